package client_test

import (
	"context"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// burier is what TestBury calls, on the HTTP and the gRPC client alike.
type burier interface {
	Enqueue(ctx context.Context, msgs []api.Message) ([]api.Result, error)
	Reserve(ctx context.Context, topic string, req api.ReserveRequest) ([]api.Delivery, error)
	Bury(ctx context.Context, receipts []string) (api.BuryResponse, error)
	Dead(ctx context.Context, topic string, limit int) ([]api.MessageView, error)
}

// TestBury: over either protocol a buried message is dead at once, its
// attempts left notwithstanding; burying its receipt again is stale, and
// a malformed receipt is an invalid argument.
func TestBury(t *testing.T) {
	kn, g := startGRPC(t)
	for proto, c := range map[string]burier{"http": client.New(kn.URL), "grpc": g} {
		t.Run(proto, func(t *testing.T) {
			ctx := t.Context()
			topic := "bury-" + proto
			msgs := messages(2, topic)
			for i := range msgs {
				msgs[i].MaxAttempts = api.Ptr(int32(5))
			}
			if _, err := c.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			ds, err := c.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(2)})
			if err != nil || len(ds) != 2 {
				t.Fatalf("reserve: %v %v", ds, err)
			}
			got, err := c.Bury(ctx, []string{ds[0].Receipt})
			if err != nil || got != (api.BuryResponse{Buried: 1}) {
				t.Fatalf("bury: %+v %v", got, err)
			}
			dead, err := c.Dead(ctx, topic, 10)
			if err != nil || len(dead) != 1 || dead[0].ID != ds[0].ID || dead[0].State != "dead" {
				t.Fatalf("dead letters after the bury: %+v %v; want %s alone", dead, err, ds[0].ID)
			}
			got, err = c.Bury(ctx, []string{ds[0].Receipt, ds[1].Receipt})
			if err != nil || got != (api.BuryResponse{Buried: 1, Stale: 1}) {
				t.Fatalf("bury of the buried and the other: %+v %v; want 1 buried, 1 stale", got, err)
			}
			if _, err := c.Bury(ctx, []string{"nope"}); !client.HasCode(err, api.CodeInvalidArgument) {
				t.Fatalf("bury of a malformed receipt: %v", err)
			}
		})
	}
}
