package wheel

import (
	"sort"
)

// TopicStats counts the transitions a topic's messages went through, as
// applied by this replica since its process started. Every replica applies
// the same log, so every replica reports the same increments.
type TopicStats struct {
	Enqueued      int64
	Delivered     int64 // hand-offs (leases), redeliveries included
	Acked         int64
	Nacked        int64
	ExpiredLeases int64 // leases that ran out before an ack
	Dead          int64
	Cancelled     int64
}

func (a TopicStats) add(b TopicStats) TopicStats {
	a.Enqueued += b.Enqueued
	a.Delivered += b.Delivered
	a.Acked += b.Acked
	a.Nacked += b.Nacked
	a.ExpiredLeases += b.ExpiredLeases
	a.Dead += b.Dead
	a.Cancelled += b.Cancelled
	return a
}

// TopicStatsEntry is a topic's name with its counters.
type TopicStatsEntry struct {
	Topic string
	TopicStats
}

// Stats returns the transition counters of every topic, sorted by name.
func (s *Store) Stats() []TopicStatsEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TopicStatsEntry, 0, len(s.stats))
	for tid, st := range s.stats {
		out = append(out, TopicStatsEntry{Topic: s.topicNames[tid], TopicStats: st})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// Gauges are point-in-time sizes of the store for metrics.
type Gauges struct {
	NonEmptySlots    int
	OpenSegments     int
	OverflowMessages int64
	SegmentBytes     int64
	AppliedIndex     uint64
	CursorSecond     int64
	Schedules        int64 // recurring schedules stored
}

// Gauges reads the store's sizes.
func (s *Store) Gauges() (Gauges, error) {
	lens, err := func() (map[int64]segLen, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.checkOpen(); err != nil {
			return nil, err
		}
		return s.segLens()
	}()
	if err != nil {
		return Gauges{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := Gauges{NonEmptySlots: len(lens), OverflowMessages: s.overflow, AppliedIndex: s.applied, CursorSecond: s.cursor, Schedules: s.schedules}
	if s.segs != nil {
		g.OpenSegments = s.segs.OpenHandles()
	}
	for _, l := range lens {
		g.SegmentBytes += l.Length
	}
	return g, nil
}

// DiskBytes returns the bytes of the store's index files.
func (s *Store) DiskBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return 0
	}
	m := s.db.Metrics()
	return int64(m.DiskSpaceUsage())
}
