package systemtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The chaos tests run a three-node cluster of real binaries under a steady
// load (300 messages/s due over 0–2 s, four long-polling consumers that ack,
// 2% nacked), inject one kind of fault, then stop producing, let the
// consumers drain, and require of the history:
//
//   - no acknowledged enqueue missing, none delivered early, every duplicate
//     explained (History.Check);
//   - long-delay messages parked before the faults (in a slot file and in the
//     overflow) still pending, unchanged, on every node;
//   - every node's topic counts equal to the leader's.
//
// By default the leader is killed three times and every other fault is
// injected once; -chaos.faults sets how many times each test injects its
// fault and -chaos.duration spreads them over that long, for a soak.

// chaosEnv is one chaos test's cluster, load and history.
type chaosEnv struct {
	t      *testing.T
	ctx    context.Context
	c      *Cluster
	h      *History
	w      *Workload
	parked map[string][]api.Result // by topic
}

const chaosTopic = "chaos"

func newChaos(t *testing.T) *chaosEnv { return newChaosGroups(t, 1) }

// newChaosGroups starts a chaos test on a cluster of the given number of
// Raft groups: the load and the parked messages then have a topic in
// each group (groupTopics).
func newChaosGroups(t *testing.T, groups int) *chaosEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos tests are not run with -short")
	}
	t.Parallel()
	c := NewCluster(t, binary(t), Options{Nodes: 3, Flags: SnapshotFlags, Groups: groups})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &chaosEnv{t: t, ctx: ctx, c: c, h: NewHistory(), parked: map[string][]api.Result{}}
	go WatchLeaders(ctx, c, e.h)

	// Park messages that must outlive every fault, in each parked topic:
	// 60 in one slot file 90 minutes out, 20 in the overflow 3 hours out.
	l, err := c.WaitLeader(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if groups > 1 {
		// Until the balancer has spread the leaderships, a group may be
		// in the middle of a transfer, and refuse the parking with 503.
		if err := c.WaitSpread(ctxFor(t, 60*time.Second)); err != nil {
			t.Fatalf("leaderships did not spread over the nodes: %v", err)
		}
	}
	for _, topic := range groupTopics("parked", groups) {
		for _, delay := range []int64{90 * 60_000, 3 * 3600_000} {
			n := 60
			if delay > 7200_000 {
				n = 20
			}
			var msgs []api.Message
			for i := 0; i < n; i++ {
				msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody(fmt.Sprintf("%s-%d-%d", topic, delay, i)), DelayMs: api.Ptr(delay)})
			}
			res, err := l.Client.Enqueue(ctxFor(t, 10*time.Second), msgs)
			if err != nil {
				t.Fatalf("park: %v", err)
			}
			e.parked[topic] = append(e.parked[topic], res...)
		}
	}

	e.w = &Workload{Topics: groupTopics(chaosTopic, groups), Rate: 300, MaxDelay: 2 * time.Second, TTR: 3 * time.Second, NackPercent: 2,
		Targets: c.Live, History: e.h}
	e.w.Start(ctx)
	t.Cleanup(e.w.Stop)
	e.sleep(1500 * time.Millisecond)
	return e
}

// groupTopics returns, for a cluster of n groups, n topics named after
// prefix, the g-th in group g (model.GroupOf); for one group, prefix alone.
func groupTopics(prefix string, n int) []string {
	if n <= 1 {
		return []string{prefix}
	}
	topics := make([]string, n)
	for i, left := 0, n; left > 0; i++ {
		name := prefix
		if i > 0 {
			name = fmt.Sprintf("%s-%d", prefix, i)
		}
		if g := model.GroupOf(name, n); topics[g] == "" {
			topics[g] = name
			left--
		}
	}
	return topics
}

func (e *chaosEnv) sleep(d time.Duration) {
	select {
	case <-e.ctx.Done():
	case <-time.After(d):
	}
}

// within returns a context for one step of a fault.
func (e *chaosEnv) within(d time.Duration) context.Context { return ctxFor(e.t, d) }

func (e *chaosEnv) leader() *Server {
	e.t.Helper()
	l, err := e.c.WaitLeader(e.within(60 * time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *chaosEnv) fault(format string, args ...any) int64 {
	at := NowMs()
	e.h.Fault(at, format, args...)
	e.t.Logf("fault at %d: %s", at, fmt.Sprintf(format, args...))
	return at
}

// repeat injects fault def times (or -chaos.faults times), spread over
// -chaos.duration when it is set, with the load running in between.
func (e *chaosEnv) repeat(def int, fault func(i int)) {
	n := def
	if *chaosFaults > 0 {
		n = *chaosFaults
	}
	begin := time.Now()
	var every time.Duration
	if *chaosDuration > 0 {
		every = *chaosDuration / time.Duration(n)
	}
	for i := 0; i < n && e.ctx.Err() == nil; i++ {
		if wait := time.Until(begin.Add(time.Duration(i) * every)); wait > 0 {
			e.sleep(wait)
		}
		fault(i)
		e.sleep(time.Second)
	}
	if wait := time.Until(begin.Add(*chaosDuration)); wait > 0 {
		e.sleep(wait)
	}
}

// resumed waits for the first delivery received more than 100 ms after
// atMs (an answer already on its way when a leader died takes less) and
// returns how long after atMs it came.
func (e *chaosEnv) resumed(atMs int64) time.Duration { return e.resumedGroup(atMs, -1) }

// resumedGroup is resumed for the messages of group g (-1: any).
func (e *chaosEnv) resumedGroup(atMs int64, g int) time.Duration {
	e.t.Helper()
	var first int64
	err := Eventually(e.within(60*time.Second), 10*time.Millisecond, func() error {
		var ok bool
		if first, ok = e.h.FirstGroupDeliveryAfter(atMs+100, g); !ok {
			return fmt.Errorf("no delivery of group %d since the fault at %d", g, atMs)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return time.Duration(first-atMs) * time.Millisecond
}

// finish stops the load, drains, and checks the history, the parked
// messages and the convergence of every node.
func (e *chaosEnv) finish() Report {
	t := e.t
	t.Helper()
	e.sleep(2 * time.Second) // load after the last fault
	e.w.StopProducing()
	drain := e.within(90 * time.Second)
	if err := e.c.WaitReady(drain); err != nil {
		t.Fatal(err)
	}
	// Drain: every acknowledged message delivered, and the topic empty on
	// the leader (indeterminate enqueues that did commit are consumed too).
	err := Eventually(drain, 100*time.Millisecond, func() error {
		if n := e.h.Undelivered(); n > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered yet", n)
		}
		l, _, err := e.c.Leader(drain)
		if err != nil {
			return err
		}
		for _, topic := range e.w.Topics {
			tc, err := topicCounts(drain, l.Client, topic)
			if err != nil {
				return err
			}
			if tc != (api.TopicCounts{Topic: topic}) {
				return fmt.Errorf("leader %s still has %+v", l.ID, tc)
			}
		}
		return nil
	})
	e.w.Stop()
	r := e.h.Check()
	t.Logf("history: %v", r)
	enq, res, last := e.w.Errors()
	t.Logf("client errors during the faults: %d enqueue calls, %d reserve calls; last: %s", enq, res, last)
	if cerr := r.Err(); cerr != nil {
		t.Error(cerr)
	}
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if r.Acknowledged < 300 {
		t.Errorf("only %d messages were acknowledged: the load did not run", r.Acknowledged)
	}
	e.converged()
	e.replicasAgree()
	return r
}

// replicasAgree stops every live node at once and compares their stores
// offline (`delaywheel dump`): nodes that applied the log up to the same
// index must hold the same state, message by message. The leader's ticks
// keep the log growing, so the nodes may stop a few entries apart; at
// least two of the three must stop at the same index for the check to say
// something, and everything they hold must match. With many groups, each
// group's stores are compared so.
func (e *chaosEnv) replicasAgree() {
	t := e.t
	t.Helper()
	live := e.c.Live()
	var wg sync.WaitGroup
	for _, n := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Stop(e.within(30 * time.Second)); err != nil {
				t.Errorf("stop %s: %v", n.ID, err)
			}
		}()
	}
	wg.Wait()
	for g := range e.c.Groups() {
		e.groupReplicasAgree(live, g)
	}
}

// groupReplicasAgree compares the dumps of group g's stores of the
// stopped nodes live.
func (e *chaosEnv) groupReplicasAgree(live []*Server, g int) {
	t := e.t
	t.Helper()
	byIndex := map[string][]string{} // applied line → node ids
	dumps := map[string]string{}
	for _, n := range live {
		dir := n.DataDir
		if e.c.Groups() > 1 {
			dir = replication.GroupDir(dir, g)
		}
		out, err := exec.CommandContext(e.within(60*time.Second), n.bin, "dump", "--data-dir", dir).Output()
		if err != nil {
			t.Fatalf("dump %s of group %d: %v", n.ID, g, err)
		}
		dump := string(out)
		applied, _, _ := strings.Cut(dump, "\n")
		if !strings.HasPrefix(applied, "applied ") {
			t.Fatalf("dump of %s starts with %q, want the applied index", n.ID, applied)
		}
		byIndex[applied] = append(byIndex[applied], n.ID)
		dumps[n.ID] = dump
	}
	compared := 0
	for applied, ids := range byIndex {
		for _, id := range ids[1:] {
			compared++
			if dumps[id] != dumps[ids[0]] {
				t.Errorf("group %d: at %s, %s and %s hold different states:\n%s", g, applied, ids[0], id, firstDifference(dumps[ids[0]], dumps[id]))
			}
		}
	}
	t.Logf("group %d: replicas stopped at %v; %d pairs compared", g, byIndex, compared)
	if compared == 0 && len(live) > 2 {
		t.Errorf("group %d: no two of the %d nodes stopped at the same applied index (%v): nothing compared", g, len(live), byIndex)
	}
}

// firstDifference returns the first line where two dumps differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n  %s\n  %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("one dump has %d lines, the other %d", len(al), len(bl))
}

// converged checks that every live node holds the parked messages and
// that all agree with the leader's topic counts.
func (e *chaosEnv) converged() {
	t := e.t
	t.Helper()
	ctx := e.within(60 * time.Second)
	l := e.leader()
	want, err := l.Client.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for topic, parked := range e.parked {
		i := slices.IndexFunc(want, func(tc api.TopicCounts) bool { return tc.Topic == topic })
		if i < 0 || want[i] != (api.TopicCounts{Topic: topic, Delayed: int64(len(parked))}) {
			t.Errorf("leader %s counts %+v, want %d parked messages of %s delayed", l.ID, want, len(parked), topic)
		}
	}
	for _, n := range e.c.Live() {
		err := Eventually(ctx, 100*time.Millisecond, func() error {
			got, err := n.Client.Topics(ctx)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s has counts %+v, the leader %s has %+v", n.ID, got, l.ID, want)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
			continue
		}
	parked:
		for _, ps := range e.parked {
			for _, p := range ps {
				v, err := getReadable(ctx, n, p.ID)
				if err != nil || v.State != api.StateDelayed || v.DeliverAtMs != p.DeliverAtMs {
					t.Errorf("%s: parked message %s: %+v, %v", n.ID, p.ID, v, err)
					break parked
				}
			}
		}
	}
}

// getReadable reads message id on n, asking again while n answers 503: a
// node reads only while it knows a leader, and on a loaded machine one of
// its groups may be electing one as the test reads. Any other answer is
// returned as it is.
func getReadable(ctx context.Context, n *Server, id string) (api.MessageView, error) {
	var v api.MessageView
	var err error
	_ = Eventually(ctx, 100*time.Millisecond, func() error {
		v, err = n.Client.Get(ctx, id)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status == http.StatusServiceUnavailable {
			return err
		}
		return nil
	})
	return v, err
}

// leadershipLeaseMs bounds how long after losing its quorum a leader may
// still answer a hand-off before its lease commits: half the servers' 500 ms
// heartbeat timeout, doubled for slack.
const leadershipLeaseMs = 500

// noStaleAnswers fails if node ("": any) answered a delivery, or an ack
// or nack that settled something, to a call sent in [sentFrom, sentTo] and
// answered in [doneFrom, doneTo] (a delivery: also handed out at doneFrom
// or later; a settle: also sent at settlesFrom or later, and settles are
// not checked when settlesFrom is negative): while it cannot commit it
// must answer neither. only, when not nil, restricts the check to the
// messages whose ids it keeps (an ack or nack, to those with a receipt of
// such a message).
//
// A settle is answered once its entry commits. One sent before a cut may
// have committed before it and be answered late on a loaded machine, so
// the partition tests check the settles sent once the cut was in place,
// which cannot commit.
func (e *chaosEnv) noStaleAnswers(node string, settlesFrom int64, only func(id string) bool, sentFrom, sentTo, doneFrom, doneTo int64) {
	e.t.Helper()
	ds, ss, calls := e.h.AnsweredVia(node, sentFrom, sentTo, doneFrom, doneTo)
	// A delivery counts from when the node handed it out (its lease's
	// start: every message of the chaos tests has the workload's TTR, and
	// the node's clock is this host's), not from when its answer arrived:
	// a hand-off decided under a valid lease may reach a client late on a
	// loaded machine. A stale hand-off is handed out late, and still caught.
	ds = slices.DeleteFunc(ds, func(d Delivery) bool { return d.LeaseExpiresMs-e.w.TTR.Milliseconds() < doneFrom })
	if settlesFrom < 0 {
		ss = nil
	}
	ss = slices.DeleteFunc(ss, func(s Settle) bool { return s.SentMs < settlesFrom })
	if only != nil {
		ds = slices.DeleteFunc(ds, func(d Delivery) bool { return !only(d.ID) })
		ss = slices.DeleteFunc(ss, func(s Settle) bool {
			return !slices.ContainsFunc(s.Receipts, func(r string) bool { id, _, _ := strings.Cut(r, "."); return only(id) })
		})
	}
	for i, d := range ds {
		if i == 5 {
			e.t.Errorf("… %d deliveries in all", len(ds))
			break
		}
		e.t.Errorf("stale leader %s delivered message %s (attempt %d, receipt %s) to a call sent at %d, answered at %d",
			node, d.ID, d.Attempt, d.Receipt, d.SentMs, d.RecvMs)
	}
	for i, s := range ss {
		if i == 5 {
			e.t.Errorf("… %d settles in all", len(ss))
			break
		}
		e.t.Errorf("stale leader %s settled %d receipts (nack %v) of a call sent at %d, answered at %d",
			node, s.OK, s.Nack, s.SentMs, s.DoneMs)
	}
	e.t.Logf("stale-leader check: of %d reserve/ack/nack calls sent to %s in [%d, %d] and answered in [%d, %d], %d got deliveries and %d settled receipts",
		calls, node, sentFrom, sentTo, doneFrom, doneTo, len(ds), len(ss))
}

// median of durations.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestChaosKillLeader kills the leader with SIGKILL and restarts it, three
// times, measuring how long until deliveries resume.
func TestChaosKillLeader(t *testing.T) {
	e := newChaos(t)
	var resume []time.Duration
	e.repeat(3, func(i int) {
		l := e.leader()
		at := e.fault("kill -9 leader %s", l.ID)
		l.Kill()
		nl, err := e.c.WaitLeader(e.within(60*time.Second), l)
		if err != nil {
			t.Fatal(err)
		}
		elected := time.Duration(NowMs()-at) * time.Millisecond
		r := e.resumed(at)
		resume = append(resume, r)
		t.Logf("kill %d: leader %s killed; %s leads after %v; deliveries resumed after %v", i+1, l.ID, nl.ID, elected, r)
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("leader kill → deliveries resume: %v (median %v)", resume, median(resume))
	e.finish()
}

// TestChaosKillFollower kills a follower with SIGKILL, keeps the load on
// the other two, and restarts it.
func TestChaosKillFollower(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(int) {
		l := e.leader()
		f := e.c.Others(l)[0]
		e.fault("kill -9 follower %s", f.ID)
		f.Kill()
		e.sleep(2 * time.Second)
		if err := f.Start(); err != nil {
			t.Fatal(err)
		}
		if err := f.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		e.fault("follower %s back", f.ID)
	})
	e.finish()
}

// TestChaosKillAll kills all three nodes at once and restarts them.
func TestChaosKillAll(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(int) {
		at := e.fault("kill -9 of all nodes")
		for _, n := range e.c.Servers() {
			n.Kill()
		}
		e.sleep(500 * time.Millisecond)
		for _, n := range e.c.Servers() {
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
		}
		l := e.leader()
		if err := e.c.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		t.Logf("full restart: %s leads %v after the kill; deliveries resumed after %v",
			l.ID, time.Duration(NowMs()-at)*time.Millisecond, e.resumed(at))
	})
	e.finish()
}

// TestChaosPauseLeader stops the leader with SIGSTOP for 3 s (past the
// election timeout), then continues it: it must step down, and what it
// answers after waking (reserves, acks that were waiting on it) must not
// be deliveries or acks of a stale leader — the history would show an
// attempt handed out twice, a redelivery after a successful ack, or a stale
// ack with the lease still valid.
func TestChaosPauseLeader(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(i int) {
		l := e.leader()
		probes := e.parkProbes(l, fmt.Sprintf("probe.%d", i))
		at := e.fault("SIGSTOP leader %s", l.ID)
		if err := l.Pause(); err != nil {
			t.Fatal(err)
		}
		nl, err := e.c.WaitLeader(e.within(60*time.Second), l)
		if err != nil {
			t.Fatal(err)
		}
		elected := time.Duration(NowMs()-at) * time.Millisecond
		if wait := time.Until(time.UnixMilli(at + 3000)); wait > 0 {
			e.sleep(wait)
		}
		resumedAt := e.fault("SIGCONT %s", l.ID)
		if err := l.Resume(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s paused for 3 s; %s led after %v; deliveries resumed after %v (clients stuck on the paused node wait out their own timeouts)",
			l.ID, nl.ID, elected, e.resumed(at))
		err = Eventually(e.within(30*time.Second), 50*time.Millisecond, func() error {
			v, err := l.Client.Cluster(e.ctx)
			if err != nil {
				return err
			}
			if v.Leader == l.ID || v.Leader == "" {
				return fmt.Errorf("%s, resumed, names %q as leader", l.ID, v.Leader)
			}
			for _, m := range v.Nodes {
				if m.ID == l.ID && m.State == "leader" {
					return fmt.Errorf("%s still reports itself leader", l.ID)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the paused leader did not step down: %v", err)
		}
		if _, err := e.c.WaitLeader(e.within(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		// The probes reached it while it led (sent to it, or forwarded to
		// it by a follower) and waited through the pause for messages that
		// came due during it: none may be answered with a delivery, since
		// its leadership lease ran out during the pause and it can no
		// longer commit. Other calls in flight at the stop may carry a
		// hand-off decided under a valid lease just before it, answered
		// once the process runs again; the history check sees such a
		// message delivered again by the new leader, as a duplicate of a
		// leader change. An ack or nack answered now may have committed
		// before the pause; if one answered success without committing, the
		// history check finds its message delivered again.
		probes.wait()
		e.sleep(e.w.TTR) // let the held-up calls finish
		e.noStaleAnswers("", -1, probes.has, 0, at, resumedAt, NowMs())
		probes.drain()
	})
	e.finish()
}

// probes are long-polls parked on a leader just before it is paused, on a
// topic of their own whose messages come due during the pause.
type probes struct {
	e     *chaosEnv
	topic string
	ids   map[string]bool
	wg    sync.WaitGroup
}

// parkProbes enqueues 30 messages due 1.5 s later on topic and parks six
// long-polls (10 s) for them on l: two sent to l, two to each follower
// (which forward them to l).
func (e *chaosEnv) parkProbes(l *Server, topic string) *probes {
	e.t.Helper()
	p := &probes{e: e, topic: topic, ids: map[string]bool{}}
	var msgs []api.Message
	var tokens []string
	for i := 0; i < 30; i++ {
		tok := fmt.Sprintf("%s#%d", topic, i)
		tokens = append(tokens, tok)
		msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody(tok), DelayMs: api.Ptr(int64(1500)), TTRMs: api.Ptr(e.w.TTR.Milliseconds())})
	}
	sent := NowMs()
	e.h.EnqueueSent(tokens, sent)
	res, err := l.Client.Enqueue(e.within(10*time.Second), msgs)
	if err != nil {
		e.t.Fatalf("probe messages: %v", err)
	}
	e.h.EnqueueAcked(tokens, res, sent, NowMs())
	for _, r := range res {
		p.ids[r.ID] = true
	}
	targets := []*Server{l, l}
	for _, f := range e.c.Others(l) {
		targets = append(targets, f, f)
	}
	for _, n := range targets {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			defer cancel()
			sent := NowMs()
			ds, err := n.Client.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(10), WaitMs: 10_000})
			if err != nil {
				e.h.ReserveFailed(n.ID, sent, NowMs())
				return
			}
			e.h.Delivered("probe", n.ID, ds, sent, NowMs())
		}()
	}
	e.sleep(200 * time.Millisecond) // let them park
	return p
}

func (p *probes) wait() { p.wg.Wait() }

// has reports whether id is one of the probe messages.
func (p *probes) has(id string) bool { return p.ids[id] }

// drain consumes the probe topic to the end and acks it.
func (p *probes) drain() {
	e := p.e
	got := map[string]bool{}
	err := Eventually(e.within(60*time.Second), 10*time.Millisecond, func() error {
		ns := e.c.Live()
		n := ns[len(got)%len(ns)]
		sent := NowMs()
		ds, err := n.Client.Reserve(e.ctx, p.topic, api.ReserveRequest{Max: api.Ptr(30), WaitMs: 1000})
		if err != nil {
			e.h.ReserveFailed(n.ID, sent, NowMs())
			return err
		}
		e.h.Delivered("drain", n.ID, ds, sent, NowMs())
		var receipts []string
		var leaseEnd int64
		for _, d := range ds {
			got[d.ID] = true
			receipts = append(receipts, d.Receipt)
			leaseEnd = max(leaseEnd, d.LeaseExpiresMs)
		}
		e.w.settle(e.ctx, false, receipts, leaseEnd, 5*time.Second)
		if len(got) < len(p.ids) {
			return fmt.Errorf("%d of %d probe messages consumed", len(got), len(p.ids))
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestChaosPartitionLeader cuts the leader's Raft traffic off from both
// followers (both ways, through the proxies), waits for a new leader, holds
// the cut for 2 s, and heals it.
func TestChaosPartitionLeader(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(int) {
		l := e.leader()
		at := e.fault("partition: leader %s cut off", l.ID)
		e.c.Isolate(l)
		// The cut is in place once Isolate returns, which a loaded machine
		// may hold up well past at: the leadership lease runs from here.
		cut := NowMs()
		nl, err := e.c.WaitLeader(e.within(60*time.Second), l)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s cut off; %s leads after %v; deliveries resumed after %v", l.ID, nl.ID,
			time.Duration(NowMs()-at)*time.Millisecond, e.resumed(at))
		err = Eventually(e.within(30*time.Second), 50*time.Millisecond, func() error {
			v, err := l.Client.Cluster(e.ctx)
			if err != nil {
				return err
			}
			if v.Leader == l.ID {
				return fmt.Errorf("%s, cut off, still names itself leader", l.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the cut-off leader did not step down: %v", err)
		}
		e.sleep(2 * time.Second)
		healAt := e.fault("partition healed")
		e.c.Heal()
		// Cut off, it could commit nothing: calls sent to it after the cut
		// and answered before the heal got no delivery and settled nothing,
		// once its leadership lease (half a heartbeat timeout after the last
		// quorum contact, before the cut) had run out. Before that, it may
		// still hand out messages: no other leader can exist yet.
		e.noStaleAnswers(l.ID, cut, nil, at, healAt, cut+leadershipLeaseMs, healAt)
		if _, err := e.c.WaitLeader(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := e.c.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if refused := l.Proxy.Refused() + nl.Proxy.Refused(); refused == 0 {
			t.Logf("note: the proxies refused no connection during the cut (existing ones were dropped)")
		}
	})
	e.finish()
}

// waitSnapshot waits until n has logged a snapshot (the Raft snapshot
// interval is 30–60 s, so this takes up to a minute).
func (e *chaosEnv) waitSnapshot(n *Server) {
	e.t.Helper()
	err := Eventually(e.within(120*time.Second), 200*time.Millisecond, func() error {
		// Finished: its metadata written, the log compacted up to it.
		if m, _ := filepath.Glob(filepath.Join(n.DataDir, "raft", "snapshots", "*", "meta.json")); len(m) == 0 {
			return fmt.Errorf("%s has finished no snapshot yet", n.ID)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// segmentTails returns a stopped node's segment files with their sizes and
// the length of each that its kept snapshot checkpoints cover (synced at
// the snapshot; 0 when no checkpoint has the file).
func segmentTails(t *testing.T, dataDir string) (sizes, covered map[string]int64) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "fsm", "segments", "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	sizes = map[string]int64{}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			sizes[filepath.Base(f)] = fi.Size()
		}
	}
	covered = map[string]int64{}
	covers, _ := checkpointLens(dataDir)
	for _, cover := range covers {
		for name, n := range cover {
			covered[name] = max(covered[name], n)
		}
	}
	return sizes, covered
}

// checkpointLens returns, for each checkpoint a node keeps (by snapshot
// id), the length of each segment file it covers, and whether Raft
// finished that snapshot: a checkpoint is kept before Raft writes the
// snapshot's metadata, and a node killed in between restarts without that
// snapshot, replaying its log instead.
func checkpointLens(dataDir string) (covers map[string]map[string]int64, finished map[string]bool) {
	covers, finished = map[string]map[string]int64{}, map[string]bool{}
	lens, _ := filepath.Glob(filepath.Join(dataDir, "raft", "checkpoints", "*", "segments", "lengths"))
	for _, lf := range lens {
		data, err := os.ReadFile(lf)
		if err != nil {
			continue
		}
		id := filepath.Base(filepath.Dir(filepath.Dir(lf)))
		_, err = os.Stat(filepath.Join(dataDir, "raft", "snapshots", id, "meta.json"))
		finished[id] = err == nil
		covers[id] = map[string]int64{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var sec, n int64
			if _, err := fmt.Sscanf(line, "%d %d", &sec, &n); err == nil {
				covers[id][segment.FileName(sec)] = n
			}
		}
	}
	return covers, finished
}

func truncateBy(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
	t.Logf("truncated %s from %d to %d bytes", path, fi.Size(), fi.Size()-n)
}

// tearLogTail zeroes the last n written bytes of the newest segment of
// the Raft log in dir, as a write cut short by a crash leaves it. A segment
// is created at its full size, zero past what was written, so what was
// written ends at the last byte that is not zero.
func tearLogTail(t *testing.T, dir string, n int) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment in %s (%v)", dir, err)
	}
	sort.Strings(segs) // named by their first index, zero-padded
	path := segs[len(segs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	if end < n {
		t.Fatalf("%s holds %d written bytes, fewer than the %d to tear", path, end, n)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(make([]byte, n), int64(end-n))
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("zeroed bytes %d to %d of %s", end-n, end, path)
}

// logLines logs the lines of n's log (since its last start) that mention
// one of the words.
func logLines(t *testing.T, n *Server, words ...string) {
	t.Helper()
	lines := strings.Split(n.Log(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "==== ") && strings.Contains(lines[i], " start #") {
			lines = lines[i:]
			break
		}
	}
	for _, l := range lines {
		for _, w := range words {
			if strings.Contains(l, w) {
				t.Logf("%s: %s", n.ID, l)
				break
			}
		}
	}
}

// TestChaosTornWrites kills a follower (once it has a snapshot), tears the
// tail of one of its segment files and of its Raft log, and restarts it: it
// must come back and catch up.
//
// What a crash can tear is what was not synced yet. A segment file is synced
// when a snapshot checkpoints it, and the checkpoint records the length it
// covers; so the test cuts 3 bytes (a torn last record) off a segment whose
// tail lies beyond every kept checkpoint. The store then finds a file
// shorter than its index says, moves itself aside, restores the snapshot
// and replays the Raft log. (A cut into bytes a snapshot covers is damage,
// not a torn write: TestDamagedFilesClearErrors.)
//
// raft.db (the term and vote) is a bolt file: pages written in place, the
// file grown ahead of use, so its tail is free space. Cutting 5 bytes models
// a torn last write; bolt opens it and the node must serve as before.
// (Cutting into pages bolt uses is damage again:
// TestDamagedFilesClearErrors.) The Raft log's newest raft-wal segment has
// its last 5 written bytes zeroed: raft-wal drops a torn last batch by its
// checksum, and the follower gets those entries from the leader again.
func TestChaosTornWrites(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(int) {
		l := e.leader()
		f := e.c.Others(l)[0]
		e.waitSnapshot(f)
		var seg string
		for try := 0; seg == "" && try < 10; try++ {
			e.fault("kill -9 follower %s", f.ID)
			f.Kill()
			sizes, covered := segmentTails(t, f.DataDir)
			best := int64(0)
			for name, size := range sizes {
				if tail := size - covered[name]; tail >= 3 && size > best {
					seg, best = name, size
				}
			}
			if seg == "" {
				t.Logf("no segment of %s has an unsynced tail; restarting it and trying again", f.ID)
				if err := f.Start(); err != nil {
					t.Fatal(err)
				}
				e.sleep(time.Second)
			}
		}
		if seg == "" {
			t.Fatalf("%s never had a segment with a tail beyond its snapshot", f.ID)
		}
		e.fault("tear the tails of %s's %s, raft.db and the raft log's newest segment", f.ID, seg)
		truncateBy(t, filepath.Join(f.DataDir, "fsm", "segments", seg), 3)
		truncateBy(t, filepath.Join(f.DataDir, "raft", "raft.db"), 5)
		tearLogTail(t, filepath.Join(f.DataDir, "raft", "wal"), 5)
		if err := f.Start(); err != nil {
			t.Fatal(err)
		}
		if err := f.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		e.fault("follower %s back", f.ID)
		logLines(t, f, "snapshot", "segment", "store", "restarting with existing state")
	})
	e.finish()
}

// TestChaosReplaceNode kills a follower for good, removes it from the
// cluster, and starts a node with an empty data dir that joins in its
// place; the log has been compacted by then, so it must catch up by
// installing a snapshot.
func TestChaosReplaceNode(t *testing.T) {
	e := newChaos(t)
	e.repeat(1, func(int) {
		l := e.leader()
		e.waitSnapshot(l)
		dead := e.c.Others(l)[0]
		e.fault("kill -9 follower %s for good", dead.ID)
		dead.Kill()
		ctx := e.within(60 * time.Second)
		err := Eventually(ctx, 100*time.Millisecond, func() error {
			return e.c.Live()[0].Client.RemoveNode(ctx, dead.ID)
		})
		if err != nil {
			t.Fatalf("remove %s: %v", dead.ID, err)
		}
		e.fault("%s removed", dead.ID)
		fresh, err := e.c.AddJoiner(l.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		e.fault("%s joins with an empty data dir", fresh.ID)
		if err := fresh.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		err = Eventually(ctx, 100*time.Millisecond, func() error {
			v, err := fresh.Client.Cluster(ctx)
			if err != nil {
				return err
			}
			var ids []string
			for _, m := range v.Nodes {
				ids = append(ids, m.ID+"/"+m.Suffrage)
			}
			slices.Sort(ids)
			want := []string{}
			for _, n := range e.c.Live() {
				want = append(want, n.ID+"/voter")
			}
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				return fmt.Errorf("members %v, want %v", ids, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !fresh.LogContains("snapshot restored") {
			t.Errorf("%s caught up without restoring a snapshot; its log:\n%s", fresh.ID, fresh.LogTail(30))
		}
	})
	e.finish()
}
