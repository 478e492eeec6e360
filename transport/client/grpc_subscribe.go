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
// used says it does not lead or cannot be reached) whenever the stream
// ends, and sends the receipts given to Ack up the stream in batches, so that
//
//	for d := range sub.Deliveries() { handle(d); sub.Ack(d) }
//
// is the fast loop. Receipts that cannot go up the stream (it is being
// replaced) are acked with the Ack call instead. It is safe for concurrent
// use.
type GRPCSubscription struct {
	*feed
	g *GRPC

	ctx      context.Context
	cancel   context.CancelFunc
	ackCtx   context.Context // of the Ack calls: ends with Close, not with ctx
	stopAcks context.CancelFunc
	closing  chan struct{} // closed by Close: flush the acks
	reader   sync.WaitGroup
	sender   sync.WaitGroup
	once     sync.Once

	streamMu sync.Mutex
	stream   pb.Delaywheel_SubscribeClient // the open stream, nil between two; only sendAcks sends on it
}

// Subscribe starts reading topic's deliveries. It runs until Close or
// until ctx ends, or until the server refuses the stream for good (a bad
// topic or option, a wrong token); Deliveries is then closed and Err says
// why. The end of ctx also stops the background acks, once the receipts
// queued so far are sent. Of opt, MaxInflight, TTRMs, AckBatch, Buffer and
// OnError apply.
func (g *GRPC) Subscribe(ctx context.Context, topic string, opt SubscribeOptions) *GRPCSubscription {
	s := &GRPCSubscription{feed: newFeed(topic, opt, false, g), g: g, closing: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.ackCtx, s.stopAcks = context.WithCancel(context.WithoutCancel(ctx))
	s.reader.Add(1)
	s.sender.Add(1)
	go s.read()
	go s.sendAcks()
	return s
}

// Ack queues d's receipt to be acked in the background.
func (s *GRPCSubscription) Ack(d api.Delivery) {
	select {
	case s.acks <- d.Receipt:
	case <-s.ctx.Done():
	}
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
		s.streamMu.Lock()
		st := s.stream
		s.streamMu.Unlock()
		if st != nil && err == nil {
			// The sender is done: nothing else sends on st.
			if st.CloseSend() == nil {
				_ = waitWithin(ctx, &s.reader) // at ctx's end, cut below
			}
		}
		s.cancel()
		s.reader.Wait()
		s.stopAcks()
		s.sender.Wait()
	})
	return err
}

// read subscribes again each time the stream ends (at the next node when
// the one it used does not lead or cannot be reached), until the server
// refuses it for good.
func (s *GRPCSubscription) read() {
	defer s.reader.Done()
	s.reconnect(s.ctx, s.readOnce, func(err error) (bool, time.Duration, error) {
		select {
		case <-s.closing:
			return true, 0, nil // Close ended the stream, or it ended while closing
		default:
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Unauthenticated, codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
			return true, 0, errorOfStatus(err)
		}
		if status.Code(err) == codes.Unavailable {
			s.g.next() // not the leader, or not reachable
		}
		if err != nil {
			s.report(fmt.Errorf("delaywheel: subscribe %s: %w", s.topic, errorOfStatus(err)))
		}
		return false, 0, nil
	})
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
	s.streamMu.Lock()
	s.stream = st
	s.streamMu.Unlock()
	defer func() {
		s.streamMu.Lock()
		s.stream = nil
		s.streamMu.Unlock()
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
// with the Ack call while there is none, until Close or the end of the
// context, and then what is queued.
func (s *GRPCSubscription) sendAcks() {
	defer s.sender.Done()
	batch := make([]string, 0, s.opt.AckBatch)
	stop, cut := (<-chan struct{})(s.closing), s.ctx.Done()
	closing := false
	for {
		var stopped, ok bool
		if batch, stopped, ok = s.nextBatch(batch, stop, cut); !ok {
			// The context ended: send what is queued, then stop.
			ended := make(chan struct{})
			close(ended)
			stop, cut, closing = ended, nil, true
			continue
		}
		closing = closing || stopped
		if len(batch) == 0 {
			return // closing, and every ack is sent
		}
		s.streamMu.Lock()
		st := s.stream
		s.streamMu.Unlock()
		if st != nil && !closing {
			if err := st.Send(&pb.SubscribeRequest{Ack: batch}); err == nil {
				continue
			}
		}
		if _, err := s.g.Ack(s.ackCtx, batch); err != nil {
			s.report(fmt.Errorf("delaywheel: ack %d receipts: %w", len(batch), err))
		}
	}
}
