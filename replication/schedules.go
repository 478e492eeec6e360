package replication

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Recurring schedules: the Backend methods, and the leader's scheduler,
// which enqueues each schedule's occurrences ahead of their time.

// SetSchedule creates or replaces a recurring schedule; the leader stamps
// its time, from which the first occurrence is computed.
func (n *Node) SetSchedule(ctx context.Context, spec command.ScheduleSpec) (wheel.ScheduleInfo, error) {
	st := n.store()
	if have := st.NumTopics(); have >= n.cfg.MaxTopics && !st.HasTopic(spec.Topic) {
		return wheel.ScheduleInfo{}, fmt.Errorf("%w: topic: %q would be topic number %d; the limit is %d topics",
			model.ErrInvalid, spec.Topic, have+1, n.cfg.MaxTopics)
	}
	v, err := n.result(ctx, command.SetSchedule{NowMs: n.clock.Now().UnixMilli(), Spec: spec})
	if err != nil {
		return wheel.ScheduleInfo{}, err
	}
	return v.(wheel.ScheduleInfo), nil
}

// DeleteSchedule removes a recurring schedule. Occurrences already
// enqueued stay: they are ordinary messages.
func (n *Node) DeleteSchedule(ctx context.Context, name string) error {
	_, err := n.result(ctx, command.DeleteSchedule{Name: name})
	return err
}

// Schedule returns a stored schedule.
func (n *Node) Schedule(ctx context.Context, name string) (wheel.ScheduleInfo, error) {
	if err := n.readable(ctx); err != nil {
		return wheel.ScheduleInfo{}, err
	}
	return n.store().Schedule(name)
}

// Schedules returns up to limit schedules whose names sort after after.
func (n *Node) Schedules(ctx context.Context, after string, limit int) ([]wheel.ScheduleInfo, error) {
	if err := n.readable(ctx); err != nil {
		return nil, err
	}
	return n.store().Schedules(after, limit)
}

// Scheduler defaults.
const (
	// scheduleAhead is how long before its time an occurrence is enqueued:
	// it then sits in the wheel, and fires with a message's precision.
	scheduleAhead = 2 * time.Second
	// scheduleEvery is how often the scheduler looks for due schedules.
	// Each look enqueues what came within ahead since the last one, in
	// one entry: the shorter the interval, the smaller each entry, and the
	// less a busy calendar's entry holds up the apply of the hand-offs and
	// acks queued behind it.
	scheduleEvery = 50 * time.Millisecond
	// scheduleBatch bounds the items of one AdvanceSchedules entry.
	scheduleBatch = 5000
	// scheduleRounds bounds the entries of one look, so that a backlog
	// (after an outage) is worked off over several looks.
	scheduleRounds = 64
)

// scheduler runs on the leader. Every scheduleEvery it reads the schedules
// whose next occurrence is within ahead of its clock (a bounded scan of
// the index, earliest first) and proposes AdvanceSchedules for them, in
// entries of at most batch items, each stamped with the clock's time and
// with sinceMs.
//
// Invariant: a scheduler lives for one leadership and looks continuously
// from its first look on, so every occurrence due from sinceMs on is this
// leader's to enqueue, and an advance of one, however late (the leader
// starved of CPU, its clock jumping), moves the schedule to the very next
// occurrence: none is skipped. Only an occurrence due before sinceMs came
// due while no leader advanced schedules, and it fires once, late.
type scheduler struct {
	clock   wheel.Clock
	log     *slog.Logger
	store   func() *wheel.Store
	propose func(ctx context.Context, cmds ...command.Command) ([]command.Result, error)
	met     *scheduleMetrics
	ahead   time.Duration
	every   time.Duration
	batch   int
	// sinceMs is the AdvanceSchedules.SinceMs of this leadership: the
	// clock's time at the first look, less ahead. An occurrence within
	// ahead before the first look counts as this leader's, because the
	// leader before, had it run on, might not have enqueued it yet.
	// started says whether the first look has set it.
	sinceMs int64
	started bool
}

// run looks for due schedules until ctx is done, again once the clock
// reads a period past the reading the last look started at: a clock that
// moved during a look gets its next look at once.
func (s *scheduler) run(ctx context.Context) {
	for {
		last := s.clock.Now()
		if err := s.step(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("advancing schedules", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.clock.At(last.Add(s.every)):
		}
	}
}

// step advances every schedule due within ahead, up to scheduleRounds
// entries. The store reads the due order from a floor it keeps (see
// wheel.Store.DueSchedules), so a look costs what is due, not what the
// advances before it deleted.
func (s *scheduler) step(ctx context.Context) error {
	for range scheduleRounds {
		now := s.clock.Now().UnixMilli()
		if !s.started {
			s.sinceMs, s.started = now-s.ahead.Milliseconds(), true
		}
		due, err := s.store().DueSchedules(now+s.ahead.Milliseconds(), s.batch)
		if err != nil || len(due) == 0 {
			return err
		}
		res, err := s.propose(ctx, command.AdvanceSchedules{NowMs: now, SinceMs: s.sinceMs, Items: due})
		if err != nil {
			return err
		}
		ar, _ := res[0].Value.(command.AdvanceResult)
		s.met.observe(ar, due, now)
		if ar.Fired+ar.Duplicate == 0 {
			return nil // nothing moved: looking again now would find the same
		}
	}
	return nil
}

// startScheduler starts the leader's scheduler; stopScheduler ends it.
func (n *Node) startScheduler(ctx context.Context) {
	s := &scheduler{
		clock: n.clock, log: n.log, store: n.store, propose: n.propose, met: n.met.sched,
		ahead: scheduleAhead, every: scheduleEvery, batch: scheduleBatch,
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.run(ctx)
	}()
	n.mu.Lock()
	n.schedStop = func() { cancel(); wg.Wait() }
	n.mu.Unlock()
}

func (n *Node) stopScheduler() {
	n.mu.Lock()
	stop := n.schedStop
	n.schedStop = nil
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// scheduleMetrics are the schedules' metrics: the number stored (read from
// the store when scraped), and, on the leader, the occurrences enqueued and
// how late each was enqueued.
type scheduleMetrics struct {
	st          func() *wheel.Store
	schedules   *prometheus.Desc
	occurrences prometheus.Counter
	lateness    prometheus.Histogram
}

func newScheduleMetrics(st func() *wheel.Store) *scheduleMetrics {
	return &scheduleMetrics{
		st:        st,
		schedules: prometheus.NewDesc("delaywheel_schedules", "Recurring schedules stored.", nil, nil),
		occurrences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "delaywheel_schedule_occurrences_total",
			Help: "Occurrences of recurring schedules this node enqueued while leading.",
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaywheel_schedule_occurrence_lateness_seconds",
			Help:    "How long after its time an occurrence was enqueued (the leader's time of the advance minus the occurrence's; 0 when enqueued ahead, as usual). Delivery lateness is delaywheel_delivery_lateness_seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}),
	}
}

// observe counts an advance of items at nowMs.
func (m *scheduleMetrics) observe(r command.AdvanceResult, items []command.AdvanceItem, nowMs int64) {
	m.occurrences.Add(float64(r.Fired))
	if r.Fired+r.Duplicate == 0 {
		return
	}
	for _, it := range items {
		m.lateness.Observe(float64(max(nowMs-it.FromMs, 0)) / 1000)
	}
}

// Describe implements prometheus.Collector.
func (m *scheduleMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.schedules
	m.occurrences.Describe(ch)
	m.lateness.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *scheduleMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.schedules, prometheus.GaugeValue, float64(m.st().NumSchedules()))
	m.occurrences.Collect(ch)
	m.lateness.Collect(ch)
}
