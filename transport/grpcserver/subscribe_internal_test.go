package grpcserver

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// settleRecorder is a backend that records the acks and nacks it is given.
type settleRecorder struct {
	transport.Backend
	acks   [][]model.Receipt
	nacks  [][]model.Receipt
	delays []int64
	ackErr error
}

func (b *settleRecorder) Ack(_ context.Context, rs []model.Receipt) (command.Counted, error) {
	b.acks = append(b.acks, slices.Clone(rs))
	return command.Counted{Done: len(rs)}, b.ackErr
}

func (b *settleRecorder) Nack(_ context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error) {
	b.nacks = append(b.nacks, slices.Clone(rs))
	b.delays = append(b.delays, delayMs)
	return command.Counted{Done: len(rs)}, nil
}

func receipts(nonces ...uint64) []model.Receipt {
	out := make([]model.Receipt, len(nonces))
	for i, n := range nonces {
		out[i] = model.Receipt{Nonce: n}
	}
	return out
}

// queued returns a closed channel holding sets.
func queued(sets ...settlement) <-chan settlement {
	ch := make(chan settlement, len(sets))
	for _, s := range sets {
		ch <- s
	}
	close(ch)
	return ch
}

// TestSettleAllAcksQueuedRequestsTogether: the requests of a Subscribe
// stream that wait to be settled are acked in one call, not one call
// each, and their nacks follow in order with their own delays.
func TestSettleAllAcksQueuedRequestsTogether(t *testing.T) {
	b := &settleRecorder{}
	s := &Server{cfg: transport.Config{}.WithDefaults()}
	err := s.settleAll(t.Context(), b, queued(
		settlement{acks: receipts(1)},
		settlement{acks: receipts(2, 3), nacks: receipts(4), nackDelayMs: 5},
		settlement{nacks: receipts(6), nackDelayMs: 7},
		settlement{acks: receipts(8)},
	))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]model.Receipt{receipts(1, 2, 3, 8)}; !slices.EqualFunc(b.acks, want, slices.Equal) {
		t.Fatalf("ack calls %v, want %v", b.acks, want)
	}
	if want := [][]model.Receipt{receipts(4), receipts(6)}; !slices.EqualFunc(b.nacks, want, slices.Equal) || !slices.Equal(b.delays, []int64{5, 7}) {
		t.Fatalf("nack calls %v with delays %v, want %v with 5, 7", b.nacks, b.delays, want)
	}
}

// TestSettleAllKeepsAcksWithinTheBatchLimit: acks taken together are sent
// in calls of at most Limits.MaxBatch receipts, in order.
func TestSettleAllKeepsAcksWithinTheBatchLimit(t *testing.T) {
	b := &settleRecorder{}
	s := &Server{cfg: transport.Config{Limits: transport.Limits{MaxBatch: 2}}.WithDefaults()}
	err := s.settleAll(t.Context(), b, queued(
		settlement{acks: receipts(1)},
		settlement{acks: receipts(2, 3)},
		settlement{acks: receipts(4)},
	))
	if err != nil {
		t.Fatal(err)
	}
	var all []model.Receipt
	for _, call := range b.acks {
		if len(call) > 2 {
			t.Fatalf("an ack call of %d receipts, over the limit of 2: %v", len(call), b.acks)
		}
		all = append(all, call...)
	}
	if !slices.Equal(all, receipts(1, 2, 3, 4)) {
		t.Fatalf("acked %v, want 1 to 4 in order", b.acks)
	}
}

// TestSettleAllStopsAtAFailedAck: an ack that fails ends the settling
// with its error; nothing after it is settled.
func TestSettleAllStopsAtAFailedAck(t *testing.T) {
	b := &settleRecorder{ackErr: model.ErrNotLeader}
	s := &Server{cfg: transport.Config{Limits: transport.Limits{MaxBatch: 1}}.WithDefaults()}
	err := s.settleAll(t.Context(), b, queued(settlement{acks: receipts(1, 2), nacks: receipts(3)}))
	if !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("err %v, want %v", err, model.ErrNotLeader)
	}
	if len(b.acks) != 1 || len(b.nacks) != 0 {
		t.Fatalf("after the failed ack: acks %v, nacks %v", b.acks, b.nacks)
	}
}
