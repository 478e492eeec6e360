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
	"sync/atomic"
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
// failRate of the requests, at random, and 204 to the others, which count
// as delivered; with hang it holds every request unanswered until close.
type receiver struct {
	srv      *http.Server
	url      string
	ch       chan received
	failRate float64
	hang     bool
	release  chan struct{} // closed by close: hung requests end
	mu       sync.Mutex
	rng      *rand.Rand

	requests, ok, failed atomic.Int64
}

func startReceiver(failRate float64, hang bool) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/hook", ch: make(chan received, 1<<16), failRate: failRate,
		hang: hang, release: make(chan struct{}), rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	at := time.Now()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.hang {
		select {
		case <-r.release:
		case <-req.Context().Done():
		}
		// A handler that returns without writing answers 200, which
		// would ack the message.
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	fail := r.failRate > 0 && r.rng.Float64() < r.failRate
	r.mu.Unlock()
	if fail {
		r.failed.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	select {
	case r.ch <- received{at: at, seq: decodeSeq(string(body))}:
	case <-req.Context().Done():
		return
	}
	r.ok.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) close() error {
	r.mu.Lock()
	select {
	case <-r.release:
	default:
		close(r.release)
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// hookReceiver starts the target's receiver and points each topic's
// webhook at it, once.
func (t *dwTarget) hookReceiver(ctx context.Context) (*receiver, error) {
	t.hookOnce.Do(func() {
		r, err := startReceiver(t.webhookFailRate, t.webhookHang)
		if err != nil {
			t.hookErr = err
			return
		}
		t.hookErr = t.call(ctx, func(c *client.Client) error {
			for _, topic := range t.topics {
				if _, err := c.SetWebhook(ctx, topic, api.WebhookRequest{URL: r.url, MaxConcurrency: api.Ptr(int64(webhookConcurrency))}); err != nil {
					return err
				}
			}
			return nil
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
