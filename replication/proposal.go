package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// propose commits commands as one log entry and returns their results. It
// answers ErrNotLeader on a follower and ErrOverloaded when too many
// proposals are in flight.
func (n *Node) propose(ctx context.Context, cmds ...command.Command) ([]command.Result, error) {
	p, err := n.submit(ctx, false, cmds...)
	if err != nil {
		return nil, err
	}
	return p.wait(ctx)
}

// proposal is a log entry handed to Raft and not yet committed.
type proposal struct {
	n      *Node
	f      raft.ApplyFuture
	cmds   int
	start  time.Time
	id     proposalID       // carried in the entry's extensions
	lease  *leadershipLease // the term's lease, confirmed if the entry commits
	at     time.Time        // clock time at submit, for the lease
	commit <-chan uint64    // takes the entry's index at commit
}

// submit hands commands to Raft as one log entry without waiting for it to
// commit. Entries submitted one after another are committed in that order,
// before any entry submitted later. The caller must wait on the proposal;
// with watch, it may wait for the commit alone (waitCommit).
func (n *Node) submit(ctx context.Context, watch bool, cmds ...command.Command) (*proposal, error) {
	if n.riders.queued.Load() > 0 {
		// The riders queued before this entry go ahead of it (riders).
		n.riders.mu.Lock()
		defer n.riders.mu.Unlock()
		n.flushRidersLocked()
	}
	return n.submitNow(ctx, watch, false, cmds...)
}

// submitNow is submit without the riders. reserved says that the caller
// has counted the proposal as pending already (reservePending); a refusal
// then gives that count back.
func (n *Node) submitNow(ctx context.Context, watch, reserved bool, cmds ...command.Command) (*proposal, error) {
	refuse := func(err error) (*proposal, error) {
		if reserved {
			n.pending.Add(-1)
		}
		return nil, err
	}
	if n.raft.State() != raft.Leader {
		return refuse(model.ErrNotLeader)
	}
	// Raft's wait to take the entry is bounded only by a timeout above
	// zero: a caller whose deadline has passed is refused instead.
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return refuse(fmt.Errorf("%w: not proposed: %w", model.ErrUnavailable, cmp.Or(context.Cause(ctx), context.DeadlineExceeded)))
	}
	if !reserved {
		if err := n.reservePending(); err != nil {
			return nil, err
		}
	}
	p := &proposal{n: n, cmds: len(cmds), start: time.Now(), id: n.ids.next(), lease: n.lease.Load(), at: n.clock.Now()}
	if watch {
		p.commit = n.commits.add(p.id)
	}
	p.f = n.raft.ApplyLog(raft.Log{Data: command.EncodeCommands(cmds), Extensions: p.id[:]}, timeout)
	return p, nil
}

// reservePending counts one more proposal in flight, or refuses it when
// MaxPendingApply are.
func (n *Node) reservePending() error {
	if n.pending.Add(1) > int64(n.cfg.MaxPendingApply) {
		n.pending.Add(-1)
		return fmt.Errorf("%w: %d proposals waiting for the log", model.ErrOverloaded, n.cfg.MaxPendingApply)
	}
	return nil
}

// outcome is what Raft settled a proposal with.
type outcome struct {
	res []command.Result
	err error
}

// settled waits for the proposal's outcome in a goroutine of its own, so
// that the caller can wait on something else at the same time. then, when
// not nil, runs once the outcome is known.
func (p *proposal) settled(then func()) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := p.result()
		if then != nil {
			then()
		}
		ch <- outcome{res, err}
	}()
	return ch
}

// waitCommit blocks until the proposal commits and returns its index, or
// until it is applied (when it was not recognised at commit) and returns
// its results instead, or until it fails, or until ctx ends (as wait). The
// proposal stays counted as pending until it is applied.
func (p *proposal) waitCommit(ctx context.Context) (index uint64, res []command.Result, err error) {
	applied := p.settled(func() { p.n.commits.forget(p.id) })
	select {
	case index = <-p.commit:
		p.n.met.answered.Observe(time.Since(p.start).Seconds())
		return index, nil, nil
	case o := <-applied:
		return 0, o.res, o.err
	case <-ctx.Done():
		return 0, nil, outcomeUnknown(ctx)
	}
}

// wait blocks until the proposal is applied and returns its results, or
// until ctx ends. A proposal Raft has taken may still commit after ctx ends,
// so that answer is ErrUnavailable with the outcome unknown; the proposal
// stays counted as pending until Raft settles it.
func (p *proposal) wait(ctx context.Context) ([]command.Result, error) {
	if ctx.Done() == nil {
		return p.result()
	}
	select {
	case o := <-p.settled(nil):
		return o.res, o.err
	case <-ctx.Done():
		return nil, outcomeUnknown(ctx)
	}
}

// outcomeUnknown answers a caller whose context ended while it waited on a
// proposal Raft had taken, which may still commit.
func outcomeUnknown(ctx context.Context) error {
	return fmt.Errorf("%w: the outcome is unknown: %w", model.ErrUnavailable, context.Cause(ctx))
}

// result blocks until Raft settles the proposal and returns its results.
func (p *proposal) result() ([]command.Result, error) {
	n := p.n
	defer n.pending.Add(-1)
	err := p.f.Error()
	n.met.apply.Observe(time.Since(p.start).Seconds())
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, fmt.Errorf("%w: %w", model.ErrNotLeader, err)
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, fmt.Errorf("%w: %w", model.ErrOverloaded, err)
		}
		return nil, fmt.Errorf("%w: %w", model.ErrUnavailable, err)
	}
	// The entry reached a quorum after it was submitted.
	p.lease.confirmed(p.at)
	res, ok := p.f.Response().([]command.Result)
	if !ok || len(res) != p.cmds {
		return nil, fmt.Errorf("%w: unexpected apply response %T", model.ErrUnavailable, p.f.Response())
	}
	return res, nil
}
