package systemtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// Workload enqueues at a steady rate and consumes with long-polls against
// the live nodes of a cluster, recording everything into a History. Each
// message's body is a unique token, so the history can tell which send a
// delivery came from even when the enqueue's answer was lost.
type Workload struct {
	Topic string
	// Topics, when set, replace Topic: each batch of a producer goes to
	// the next of them in turn, and each has its own Consumers.
	Topics      []string
	Rate        int           // messages per second (default 300)
	MaxDelay    time.Duration // delays are uniform in [0, MaxDelay] (default 2 s)
	TTR         time.Duration // lease of every message (default 3 s)
	MaxAttempts int32         // default 1000: nothing goes dead
	Producers   int           // default 4
	Consumers   int           // per topic, default 4
	ReserveMax  int           // per reserve (default 50)
	WaitMs      int64         // long-poll wait (default 1000)
	// NackPercent of first deliveries are nacked (delay 0) instead of
	// acked, so nacks show up in the history.
	NackPercent int
	// Targets returns the nodes to send to (one is picked at random per
	// call); required.
	Targets func() []*Server
	History *History

	seq         atomic.Int64
	prodCancel  context.CancelFunc
	consCancel  context.CancelFunc
	prodWG      sync.WaitGroup
	consWG      sync.WaitGroup
	enqueueErrs atomic.Int64
	reserveErrs atomic.Int64
	lastErr     atomic.Value // string
}

func (w *Workload) defaults() {
	if len(w.Topics) == 0 {
		w.Topics = []string{w.Topic}
	}
	if w.Rate == 0 {
		w.Rate = 300
	}
	if w.MaxDelay == 0 {
		w.MaxDelay = 2 * time.Second
	}
	if w.TTR == 0 {
		w.TTR = 3 * time.Second
	}
	if w.MaxAttempts == 0 {
		w.MaxAttempts = 1000
	}
	if w.Producers == 0 {
		w.Producers = 4
	}
	if w.Consumers == 0 {
		w.Consumers = 4
	}
	if w.ReserveMax == 0 {
		w.ReserveMax = 50
	}
	if w.WaitMs == 0 {
		w.WaitMs = 1000
	}
	if w.History == nil {
		w.History = NewHistory()
	}
}

// Start starts the producers and the consumers.
func (w *Workload) Start(ctx context.Context) {
	w.defaults()
	pctx, pcancel := context.WithCancel(ctx)
	cctx, ccancel := context.WithCancel(ctx)
	w.prodCancel, w.consCancel = pcancel, ccancel
	per := w.Rate / w.Producers
	for i := 0; i < w.Producers; i++ {
		rate := per
		if i < w.Rate%w.Producers {
			rate++
		}
		w.prodWG.Add(1)
		go w.produce(pctx, rate, i)
	}
	for i := 0; i < w.Consumers*len(w.Topics); i++ {
		// Even consumers of a topic wait long enough to outlast a paused
		// node, so answers held up by a pause are seen too; odd ones give
		// up on a call after 2 s and try another node, so they see
		// deliveries resume as soon as a new leader serves.
		patience := 10 * time.Second
		if i/len(w.Topics)%2 == 1 {
			patience = 2 * time.Second
		}
		w.consWG.Add(1)
		go w.consume(cctx, "c"+strconv.Itoa(i), w.Topics[i%len(w.Topics)], patience)
	}
}

// StopProducing stops the producers and waits for their calls to end.
func (w *Workload) StopProducing() {
	if w.prodCancel != nil {
		w.prodCancel()
	}
	w.prodWG.Wait()
}

// Stop stops producers and consumers and waits for them.
func (w *Workload) Stop() {
	w.StopProducing()
	if w.consCancel != nil {
		w.consCancel()
	}
	w.consWG.Wait()
}

// Errors reports how many enqueue and reserve calls failed, and the last
// error seen.
func (w *Workload) Errors() (enqueue, reserve int64, last string) {
	s, _ := w.lastErr.Load().(string)
	return w.enqueueErrs.Load(), w.reserveErrs.Load(), s
}

func (w *Workload) pick() *Server {
	ns := w.Targets()
	if len(ns) == 0 {
		return nil
	}
	return ns[rand.IntN(len(ns))]
}

func (w *Workload) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// produce sends rate messages a second, in batches every 100 ms, each
// batch to the next topic, starting at topic first.
func (w *Workload) produce(ctx context.Context, rate, first int) {
	defer w.prodWG.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	carry := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		carry += rate
		n := carry / 10
		carry %= 10
		if n == 0 {
			continue
		}
		node := w.pick()
		if node == nil {
			continue
		}
		topic := w.Topics[first%len(w.Topics)]
		first++
		msgs := make([]api.Message, n)
		tokens := make([]string, n)
		for i := range msgs {
			tokens[i] = topic + "#" + strconv.FormatInt(w.seq.Add(1), 10)
			msgs[i] = api.Message{Topic: topic, Payload: api.TextBody(tokens[i]),
				DelayMs:     api.Ptr(rand.Int64N(w.MaxDelay.Milliseconds() + 1)),
				TTRMs:       api.Ptr(w.TTR.Milliseconds()),
				MaxAttempts: api.Ptr(w.MaxAttempts)}
		}
		sent := NowMs()
		w.History.EnqueueSent(tokens, sent)
		// Not bound to ctx: a send that was started is seen through, so
		// stopping the producers leaves no enqueue without its answer.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := node.Client.Enqueue(rctx, msgs)
		cancel()
		if err != nil {
			w.History.EnqueueFailed()
			w.enqueueErrs.Add(1)
			w.lastErr.Store(fmt.Sprintf("enqueue via %s: %v", node.ID, err))
			continue
		}
		w.History.EnqueueAcked(tokens, res, sent, NowMs())
	}
}

// consume long-polls topic, then acks (or nacks) what it got.
func (w *Workload) consume(ctx context.Context, name, topic string, patience time.Duration) {
	defer w.consWG.Done()
	for ctx.Err() == nil {
		node := w.pick()
		if node == nil {
			w.sleep(ctx, 50*time.Millisecond)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Duration(w.WaitMs)*time.Millisecond+patience)
		sent := NowMs()
		ds, err := node.Client.Reserve(rctx, topic, api.ReserveRequest{Max: api.Ptr(w.ReserveMax), WaitMs: w.WaitMs})
		recv := NowMs()
		cancel()
		if err != nil {
			w.History.ReserveFailed(node.ID, sent, recv)
			if ctx.Err() == nil {
				w.reserveErrs.Add(1)
				w.lastErr.Store(fmt.Sprintf("reserve via %s: %v", node.ID, err))
				w.sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		w.History.Delivered(name, node.ID, ds, sent, recv)
		var acks, nacks []string
		var leaseEnd int64
		for _, d := range ds {
			leaseEnd = max(leaseEnd, d.LeaseExpiresMs)
			if d.Attempt == 1 && w.NackPercent > 0 && rand.IntN(100) < w.NackPercent {
				nacks = append(nacks, d.Receipt)
			} else {
				acks = append(acks, d.Receipt)
			}
		}
		w.settle(ctx, false, acks, leaseEnd, patience)
		w.settle(ctx, true, nacks, leaseEnd, patience)
	}
}

// settle acks or nacks receipts, retrying on other nodes while the call
// fails for want of a leader, until a little past the leases' end.
func (w *Workload) settle(ctx context.Context, nack bool, receipts []string, leaseEnd int64, patience time.Duration) {
	if len(receipts) == 0 {
		return
	}
	for try := 0; ; try++ {
		node := w.pick()
		if node == nil {
			w.sleep(ctx, 50*time.Millisecond)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		// Not bound to ctx: a settle that was started is seen through,
		// so the history knows its answer.
		rctx, cancel := context.WithTimeout(context.Background(), patience)
		sent := NowMs()
		var err error
		if nack {
			var res api.NackResponse
			res, err = node.Client.Nack(rctx, receipts, 0)
			w.History.Nacked(node.ID, receipts, sent, NowMs(), res, err, try > 0)
		} else {
			var res api.AckResponse
			res, err = node.Client.Ack(rctx, receipts)
			w.History.Acked(node.ID, receipts, sent, NowMs(), res, err, try > 0)
		}
		cancel()
		if err == nil {
			return
		}
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 && ce.Status != 429 {
			return // answered: retrying cannot help
		}
		if ctx.Err() != nil || NowMs() > leaseEnd+2000 {
			return
		}
		w.sleep(context.Background(), 100*time.Millisecond)
	}
}

// WatchLeaders polls each live node's own view of every Raft group
// (/v1/cluster?local=true, which answers at once while a peer is down)
// every 100 ms and records every new term into h until ctx ends. Each node
// is polled by a goroutine of its own: a node that answers slowly (paused,
// or starved on a loaded machine) holds up no other node's poll, which
// would record a new term it knows late, past the slack in which a leader
// change explains a duplicate (leaderSlack).
func WatchLeaders(ctx context.Context, c *Cluster, h *History) {
	var wg sync.WaitGroup
	defer wg.Wait()
	watched := map[*Server]bool{}
	for ctx.Err() == nil {
		for _, n := range c.Servers() {
			if !watched[n] {
				watched[n] = true
				wg.Go(func() { watchNode(ctx, n, c.Groups(), h) })
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchNode polls n's views of its groups for WatchLeaders while n is
// live, until ctx ends.
func watchNode(ctx context.Context, n *Server, groups int, h *History) {
	for ctx.Err() == nil {
		if n.Running() && !n.Paused() {
			for g := range groups {
				rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				v, err := n.ClusterOf(rctx, g, true)
				cancel()
				if err == nil && v.Term > 0 {
					h.ObserveGroupLeader(NowMs(), g, v.Leader, v.Term)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
