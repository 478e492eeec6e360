package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A proposal whose caller's context has already ended is refused, not
// handed to Raft: the caller is told it was not made, and Raft's wait to
// take it is not left without a bound (a deadline passed gives none).
func TestProposalRefusedAfterContextEnded(t *testing.T) {
	n := repltest.NewCluster(t, 1, nil).Leader().Node
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	passed, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		id  string
		ctx context.Context
	}{{"cancelled", cancelled}, {"past-deadline", passed}} {
		_, err := n.SubmitWait(c.ctx, command.SetNode{Node: model.Member{ID: c.id}})
		if !errors.Is(err, model.ErrUnavailable) || !errors.Is(err, c.ctx.Err()) {
			t.Errorf("%s: proposal = %v, want ErrUnavailable and %v", c.id, err, c.ctx.Err())
		}
	}
	// Entries commit in their order: once this one is applied, either of
	// the two above would be too.
	if _, err := n.SubmitWait(t.Context(), command.SetNode{Node: model.Member{ID: "after"}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range n.Store().Nodes() {
		if m.ID == "cancelled" || m.ID == "past-deadline" {
			t.Errorf("the proposal of %s was made after its caller's context ended", m.ID)
		}
	}
}
