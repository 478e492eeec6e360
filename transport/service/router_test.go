package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// group is one group of a node: it leads the group or knows its leader.
type group struct {
	service.Backend // nil: a method the test does not expect panics
	g               int
	leads           bool
	leader          model.Member
	readAfter       uint64
	enqueued        [][]command.NewMessage
}

func (b *group) Leader() (model.Member, bool, bool) { return b.leader, b.leads, true }
func (b *group) Removed() error                     { return nil }
func (b *group) ReadAfter(index uint64)             { b.readAfter = index }
func (b *group) Enqueue(_ context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error) {
	b.enqueued = append(b.enqueued, msgs)
	return results(b.g, msgs), nil
}

// results are the answers of group g to msgs: ids naming g, due where
// they ask.
func results(g int, msgs []command.NewMessage) []wheel.Enqueued {
	out := make([]wheel.Enqueued, len(msgs))
	for i, m := range msgs {
		out[i] = wheel.Enqueued{ID: model.ID{Index: uint64(i + 1), Seq: uint32(g)<<24 | uint32(i)}, DeliverAtMs: m.DeliverAtMs}
	}
	return out
}

// forwarder answers what it is sent as the leader at to would, or fails.
type forwarder struct {
	service.Forwarder
	sent map[string][]command.NewMessage // by leader
	fail error
}

func (f *forwarder) Enqueue(_ context.Context, to model.Member, msgs []command.NewMessage) ([]wheel.Enqueued, uint64, error) {
	if f.fail != nil {
		return nil, 0, f.fail
	}
	f.sent[to.ID] = msgs
	return results(1, msgs), 42, nil
}

func (f *forwarder) Reaches(context.Context, model.Member) bool { return true }

// topicOf returns a topic of group g, of n.
func topicOf(g, n int) string {
	for i := 0; ; i++ {
		if t := fmt.Sprintf("t%d", i); model.GroupOf(t, n) == g {
			return t
		}
	}
}

// A batch over two groups is split: the part of the group this node
// leads is enqueued here, the other part forwarded to its leader, whose
// applied index this node's reads then wait for; the results come back
// in the batch's order. When the forward fails, the answer is that
// part's error, naming its group; without a Forwarder it is NOT_LEADER.
func TestRouterEnqueueSplitsByGroup(t *testing.T) {
	g0 := &group{g: 0, leads: true}
	g1 := &group{g: 1, leader: model.Member{ID: "n2", HTTPAddr: "h2:1", GRPCAddr: "h2:2"}}
	fwd := &forwarder{sent: map[string][]command.NewMessage{}}
	r := service.NewRouter([]service.Backend{g0, g1}, fwd)
	msgs := []command.NewMessage{{Topic: topicOf(1, 2), DeliverAtMs: 1}, {Topic: topicOf(0, 2), DeliverAtMs: 2}, {Topic: topicOf(1, 2), DeliverAtMs: 3}}
	res, err := r.Enqueue(t.Context(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if want := model.GroupOf(msgs[i].Topic, 2); e.ID.Group() != want || e.DeliverAtMs != msgs[i].DeliverAtMs {
			t.Errorf("result %d: %+v; want an id of group %d due at %d", i, e, want, msgs[i].DeliverAtMs)
		}
	}
	if len(g0.enqueued) != 1 || len(g0.enqueued[0]) != 1 || len(fwd.sent["n2"]) != 2 {
		t.Fatalf("enqueued here %v, forwarded %v", g0.enqueued, fwd.sent)
	}
	if g1.readAfter != 42 {
		t.Fatalf("reads wait for %d, want the leader's 42", g1.readAfter)
	}

	fwd.fail = model.ErrOverloaded
	_, err = r.Enqueue(t.Context(), msgs)
	var ge *service.GroupError
	if !errors.As(err, &ge) || ge.Group != 1 || !errors.Is(err, model.ErrOverloaded) || err.Error() != "group 1: overloaded" {
		t.Fatalf("a failed part: %v", err)
	}

	alone := service.NewRouter([]service.Backend{g0, g1}, nil)
	_, err = alone.Enqueue(t.Context(), msgs[:1])
	var nl *service.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader.ID != "n2" || !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("a part that cannot be forwarded: %v", err)
	}
}

// settling is a group this node leads whose Settled answers index, or
// fails with err as when the apply takes longer than the leader waits.
type settling struct {
	group
	index  uint64
	err    error
	commit uint64
}

func (b *settling) Settled(context.Context) (uint64, error) { return b.index, b.err }
func (b *settling) Indexes() (uint64, uint64)               { return 1, b.commit }

// A write forwarded here is answered with the index the forwarding node's
// reads must wait for: the applied index that covers it, or, when the
// leader could not wait for its apply, its commit index, never none.
func TestCallSettledIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *settling
		want uint64
	}{
		{"applied", &settling{group: group{leads: true}, index: 7, commit: 9}, 7},
		{"apply slower than the wait", &settling{group: group{leads: true}, err: context.DeadlineExceeded, commit: 9}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := service.NewRouter([]service.Backend{tc.b}, nil)
			ctx, s := service.WithSettled(t.Context())
			_, err := service.Call(ctx, r, 0, func(service.Backend) (int, error) { return 1, nil },
				func(service.Forwarder, model.Member) (int, uint64, error) { return 0, 0, errors.New("not forwarded") })
			if err != nil {
				t.Fatal(err)
			}
			if s.Index != tc.want {
				t.Errorf("answered with index %d, want %d", s.Index, tc.want)
			}
		})
	}
}
