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
	fail  map[uint64]error // the error of the call of a receipt, by nonce
}

func (f *settleForwarder) Settle(_ context.Context, _ model.Member, op service.Op, rs []model.Receipt, _ int64) (command.Counted, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if op != service.OpAck {
		return command.Counted{}, 0, errors.New("not an ack")
	}
	for _, r := range rs {
		if err := f.fail[r.Nonce]; err != nil {
			return command.Counted{}, 0, err
		}
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
	if res, err := service.AckEach(t.Context(), r, 0, receiptsOf(0)); err != nil || !slices.Equal(doneOf(res), want) || len(each.calls) != 1 {
		t.Fatalf("on a group led here: %v, %v after %d calls; want %v in one", res, err, len(each.calls), want)
	}
	if _, err := service.AckEach(t.Context(), r, 0, receiptsOf(1)); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("receipts of another group: %v; want invalid", err)
	}

	away := &group{g: 1, leader: model.Member{ID: "n2", HTTPAddr: "h2:1"}}
	fwd := &settleForwarder{}
	r = service.NewRouter([]service.Backend{each, away}, fwd)
	if res, err := service.AckEach(t.Context(), r, 1, receiptsOf(1)); err != nil || !slices.Equal(doneOf(res), want) || fwd.calls != 3 {
		t.Fatalf("forwarded: %v, %v after %d calls; want %v in three", res, err, fwd.calls, want)
	}
	if away.readAfter != 7 {
		t.Fatalf("reads wait for %d, want the leader's 7", away.readAfter)
	}
}

// doneOf returns whether each ack took effect, or nil when one failed.
func doneOf(res []service.Acked) []bool {
	done := make([]bool, len(res))
	for i, a := range res {
		if a.Err != nil {
			return nil
		}
		done[i] = a.Done
	}
	return done
}

// A forwarded part tells each receipt's own outcome: the one whose
// forwarded ack failed has that failure, whatever the others' acks
// answered; one not forwarded is not-leader.
func TestAckEachForwardedReceiptFailsAlone(t *testing.T) {
	lost := errors.New("the leader's answer was lost")
	away := &group{g: 1, leader: model.Member{ID: "n2", HTTPAddr: "h2:1"}}
	fwd := &settleForwarder{fail: map[uint64]error{2: service.ErrNoForward, 3: lost}}
	r := service.NewRouter([]service.Backend{&eachGroup{group: group{g: 0, leads: true}}, away}, fwd)
	rs := append(receiptsOf(1), model.Receipt{ID: model.ID{Index: 4, Seq: 1 << 24}, Nonce: 4})
	res, err := service.AckEach(t.Context(), r, 1, rs)
	if err != nil || len(res) != len(rs) {
		t.Fatalf("forwarded: %v, %v; want one outcome per receipt", res, err)
	}
	if !res[0].Done || res[0].Err != nil {
		t.Fatalf("receipt whose ack took effect: %+v; want done", res[0])
	}
	if !errors.Is(res[1].Err, model.ErrNotLeader) || res[1].Done {
		t.Fatalf("receipt not forwarded: %+v; want not leader", res[1])
	}
	if !errors.Is(res[2].Err, lost) || res[2].Done {
		t.Fatalf("receipt whose ack failed: %+v; want its own failure", res[2])
	}
	if res[3].Done || res[3].Err != nil {
		t.Fatalf("stale receipt: %+v; want not done, no error", res[3])
	}
	if away.readAfter != 7 {
		t.Fatalf("reads wait for %d, want the leader's 7", away.readAfter)
	}
}
