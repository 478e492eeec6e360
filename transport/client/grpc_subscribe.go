package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// GRPCSubscription reads a topic's deliveries through the gRPC Subscribe
// stream, subscribing again (at the next node it knows, when the one it
// used says it does not lead) whenever the stream ends, and sends the
// receipts given to Ack up the stream in batches, so that
//
//	for d := range sub.Deliveries() { handle(d); sub.Ack(d) }
//
// is the fast loop. Receipts that cannot go up the stream (it is being
// replaced) are acked with the Ack call instead. It is safe for concurrent
// use.
type GRPCSubscription struct {
	g     *GRPC
	topic string
	opt   SubscribeOptions

	out     chan api.Delivery
	acks    chan string
	ctx     context.Context
	cancel  context.CancelFunc
	closing chan struct{} // closed by Close: flush the acks
	reader  sync.WaitGroup
	sender  sync.WaitGroup
	once    sync.Once

	mu     sync.Mutex
	stream pb.Delaywheel_SubscribeClient // the open stream, nil between two; only sendAcks sends on it
	err    error
}

// Subscribe starts reading topic's deliveries. It runs until Close or
// until ctx ends, or until the server refuses the stream for good (a bad
// topic or option, a wrong token); Deliveries is then closed and Err says
// why. Of opt, MaxInflight, TTRMs, AckBatch, Buffer and OnError apply.
func (g *GRPC) Subscribe(ctx context.Context, topic string, opt SubscribeOptions) *GRPCSubscription {
	if opt.AckBatch <= 0 {
		opt.AckBatch = 1000
	}
	if opt.Buffer <= 0 {
		opt.Buffer = 256
	}
	s := &GRPCSubscription{g: g, topic: topic, opt: opt, out: make(chan api.Delivery, opt.Buffer),
		acks: make(chan string, max(opt.AckBatch, opt.MaxInflight)), closing: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.reader.Add(1)
	s.sender.Add(1)
	go s.read()
	go s.sendAcks()
	return s
}

// Deliveries returns the channel of deliveries. It is closed once the
// subscription ends.
func (s *GRPCSubscription) Deliveries() <-chan api.Delivery { return s.out }

// Ack queues d's receipt to be acked in the background.
func (s *GRPCSubscription) Ack(d api.Delivery) {
	select {
	case s.acks <- d.Receipt:
	case <-s.ctx.Done():
	}
}

// Nack returns d to delayed, due delayMs from now, at once.
func (s *GRPCSubscription) Nack(ctx context.Context, d api.Delivery, delayMs int64) error {
	_, err := s.g.Nack(ctx, []string{d.Receipt}, delayMs)
	return err
}

// Err returns why the subscription ended, once Deliveries is closed: nil
// after Close or the end of its context.
func (s *GRPCSubscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close sends the acks queued so far, then half-closes the stream and
// waits for the server to end it (all within ctx): the server settles
// every ack sent up the stream before it ends it, and releases the
// deliveries not acked for redelivery. Ack must not be called after Close.
func (s *GRPCSubscription) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.closing)
		if werr := waitWithin(ctx, &s.sender); werr != nil {
			err = fmt.Errorf("delaywheel: close subscription of %s: acks not sent: %w", s.topic, werr)
		}
		s.mu.Lock()
		st := s.stream
		s.mu.Unlock()
		if st != nil && err == nil {
			// The sender is done: nothing else sends on st.
			if st.CloseSend() == nil {
				_ = waitWithin(ctx, &s.reader) // at ctx's end, cut below
			}
		}
		s.cancel()
		s.reader.Wait()
		s.sender.Wait()
	})
	return err
}

// read subscribes again each time the stream ends, with a growing pause
// while it cannot.
func (s *GRPCSubscription) read() {
	defer s.reader.Done()
	defer close(s.out)
	pause := 10 * time.Millisecond
	for {
		got, err := s.readOnce()
		if s.ctx.Err() != nil {
			return
		}
		select {
		case <-s.closing:
			return // Close ended the stream, or it ended while closing
		default:
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Unauthenticated, codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
			s.mu.Lock()
			s.err = errorOfStatus(err)
			s.mu.Unlock()
			return
		}
		if notLeader(err) {
			i := s.g.cur.Load()
			s.g.cur.CompareAndSwap(i, (i+1)%int64(len(s.g.calls)))
		}
		if err != nil && s.opt.OnError != nil {
			s.opt.OnError(fmt.Errorf("delaywheel: subscribe %s: %w", s.topic, errorOfStatus(err)))
		}
		if got {
			pause = 10 * time.Millisecond
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// readOnce reads one stream to its end; got says whether it delivered.
func (s *GRPCSubscription) readOnce() (got bool, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if s.g.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.g.token)
	}
	st, err := s.g.calls[s.g.cur.Load()].Subscribe(ctx)
	if err != nil {
		return false, err
	}
	first := &pb.SubscribeRequest{Topic: s.topic}
	if s.opt.MaxInflight > 0 {
		first.MaxInflight = api.Ptr(int32(s.opt.MaxInflight))
	}
	if s.opt.TTRMs > 0 {
		first.TtrMs = api.Ptr(s.opt.TTRMs)
	}
	if err := st.Send(first); err != nil {
		return false, recvErr(st, err)
	}
	s.mu.Lock()
	s.stream = st
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stream = nil
		s.mu.Unlock()
	}()
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
	deliver:
		for _, d := range resp.GetMessages() {
			got = true
			select {
			case s.out <- deliveryOfProto(d):
			case <-s.closing:
				// Read on to the stream's end without handing out: the
				// server releases what was not acked once it ends it.
				break deliver
			case <-s.ctx.Done():
				return got, nil
			}
		}
	}
}

// recvErr is the status a stream ended with, which a failed Send hides.
func recvErr(st pb.Delaywheel_SubscribeClient, sendErr error) error {
	if !errors.Is(sendErr, io.EOF) {
		return sendErr
	}
	_, err := st.Recv()
	return err
}

// sendAcks sends the queued receipts in batches up the open stream, or
// with the Ack call while there is none.
func (s *GRPCSubscription) sendAcks() {
	defer s.sender.Done()
	batch := make([]string, 0, s.opt.AckBatch)
	closing := false
	for {
		batch = batch[:0]
		select {
		case r := <-s.acks:
			batch = append(batch, r)
		case <-s.closing:
			closing = true
		case <-s.ctx.Done():
			return
		}
	fill:
		for len(batch) < s.opt.AckBatch {
			select {
			case r := <-s.acks:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return // closing, and every ack is sent
		}
		s.mu.Lock()
		st := s.stream
		s.mu.Unlock()
		if st != nil && !closing {
			if err := st.Send(&pb.SubscribeRequest{Ack: batch}); err == nil {
				continue
			}
		}
		if _, err := s.g.Ack(context.WithoutCancel(s.ctx), batch); err != nil && s.opt.OnError != nil {
			s.opt.OnError(fmt.Errorf("delaywheel: ack %d receipts: %w", len(batch), err))
		}
	}
}
