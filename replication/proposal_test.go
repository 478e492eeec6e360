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

// A proposal whose caller's deadline has passed is refused, not handed to
// Raft, whose wait to take it a timeout of zero or less leaves without a
// bound: the caller is told it was not made.
func TestProposalRefusedAfterDeadline(t *testing.T) {
	n := repltest.NewCluster(t, 1, nil).Leader().Node
	passed, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := n.SubmitWait(passed, command.SetNode{Node: model.Member{ID: "late"}})
	if !errors.Is(err, model.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("proposal after its deadline = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	// Entries commit in their order: once this one is applied, the one
	// above would be too.
	if _, err := n.SubmitWait(t.Context(), command.SetNode{Node: model.Member{ID: "after"}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range n.Store().Nodes() {
		if m.ID == "late" {
			t.Error("the proposal was made after its caller's deadline")
		}
	}
}
