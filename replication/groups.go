package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Groups is a node's Raft groups (--groups N): one Node per group, each with
// its own wheel store, log and snapshots in its own directory, all over the
// node's one Raft address, with the same node id and members in every
// group. A topic belongs to group model.GroupOf(topic, N) and a message id
// names its group (model.ID.Group). With more than one group, Groups owns
// the stream multiplexer, the data dir's lock and groups file, and the
// leadership balancer (balance.go). One group is exactly the node Open
// starts, in the data dir itself.
type Groups struct {
	nodes []*Node
	mux   *mux      // nil with one group
	lock  io.Closer // the data dir's lock, with more than one group

	cancel context.CancelFunc // ends the balancer
	done   chan struct{}      // closed when the balancer has ended
	once   sync.Once
	err    error
}

// groupsFile, in a data dir of more than one group, holds the group count
// the cluster was created with.
const groupsFile = "groups"

// ErrGroupCount is returned by OpenGroups when the data dir was created
// with another group count: it is fixed when the cluster is created.
var ErrGroupCount = errors.New("group count differs from the data dir's")

// GroupDir is where group g of a node with more than one group keeps its
// data, under the node's data dir.
func GroupDir(dataDir string, g int) string {
	return filepath.Join(dataDir, fmt.Sprintf("group-%d", g))
}

// GroupDataDir returns where group g of the node whose data dir is dataDir
// keeps its data: dataDir itself for a node of one group (or a data dir
// that holds no node yet), else GroupDir(dataDir, g). A g outside the data
// dir's groups is an error wrapping model.ErrInvalid that names the range.
// It reads a stopped node's dir, for the offline tools.
func GroupDataDir(dataDir string, g int) (string, error) {
	n, err := storedGroupCount(dataDir)
	if err != nil {
		return "", err
	}
	n = max(n, 1)
	if g < 0 || g >= n {
		return "", fmt.Errorf("%w: data dir %s holds groups 0 to %d, not group %d", model.ErrInvalid, dataDir, n-1, g)
	}
	if n == 1 {
		return dataDir, nil
	}
	return GroupDir(dataDir, g), nil
}

// OpenGroups starts a node's n groups with cfg: with n == 1, the node Open
// starts; otherwise group g's node in GroupDir(cfg.DataDir, g), its store of
// group g, its Raft traffic on a multiplexer over cfg.RaftAddr. A data dir
// keeps the group count it was created with (one for a data dir Open
// created); starting it with another fails with ErrGroupCount.
func OpenGroups(cfg Config, n int) (*Groups, error) {
	if n < 1 || n > model.MaxGroups {
		return nil, fmt.Errorf("%w: %d groups; a cluster runs 1 to %d", model.ErrInvalid, n, model.MaxGroups)
	}
	if cfg.ID == "" || cfg.DataDir == "" || cfg.RaftAddr == "" {
		return nil, fmt.Errorf("%w: node id, data dir and raft address are required", model.ErrInvalid)
	}
	if err := checkNoRestore(cfg.DataDir); err != nil {
		return nil, err
	}
	if n == 1 {
		if err := checkGroupCount(cfg.DataDir, 1); err != nil {
			return nil, err
		}
		node, err := Open(cfg)
		if err != nil {
			return nil, err
		}
		return &Groups{nodes: []*Node{node}}, nil
	}
	cfg.setDefaults()
	if err := segment.MkdirAllSync(vfs.Default, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	gs := &Groups{}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	gs.lock = lock
	fail := func(err error) (*Groups, error) {
		gs.closeAll(context.Background())
		return nil, err
	}
	if err := checkGroupCount(cfg.DataDir, n); err != nil {
		return fail(err)
	}
	if err := writeGroupCount(cfg.DataDir, n); err != nil {
		return fail(err)
	}
	m, err := newMux(cfg.RaftAddr, cfg.RaftAdvertise, cfg.RaftServerTLS, cfg.RaftClientTLS, n, cfg.Logger.With("node", cfg.ID))
	if err != nil {
		return fail(err)
	}
	m.start()
	gs.mux = m
	for g := range n {
		gc := cfg
		gc.DataDir = GroupDir(cfg.DataDir, g)
		gc.Store.Group = g
		gc.Logger = cfg.Logger.With("group", g)
		gc.stream = m.Layer(g)
		node, err := Open(gc)
		if err != nil {
			return fail(fmt.Errorf("group %d: %w", g, err))
		}
		gs.nodes = append(gs.nodes, node)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs.cancel, gs.done = cancel, make(chan struct{})
	b := newBalancer(gs.nodes, cfg.Balance, cfg.Clock, cfg.Logger.With("node", cfg.ID))
	go func() {
		defer close(gs.done)
		b.run(ctx)
	}()
	return gs, nil
}

// Count is the number of groups.
func (gs *Groups) Count() int { return len(gs.nodes) }

// Node returns group g's node, g in [0, Count()).
func (gs *Groups) Node(g int) *Node { return gs.nodes[g] }

// ForTopic returns the node of the group topic belongs to.
func (gs *Groups) ForTopic(topic string) *Node {
	return gs.nodes[model.GroupOf(topic, len(gs.nodes))]
}

// ForID returns the node of the group id names, or an error wrapping
// model.ErrInvalid when this cluster has no such group.
func (gs *Groups) ForID(id model.ID) (*Node, error) {
	g := id.Group()
	if g >= len(gs.nodes) {
		return nil, fmt.Errorf("%w: message id %s names group %d; this cluster has %d groups (0 to %d)",
			model.ErrInvalid, id, g, len(gs.nodes), len(gs.nodes)-1)
	}
	return gs.nodes[g], nil
}

// Close stops the balancer, closes every group's node, then the
// multiplexer, then releases the data dir. Later calls return the first
// one's result.
func (gs *Groups) Close(ctx context.Context) error {
	gs.once.Do(func() {
		if gs.cancel != nil {
			gs.cancel()
			<-gs.done
		}
		gs.err = gs.closeAll(ctx)
	})
	return gs.err
}

// closeAll closes the nodes (each group's at once: a leader hands its
// leadership over first), the multiplexer and the lock.
func (gs *Groups) closeAll(ctx context.Context) error {
	errs := make([]error, len(gs.nodes))
	var wg sync.WaitGroup
	for i, n := range gs.nodes {
		wg.Go(func() {
			if err := n.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("group %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	if gs.mux != nil {
		errs = append(errs, gs.mux.Close())
	}
	if gs.lock != nil {
		errs = append(errs, gs.lock.Close())
	}
	return errors.Join(errs...)
}

// storedGroupCount returns the group count data dir dir was created with:
// its groups file's, 1 for a data dir of one group (Open's layout), 0 for
// a new one.
func storedGroupCount(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, groupsFile))
	switch {
	case err == nil:
		k, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if perr != nil || k < 2 || k > model.MaxGroups {
			return 0, fmt.Errorf("data dir %s: its %s file holds %q, not a group count", dir, groupsFile, b)
		}
		return k, nil
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("data dir %s: %w", dir, err)
	}
	for _, sub := range []string{"raft", "fsm"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err == nil {
			return 1, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("data dir %s: %w", dir, err)
		}
	}
	return 0, nil
}

// checkGroupCount fails with ErrGroupCount when data dir dir was created
// with a group count other than n.
func checkGroupCount(dir string, n int) error {
	have, err := storedGroupCount(dir)
	if err != nil {
		return err
	}
	if have != 0 && have != n {
		return fmt.Errorf("%w: data dir %s was created with --groups %d and is started with --groups %d; the group count is fixed when a cluster is created",
			ErrGroupCount, dir, have, n)
	}
	return nil
}

// writeGroupCount records n in dir's groups file, durably, unless it
// holds it already.
func writeGroupCount(dir string, n int) error {
	path := filepath.Join(dir, groupsFile)
	if have, err := storedGroupCount(dir); err != nil || have == n {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("groups file: %w", err)
	}
	_, err = f.WriteString(strconv.Itoa(n) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = segment.SyncDir(vfs.Default, dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("groups file %s: %w", path, err)
	}
	return nil
}
