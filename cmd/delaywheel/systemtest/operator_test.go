package systemtest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// TestOperatorView runs what an operator relies on against real
// processes: the cluster view after a follower is killed with kill -9,
// readiness of that follower restarted behind a backlog, its removal and
// return with --join on its data dir, and the view once it is cut off.
func TestOperatorView(t *testing.T) {
	c := NewCluster(t, binary(t), Options{Nodes: 3})
	ctx := ctxFor(t, 3*time.Minute)
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	others := c.Others(l)
	f, asked := others[0], others[1]

	f.Kill()
	var v api.Cluster
	err = Eventually(ctxFor(t, 30*time.Second), 100*time.Millisecond, func() error {
		if v, err = asked.Client.Cluster(ctx); err != nil {
			return err
		}
		for _, m := range v.Nodes {
			switch {
			case m.ID == f.ID && (m.Reachable == nil || *m.Reachable || m.State != "unknown"):
				return fmt.Errorf("the killed %s is listed as %s, reachable %v", m.ID, m.State, m.Reachable)
			case m.ID != f.ID && (m.AppliedIndex == 0 || m.Reachable == nil || !*m.Reachable):
				return fmt.Errorf("the running %s: applied %d, reachable %v", m.ID, m.AppliedIndex, m.Reachable)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster view after kill -9: %v (%+v)", err, v)
	}
	if v.Self != asked.ID || v.ViewOf != l.ID {
		t.Fatalf("the view answered by %s is of %s, want answered by %s, of the leader %s", v.Self, v.ViewOf, asked.ID, l.ID)
	}

	const batches, per = 6, 5000
	for range batches {
		msgs := make([]api.Message, per)
		for i := range msgs {
			msgs[i] = api.Message{Topic: "backlog", Payload: api.TextBody("x"), DelayMs: api.Ptr(int64(time.Hour / time.Millisecond))}
		}
		if _, err := l.Client.Enqueue(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	notReady := 0
	err = Eventually(ctxFor(t, 60*time.Second), 20*time.Millisecond, func() error {
		if err := f.Client.Readyz(ctx); err != nil {
			notReady++
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the restarted follower: %v", err)
	}
	ts, err := f.Client.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Delayed != batches*per {
		t.Fatalf("ready, %s holds %+v; want the backlog of %d", f.ID, ts, batches*per)
	}
	t.Logf("%s not ready %d times before it was", f.ID, notReady)

	// A member of an initial cluster announces its HTTP address to the
	// leader in the background (once a second until recorded); the leader
	// needs it to hear the member confirm its demotion before removing it.
	err = Eventually(ctxFor(t, 30*time.Second), 50*time.Millisecond, func() error {
		v, err := l.Client.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, m := range v.Nodes {
			if m.ID == f.ID && m.HTTPAddr == f.HTTPAddr {
				return nil
			}
		}
		return fmt.Errorf("the leader's view does not record %s at %s: %+v", f.ID, f.HTTPAddr, v.Nodes)
	})
	if err != nil {
		t.Fatalf("before the removal: %v", err)
	}
	if err := l.Client.RemoveNode(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	wantRemoved := func(err error) error {
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(ce.Message, "removed from the cluster") {
			return fmt.Errorf("got %v, want a 503 saying it was removed", err)
		}
		return nil
	}
	err = Eventually(ctxFor(t, 10*time.Second), 50*time.Millisecond, func() error { return wantRemoved(f.Client.Readyz(ctx)) })
	if err != nil {
		t.Fatalf("readyz on the removed node: %v", err)
	}
	if _, err := f.Client.Enqueue(ctx, []api.Message{{Topic: "t", Payload: api.TextBody("x")}}); wantRemoved(err) != nil {
		t.Fatalf("a write to the removed node: %v", wantRemoved(err))
	}
	if err := f.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if log, _ := os.ReadFile(f.LogPath); !strings.Contains(string(log), "was removed from the cluster") {
		t.Fatalf("the removed node's log does not say it was removed:\n%s", log)
	}

	f.clusterArgs = []string{"--join", l.HTTPAddr}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitReady(ctxFor(t, 60*time.Second)); err != nil {
		t.Fatalf("restarted with --join after its removal: %v", err)
	}
	v, err = l.Client.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) != 3 {
		t.Fatalf("after the return of %s: %+v", f.ID, v.Nodes)
	}

	c.Isolate(f)
	err = Eventually(ctxFor(t, 30*time.Second), 100*time.Millisecond, func() error {
		if v, err = l.Client.Cluster(ctx); err != nil {
			return err
		}
		for _, m := range v.Nodes {
			if m.ID == f.ID && (m.Reachable == nil || *m.Reachable) {
				return fmt.Errorf("the cut-off %s is listed as %s, reachable %v", m.ID, m.State, m.Reachable)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster view after a partition: %v", err)
	}
	c.Heal()
}
