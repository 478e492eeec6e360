package service_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// eachGroup is a group this node leads that acks as one entry.
type eachGroup struct {
	group
	calls [][]model.Receipt
}

func (b *eachGroup) AckEach(_ context.Context, rs []model.Receipt) ([]bool, error) {
	b.calls = append(b.calls, rs)
	return held(rs), nil
}

// settleForwarder answers forwarded settlements one by one.
type settleForwarder struct {
	forwarder
	mu    sync.Mutex
	calls int
}

func (f *settleForwarder) Settle(_ context.Context, _ model.Member, op service.Op, rs []model.Receipt, _ int64) (command.Counted, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if op != service.OpAck {
		return command.Counted{}, 0, errors.New("not an ack")
	}
	return counted(rs), 7, nil
}

// held says of each receipt whether it still holds its message: here, when
// its nonce is odd.
func held(rs []model.Receipt) []bool {
	out := make([]bool, len(rs))
	for i, r := range rs {
		out[i] = r.Nonce%2 == 1
	}
	return out
}

func counted(rs []model.Receipt) command.Counted {
	var c command.Counted
	for _, ok := range held(rs) {
		if ok {
			c.Done++
		} else {
			c.Stale++
		}
	}
	return c
}

// receiptsOf returns receipts of group g with nonces 1, 2 and 3.
func receiptsOf(g int) []model.Receipt {
	rs := make([]model.Receipt, 3)
	for i := range rs {
		rs[i] = model.Receipt{ID: model.ID{Index: uint64(i + 1), Seq: uint32(g) << 24}, Nonce: uint64(i + 1)}
	}
	return rs
}

// AckEach acks the receipts of one group as one call on a group led here,
// else one forwarded ack each, and tells of each receipt whether it took
// effect.
func TestAckEach(t *testing.T) {
	want := []bool{true, false, true}
	each := &eachGroup{group: group{g: 0, leads: true}}
	other := &eachGroup{group: group{g: 1, leads: true}}
	r := service.NewRouter([]service.Backend{each, other}, nil)
	if done, err := service.AckEach(t.Context(), r, 0, receiptsOf(0)); err != nil || !slices.Equal(done, want) || len(each.calls) != 1 {
		t.Fatalf("on a group led here: %v, %v after %d calls; want %v in one", done, err, len(each.calls), want)
	}
	if _, err := service.AckEach(t.Context(), r, 0, receiptsOf(1)); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("receipts of another group: %v; want invalid", err)
	}

	away := &group{g: 1, leader: model.Member{ID: "n2", HTTPAddr: "h2:1"}}
	fwd := &settleForwarder{}
	r = service.NewRouter([]service.Backend{each, away}, fwd)
	if done, err := service.AckEach(t.Context(), r, 1, receiptsOf(1)); err != nil || !slices.Equal(done, want) || fwd.calls != 3 {
		t.Fatalf("forwarded: %v, %v after %d calls; want %v in three", done, err, fwd.calls, want)
	}
	if away.readAfter != 7 {
		t.Fatalf("reads wait for %d, want the leader's 7", away.readAfter)
	}
}
