package systemtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// The chaos tests of a cluster of three Raft groups (--groups 3) run the
// chaos load over three topics, one in each group, and park messages in
// each group; finish checks every group's stores as it checks the one
// group's. A duplicate is explained only by a leader change of its own
// group.

// spread waits until every group is led by its preferred node (with three
// groups and three nodes, each node leads one group) and returns how long
// after sinceMs that was.
func (e *chaosEnv) spread(sinceMs int64) time.Duration {
	e.t.Helper()
	if err := e.c.WaitSpread(e.within(60 * time.Second)); err != nil {
		e.t.Fatalf("leaderships did not spread over the nodes: %v", err)
	}
	return time.Duration(NowMs()-sinceMs) * time.Millisecond
}

// spreadLeader waits until leaderships are spread, and still are a second
// (two heartbeat timeouts) later, and returns the group that fault i
// concerns and the node that leads it. A node kept busy can miss a
// leader's heartbeats and start an election; one brewing as the fault
// begins is not the fault's doing, yet would interrupt a group the fault
// must leave alone.
func (e *chaosEnv) spreadLeader(i int) (int, *Server) {
	e.t.Helper()
	for try := 1; ; try++ {
		e.spread(NowMs())
		e.sleep(time.Second)
		err := e.c.CheckSpread(e.ctx)
		if err == nil {
			break
		}
		if try == 5 {
			e.t.Fatalf("leaderships did not stay spread for a second: %v", err)
		}
	}
	g := i % e.c.Groups()
	return g, e.c.PreferredLeader(g)
}

// TestChaosGroupsKillLeaders kills with SIGKILL, in turn, the leader of
// group 0, 1 and 2 — with leaderships spread, a different node each time —
// and restarts it. It proves that after each kill every group has a
// leader again among the live nodes (the killed node's group elects one,
// the others keep theirs) and the killed node's group delivers again, that
// after each restart the balancer gives every group back to its preferred
// node (each node leads one group), and that the history holds nothing
// lost, early or unexplained.
func TestChaosGroupsKillLeaders(t *testing.T) {
	e := newChaosGroups(t, 3)
	e.repeat(3, func(i int) {
		g, l := e.spreadLeader(i)
		at := e.fault("kill -9 %s, leader of group %d", l.ID, g)
		l.Kill()
		leaders, err := e.c.WaitGroupLeaders(e.within(60*time.Second), l)
		if err != nil {
			t.Fatalf("after the kill of %s: %v", l.ID, err)
		}
		elected := time.Duration(NowMs()-at) * time.Millisecond
		t.Logf("kill %d: %s killed; group leaders %v after %v; group %d delivers again after %v",
			i+1, l.ID, nodeIDs(leaders), elected, g, e.resumedGroup(at, g))
		back := e.fault("%s restarted", l.ID)
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitReady(e.within(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s ready %v after its restart; leaderships spread again after %v",
			l.ID, time.Duration(NowMs()-back)*time.Millisecond, e.spread(back))
	})
	e.finish()
}

// TestChaosPartitionGroupLeader cuts off, with leaderships spread, the
// node that leads one group g. The groups share a node's one Raft address,
// so the cut isolates the node in every group: it leads g only and
// follows in the others. It proves that:
//
//   - the groups led by the two other nodes serve without interruption:
//     while the cut holds, every enqueue to their topics through a node of
//     the majority succeeds, and what it enqueued is reserved and acked
//     through the other;
//   - group g elects a leader in the majority, and the cut-off node stops
//     naming itself g's leader;
//   - the cut-off node answers no delivery of g's messages and settles
//     none of their receipts once its leadership lease has run out;
//   - after the heal g's leadership returns to the node, and the history
//     holds nothing lost, early or unexplained.
//
// A group of the majority whose leader changed during the cut was
// interrupted by its own election: on a loaded machine a node kept from
// running past half a heartbeat timeout loses its leadership, cut or not.
// Such a cut is tried again, up to three times in all; an interruption
// without a leader change of its group, or one in every try, fails.
func TestChaosPartitionGroupLeader(t *testing.T) {
	e := newChaosGroups(t, 3)
	e.repeat(1, func(i int) {
		const tries = 3
		for try := 1; !e.partitionGroupLeader(i, try == tries); try++ {
			t.Logf("try %d of %d: a group of the majority held an election during the cut; cutting again", try, tries)
		}
	})
	e.finish()
}

// partitionGroupLeader is one cut of TestChaosPartitionGroupLeader. It
// reports whether the groups of the majority served without
// interruption; an interruption fails the test when last, or when no
// leader change of its group explains it.
func (e *chaosEnv) partitionGroupLeader(i int, last bool) (served bool) {
	t := e.t
	t.Helper()
	g, x := e.spreadLeader(i)
	s := e.serveOthers(x, g)
	at := e.fault("partition: %s, leader of group %d, cut off", x.ID, g)
	e.c.Isolate(x)
	cut := NowMs() // the lease runs from here (TestChaosPartitionLeader)
	nl, err := e.c.WaitGroupLeader(e.within(60*time.Second), g, x)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s cut off; %s leads group %d after %v; group %d delivers again after %v", x.ID, nl.ID, g,
		time.Duration(NowMs()-at)*time.Millisecond, g, e.resumedGroup(at, g))
	err = Eventually(e.within(30*time.Second), 50*time.Millisecond, func() error {
		v, err := x.ClusterOf(e.ctx, g, true)
		if err != nil {
			return err
		}
		if v.Leader == x.ID {
			return fmt.Errorf("%s, cut off, still names itself leader of group %d", x.ID, g)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the cut-off leader did not step down: %v", err)
	}
	e.sleep(2 * time.Second)
	s.stop()
	healAt := e.fault("partition healed")
	e.c.Heal()
	served = s.check(last)
	// As in TestChaosPartitionLeader, for group g's messages: calls to
	// the cut-off node answered after its lease ran out got none and
	// settled none. It may serve the other groups' messages by
	// forwarding to their leaders over HTTP, which the cut spares.
	e.noStaleAnswers(x.ID, cut, func(id string) bool { return GroupOfID(id) == g }, at, healAt, cut+leadershipLeaseMs, healAt)
	if _, err := e.c.WaitGroupLeaders(e.within(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitReady(e.within(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Logf("group %d led by %s again %v after the heal", g, x.ID, e.spread(healAt))
	return served
}

// nodeIDs are the ids of ns.
func nodeIDs(ns []*Server) []string {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	return ids
}

// serving checks that the groups a cut-off node does not lead keep
// serving: for each, one goroutine enqueues a message due at once to a
// topic of that group through one node of the majority, reserves it
// through the other and acks it, round after round, until stop; every
// call must succeed, and the message must be handed out within a
// generous 30 s.
type serving struct {
	e      *chaosEnv
	begin  int64 // when it started, in its tokens
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	rounds   map[int]int // by group
	failures []failure
}

// failure is a failed call of a round of group g.
type failure struct {
	g   int
	msg string
}

// serveOthers starts serving over the nodes other than x, for every group
// but g.
func (e *chaosEnv) serveOthers(x *Server, g int) *serving {
	ctx, cancel := context.WithCancel(e.ctx)
	s := &serving{e: e, begin: NowMs(), cancel: cancel, rounds: map[int]int{}}
	majority := e.c.Others(x)
	for h, topic := range groupTopics("steady", e.c.Groups()) {
		if h == g {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for round := 0; ctx.Err() == nil; round++ {
				s.round(ctx, h, topic, round, majority[round%len(majority)], majority[(round+1)%len(majority)])
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return s
}

// round enqueues one message to topic through in, reserves it through out
// and acks it there.
func (s *serving) round(ctx context.Context, g int, topic string, round int, in, out *Server) {
	h := s.e.h
	tok := fmt.Sprintf("%s#%d.%d", topic, s.begin, round)
	sent := NowMs()
	h.EnqueueSent([]string{tok}, sent)
	// Calls are not bound to ctx: stop lets a round that started finish.
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := in.Client.Enqueue(cctx, []api.Message{{Topic: topic, Payload: api.TextBody(tok), TTRMs: api.Ptr(int64(10_000))}})
	if err != nil {
		h.EnqueueFailed()
		s.fail(g, "group %d: enqueue through %s at %d: %v", g, in.ID, sent, err)
		return
	}
	h.EnqueueAcked([]string{tok}, res, sent, NowMs())
	for got := false; !got; {
		sent = NowMs()
		ds, err := out.Client.Reserve(cctx, topic, api.ReserveRequest{Max: api.Ptr(10), WaitMs: 1000})
		if err != nil {
			h.ReserveFailed(out.ID, sent, NowMs())
			s.fail(g, "group %d: reserve through %s at %d (%s enqueued at %d): %v", g, out.ID, sent, res[0].ID, res[0].DeliverAtMs, err)
			return
		}
		h.Delivered("steady", out.ID, ds, sent, NowMs())
		if len(ds) == 0 {
			continue // not handed out yet: wait on (until cctx ends the reserve with an error)
		}
		var receipts []string
		for _, d := range ds {
			got = got || d.ID == res[0].ID
			receipts = append(receipts, d.Receipt)
		}
		sent = NowMs()
		ack, err := out.Client.Ack(cctx, receipts)
		h.Acked(out.ID, receipts, sent, NowMs(), ack, err, false)
		if err != nil || ack.Acked != len(receipts) {
			s.fail(g, "group %d: ack of %d receipts through %s at %d: %+v, %v", g, len(receipts), out.ID, sent, ack, err)
			return
		}
	}
	s.mu.Lock()
	s.rounds[g]++
	s.mu.Unlock()
}

func (s *serving) fail(g int, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, failure{g, fmt.Sprintf(format, args...)})
}

// stop ends the rounds and waits for those under way.
func (s *serving) stop() {
	s.cancel()
	s.wg.Wait()
}

// check reports whether every group served rounds and none failed. It
// fails the test unless so, except, when not last, where each failed
// group's leader changed during the cut: the group was interrupted by an
// election of its own, which a loaded machine brings about (a node kept
// from running past half a heartbeat timeout loses its leadership), and
// the cut is tried again.
func (s *serving) check(last bool) bool {
	t := s.e.t
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("groups served through the majority during the cut: rounds by group %v, failures %d", s.rounds, len(s.failures))
	if len(s.rounds) < s.e.c.Groups()-1 {
		t.Errorf("only groups %v completed a round during the cut", s.rounds)
	}
	if len(s.failures) == 0 {
		return true
	}
	changed := map[int]bool{}
	var changes []string
	for _, l := range s.e.h.LeaderChanges() {
		if l.AtMs >= s.begin {
			changed[l.Group] = true
			changes = append(changes, fmt.Sprintf("group %d: %s, term %d, seen at %d", l.Group, l.Leader, l.Term, l.AtMs))
		}
	}
	t.Logf("leader changes seen since the rounds began: %v", changes)
	explained := true
	for _, f := range s.failures {
		explained = explained && changed[f.g]
	}
	report := t.Errorf
	if explained && !last {
		report = t.Logf
	}
	for i, f := range s.failures {
		if i == 10 {
			report("… %d failures in all", len(s.failures))
			break
		}
		report("a group the cut-off node did not lead was interrupted: %s", f.msg)
	}
	return false
}
