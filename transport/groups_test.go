package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// topicsOver returns k topics and the groups (of n) they cover.
func topicsOver(k, n int) (topics []string, groups map[int]bool) {
	groups = map[int]bool{}
	for i := range k {
		topic := fmt.Sprintf("orders.%d", i)
		topics = append(topics, topic)
		groups[model.GroupOf(topic, n)] = true
	}
	return topics, groups
}

// A batch over many topics enqueued through one node lands each message
// in its topic's group, with an id naming it; its messages are reserved
// through another node and acked through a third in one call; the
// topics of every group are listed together.
func TestGroupsBatchSpansGroups(t *testing.T) {
	const groups = 3
	c := startGroups(t, 3, groups, transporttest.Options{})
	ctx := t.Context()
	topics, covered := topicsOver(24, groups)
	if len(covered) != groups {
		t.Fatalf("the test's topics cover groups %v; want all %d", covered, groups)
	}
	var msgs []api.Message
	for i, topic := range topics {
		msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody(fmt.Sprintf("m%d", i))})
	}
	res, err := c.Nodes[0].Client.Enqueue(ctx, msgs)
	check(t, "enqueue a batch over every group through one node", err)
	equal(t, "results", len(res), len(msgs))
	for i, r := range res {
		id, err := model.ParseID(r.ID)
		check(t, "parse id "+r.ID, err)
		equal(t, "group of "+msgs[i].Topic+"'s id", id.Group(), model.GroupOf(msgs[i].Topic, groups))
		// The node the batch went through reads it at once, whichever
		// group's leader took each part.
		v, err := c.Nodes[0].Client.Get(ctx, r.ID)
		check(t, "get "+r.ID+" through the node that enqueued it", err)
		equal(t, "topic of "+r.ID, v.Topic, msgs[i].Topic)
		store := c.Nodes[2].Groups.Node(id.Group()).Store()
		c.Nodes[2].Eventually(t, "the message in its group's store on a third node", func() bool {
			_, err := store.Get(id)
			return err == nil
		})
	}

	var receipts []string
	for i, topic := range topics {
		ds, err := c.Nodes[1].Client.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(1), WaitMs: 5000})
		check(t, "reserve "+topic, err)
		if len(ds) != 1 || ds[0].ID != res[i].ID {
			t.Fatalf("reserve %s = %+v; want %s", topic, ds, res[i].ID)
		}
		receipts = append(receipts, ds[0].Receipt)
	}
	ack, err := c.Nodes[2].Client.Ack(ctx, receipts)
	check(t, "ack receipts of every group in one call", err)
	equal(t, "acked", ack.Acked, len(receipts))
	equal(t, "stale", ack.Stale, 0)

	_, err = c.Nodes[0].Client.Enqueue(ctx, msgs)
	check(t, "enqueue again", err)
	ts, err := c.Nodes[0].Client.Topics(ctx)
	check(t, "topics", err)
	equal(t, "topics listed", len(ts), len(topics))
	for i := 1; i < len(ts); i++ {
		if ts[i-1].Topic >= ts[i].Topic {
			t.Fatalf("topics not sorted: %s before %s", ts[i-1].Topic, ts[i].Topic)
		}
	}
}

// The cluster view names every group with its leader, and the balancer
// spreads the leaderships; every node is ready; a group out of range is
// refused naming group.
func TestGroupsClusterReadyAndRange(t *testing.T) {
	const groups = 3
	c := startGroups(t, 3, groups, transporttest.Options{})
	ctx := t.Context()
	c.Spread(t)
	for _, n := range c.Nodes {
		var v api.Cluster
		n.Eventually(t, "the cluster view at "+n.ID+" to show every group's leader", func() bool {
			var err error
			v, err = n.Client.Cluster(ctx)
			if err != nil || len(v.Groups) != groups {
				return false
			}
			leaders := c.Leaders()
			for g, gs := range v.Groups {
				if gs.Group != g || gs.Leader != leaders[g] || gs.CommitIndex == 0 {
					return false
				}
			}
			return true
		})
		equal(t, "members", len(v.Nodes), 3)
		// A new leader's first entry is applied by no store: the leader's
		// next tick, which the kit's clock drives, brings a follower's
		// applied index up to the commit index.
		n.AdvanceUntil(t, 100*time.Millisecond, n.ID+" to be ready in every group", func() bool {
			return n.Client.Readyz(ctx) == nil
		})
	}

	for _, path := range []string{"/v1/wheel?group=9", "/v1/topics/t/reserve?group=9", "/readyz?group=-1"} {
		method := http.MethodGet
		if strings.Contains(path, "reserve") {
			method = http.MethodPost
		}
		a := doURL(t, method, c.Nodes[0].URL+path, "")
		equal(t, path+" status", a.status, http.StatusBadRequest)
		if e := a.errBody(t); !strings.HasPrefix(e.Message, "group: must be between 0 and 2") {
			t.Fatalf("%s: %q; want it to name group and its range", path, e.Message)
		}
	}
	a := doURL(t, http.MethodGet, c.Nodes[0].URL+"/v1/wheel?group=2", "")
	equal(t, "wheel of group 2", a.status, http.StatusOK)
	for id, want := range map[string]string{
		"000000000000000a05000000": "id: message id 000000000000000a05000000 names group 5; this cluster has groups 0 to 2",
		"zz":                       "id: ",
	} {
		a := doURL(t, http.MethodGet, c.Nodes[0].URL+"/v1/messages/"+id, "")
		equal(t, "get "+id, a.status, http.StatusBadRequest)
		if e := a.errBody(t); !strings.HasPrefix(e.Message, want) {
			t.Fatalf("get %s: %q; want it to start %q", id, e.Message, want)
		}
	}
}

// With one group's leader stopped, the other groups go on taking
// enqueues to their topics at once, and the stopped group elects a new
// leader and takes them again.
func TestGroupsOneLeaderDown(t *testing.T) {
	const groups = 3
	c := startGroups(t, 3, groups, transporttest.Options{})
	ctx := t.Context()
	topics, _ := topicsOver(24, groups)
	byGroup := map[int]string{}
	for _, topic := range topics {
		byGroup[model.GroupOf(topic, groups)] = topic
	}
	c.Spread(t)
	leader := c.Leader(0)
	stopped := -1
	for i, n := range c.Nodes {
		if n == leader {
			stopped = i
		}
	}
	led := map[int]bool{}
	for g, id := range c.Leaders() {
		led[g] = id == leader.ID
	}
	c.Stop(stopped)
	via := c.Nodes[(stopped+1)%len(c.Nodes)]
	for g := range groups {
		if led[g] {
			continue
		}
		_, err := via.Client.Enqueue(ctx, []api.Message{{Topic: byGroup[g], Payload: api.TextBody("x")}})
		check(t, fmt.Sprintf("enqueue to group %d, whose leader runs", g), err)
	}
	via.Eventually(t, "group 0 to take enqueues again under a new leader", func() bool {
		_, err := via.Client.Enqueue(ctx, []api.Message{{Topic: byGroup[0], Payload: api.TextBody("y")}})
		return err == nil
	})
}

// Nack and touch take receipts of many groups in one call; schedules are
// stored in their topic's group and read, listed and deleted through any
// node.
func TestGroupsSettleAndSchedules(t *testing.T) {
	const groups = 3
	// With a token, which each group's part carries on to its leader.
	c := startGroups(t, 3, groups, transporttest.Options{Server: func(cfg *transport.Config) { cfg.AuthToken = "tok" }})
	ctx := t.Context()
	c.Spread(t)
	topics, _ := topicsOver(12, groups)
	var msgs []api.Message
	for _, topic := range topics {
		msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody("x")})
	}
	_, err := c.Nodes[0].Client.Enqueue(ctx, msgs)
	check(t, "enqueue", err)
	var receipts []string
	for _, topic := range topics {
		ds, err := c.Nodes[2].Client.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(1), WaitMs: 5000})
		check(t, "reserve "+topic, err)
		equal(t, "deliveries of "+topic, len(ds), 1)
		receipts = append(receipts, ds[0].Receipt)
	}
	tr, err := c.Nodes[1].Client.Touch(ctx, receipts)
	check(t, "touch", err)
	equal(t, "touched", tr.Touched, len(receipts))
	nr, err := c.Nodes[1].Client.Nack(ctx, receipts, 1000)
	check(t, "nack", err)
	equal(t, "nacked", nr.Nacked, len(receipts))
	equal(t, "stale", nr.Stale, 0)

	names := map[string]string{}
	for i, topic := range topics[:6] {
		name := fmt.Sprintf("s%d", i)
		names[name] = topic
		_, err := c.Nodes[i%3].Client.SetSchedule(ctx, name, api.ScheduleRequest{Topic: topic, EveryMs: 60000, Payload: api.TextBody("tick")})
		check(t, "put schedule "+name, err)
	}
	// Node 1's reads are its own: the schedules put through the others may
	// trail there until it has applied them.
	c.Nodes[1].Eventually(t, "every schedule on node 1", func() bool {
		all, err := c.Nodes[1].Client.Schedules(ctx, "", 10)
		return err == nil && len(all.Schedules) == len(names)
	})
	list, err := c.Nodes[1].Client.Schedules(ctx, "", 4)
	check(t, "list schedules", err)
	equal(t, "first page", len(list.Schedules), 4)
	equal(t, "first listed", list.Schedules[0].Name, "s0")
	equal(t, "next page", list.Next, "s3")
	for name, topic := range names {
		// Another node's reads are its own: they may trail the write.
		var got api.Schedule
		c.Nodes[2].Eventually(t, "schedule "+name+" on another node", func() bool {
			got, err = c.Nodes[2].Client.GetSchedule(ctx, name)
			return err == nil
		})
		equal(t, "topic of "+name, got.Topic, topic)
		g := model.GroupOf(topic, groups)
		sb := c.Nodes[2].Groups.Node(g)
		if _, err := sb.Schedule(ctx, name); err != nil {
			t.Fatalf("schedule %s is not in its topic's group %d: %v", name, g, err)
		}
	}
	// A schedule put again with a topic of another group moves there.
	var other string
	for _, topic := range topics {
		if model.GroupOf(topic, groups) != model.GroupOf(names["s0"], groups) {
			other = topic
		}
	}
	_, err = c.Nodes[0].Client.SetSchedule(ctx, "s0", api.ScheduleRequest{Topic: other, EveryMs: 60000, Payload: api.TextBody("tick")})
	check(t, "move s0 to another group's topic", err)
	for g := range groups {
		_, err := c.Nodes[0].Groups.Node(g).Schedule(ctx, "s0")
		if held := err == nil; held != (g == model.GroupOf(other, groups)) {
			t.Fatalf("after the move, group %d holds s0: %v (err %v)", g, held, err)
		}
	}

	check(t, "delete s1", c.Nodes[0].Client.DeleteSchedule(ctx, "s1"))
	if _, err := c.Nodes[0].Client.GetSchedule(ctx, "s1"); err == nil {
		t.Fatal("s1 still there after its delete")
	}
	a := doURL(t, http.MethodDelete, c.Nodes[0].URL+"/v1/schedules/nosuch", "", "Authorization", "Bearer tok")
	equal(t, "delete an unknown schedule", a.status, http.StatusNotFound)
}

// Removing a node through any member removes it from every group, those
// it leads included, and adding it back adds it to every group.
func TestGroupsMembership(t *testing.T) {
	const groups = 3
	c := startGroups(t, 3, groups, transporttest.Options{})
	ctx := t.Context()
	gone := c.Nodes[2]
	check(t, "remove n3", c.Nodes[0].Client.RemoveNode(ctx, gone.ID))
	for g := range groups {
		gone.Eventually(t, fmt.Sprintf("n3 to know it is removed from group %d", g), func() bool {
			return gone.Groups.Node(g).Removed() != nil
		})
	}
	// As in operation, the removed node is started again, then added
	// back.
	c.Stop(2)
	c.Restart(2)
	check(t, "add n3 back", c.Nodes[1].Client.AddNode(ctx, api.Node{ID: gone.ID, RaftAddr: gone.RaftAddr, HTTPAddr: gone.Addr}))
	for g := range groups {
		gone.Eventually(t, fmt.Sprintf("n3 to be a member of group %d again", g), func() bool {
			return gone.Groups.Node(g).Removed() == nil
		})
	}
}

// A request all of one group is answered at once by that group's leader,
// and through a follower as a part sent on to the leader: both answer it
// alike, to the byte (status, body, error message, headers), whether it
// settles, finds its receipts stale, or is refused.
func TestGroupsOneGroupAtItsLeader(t *testing.T) {
	const groups, g = 3, 1
	c := startGroups(t, 3, groups, transporttest.Options{
		Replication: func(cfg *replication.Config) { cfg.MaxTopics = 1 },
	})
	ctx := t.Context()
	c.Spread(t)
	leader := c.Leader(g)
	var follower *transporttest.Node
	for _, n := range c.Nodes {
		if n != leader {
			follower = n
			break
		}
	}
	var inG []string // topics of group g
	for i := 0; len(inG) < 2; i++ {
		if topic := fmt.Sprintf("orders.%d", i); model.GroupOf(topic, groups) == g {
			inG = append(inG, topic)
		}
	}
	topic := inG[0]
	receipts := func(n int) []string {
		t.Helper()
		var msgs []api.Message
		for range n {
			msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody("x")})
		}
		_, err := leader.Client.Enqueue(ctx, msgs)
		check(t, "enqueue", err)
		ds, err := leader.Client.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(n), WaitMs: 5000})
		check(t, "reserve", err)
		equal(t, "deliveries", len(ds), n)
		var rs []string
		for _, d := range ds {
			rs = append(rs, d.Receipt)
		}
		return rs
	}
	// alike sends path with atLeader's body to the leader and
	// viaFollower's to the follower, and wants the same answer.
	alike := func(path, atLeader, viaFollower string) answer {
		t.Helper()
		a := doURL(t, http.MethodPost, leader.URL+path, atLeader, "Content-Type", "application/json")
		b := doURL(t, http.MethodPost, follower.URL+path, viaFollower, "Content-Type", "application/json")
		if a.status != b.status || string(a.body) != string(b.body) {
			t.Fatalf("%s %s: at the leader %d %s; through a follower %d %s", path, atLeader, a.status, a.body, b.status, b.body)
		}
		for _, h := range []string{"Content-Type", "Content-Length", "Retry-After", transport.AppliedIndexHeader} {
			if a.header.Get(h) != b.header.Get(h) {
				t.Fatalf("%s %s: %s %q at the leader, %q through a follower", path, atLeader, h, a.header.Get(h), b.header.Get(h))
			}
		}
		return a
	}
	body := func(rs ...string) string {
		return fmt.Sprintf(`{"receipts":["%s"]}`, strings.Join(rs, `","`))
	}
	wantBody := func(what string, a answer, want string) {
		t.Helper()
		if got := strings.TrimSpace(string(a.body)); got != want {
			t.Fatalf("%s: %d %s; want %s", what, a.status, got, want)
		}
	}

	rs := receipts(2)
	wantBody("touch", alike("/v1/touch", body(rs[0]), body(rs[1])), `{"touched":1,"stale":0}`)
	wantBody("nack", alike("/v1/nack", `{"receipts":["`+rs[0]+`"],"delay_ms":0}`, `{"receipts":["`+rs[1]+`"],"delay_ms":0}`), `{"nacked":1,"stale":0}`)
	rs = receipts(2)
	wantBody("ack", alike("/v1/ack", body(rs[0]), body(rs[1])), `{"acked":1,"stale":0}`)
	// The receipts of acked messages settle nothing more.
	wantBody("ack again", alike("/v1/ack", body(rs...), body(rs...)), `{"acked":0,"stale":2}`)
	wantBody("touch after the ack", alike("/v1/touch", body(rs[0]), body(rs[0])), `{"touched":0,"stale":1}`)
	wantBody("nack after the ack", alike("/v1/nack", body(rs[1]), body(rs[1])), `{"nacked":0,"stale":1}`)
	rs = receipts(2)
	wantBody("bury", alike("/v1/bury", body(rs[0]), body(rs[1])), `{"buried":1,"stale":0}`)
	wantBody("ack after the bury", alike("/v1/ack", body(rs...), body(rs...)), `{"acked":0,"stale":2}`)

	// Refused before the request is split: the message names the field
	// and no group, for no group's part was done.
	nack := `{"receipts":["` + rs[0] + `"],"delay_ms":-1}`
	a := alike("/v1/nack", nack, nack)
	equal(t, "nack of a negative delay", a.status, http.StatusBadRequest)
	if e := a.errBody(t); !strings.HasPrefix(e.Message, "delay_ms: ") {
		t.Fatalf("nack of a negative delay: %q; want it to name delay_ms and no group", e.Message)
	}
	// Refused by the group's backend: a topic past --max-topics.
	enqueue := fmt.Sprintf(`{"messages":[{"topic":%q,"body":"x"}]}`, inG[1])
	a = alike("/v1/messages", enqueue, enqueue)
	equal(t, "enqueue past the topic limit", a.status, http.StatusBadRequest)
	if e := a.errBody(t); !strings.HasPrefix(e.Message, fmt.Sprintf("group %d: ", g)) || !strings.Contains(e.Message, "messages[0].topic") || strings.Contains(e.Message, "invalid argument") {
		t.Fatalf("enqueue past the topic limit: %q; want it to name group %d and the topic", e.Message, g)
	}
}

// Topics, keys and schedules named "." and ".." reach their own routes
// when a node passes a call on to another group's leader, as when a
// client sends them: as bare path steps they would be resolved away.
func TestGroupsForwardDotNames(t *testing.T) {
	const groups = 3
	c := startGroups(t, 3, groups, transporttest.Options{})
	ctx := t.Context()
	c.Spread(t)
	leader := c.Leader(model.GroupOf("..", groups))
	var via *transporttest.Node
	for _, n := range c.Nodes {
		if n != leader {
			via = n
			break
		}
	}
	_, err := via.Client.Enqueue(ctx, []api.Message{{Topic: "..", Key: ".", Payload: api.TextBody("x")}, {Topic: "..", Key: "..", Payload: api.TextBody("y")}})
	check(t, "enqueue", err)
	got, err := via.Client.CancelKey(ctx, "..", "..")
	check(t, "cancel key .. of topic ..", err)
	equal(t, "cancelled", got.State, api.StateCancelled)
	ds, err := via.Client.Reserve(ctx, "..", api.ReserveRequest{WaitMs: 5000})
	check(t, "reserve of topic ..", err)
	if len(ds) != 1 || ds[0].Key != "." {
		t.Fatalf("reserved of topic ..: %+v, want the message of key .", ds)
	}
}
