package beanstalkd

import (
	"context"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// The waiting reserves of a tube. Invariant: the connections that wait on
// the same tube take their jobs through one Backend.Reserve at a time, for
// as many jobs as there are connections waiting (never more), so that N
// waiting connections cost one lease of up to N messages (one look into
// the ready queue and one log entry) instead of N. A job goes only to a
// connection that waits for it, the longest waiting first; one whose
// connections all stopped waiting meanwhile goes back at once. A reserve
// that does not wait asks the backend itself.

// tubeReserves gathers the waiting reserves of one tube.
type tubeReserves struct {
	s    *Server
	tube string

	mu      sync.Mutex
	waiters []chan reserved // each buffered for the one answer it gets
	cancel  context.CancelFunc
	round   chan struct{} // closed once the backend's reserve in flight has handed out its jobs
	running bool
}

// reserved is the answer to a waiting reserve: a job, or an error.
type reserved struct {
	d   model.Delivery
	err error
}

// reserveOne takes a due job of tube, waiting for one until the clock
// reads until (not at all when it does already).
func (s *Server) reserveOne(ctx context.Context, tube string, until time.Time) (model.Delivery, bool, error) {
	if !until.After(s.cfg.Now()) {
		ds, err := s.be.Reserve(ctx, tube, 1, 0)
		if err != nil || len(ds) == 0 {
			return model.Delivery{}, false, err
		}
		return ds[0], true, nil
	}
	r := s.reserves(tube)
	ch := make(chan reserved, 1)
	r.join(ch)
	var got reserved
	select {
	case got = <-ch:
	case <-s.cfg.At(until):
		if _, left := r.leave(ch); left {
			return model.Delivery{}, false, nil
		}
		got = <-ch // answered as it left
	case <-ctx.Done():
		if round, left := r.leave(ch); left {
			if round != nil {
				<-round // the jobs of the reserve it ended are back
			}
			return model.Delivery{}, false, nil
		}
		got = <-ch
	}
	return got.d, got.err == nil, got.err
}

// reserves returns the waiting reserves of tube, creating them.
func (s *Server) reserves(tube string) *tubeReserves {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.waits[tube]
	if !ok {
		r = &tubeReserves{s: s, tube: tube}
		s.waits[tube] = r
	}
	return r
}

// join queues a waiting reserve, and starts the reserves of the tube if
// they do not run.
func (r *tubeReserves) join(ch chan reserved) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiters = append(r.waiters, ch)
	if !r.running {
		r.running = true
		go r.run()
	}
}

// leave takes a reserve out of the queue; false when it has been answered
// already (its answer is in ch). The last one to leave ends the backend's
// reserve in flight, and round, when not nil, is closed once that reserve
// has given back the jobs it took.
func (r *tubeReserves) leave(ch chan reserved) (round <-chan struct{}, left bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, w := range r.waiters {
		if w == ch {
			r.waiters = append(r.waiters[:i], r.waiters[i+1:]...)
			if len(r.waiters) == 0 && r.cancel != nil {
				r.cancel()
				return r.round, true
			}
			return nil, true
		}
	}
	return nil, false
}

// run reserves jobs for the waiting reserves until none waits.
func (r *tubeReserves) run() {
	for {
		r.mu.Lock()
		n := len(r.waiters)
		if n == 0 {
			r.running = false
			r.mu.Unlock()
			r.s.forgetReserves(r)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		round := make(chan struct{})
		r.round = round
		r.mu.Unlock()

		ds, err := r.s.be.Reserve(ctx, r.tube, n, r.s.cfg.MaxWait)
		abandoned := ctx.Err() != nil
		cancel()

		r.mu.Lock()
		r.cancel = nil
		if err != nil && !abandoned {
			for _, w := range r.waiters {
				w <- reserved{err: err}
			}
			r.waiters = r.waiters[:0]
		}
		var extra []model.Delivery
		for _, d := range ds {
			if len(r.waiters) == 0 {
				extra = append(extra, d)
				continue
			}
			r.waiters[0] <- reserved{d: d}
			r.waiters = r.waiters[1:]
		}
		r.mu.Unlock()
		for _, d := range extra {
			r.s.giveBack(d)
		}
		close(round)
	}
}

// forgetReserves drops the reserves of a tube once none waits, unless one
// joined meanwhile.
func (s *Server) forgetReserves(r *tubeReserves) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running && s.waits[r.tube] == r {
		delete(s.waits, r.tube)
	}
}
