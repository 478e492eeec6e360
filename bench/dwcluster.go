package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// dwNode is one delaywheel node the harness spawned.
type dwNode struct {
	id       string
	httpAddr string
	raftAddr string
	grpcAddr string
	dataDir  string
	proc     *proc
}

// dwCluster is a delaywheel cluster the harness spawned from the real binary.
type dwCluster struct {
	nodes  []*dwNode
	token  string
	logger *slog.Logger
}

// readyTimeout bounds how long a spawned server may take to become ready.
const readyTimeout = 5 * time.Minute

// spawnDelaywheel starts n nodes (1 or 3) of the binary bin in subdirectories
// of dir on free loopback ports and waits until the cluster is ready. The
// nodes read the bearer token from tokenFile; the harness presents token.
func spawnDelaywheel(ctx context.Context, logger *slog.Logger, dir, bin string, n int, tokenFile, token string, extra []string) (*dwCluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	c := &dwCluster{logger: logger, token: token}
	var members []string
	for i := range n {
		nd := &dwNode{
			id:       "n" + strconv.Itoa(i+1),
			httpAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			raftAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
		}
		nd.dataDir = filepath.Join(dir, nd.id)
		if err := os.MkdirAll(nd.dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("spawn delaywheel: %w", err)
		}
		members = append(members, nd.id+"="+nd.raftAddr)
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		args := []string{"server", "--node-id", nd.id, "--data-dir", filepath.Join(nd.dataDir, "data"),
			"--http-addr", nd.httpAddr, "--raft-addr", nd.raftAddr, "--grpc-addr", nd.grpcAddr}
		if n > 1 {
			args = append(args, "--initial-cluster", strings.Join(members, ","))
		}
		if tokenFile != "" {
			abs, err := filepath.Abs(tokenFile)
			if err != nil {
				return nil, fmt.Errorf("token file: %w", err)
			}
			args = append(args, "--auth-token-file", abs)
		}
		args = append(args, extra...)
		nd.proc = newProc(logger, "delaywheel-"+nd.id, nd.dataDir, bin, args...)
	}
	if err := c.startAll(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startAll starts every node and waits until the cluster is ready.
func (c *dwCluster) startAll(ctx context.Context) error {
	for _, nd := range c.nodes {
		if err := nd.proc.Start(); err != nil {
			return err
		}
	}
	return c.waitReady(ctx)
}

// waitReady waits until every node answers /readyz and the cluster view
// knows a leader and every node's HTTP address (needed for forwarding).
func (c *dwCluster) waitReady(ctx context.Context) error {
	for _, nd := range c.nodes {
		cl := client.New(nd.httpAddr, client.WithToken(c.token))
		if err := waitReady(ctx, nd.proc, readyTimeout, cl.Readyz); err != nil {
			return err
		}
	}
	cl := client.New(c.nodes[0].httpAddr, client.WithToken(c.token))
	return waitReady(ctx, c.nodes[0].proc, readyTimeout, func(ctx context.Context) error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		if info.Leader == "" {
			return errors.New("no leader yet")
		}
		for _, ns := range info.Nodes {
			if ns.HTTPAddr == "" {
				return fmt.Errorf("node %s has not announced its HTTP address", ns.ID)
			}
		}
		if len(info.Nodes) != len(c.nodes) {
			return fmt.Errorf("%d of %d nodes in the configuration", len(info.Nodes), len(c.nodes))
		}
		return spread(info.Groups, len(c.nodes))
	})
}

// spread tells whether the leaderships of groups have spread over the
// nodes, min(groups, nodes) distinct leaders, as the balancer leaves them.
// Until then the balancer moves leaderships, and a lease in flight at a
// move is answered 503: its messages come back only when the lease ends,
// which a run would count as lost.
func spread(groups []api.Group, nodes int) error {
	if len(groups) <= 1 {
		return nil
	}
	leaders := map[string]bool{}
	for _, g := range groups {
		if g.Leader == "" {
			return fmt.Errorf("group %d has no leader yet", g.Group)
		}
		leaders[g.Leader] = true
	}
	if want := min(len(groups), nodes); len(leaders) < want {
		return fmt.Errorf("the leaderships of %d groups are on %d of %d nodes: not spread yet", len(groups), len(leaders), want)
	}
	return nil
}

// stopAll stops every node with SIGTERM at once and returns how long the
// slowest took to exit.
func (c *dwCluster) stopAll() (time.Duration, error) {
	var wg sync.WaitGroup
	took := make([]time.Duration, len(c.nodes))
	errs := make([]error, len(c.nodes))
	for i, nd := range c.nodes {
		wg.Go(func() { took[i], errs[i] = nd.proc.Stop(time.Minute) })
	}
	wg.Wait()
	var worst time.Duration
	for _, d := range took {
		worst = max(worst, d)
	}
	return worst, errors.Join(errs...)
}

// Close stops every node.
func (c *dwCluster) Close() error {
	_, err := c.stopAll()
	return err
}

// addrs are the nodes' HTTP addresses.
func (c *dwCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.httpAddr
	}
	return out
}
