package replication

import (
	"context"
	"errors"
	"testing"
)

// blockedFuture is a Raft future whose entry never commits.
type blockedFuture struct{ release chan struct{} }

func (f blockedFuture) Error() error {
	<-f.release
	return errors.New("released")
}

// A membership change whose entry cannot commit (no quorum) holds its
// caller only until the caller's context ends.
func TestWaitFutureEndsWithItsContext(t *testing.T) {
	f := blockedFuture{release: make(chan struct{})}
	defer close(f.release)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := waitFuture(ctx, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitFuture on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestWaitFutureReturnsTheFuturesError(t *testing.T) {
	f := blockedFuture{release: make(chan struct{})}
	close(f.release)
	if err := waitFuture(t.Context(), f); err == nil || err.Error() != "released" {
		t.Fatalf("waitFuture = %v, want the future's own error", err)
	}
}
