package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What the delaywheel target's servers use: memory, disk and CPU, read
// from the spawned processes or scraped from a node's /metrics.

func (t *dwTarget) Resources(ctx context.Context) (resources, error) {
	if t.cluster == nil {
		rss, err := t.scrapeRSS(ctx)
		return resources{RSSBytes: rss, RSSAnonBytes: -1, RSSFileBytes: -1, DiskBytes: -1}, err
	}
	t.refreshLeader(ctx)
	nd := t.leaderNode()
	return footprint(nd.proc, nd.dataDir)
}

// scrapeRSS reads process_resident_memory_bytes from the leader's /metrics.
func (t *dwTarget) scrapeRSS(ctx context.Context) (int64, error) {
	v, err := t.scrapeMetric(ctx, "process_resident_memory_bytes")
	return int64(v), err
}

// scrapeMetric reads an unlabelled metric from the leader's /metrics.
func (t *dwTarget) scrapeMetric(ctx context.Context, name string) (float64, error) {
	i := t.leader.Load()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.bases[i]+"/metrics", nil)
	if err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1, fmt.Errorf("metrics: %s %q: %w", name, v, err)
			}
			return f, nil
		}
	}
	if err := sc.Err(); err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	return -1, fmt.Errorf("metrics: no %s", name)
}

// serverCPU adds up the CPU time of the spawned nodes, and gives the
// leader's apart; of a cluster reached by address, the CPU time of the
// pids it was given (the leader's is not known: -1).
func (t *dwTarget) serverCPU() (all, leader time.Duration, err error) {
	if t.cluster == nil {
		return pidsCPU(t.pids)
	}
	ld := t.leaderNode()
	for _, nd := range t.cluster.nodes {
		d, err := nd.proc.CPU()
		if err != nil {
			return 0, 0, err
		}
		all += d
		if nd == ld {
			leader = d
		}
	}
	return all, leader, nil
}
