package bench

import (
	"slices"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// ledger is the record of a fire run: when each message is due, whether its
// enqueue was acknowledged, and every delivery. It is safe for concurrent
// use.
type ledger struct {
	mu       sync.Mutex
	dueMs    []int64 // by sequence number
	acked    []bool
	failed   int64 // messages whose enqueue failed
	recv     []uint32
	early    int64
	earliest int64 // most negative lateness seen, µs
	dup      int64
	foreign  int64
	late     *hdrhistogram.Histogram
	times    []int64 // every first delivery, µs since the epoch
}

// newLedger records a run whose message i is due at dueMs[i].
func newLedger(dueMs []int64) *ledger {
	return &ledger{
		dueMs: dueMs,
		acked: make([]bool, len(dueMs)),
		recv:  make([]uint32, len(dueMs)),
		late:  newHist(),
		times: make([]int64, 0, len(dueMs)),
	}
}

// Sent records that the enqueue of these messages was acknowledged.
func (l *ledger) Sent(seqs []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		if s >= 0 && s < len(l.acked) {
			l.acked[s] = true
		}
	}
}

// Failed records that the enqueue of n messages failed for good.
func (l *ledger) Failed(n int) {
	l.mu.Lock()
	l.failed += int64(n)
	l.mu.Unlock()
}

// Received records the messages of one answer that arrived at at. A message
// received again is a duplicate; one received before its due time is early;
// the lateness of every first on-time delivery goes into the histogram.
func (l *ledger) Received(at time.Time, seqs []int) {
	us := at.UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		if s < 0 || s >= len(l.dueMs) {
			l.foreign++
			continue
		}
		l.recv[s]++
		if l.recv[s] > 1 {
			l.dup++
			continue
		}
		l.times = append(l.times, us)
		late := us - l.dueMs[s]*1000
		if late < 0 {
			l.early++
			l.earliest = min(l.earliest, late)
			continue
		}
		recordMicros(l.late, late)
	}
}

// Outcome is what became of the messages of a fire run.
type Outcome struct {
	Messages   int        `json:"messages"`              // scheduled
	Sent       int        `json:"sent"`                  // enqueue acknowledged
	Failed     int64      `json:"enqueue_failed"`        // enqueue failed for good
	Received   int        `json:"received"`              // delivered at least once
	Lost       int        `json:"lost"`                  // acknowledged, never delivered
	Early      int64      `json:"early"`                 // delivered before the due time
	EarliestMs float64    `json:"earliest_ms,omitempty"` // how early the earliest was
	Duplicates int64      `json:"duplicates"`            // deliveries beyond the first
	Foreign    int64      `json:"foreign,omitempty"`     // bodies the harness did not write
	Lateness   Summary    `json:"lateness"`
	CDF        []CDFPoint `json:"cdf,omitempty"`
}

// Outcome tallies the record so far.
func (l *ledger) Outcome() Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := Outcome{
		Messages:   len(l.dueMs),
		Failed:     l.failed,
		Early:      l.early,
		EarliestMs: float64(-l.earliest) / 1000,
		Duplicates: l.dup,
		Foreign:    l.foreign,
		Lateness:   summarize(l.late),
		CDF:        cdf(l.late),
	}
	for i, ok := range l.acked {
		if ok {
			o.Sent++
		}
		if l.recv[i] > 0 {
			o.Received++
		} else if ok {
			o.Lost++
		}
	}
	return o
}

// sentAndReceived returns, by sequence number, whether each message's
// enqueue was acknowledged and whether it was delivered.
func (l *ledger) sentAndReceived() (sent, received []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	received = make([]bool, len(l.recv))
	for i, n := range l.recv {
		received[i] = n > 0
	}
	return slices.Clone(l.acked), received
}

// ReceivedCount is how many distinct messages were delivered so far.
func (l *ledger) ReceivedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times)
}

// Gap returns the longest interval in [from, to] without a first delivery,
// and when it began.
func (l *ledger) Gap(from, to time.Time) (time.Duration, time.Time) {
	l.mu.Lock()
	ts := slices.Clone(l.times)
	l.mu.Unlock()
	return longestGap(ts, from.UnixMicro(), to.UnixMicro())
}

// longestGap is the longest interval between consecutive instants of ts
// (µs, any order) inside [from, to], counting the bounds as instants.
func longestGap(ts []int64, from, to int64) (time.Duration, time.Time) {
	slices.Sort(ts)
	prev, best, start := from, int64(0), from
	for _, t := range ts {
		if t < from {
			continue
		}
		if t > to {
			break
		}
		if t-prev > best {
			best, start = t-prev, prev
		}
		prev = t
	}
	if to-prev > best {
		best, start = to-prev, prev
	}
	return time.Duration(best) * time.Microsecond, time.UnixMicro(start)
}

// timeline counts events in 10 ms buckets from a start instant, for the
// throughput-over-time chart. It is safe for concurrent use.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	counts []int64
}

const timelineBucket = 10 * time.Millisecond

func newTimeline(start time.Time) *timeline { return &timeline{start: start} }

// Add counts n events at t.
func (t *timeline) Add(at time.Time, n int) {
	i := int(at.Sub(t.start) / timelineBucket)
	if i < 0 {
		i = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i >= len(t.counts) {
		t.counts = append(t.counts, make([]int64, i+1-len(t.counts))...)
	}
	t.counts[i] += int64(n)
}

// RatePoint is the rate of events (per second) in the interval ending at T
// seconds after the start.
type RatePoint struct {
	T    float64 `json:"t_s"`
	Rate float64 `json:"per_s"`
}

// Rates resamples the timeline to at most points intervals of whole buckets
// and returns the rate in each.
func (t *timeline) Rates(points int) []RatePoint {
	t.mu.Lock()
	counts := slices.Clone(t.counts)
	t.mu.Unlock()
	if len(counts) == 0 || points <= 0 {
		return nil
	}
	per := (len(counts) + points - 1) / points
	var out []RatePoint
	for i := 0; i < len(counts); i += per {
		j := min(i+per, len(counts))
		var n int64
		for _, c := range counts[i:j] {
			n += c
		}
		secs := (time.Duration(j-i) * timelineBucket).Seconds()
		end := (time.Duration(j) * timelineBucket).Seconds()
		out = append(out, RatePoint{T: round3(end), Rate: round3(float64(n) / secs)})
	}
	return out
}
