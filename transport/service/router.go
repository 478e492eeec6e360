package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Forwarder passes a part of a request on to its group's leader, another
// node, whose member record is to. Each call returns the leader's answer
// and the log index the leader had applied once it answered (0: none),
// which this node's reads then wait for, so that a caller reads its own
// write here. A refusal of the leader comes back as the Forwarder's wire
// carries it; ErrNoForward says nothing was sent.
type Forwarder interface {
	Enqueue(ctx context.Context, to model.Member, msgs []command.NewMessage) ([]wheel.Enqueued, uint64, error)
	Cancel(ctx context.Context, to model.Member, c command.Cancel) (model.ID, uint64, error)
	Reschedule(ctx context.Context, to model.Member, id model.ID, deliverAtMs int64) (int64, uint64, error)
	Reserve(ctx context.Context, to model.Member, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, uint64, error)
	Settle(ctx context.Context, to model.Member, op Op, rs []model.Receipt, nackDelayMs int64) (command.Counted, uint64, error)
	Redrive(ctx context.Context, to model.Member, topic string, ids []model.ID) (int, uint64, error)
	ReserveID(ctx context.Context, to model.Member, id model.ID, ttr time.Duration) (model.Delivery, uint64, error)
	// Reaches reports whether a call of ctx can be forwarded to the
	// leader at to.
	Reaches(ctx context.Context, to model.Member) bool
}

// Op is a settlement of receipts.
type Op int

// The settlements.
const (
	OpAck Op = iota
	OpNack
	OpTouch
	OpBury // to the dead letters
)

// Router serves requests on the groups of a node, each part by its
// group's leader.
type Router struct {
	groups []Backend
	fwd    Forwarder // nil: a part of a group led elsewhere is NotLeaderError
	named  bool      // every part's error is a GroupError, even of a request of one group
	pin    int       // > 0: every part is of group pin-1 (In)
}

// NewRouter routes over groups (group g is groups[g]; at least one),
// forwarding through fwd (nil: never).
func NewRouter(groups []Backend, fwd Forwarder) *Router {
	return &Router{groups: groups, fwd: fwd}
}

// NamingGroups returns a router like r whose answer to a request of many
// groups names the group of a part that failed even when all its parts
// are of one group (as an API that answers every such request part by
// part does).
func (r *Router) NamingGroups() *Router {
	c := *r
	c.named = len(r.groups) > 1
	return &c
}

// In returns a router like r that serves every part of a request in
// group g, whatever group its topics or ids name: the group a request
// names itself (as a part another node forwarded does), g in [0, Count()).
// Its errors name no group.
func (r *Router) In(g int) *Router {
	c := *r
	c.pin, c.named = g+1, false
	return &c
}

// Count is the number of groups.
func (r *Router) Count() int { return len(r.groups) }

// Groups lists the groups the router serves: every group, or the one of
// a router In a group.
func (r *Router) Groups() []int {
	if r.pin > 0 {
		return []int{r.pin - 1}
	}
	return All(len(r.groups))
}

// Group returns group g's backend, g in [0, Count()).
func (r *Router) Group(g int) Backend { return r.groups[g] }

// GroupOfTopic is the group of topic.
func (r *Router) GroupOfTopic(topic string) int {
	if r.pin > 0 {
		return r.pin - 1
	}
	return model.GroupOf(topic, len(r.groups))
}

// GroupOfID returns the group id names, refusing, as field, one this
// cluster does not have (a router In a group too: no message has it).
func (r *Router) GroupOfID(field string, id model.ID) (int, error) {
	g, n := id.Group(), len(r.groups)
	if g >= n {
		return 0, refuse(model.ErrInvalid, "%s: message id %s names group %d; this cluster has groups 0 to %d", field, id, g, n-1)
	}
	if r.pin > 0 {
		return r.pin - 1, nil
	}
	return g, nil
}

// CheckGroup refuses a group g, given as field group, that this cluster
// does not have.
func (r *Router) CheckGroup(g int) error {
	if n := len(r.groups); g < 0 || g >= n {
		return refuse(model.ErrInvalid, "group: must be between 0 and %d (this cluster has %d groups), got %d", n-1, n, g)
	}
	return nil
}

// Local returns group g's backend to answer a read from this node's
// state; refused while the group counts this node removed.
func (r *Router) Local(g int) (Backend, error) {
	b := r.groups[g]
	if err := b.Removed(); err != nil {
		return nil, refuse(model.ErrUnavailable, "%v", err)
	}
	return b, nil
}

// Leads reports whether this node leads group g.
func (r *Router) Leads(g int) bool {
	_, isLeader, _ := r.groups[g].Leader()
	return isLeader
}

// settleKey is the context key of a *Settled.
type settleKey struct{}

// Settled is where the router puts the index a call is answered with
// (WithSettled, WithLeaderIndex).
type Settled struct {
	Index uint64
	wait  bool // WithSettled's
}

// WithSettled marks ctx as a call another node forwarded here: a part this
// node serves as leader waits, up to settleTimeout, until this node has
// applied what it answered, and puts its applied index in the Settled
// returned, for the answer to carry (0: none).
func WithSettled(ctx context.Context) (context.Context, *Settled) {
	s := &Settled{wait: true}
	return context.WithValue(ctx, settleKey{}, s), s
}

// WithLeaderIndex returns ctx with a Settled the router puts the index in
// that a part it forwarded was answered with (the last one's; 0: none),
// for a front end whose answer names it as the leader's did.
func WithLeaderIndex(ctx context.Context) (context.Context, *Settled) {
	s := &Settled{}
	return context.WithValue(ctx, settleKey{}, s), s
}

// settleTimeout bounds how long the leader holds a forwarded write's
// answer until it has applied what it answered. The write is done either
// way; past it the answer carries the leader's commit index, which covers
// the write, so the forwarding node's reads still wait for it.
const settleTimeout = 2 * time.Second

// SettledIndex is b's applied index once everything it answered is
// applied, waited for at most settleTimeout.
func SettledIndex(ctx context.Context, b Backend) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return b.Settled(ctx)
}

// Reachable returns nil when a part of group g can be served: this node
// leads g, or can forward to its leader; else the answer the part would
// get (the group counts this node removed, NotLeaderError). A front end
// asks it before it validates a request, where the leader would.
func (r *Router) Reachable(ctx context.Context, g int) error {
	b := r.groups[g]
	if err := b.Removed(); err != nil {
		return refuse(model.ErrUnavailable, "%v", err)
	}
	m, isLeader, known := b.Leader()
	if isLeader || (known && m.HTTPAddr != "" && r.fwd != nil && r.fwd.Reaches(ctx, m)) {
		return nil
	}
	return &NotLeaderError{Leader: m, Known: known}
}

// Call serves a part of group g: with local on g's backend when this node
// leads g, else with remote at g's leader (through the router's
// Forwarder). A front end calls it for a request the router has no
// method for.
func Call[T any](ctx context.Context, r *Router, g int, local func(b Backend) (T, error), remote func(f Forwarder, to model.Member) (T, uint64, error)) (T, error) {
	var zero T
	b := r.groups[g]
	if err := b.Removed(); err != nil {
		return zero, refuse(model.ErrUnavailable, "%v", err)
	}
	m, isLeader, known := b.Leader()
	if isLeader {
		v, err := local(b)
		if s, ok := ctx.Value(settleKey{}).(*Settled); ok && s.wait && err == nil {
			index, serr := SettledIndex(ctx, b)
			if serr != nil {
				// The write is committed, so the leader's commit index
				// covers it: the caller's reads wait for that instead.
				_, index = b.Indexes()
			}
			s.Index = index
		}
		return v, err
	}
	if !known || m.HTTPAddr == "" || r.fwd == nil {
		return zero, &NotLeaderError{Leader: m, Known: known}
	}
	v, index, err := remote(r.fwd, m)
	switch {
	case errors.Is(err, ErrNoForward):
		return zero, &NotLeaderError{Leader: m, Known: known}
	case err != nil:
		return zero, err
	}
	if index > 0 {
		b.ReadAfter(index) // the caller reads its own write here
		if s, ok := ctx.Value(settleKey{}).(*Settled); ok {
			s.Index = index
		}
	}
	return v, nil
}

// Enqueue schedules a validated batch (due times absolute): each group's
// messages as one enqueue of that group, the results in the batch's order.
func (r *Router) Enqueue(ctx context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error) {
	groups, parts := Split(len(msgs), func(i int) int { return r.GroupOfTopic(msgs[i].Topic) })
	in := func(g int, part []command.NewMessage) ([]wheel.Enqueued, error) {
		return Call(ctx, r, g, func(b Backend) ([]wheel.Enqueued, error) { return b.Enqueue(ctx, part) },
			func(f Forwarder, to model.Member) ([]wheel.Enqueued, uint64, error) { return f.Enqueue(ctx, to, part) })
	}
	if len(groups) <= 1 && !r.named {
		return in(r.GroupOfTopic(first(msgs).Topic), msgs)
	}
	res := make([]wheel.Enqueued, len(msgs))
	err := EachGroup(groups, func(g int) error {
		idx := parts[g]
		part := make([]command.NewMessage, len(idx))
		for j, i := range idx {
			part[j] = msgs[i]
		}
		out, err := in(g, part)
		if err != nil {
			return &GroupError{Group: g, Err: err}
		}
		if len(out) != len(idx) {
			return fmt.Errorf("service: group %d answered %d results for %d messages", g, len(out), len(idx))
		}
		for j, i := range idx {
			res[i] = out[j]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// first is the first element of s, or its zero value.
func first[T any](s []T) T {
	var v T
	if len(s) > 0 {
		v = s[0]
	}
	return v
}

// Settle acks, nacks (due nackDelayMs from now), touches or buries validated
// receipts, each group's as one call of that group, and sums the counts.
// A receipt of a group this cluster does not have is refused, naming
// field[i].
func (r *Router) Settle(ctx context.Context, field string, op Op, rs []model.Receipt, nackDelayMs int64) (command.Counted, error) {
	if err := r.CheckReceipts(field, rs); err != nil {
		return command.Counted{}, err
	}
	groups, parts := Split(len(rs), func(i int) int { return r.groupOfReceipt(rs[i]) })
	in := func(g int, part []model.Receipt) (command.Counted, error) {
		return Call(ctx, r, g, func(b Backend) (command.Counted, error) { return SettleOn(ctx, b, op, part, nackDelayMs) },
			func(f Forwarder, to model.Member) (command.Counted, uint64, error) {
				return f.Settle(ctx, to, op, part, nackDelayMs)
			})
	}
	if len(groups) <= 1 && !r.named {
		return in(r.groupOfReceipt(first(rs)), rs)
	}
	var mu sync.Mutex
	var sum command.Counted
	err := EachGroup(groups, func(g int) error {
		part := make([]model.Receipt, len(parts[g]))
		for j, i := range parts[g] {
			part[j] = rs[i]
		}
		c, err := in(g, part)
		if err != nil {
			return &GroupError{Group: g, Err: err}
		}
		mu.Lock()
		defer mu.Unlock()
		sum.Done += c.Done
		sum.Stale += c.Stale
		return nil
	})
	return sum, err
}

// groupOfReceipt is the group that settles rc.
func (r *Router) groupOfReceipt(rc model.Receipt) int {
	if r.pin > 0 {
		return r.pin - 1
	}
	return rc.ID.Group()
}

// CheckReceipts refuses a receipt of a group this cluster does not have,
// naming field[i] (a router In a group too: no message has it).
func (r *Router) CheckReceipts(field string, rs []model.Receipt) error {
	n := len(r.groups)
	for i, rc := range rs {
		if g := rc.ID.Group(); g >= n {
			return refuse(model.ErrInvalid, "%s[%d]: receipt names group %d; this cluster has groups 0 to %d", field, i, g, n-1)
		}
	}
	return nil
}

// SettleOn acks, nacks (due nackDelayMs from now), touches or buries rs
// on b.
func SettleOn(ctx context.Context, b Backend, op Op, rs []model.Receipt, nackDelayMs int64) (command.Counted, error) {
	switch op {
	case OpNack:
		return b.Nack(ctx, rs, nackDelayMs)
	case OpTouch:
		return b.Touch(ctx, rs)
	case OpBury:
		return b.DeadLetter(ctx, rs)
	}
	return b.Ack(ctx, rs)
}

// Cancel removes a delayed or ready message by id, or by topic and key,
// in its group.
func (r *Router) Cancel(ctx context.Context, c command.Cancel) (model.ID, error) {
	g := r.GroupOfTopic(c.Topic)
	if c.Topic == "" {
		var err error
		if g, err = r.GroupOfID("id", c.ID); err != nil {
			return model.ID{}, err
		}
	}
	return Call(ctx, r, g, func(b Backend) (model.ID, error) { return b.Cancel(ctx, c) },
		func(f Forwarder, to model.Member) (model.ID, uint64, error) { return f.Cancel(ctx, to, c) })
}

// Reschedule moves a delayed or ready message, in the group its id names.
func (r *Router) Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) (int64, error) {
	g, err := r.GroupOfID("id", id)
	if err != nil {
		return 0, err
	}
	return Call(ctx, r, g, func(b Backend) (int64, error) { return b.Reschedule(ctx, id, deliverAtMs) },
		func(f Forwarder, to model.Member) (int64, uint64, error) {
			return f.Reschedule(ctx, to, id, deliverAtMs)
		})
}

// Reserve leases up to max due messages of topic, in its group, waiting
// up to wait for the first.
func (r *Router) Reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, error) {
	return Call(ctx, r, r.GroupOfTopic(topic), func(b Backend) ([]model.Delivery, error) { return b.Reserve(ctx, topic, max, wait, ttr) },
		func(f Forwarder, to model.Member) ([]model.Delivery, uint64, error) {
			return f.Reserve(ctx, to, topic, max, wait, ttr)
		})
}

// ReserveID leases one ready, delayed or dead message by its id for ttr
// (0: its own time-to-run), in the group the id names (Backend.ReserveID).
func (r *Router) ReserveID(ctx context.Context, id model.ID, ttr time.Duration) (model.Delivery, error) {
	g, err := r.GroupOfID("id", id)
	if err != nil {
		return model.Delivery{}, err
	}
	return Call(ctx, r, g, func(b Backend) (model.Delivery, error) { return b.ReserveID(ctx, id, ttr) },
		func(f Forwarder, to model.Member) (model.Delivery, uint64, error) {
			return f.ReserveID(ctx, to, id, ttr)
		})
}

// Redrive moves dead messages of topic back to ready (all of them when
// ids is empty), in the topic's group.
func (r *Router) Redrive(ctx context.Context, topic string, ids []model.ID) (int, error) {
	return Call(ctx, r, r.GroupOfTopic(topic), func(b Backend) (int, error) { return b.Redrive(ctx, topic, ids) },
		func(f Forwarder, to model.Member) (int, uint64, error) { return f.Redrive(ctx, to, topic, ids) })
}

// Topics lists the topics of the router's groups (every group; a router
// In a group, that group's), by name (a topic lives in one group), each
// group's as this node holds it.
func (r *Router) Topics(ctx context.Context) ([]wheel.TopicCounts, error) {
	return merged(r, func(b Backend) ([]wheel.TopicCounts, error) { return b.Topics(ctx) },
		func(t wheel.TopicCounts) string { return t.Topic })
}

// Schedules lists the first limit schedules whose names sort after after
// of the router's groups (as Topics), each group's as this node holds it.
func (r *Router) Schedules(ctx context.Context, after string, limit int) ([]wheel.ScheduleInfo, error) {
	infos, err := merged(r, func(b Backend) ([]wheel.ScheduleInfo, error) { return b.Schedules(ctx, after, limit) },
		func(i wheel.ScheduleInfo) string { return i.Name })
	return infos[:min(len(infos), limit)], err
}

// merged reads a list of each of the router's groups at once and merges
// them, sorted by key; the error is the first group's that failed.
func merged[T any](r *Router, read func(b Backend) ([]T, error), key func(T) string) ([]T, error) {
	per := make([][]T, len(r.groups))
	err := EachGroup(r.Groups(), func(g int) (err error) {
		per[g], err = read(r.groups[g])
		return err
	})
	out := slices.Concat(per...)
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	return out, err
}

// EachGroup runs do for the groups gs at once and returns the error of
// the first group, in gs's order, that failed.
func EachGroup(gs []int, do func(g int) error) error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { errs[i] = do(g) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// All lists the groups 0 to n-1.
func All(n int) []int {
	gs := make([]int, n)
	for g := range gs {
		gs[g] = g
	}
	return gs
}

// Split sorts the indexes 0..count-1 of a list by the group of each
// element: groupAt(i) is element i's. It returns the groups that have
// elements, in order, and each one's indexes, in the list's order.
func Split(count int, groupAt func(i int) int) (groups []int, parts map[int][]int) {
	parts = map[int][]int{}
	for i := range count {
		g := groupAt(i)
		if _, ok := parts[g]; !ok {
			groups = append(groups, g)
		}
		parts[g] = append(parts[g], i)
	}
	slices.Sort(groups)
	return groups, parts
}
