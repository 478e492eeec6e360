package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// ConsumeWebhook makes the cluster POST the messages to a receiver in the
// harness (a topic webhook) instead of consumers taking them.
const ConsumeWebhook = "webhook"

// webhookConcurrency is the max_concurrency of a bench webhook.
const webhookConcurrency = 100

// received is one message a receiver answered 2xx.
type received struct {
	at  time.Time
	seq int
}

// receiver is the harness's webhook endpoint. It answers 500 to a share
// failRate of the requests, at random; the others count as delivered.
type receiver struct {
	srv      *http.Server
	url      string
	ch       chan received
	failRate float64
	mu       sync.Mutex
	rng      *rand.Rand
}

func startReceiver(failRate float64) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/hook", ch: make(chan received, 1<<16), failRate: failRate,
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	at := time.Now()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	fail := r.failRate > 0 && r.rng.Float64() < r.failRate
	r.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	select {
	case r.ch <- received{at: at, seq: decodeSeq(string(body))}:
	case <-req.Context().Done():
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// hookReceiver starts the target's receiver and points the topic's
// webhook at it, once.
func (t *dwTarget) hookReceiver(ctx context.Context) (*receiver, error) {
	t.hookOnce.Do(func() {
		r, err := startReceiver(t.webhookFailRate)
		if err != nil {
			t.hookErr = err
			return
		}
		t.hookErr = t.call(ctx, func(c *client.Client) error {
			_, err := c.SetWebhook(ctx, t.topic, api.WebhookRequest{URL: r.url, MaxConcurrency: api.Ptr(int64(webhookConcurrency))})
			return err
		})
		if t.hookErr != nil {
			t.hookErr = errors.Join(fmt.Errorf("set the webhook: %w", t.hookErr), r.close())
			return
		}
		t.hook = r
	})
	return t.hook, t.hookErr
}

// webhookConsumer reports what the receiver answered 2xx, one message a
// batch, at the instant it arrived.
type webhookConsumer struct{ r *receiver }

func (c webhookConsumer) Next(ctx context.Context) (batch, error) {
	select {
	case m := <-c.r.ch:
		return batch{At: m.at, Seqs: []int{m.seq}}, nil
	case <-ctx.Done():
		return batch{}, nil
	case <-time.After(time.Second):
		return batch{}, nil
	}
}

func (c webhookConsumer) Close() error { return nil }
