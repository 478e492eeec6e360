package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/dispatch"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The methods below are what the HTTP API needs from a node (transport.Backend).

// LeaderHTTP returns the leader's HTTP address, whether this node leads,
// and whether a leader is known.
func (n *Node) LeaderHTTP() (addr string, isLeader, known bool) {
	m, isLeader, known := n.Leader()
	return m.HTTPAddr, isLeader, known
}

// Leader returns the leader's member record (its addresses; a GRPCAddr
// it did not record is empty), whether this node leads, and whether a
// leader is known: known needs the leader's HTTP address, as forwarding
// does.
func (n *Node) Leader() (m model.Member, isLeader, known bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return model.Member{}, false, false
	}
	if string(id) == n.cfg.ID {
		return n.cfg.Self(), n.raft.State() == raft.Leader, true
	}
	if m, ok := n.store().Node(string(id)); ok && m.HTTPAddr != "" {
		return m, false, true
	}
	return model.Member{}, false, false
}

// Indexes returns the highest log index this node has applied and the
// commit index it knows of. A follower's commit index never passes its
// own last log entry, so it is not the cluster's; nor is it below what
// the node applied, which Raft's is after a restart until the leader's
// entries reach the node's log (a follower catching up from a snapshot).
func (n *Node) Indexes() (applied, commit uint64) {
	applied = n.fsm.appliedIndex()
	return applied, max(applied, n.raft.CommitIndex())
}

// result unwraps the single result of a one-command proposal.
func (n *Node) result(ctx context.Context, cmd command.Command) (any, error) {
	res, err := n.propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return res[0].Value, res[0].Err
}

// Enqueue schedules messages as one log entry.
func (n *Node) Enqueue(ctx context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error) {
	if len(msgs) > model.MaxEntryMessages {
		return nil, fmt.Errorf("%w: %d messages in one enqueue; one log entry holds at most %d", model.ErrInvalid, len(msgs), model.MaxEntryMessages)
	}
	if err := n.checkTopics(msgs); err != nil {
		return nil, err
	}
	cmd := command.Schedule{NowMs: n.clock.Now().UnixMilli(), Messages: msgs}
	var (
		v   any
		err error
	)
	if slices.ContainsFunc(msgs, func(m command.NewMessage) bool { return m.Key != "" }) {
		// A key may name a pending message: the answer comes from the state.
		v, err = n.result(ctx, cmd)
	} else {
		v, err = n.resultAtCommit(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return v.([]wheel.Enqueued), nil
}

// checkTopics refuses a batch whose new topics would take the store past
// MaxTopics, naming the first message over the limit; the batch's new
// topics count together, so one batch cannot overshoot the limit.
func (n *Node) checkTopics(msgs []command.NewMessage) error {
	st := n.store()
	have := st.NumTopics()
	if have+len(msgs) <= n.cfg.MaxTopics {
		return nil // even all new, they fit
	}
	fresh := map[string]bool{}
	for i, m := range msgs {
		if fresh[m.Topic] || st.HasTopic(m.Topic) {
			continue
		}
		fresh[m.Topic] = true
		if have+len(fresh) > n.cfg.MaxTopics {
			return fmt.Errorf("%w: messages[%d].topic: %q would be topic number %d; the limit is %d topics",
				model.ErrInvalid, i, m.Topic, have+len(fresh), n.cfg.MaxTopics)
		}
	}
	return nil
}

// resultAtCommit is result for a Schedule of messages without keys,
// answered once its entry commits (commit.go), or after its apply when
// the commit went unseen.
func (n *Node) resultAtCommit(ctx context.Context, cmd command.Schedule) (any, error) {
	p, err := n.submit(ctx, true, cmd)
	if err != nil {
		return nil, err
	}
	index, res, err := p.waitCommit(ctx)
	switch {
	case err != nil:
		return nil, err
	case res != nil:
		return res[0].Value, res[0].Err
	}
	return wheel.Scheduled(n.cfg.Store.Group, index, cmd.Messages), nil
}

// caughtUp waits until this node has applied every entry it answered at
// commit (commit.go), every Lease its dispatcher answered before the
// apply, and every entry the leader named in its answer to a write this
// node forwarded (ReadAfter), so that what a client reads after its
// enqueue or reserve was answered includes them.
func (n *Node) caughtUp(ctx context.Context) error {
	d := n.dispatcher()
	h := max(n.commits.highest.Load(), n.readFloor.Load())
	if d == nil && (h == 0 || n.store().AppliedIndex() >= h) {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if d != nil {
		if err := d.WaitAnswered(wctx); err != nil {
			return fmt.Errorf("%w: waiting for the leases answered before their apply: %w", model.ErrUnavailable, err)
		}
	}
	if h == 0 || n.store().AppliedIndex() >= h {
		return nil
	}
	if err := n.fsm.waitApplied(wctx, h); err != nil {
		return fmt.Errorf("%w: waiting for entry %d to be applied: %w", model.ErrUnavailable, h, err)
	}
	return nil
}

// readable is caughtUp for the reads of messages, topics, schedules and
// webhooks: a node that knows no leader cannot tell whether its state is
// current (it may be cut off, or never have caught up), so it answers
// ErrUnavailable rather than, say, not-found for a message it has not
// seen. The operator's views of the local wheel answer regardless.
func (n *Node) readable(ctx context.Context) error {
	if err := n.noLeader(); err != nil {
		return fmt.Errorf("%w: %w", model.ErrUnavailable, err)
	}
	return n.caughtUp(ctx)
}

// noLeader says that this node knows no leader, or returns nil.
func (n *Node) noLeader() error {
	if _, id := n.raft.LeaderWithID(); id == "" {
		return errors.New("no leader is known yet (an election is in progress, or this node is cut off)")
	}
	return nil
}

// Settled waits until this node has applied everything it answered ahead
// of the apply (caughtUp) and returns its applied index: the leader sends
// it with its answer to a write a follower forwarded, whose reads then
// wait for it (ReadAfter).
func (n *Node) Settled(ctx context.Context) (uint64, error) {
	if err := n.caughtUp(ctx); err != nil {
		return 0, err
	}
	return n.store().AppliedIndex(), nil
}

// ReadAfter makes this node's reads wait until it has applied index (see
// caughtUp): a follower that forwarded a write learns its index from the
// leader's answer.
func (n *Node) ReadAfter(index uint64) {
	for {
		cur := n.readFloor.Load()
		if index <= cur || n.readFloor.CompareAndSwap(cur, index) {
			return
		}
	}
}

// Get returns a message from local state.
func (n *Node) Get(ctx context.Context, id model.ID) (wheel.View, error) {
	if err := n.readable(ctx); err != nil {
		return wheel.View{}, err
	}
	v, err := n.store().Get(id)
	return v.At(n.clock.Now().UnixMilli()), err
}

// Cancel removes a delayed or ready message.
func (n *Node) Cancel(ctx context.Context, c command.Cancel) (model.ID, error) {
	if d := n.dispatcher(); d != nil && c.Topic == "" && d.InFlight(c.ID) {
		return model.ID{}, fmt.Errorf("%w: message %s is being handed to a consumer", model.ErrConflict, c.ID)
	}
	v, err := n.result(ctx, c)
	if err != nil {
		return model.ID{}, err
	}
	return v.(model.ID), nil
}

// Reschedule moves a delayed or ready message.
func (n *Node) Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) (int64, error) {
	v, err := n.result(ctx, command.Reschedule{ID: id, DeliverAtMs: deliverAtMs})
	if err != nil {
		return 0, err
	}
	return v.(int64), nil
}

func (n *Node) dispatcher() *dispatch.Dispatcher {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.disp
}

// Reserve hands out due messages; only the leader can.
func (n *Node) Reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, error) {
	d := n.dispatcher()
	if d == nil {
		return nil, model.ErrNotLeader
	}
	if n.hasWebhook(topic) {
		return n.idleReserve(ctx, wait), nil
	}
	if wait <= 0 {
		// A reserve that does not wait takes only what is due now, which
		// includes what this node has answered as enqueued. One that waits
		// gets such messages once they are applied, and must not be held
		// up meanwhile from messages due already.
		if err := n.caughtUp(ctx); err != nil {
			return nil, err
		}
	}
	return d.Reserve(ctx, topic, max, wait, ttr)
}

// ReserveID leases one ready, delayed or dead message by its id for ttr
// (zero: its own), as beanstalkd's reserve-job does; see
// dispatch.ReserveID.
func (n *Node) ReserveID(ctx context.Context, id model.ID, ttr time.Duration) (model.Delivery, error) {
	d := n.dispatcher()
	if d == nil {
		return model.Delivery{}, model.ErrNotLeader
	}
	// It reads the message's state: what this node has answered must be
	// in it.
	if err := n.caughtUp(ctx); err != nil {
		return model.Delivery{}, err
	}
	return d.ReserveID(ctx, id, ttr, n.hasWebhook)
}

func (n *Node) counted(ctx context.Context, cmd command.Command) (command.Counted, error) {
	v, err := n.result(ctx, cmd)
	if err != nil {
		return command.Counted{}, err
	}
	return v.(command.Counted), nil
}

// Stream opens a streaming consumer of topic; only the leader can.
func (n *Node) Stream(ctx context.Context, topic string, opt model.ConsumerOptions) (model.Consumer, error) {
	d := n.dispatcher()
	if d == nil {
		return nil, model.ErrNotLeader
	}
	if n.hasWebhook(topic) {
		return nil, webhookConflict(topic)
	}
	return d.Stream(topic, opt)
}

// settled proposes an ack or nack and tells the streams that handed out
// its receipts: once it is in the log's order, that the room they take in
// their windows is free (a consumer that sent an ack holds nothing more,
// and a state machine that trails the commit must not hold deliveries
// back); once it has applied, that their leases ended. Should it fail
// between the two, a stream that closes still releases them, and its sweep
// forgets them once their leases end.
func (n *Node) settled(ctx context.Context, cmd command.Command, rs []model.Receipt) (command.Counted, error) {
	res, err := n.settle(ctx, rs, cmd)
	if err != nil {
		return command.Counted{}, err
	}
	return res[0].Value.(command.Counted), nil
}

// settle proposes cmds, which settle receipts rs, as one log entry, tells
// the streams as settled says, and returns each command's result, or the
// first command's error.
func (n *Node) settle(ctx context.Context, rs []model.Receipt, cmds ...command.Command) ([]command.Result, error) {
	p, err := n.submit(ctx, false, cmds...)
	if err != nil {
		return nil, err
	}
	d := n.dispatcher()
	if d != nil {
		d.Settling(rs)
	}
	res, err := p.wait(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		if r.Err != nil {
			return nil, r.Err
		}
	}
	if d != nil {
		d.Settled(rs)
	}
	return res, nil
}

// Ack finishes reserved messages.
func (n *Node) Ack(ctx context.Context, rs []model.Receipt) (command.Counted, error) {
	return n.settled(ctx, command.Ack{NowMs: n.clock.Now().UnixMilli(), Receipts: rs}, rs)
}

// Nack returns reserved messages to delayed.
func (n *Node) Nack(ctx context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error) {
	return n.settled(ctx, command.Nack{NowMs: n.clock.Now().UnixMilli(), DelayMs: delayMs, Receipts: rs}, rs)
}

// DeadLetter moves reserved messages to their topics' dead letters.
func (n *Node) DeadLetter(ctx context.Context, rs []model.Receipt) (command.Counted, error) {
	return n.settled(ctx, command.DeadLetter{NowMs: n.clock.Now().UnixMilli(), Receipts: rs}, rs)
}

// Touch extends leases.
func (n *Node) Touch(ctx context.Context, rs []model.Receipt) (command.Counted, error) {
	return n.counted(ctx, command.Touch{NowMs: n.clock.Now().UnixMilli(), Receipts: rs})
}

// Topics returns local per-topic counts.
func (n *Node) Topics(ctx context.Context) ([]wheel.TopicCounts, error) {
	if err := n.readable(ctx); err != nil {
		return nil, err
	}
	return n.store().TopicsAt(n.clock.Now().UnixMilli())
}

// Dead lists dead messages from local state.
func (n *Node) Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error) {
	if err := n.readable(ctx); err != nil {
		return nil, err
	}
	return n.store().Dead(topic, limit)
}

// Redrive moves dead messages back to ready.
func (n *Node) Redrive(ctx context.Context, topic string, ids []model.ID) (int, error) {
	v, err := n.result(ctx, command.Redrive{NowMs: n.clock.Now().UnixMilli(), Topic: topic, IDs: ids})
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// Wheel describes the local wheel.
func (n *Node) Wheel(ctx context.Context) (wheel.Info, error) {
	if err := n.caughtUp(ctx); err != nil {
		return wheel.Info{}, err
	}
	return n.store().Wheel()
}

// Slot describes one local slot.
func (n *Node) Slot(ctx context.Context, slot int, records bool) (wheel.SlotInfo, error) {
	if err := n.caughtUp(ctx); err != nil {
		return wheel.SlotInfo{}, err
	}
	return n.store().Slot(slot, records)
}

// AddNode adds a voter (or updates its addresses) and records its metadata.
func (n *Node) AddNode(ctx context.Context, m model.Member) error {
	if n.raft.State() != raft.Leader {
		return model.ErrNotLeader
	}
	if err := waitFuture(ctx, n.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
		return fmt.Errorf("%w: add voter %s: %w", model.ErrUnavailable, m.ID, err)
	}
	_, err := n.result(ctx, command.SetNode{Node: m})
	if err == nil {
		n.log.Info("node joined", "id", m.ID, "raft_addr", m.RaftAddr, "http_addr", m.HTTPAddr, "grpc_addr", m.GRPCAddr)
	}
	return err
}

// RemoveNode removes a member and forgets its metadata. Another member is
// demoted first, and confirm (when set) waits until it holds its demotion,
// from which it knows it was removed. Asked to remove itself, the leader
// hands its leadership on and answers ErrNotLeader: the next leader
// removes it.
func (n *Node) RemoveNode(ctx context.Context, id string, confirm func(ctx context.Context, index uint64) error) error {
	if n.raft.State() != raft.Leader {
		return model.ErrNotLeader
	}
	f := n.raft.GetConfiguration()
	if err := waitFuture(ctx, f); err != nil {
		return fmt.Errorf("%w: %w", model.ErrUnavailable, err)
	}
	found := false
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	if !found {
		// A removal whose last step, the member record's, did not
		// answer is finished by its retry.
		if _, ok := n.store().Node(id); ok {
			return n.removeRecord(ctx, id)
		}
		return fmt.Errorf("%w: node %q is not a member", model.ErrNotFound, id)
	}
	if id == n.cfg.ID {
		// A leader that removed itself would step down, its Raft shut,
		// before it could drop its member record, and, removed, would
		// refuse the retry that finishes it: it hands its leadership on
		// instead, and the next leader removes it as any other member.
		// The follower taking over is elected at once: as in StepDown,
		// hand-offs from here on wait for their Lease to commit.
		n.beforeTransfer(n.lease.Load())
		if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
			return fmt.Errorf("%w: hand the leadership on before this node's removal: %w", model.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: leadership handed on for this node's removal, which the next leader makes", model.ErrNotLeader)
	}
	// Demoted first, a follower learns of its removal for sure: a
	// nonvoter still gets every entry, whereas the removal's own entry
	// reaches it only by the leader's last best-effort send.
	demote := n.raft.DemoteVoter(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
	if err := waitFuture(ctx, demote); err != nil {
		return fmt.Errorf("%w: demote %s: %w", model.ErrUnavailable, id, err)
	}
	// A member that does not hold its demotion when it is removed
	// would never learn it was removed: give it the time to take it.
	if confirm != nil {
		if err := confirm(ctx, demote.Index()); err != nil {
			n.log.Warn("removing a member that did not confirm its demotion: it may not learn of its removal", "id", id, "err", err)
		}
	}
	if err := waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
		return fmt.Errorf("%w: remove %s: %w", model.ErrUnavailable, id, err)
	}
	return n.removeRecord(ctx, id)
}

// removeRecord drops the member record of id, removed from the Raft
// configuration already. It waits at most ApplyTimeout: a leader deposed
// meanwhile may never hear the answer; the removal is then finished by a
// retry.
func (n *Node) removeRecord(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if _, err := n.result(ctx, command.RemoveNode{ID: id}); err != nil {
		return fmt.Errorf("node %s left the Raft configuration, its member record stays until a retry: %w", id, err)
	}
	n.log.Info("node removed", "id", id)
	return nil
}
