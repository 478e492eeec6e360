package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// heldFuture is a Raft apply future that settles only when release is
// closed, as one does whose entry Raft never commits nor fails.
type heldFuture struct {
	release chan struct{}
	res     []command.Result
}

func (f heldFuture) Error() error          { <-f.release; return nil }
func (f heldFuture) Index() uint64         { return 1 }
func (f heldFuture) Response() any         { return f.res }
func (f heldFuture) Done() <-chan struct{} { return f.release }

var _ raft.ApplyFuture = heldFuture{}

// A caller waiting on a proposal Raft does not settle is answered when its
// context ends, with ErrUnavailable; the proposal stays pending until Raft
// settles it.
func TestProposalWaitHonoursContext(t *testing.T) {
	n := &Node{}
	n.met = newMetrics(n)
	f := heldFuture{release: make(chan struct{}), res: []command.Result{{}}}
	n.pending.Add(1)
	p := &proposal{n: n, f: f, cmds: 1, start: time.Now(), lease: &leadershipLease{}}

	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		_, err := p.wait(ctx)
		answered <- err
	}()
	cancel()
	err := <-answered
	if !errors.Is(err, model.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after its context ended = %v, want ErrUnavailable and context.Canceled", err)
	}
	if got := n.pending.Load(); got != 1 {
		t.Fatalf("pending = %d before Raft settled the proposal, want 1", got)
	}
	close(f.release)
	waitUnpending(t, n)

	// A proposal Raft settles is answered with its results.
	n.pending.Add(1)
	p = &proposal{n: n, f: f, cmds: 1, start: time.Now(), lease: &leadershipLease{}}
	res, err := p.wait(context.Background())
	if err != nil || len(res) != 1 {
		t.Fatalf("wait = %v, %v; want one result", res, err)
	}
}

// A caller waiting for a proposal's commit is answered when its context
// ends, with ErrUnavailable, as one waiting for its apply is; the proposal
// stays pending, and watched, until Raft settles it.
func TestProposalWaitCommitHonoursContext(t *testing.T) {
	n := &Node{commits: newCommitWaiters()}
	n.met = newMetrics(n)
	f := heldFuture{release: make(chan struct{}), res: []command.Result{{}}}
	n.pending.Add(1)
	p := &proposal{n: n, f: f, cmds: 1, start: time.Now(), id: proposalID{1}, lease: &leadershipLease{}}
	p.commit = n.commits.add(p.id)

	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		_, _, err := p.waitCommit(ctx)
		answered <- err
	}()
	cancel()
	select {
	case err := <-answered:
		if !errors.Is(err, model.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("waitCommit after its context ended = %v, want ErrUnavailable and context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("waitCommit still waits a minute after its context ended")
	}
	if got := n.pending.Load(); got != 1 {
		t.Fatalf("pending = %d before Raft settled the proposal, want 1", got)
	}
	close(f.release)
	waitUnpending(t, n)
	n.commits.mu.Lock()
	watched := len(n.commits.m)
	n.commits.mu.Unlock()
	if watched != 0 {
		t.Fatalf("%d proposals still watched for their commit after Raft settled them", watched)
	}
}

// waitUnpending waits until n counts no proposal as pending, once Raft
// settled them.
func waitUnpending(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for n.pending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the proposal stayed pending after Raft settled it")
		}
		time.Sleep(time.Millisecond)
	}
}
