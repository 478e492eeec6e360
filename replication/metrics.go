package replication

import (
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/segment/diskuse"
)

// metrics are the node's Prometheus metrics. Histograms are observed where
// things happen; everything else is read from the node when scraped.
type metrics struct {
	n         *Node
	apply     prometheus.Histogram
	answered  prometheus.Histogram
	lateness  prometheus.Histogram
	messages  *prometheus.Desc
	pending   *prometheus.Desc
	slots     *prometheus.Desc
	handles   *prometheus.Desc
	overflow  *prometheus.Desc
	disk      *prometheus.Desc
	raftState *prometheus.Desc
	term      *prometheus.Desc
	commit    *prometheus.Desc
	applied   *prometheus.Desc
	leader    *prometheus.Desc
	inflight  *prometheus.Desc

	webhookAttempts *prometheus.CounterVec
	webhookLateness prometheus.Histogram
	streamed        *prometheus.CounterVec
	streams         *prometheus.Desc
	streamInflight  *prometheus.Desc
	sched           *scheduleMetrics
}

func newMetrics(n *Node) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delaywheel_"+name, help, labels, nil)
	}
	return &metrics{
		n: n,
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaywheel_apply_seconds",
			Help:    "Time from proposing a log entry on the leader until it is applied.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}),
		answered: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaywheel_commit_answer_seconds",
			Help:    "Time from proposing an enqueue of messages without keys on the leader until it commits and is answered, ahead of its apply.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaywheel_delivery_lateness_seconds",
			Help:    "Hand-off time minus deliver_at_ms, measured on the leader when the lease commits.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		messages:  d("messages_total", "Message transitions applied by this replica since it started, by topic and event.", "topic", "event"),
		pending:   d("pending_messages", "Messages by topic and state.", "topic", "state"),
		slots:     d("slots_nonempty", "Wheel slots holding a segment file."),
		handles:   d("open_segment_handles", "Open segment file handles."),
		overflow:  d("overflow_messages", "Messages due beyond the two-hour horizon, kept in the index."),
		disk:      d("disk_bytes", "Bytes on disk by kind: segments, index, raft (the log, and the snapshots' files the live store does not share).", "kind"),
		raftState: d("raft_state", "1 for this node's Raft state.", "state"),
		term:      d("raft_term", "Current Raft term."),
		commit:    d("raft_commit_index", "Raft commit index."),
		applied:   d("raft_applied_index", "Raft applied index."),
		leader:    d("raft_leader", "1 while this node is the leader."),
		inflight:  d("pending_applies", "Proposals waiting to commit (back-pressure answers 429 past --max-pending-applies)."),
		webhookAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delaywheel_webhook_attempts_total",
			Help: "Webhook requests this node sent as leader, by outcome: 2xx, 3xx (redirects are not followed), 4xx, 5xx, timeout, refused.",
		}, []string{"outcome"}),
		streamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delaywheel_stream_deliveries_total",
			Help: "Deliveries streams took on this node as leader, by topic (webhooks' included).",
		}, []string{"topic"}),
		streams:        d("streams_open", "Streams (and webhook senders) running on this node as leader."),
		streamInflight: d("stream_inflight", "Stream deliveries handed out and not yet acked, nacked or expired."),
		webhookLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delaywheel_webhook_lateness_seconds",
			Help:    "Start of a webhook request minus the message's deliver_at_ms.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		sched: newScheduleMetrics(n.store),
	}
}

// observed lists the collectors observed where things happen: Describe
// and Collect pass both calls on to each.
func (m *metrics) observed() []prometheus.Collector {
	return []prometheus.Collector{m.apply, m.answered, m.lateness,
		m.webhookAttempts, m.webhookLateness, m.streamed, m.sched}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.observed() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.messages, m.pending, m.slots, m.handles, m.overflow, m.disk,
		m.raftState, m.term, m.commit, m.applied, m.leader, m.inflight, m.streams, m.streamInflight} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.observed() {
		c.Collect(ch)
	}
	st := m.n.store()
	c := func(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, t, v, labels...)
	}
	var open, unsettled int
	if d := m.n.dispatcher(); d != nil {
		open, unsettled = d.StreamStats()
	}
	c(m.streams, prometheus.GaugeValue, float64(open))
	c(m.streamInflight, prometheus.GaugeValue, float64(unsettled))
	for _, s := range st.Stats() {
		c(m.messages, prometheus.CounterValue, float64(s.Enqueued), s.Topic, "enqueued")
		c(m.messages, prometheus.CounterValue, float64(s.Delivered), s.Topic, "delivered")
		c(m.messages, prometheus.CounterValue, float64(s.Acked), s.Topic, "acked")
		c(m.messages, prometheus.CounterValue, float64(s.Nacked), s.Topic, "nacked")
		c(m.messages, prometheus.CounterValue, float64(s.ExpiredLeases), s.Topic, "expired_lease")
		c(m.messages, prometheus.CounterValue, float64(s.Dead), s.Topic, "dead")
		c(m.messages, prometheus.CounterValue, float64(s.Cancelled), s.Topic, "cancelled")
	}
	topics, err := st.TopicsAt(m.n.clock.Now().UnixMilli())
	if err != nil {
		topics = st.Topics() // the stored counts: due messages still read delayed
	}
	for _, t := range topics {
		c(m.pending, prometheus.GaugeValue, float64(t.Delayed), t.Topic, "delayed")
		c(m.pending, prometheus.GaugeValue, float64(t.Ready), t.Topic, "ready")
		c(m.pending, prometheus.GaugeValue, float64(t.Reserved), t.Topic, "reserved")
		c(m.pending, prometheus.GaugeValue, float64(t.Dead), t.Topic, "dead")
	}
	if g, err := st.Gauges(); err == nil {
		c(m.slots, prometheus.GaugeValue, float64(g.NonEmptySlots))
		c(m.handles, prometheus.GaugeValue, float64(g.OpenSegments))
		c(m.overflow, prometheus.GaugeValue, float64(g.OverflowMessages))
		c(m.disk, prometheus.GaugeValue, float64(g.SegmentBytes), "segments")
	}
	c(m.disk, prometheus.GaugeValue, float64(st.DiskBytes()), "index")
	c(m.disk, prometheus.GaugeValue, float64(m.raftBytes()), "raft")
	state := m.n.raft.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		c(m.raftState, prometheus.GaugeValue, v, stateName(s))
	}
	c(m.term, prometheus.GaugeValue, float64(m.n.raft.CurrentTerm()))
	c(m.commit, prometheus.GaugeValue, float64(m.n.raft.CommitIndex()))
	c(m.applied, prometheus.GaugeValue, float64(m.n.raft.AppliedIndex()))
	leader := 0.0
	if state == raft.Leader {
		leader = 1
	}
	c(m.leader, prometheus.GaugeValue, leader)
	c(m.inflight, prometheus.GaugeValue, float64(m.n.pending.Load()))
}

// raftBytes sums the files under the raft directory (the log, the
// snapshots) that the live store does not hold as well: a snapshot's
// checkpoint links the live store's index tables, which "index" reports.
// A file the walk cannot read counts as nothing.
func (m *metrics) raftBytes() int64 {
	var c diskuse.Counter
	c.Add(filepath.Join(m.n.cfg.DataDir, "fsm"))
	n, _ := c.Add(filepath.Join(m.n.cfg.DataDir, "raft"))
	return n
}

// Collector returns the node's Prometheus metrics for registration.
func (n *Node) Collector() prometheus.Collector { return n.met }
