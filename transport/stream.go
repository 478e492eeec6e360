package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// ContentTypeNDJSON is the media type of a stream: one JSON object a line.
const ContentTypeNDJSON = "application/x-ndjson"

// streamTopic answers GET /v1/topics/{topic}/stream: an NDJSON body of
// deliveries, each written and flushed the moment it is handed out, until
// the client goes away, the node shuts down or leadership is lost.
func (s *Server) streamTopic(r *http.Request) (any, error) {
	if r.Method == http.MethodHead {
		// The mux serves HEAD with the GET route: a stream served so would
		// hand out deliveries no one reads, each an attempt.
		return nil, methodNotAllowed(r.Method, "/v1/topics/{topic}/stream", http.MethodGet)
	}
	topic, err := s.pathTopic(r)
	if err != nil {
		return nil, err
	}
	lim := s.cfg.Limits
	maxIn, err := queryInt(r, "max_inflight", lim.DefaultInflight, 1, lim.MaxInflight)
	if err != nil {
		return nil, err
	}
	ttrMs, err := queryInt(r, "ttr_ms", 0, int(lim.MinTTRMs), int(lim.MaxTTRMs))
	if err != nil {
		return nil, err
	}
	release, err := s.cfg.Slots.AcquireStream()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(r.Context())
	stopDrain := context.AfterFunc(s.drain, cancel)
	done := func() {
		stopDrain()
		cancel()
		release()
	}
	st, err := s.be(r).Stream(ctx, topic, model.ConsumerOptions{MaxInflight: maxIn, TTR: time.Duration(ttrMs) * time.Millisecond})
	if err != nil {
		done()
		return nil, err
	}
	return stream(func(w http.ResponseWriter) error {
		defer done()
		defer st.Close()
		return s.writeStream(ctx, w, st)
	}), nil
}

// writeStream writes st's deliveries as NDJSON until ctx ends or st ends.
// A reader that takes no bytes for a while (four keepalives, at least a
// minute) is cut off, which closes the stream and releases its deliveries.
func (s *Server) writeStream(ctx context.Context, w http.ResponseWriter, st model.Consumer) error {
	w.Header().Set("Content-Type", ContentTypeNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	stuck := max(4*s.cfg.StreamKeepalive, time.Minute)
	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(stuck)) // not every writer has deadlines
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("write stream: %w", err)
		}
		if err := rc.Flush(); err != nil {
			return fmt.Errorf("flush stream: %w", err)
		}
		return nil
	}
	if err := write(nil); err != nil {
		return err
	}
	var buf []byte
	for {
		nctx, cancel := context.WithTimeout(ctx, s.cfg.StreamKeepalive)
		ds, err := st.Next(nctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil // the client went away, or the node shuts down
		case errors.Is(err, context.DeadlineExceeded):
			if err := write([]byte{'\n'}); err != nil {
				return err
			}
			continue
		case errors.Is(err, model.ErrNotLeader):
			return nil // the client reconnects, to the new leader
		case err != nil:
			return fmt.Errorf("stream: %w", err)
		}
		buf = buf[:0]
		for _, d := range ds {
			buf = appendDelivery(buf, d)
		}
		if err := write(buf); err != nil {
			return err
		}
	}
}
