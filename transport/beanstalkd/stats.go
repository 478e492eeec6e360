package beanstalkd

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// commandNames are the command names in Op order (OpPut first).
func commandNames() []string {
	return []string{"put", "use", "reserve", "reserve-with-timeout", "reserve-job", "delete", "release", "bury", "touch",
		"watch", "ignore", "peek", "peek-ready", "peek-delayed", "peek-buried", "kick", "kick-job", "stats-job",
		"stats-tube", "stats", "list-tubes", "list-tube-used", "list-tubes-watched", "pause-tube", "quit"}
}

// String is the command's name.
func (o Op) String() string {
	if names := commandNames(); o >= 1 && int(o) <= len(names) {
		return names[o-1]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// yamlDict renders beanstalkd's YAML dictionary of keys and values.
type yamlDict struct{ b strings.Builder }

func newYAMLDict() *yamlDict {
	d := &yamlDict{}
	d.b.WriteString("---\n")
	return d
}

func (d *yamlDict) add(key string, v any) {
	fmt.Fprintf(&d.b, "%s: %v\n", key, v)
}

func (d *yamlDict) bytes() []byte { return []byte(d.b.String()) }

// yamlList renders beanstalkd's YAML list of names.
func yamlList(names []string) []byte {
	var b strings.Builder
	b.WriteString("---\n")
	for _, n := range names {
		b.WriteString("- " + n + "\n")
	}
	return []byte(b.String())
}

// stateName is beanstalkd's name of a message's state.
func stateName(s wheel.State) string {
	switch s {
	case wheel.StateDelayed:
		return "delayed"
	case wheel.StateReserved:
		return "reserved"
	case wheel.StateDead:
		return "buried"
	default:
		return "ready"
	}
}

// statsJob answers stats-job from the message's own fields.
func (c *conn) statsJob(job uint64) {
	v, ok := c.view("stats-job", job)
	if !ok {
		return
	}
	nowMs := c.s.cfg.Now().UnixMilli()
	if v.State == wheel.StateReserved && v.LeaseExpiresMs <= nowMs {
		v.State = wheel.StateReady // its time-to-run ran out: ready again, as in beanstalkd
	}
	left := int64(0)
	switch v.State {
	case wheel.StateReserved:
		left = max(v.LeaseExpiresMs-nowMs, 0)
	case wheel.StateDelayed:
		left = max(v.DeliverAtMs-nowMs, 0)
	}
	d := newYAMLDict()
	d.add("id", job)
	d.add("tube", v.Topic)
	d.add("state", stateName(v.State))
	d.add("pri", PriOf(v.Priority))
	d.add("age", max(nowMs-v.EnqueuedMs, 0)/1000)
	d.add("delay", max(v.DeliverAtMs-v.EnqueuedMs, 0)/1000)
	d.add("ttr", v.TTRMs/1000)
	d.add("time-left", left/1000)
	d.add("file", 0)
	d.add("reserves", v.Attempts)
	for _, k := range []string{"timeouts", "releases", "buries", "kicks"} {
		d.add(k, 0)
	}
	c.replyData(d.bytes(), "OK")
}

// topicCounts returns the counts by name of every topic that has a job,
// and false after answering the error. A topic stays on the node once it
// had a message, but a tube with no job is, as in beanstalkd, only while a
// connection uses or watches it.
func (c *conn) topicCounts(op string) (map[string]wheel.TopicCounts, bool) {
	ctx, cancel := c.callCtx()
	defer cancel()
	ts, err := c.s.be.Topics(ctx)
	if err != nil {
		c.fail(op, err)
		return nil, false
	}
	out := make(map[string]wheel.TopicCounts, len(ts))
	for _, t := range ts {
		if t.Ready+t.Reserved+t.Delayed+t.Dead > 0 {
			out[t.Topic] = t
		}
	}
	return out, true
}

// statsTube answers stats-tube: the topic's counts and this node's use of
// the tube. A tube no topic has and no connection uses is NOT_FOUND.
func (c *conn) statsTube(name string) {
	counts, ok := c.topicCounts("stats-tube")
	if !ok {
		return
	}
	tc, isTopic := counts[name]
	c.s.mu.Lock()
	ts, used := c.s.tubes[name]
	var st tubeState
	if used {
		st = *ts
	}
	c.s.mu.Unlock()
	if !isTopic && !used {
		c.reply("NOT_FOUND")
		return
	}
	now := c.s.cfg.Now()
	d := newYAMLDict()
	d.add("name", name)
	d.add("current-jobs-urgent", 0)
	d.add("current-jobs-ready", tc.Ready)
	d.add("current-jobs-reserved", tc.Reserved)
	d.add("current-jobs-delayed", tc.Delayed)
	d.add("current-jobs-buried", tc.Dead)
	d.add("total-jobs", tc.Ready+tc.Reserved+tc.Delayed+tc.Dead)
	d.add("current-using", max(st.using, 0))
	d.add("current-watching", max(st.watching, 0))
	d.add("current-waiting", max(st.waiting, 0))
	d.add("cmd-delete", st.deletes)
	d.add("cmd-pause-tube", st.pauses)
	d.add("pause", int64(st.pauseFor/time.Second))
	d.add("pause-time-left", int64(max(st.pausedUntil.Sub(now), 0)/time.Second))
	c.replyData(d.bytes(), "OK")
}

// stats answers stats: the jobs of every topic and this node's counters.
func (c *conn) stats() {
	counts, ok := c.topicCounts("stats")
	if !ok {
		return
	}
	var sum wheel.TopicCounts
	for _, t := range counts {
		sum.Ready += t.Ready
		sum.Reserved += t.Reserved
		sum.Delayed += t.Delayed
		sum.Dead += t.Dead
	}
	c.s.mu.Lock()
	conns, waiting := len(c.s.live), 0
	for _, ts := range c.s.tubes {
		waiting += max(ts.waiting, 0)
	}
	tubes := len(counts)
	for t := range c.s.tubes {
		if _, ok := counts[t]; !ok {
			tubes++
		}
	}
	c.s.mu.Unlock()
	d := newYAMLDict()
	d.add("current-jobs-urgent", 0)
	d.add("current-jobs-ready", sum.Ready)
	d.add("current-jobs-reserved", sum.Reserved)
	d.add("current-jobs-delayed", sum.Delayed)
	d.add("current-jobs-buried", sum.Dead)
	for op := OpPut; op < OpQuit; op++ {
		if op != OpReserveJob {
			d.add("cmd-"+op.String(), c.s.cmds[op].Load())
		}
	}
	d.add("job-timeouts", 0)
	d.add("total-jobs", sum.Ready+sum.Reserved+sum.Delayed+sum.Dead)
	d.add("max-job-size", c.s.cfg.MaxJobSize)
	d.add("current-tubes", tubes)
	d.add("current-connections", conns)
	d.add("current-producers", 0)
	d.add("current-workers", 0)
	d.add("current-waiting", waiting)
	d.add("total-connections", c.s.totalConns.Load())
	d.add("pid", os.Getpid())
	d.add("version", `"delaywheel"`)
	d.add("rusage-utime", "0.000000")
	d.add("rusage-stime", "0.000000")
	d.add("uptime", int64(c.s.cfg.Now().Sub(c.s.start)/time.Second))
	for _, k := range []string{"binlog-oldest-index", "binlog-current-index", "binlog-records-migrated", "binlog-records-written", "binlog-max-size"} {
		d.add(k, 0)
	}
	d.add("draining", c.s.draining.Load())
	d.add("id", c.s.cfg.NodeID)
	host, _ := os.Hostname()
	d.add("hostname", host)
	d.add("os", runtime.GOOS)
	d.add("platform", runtime.GOARCH)
	c.replyData(d.bytes(), "OK")
}

// listTubes answers list-tubes: every topic and every tube a connection
// of this node uses or watches.
func (c *conn) listTubes() {
	counts, ok := c.topicCounts("list-tubes")
	if !ok {
		return
	}
	names := c.s.knownTubes()
	for t := range counts {
		if !slices.Contains(names, t) {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	c.replyData(yamlList(names), "OK")
}

// pauseTube answers pause-tube: this node's reserves skip the tube until
// the pause ends. The pause is the node's own, not the cluster's.
func (c *conn) pauseTube(name string, d time.Duration) {
	counts, ok := c.topicCounts("pause-tube")
	if !ok {
		return
	}
	found := false
	c.s.mu.Lock()
	ts, used := c.s.tubes[name]
	_, isTopic := counts[name]
	if used || isTopic {
		if !used {
			ts = c.s.tube(name)
		}
		ts.pausedUntil = c.s.cfg.Now().Add(d)
		ts.pauseFor = d
		ts.pauses++
		found = true
	}
	c.s.mu.Unlock()
	if !found {
		c.reply("NOT_FOUND")
		return
	}
	c.reply("PAUSED")
}
