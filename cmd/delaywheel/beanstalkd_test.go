package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/beanstalkd"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// dialBeanstalk connects go-beanstalk to addr.
func dialBeanstalk(t *testing.T, addr string) *beanstalk.Conn {
	t.Helper()
	c, err := beanstalk.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// messageID is the id over HTTP of a job.
func messageID(job uint64) string { return beanstalkd.MessageID(job).String() }

// go-beanstalk against a node of two groups: put with a delay, reserve,
// release, bury, kick, touch and delete, each visible over HTTP as a
// message of topic = tube, and a message enqueued over HTTP reserved as
// a job.
func TestBeanstalkdGoClient(t *testing.T) {
	addrs := nettest.FreeAddrs(t, 3)
	httpAddr, bsAddr := addrs[0], addrs[1]
	startServer(t, httpAddr, "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-addr", addrs[2],
		"--groups", "2", "--beanstalkd-addr", bsAddr)
	ctx := t.Context()
	cl := client.New("http://" + httpAddr)
	nettest.WaitFor(t, 30*time.Second, "the node to be ready", func() bool { return cl.Readyz(ctx) == nil })

	c := dialBeanstalk(t, bsAddr)
	tube, ts := beanstalk.NewTube(c, "emails"), beanstalk.NewTubeSet(c, "emails")
	put := time.Now()
	id, err := tube.Put([]byte("hello"), 10, time.Second, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v, err := cl.Get(ctx, messageID(id))
	if err != nil || v.Topic != "emails" || v.DeliverAtMs < put.UnixMilli()+1000 {
		t.Fatalf("job %d over HTTP: %+v, %v", id, v, err)
	}
	later := beanstalk.NewTube(c, "later")
	lid, err := later.Put([]byte("in an hour"), 10, time.Hour, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, body, err := later.PeekDelayed(); err != nil || got != lid || string(body) != "in an hour" {
		t.Fatalf("peek-delayed: %d %q %v; want %d", got, body, err, lid)
	}
	if err := c.Delete(lid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := later.PeekDelayed(); !errors.Is(err, beanstalk.ErrNotFound) {
		t.Fatalf("peek-delayed after delete: %v", err)
	}
	kid, err := later.Put([]byte("kicked"), 10, time.Hour, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := later.Kick(10); err != nil || n != 1 {
		t.Fatalf("kick of a delayed job: %d %v", n, err)
	}
	if got, body, err := beanstalk.NewTubeSet(c, "later").Reserve(10 * time.Second); err != nil || got != kid || string(body) != "kicked" {
		t.Fatalf("reserve after the kick of a delayed job: %d %q %v; want %d", got, body, err, kid)
	}
	if err := c.Delete(kid); err != nil {
		t.Fatal(err)
	}
	got, body, err := ts.Reserve(10 * time.Second)
	if err != nil || got != id || string(body) != "hello" {
		t.Fatalf("reserve: %d %q %v; want %d", got, body, err, id)
	}
	if now := time.Now().UnixMilli(); now < v.DeliverAtMs {
		t.Fatalf("reserved at %d, before its due time %d", now, v.DeliverAtMs)
	}
	if v, _ := cl.Get(ctx, messageID(id)); v.State != api.StateReserved {
		t.Fatalf("a reserved job is %s over HTTP", v.State)
	}
	if err := c.Release(id, 10, 0); err != nil {
		t.Fatal(err)
	}
	if got, _, err = ts.Reserve(10 * time.Second); err != nil || got != id {
		t.Fatalf("reserve after release: %d %v", got, err)
	}
	if err := c.Bury(id, 10); err != nil {
		t.Fatal(err)
	}
	dead, err := cl.Dead(ctx, "emails", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != messageID(id) {
		t.Fatalf("dead letters after bury: %+v %v", dead, err)
	}
	if got, _, err := tube.PeekBuried(); err != nil || got != id {
		t.Fatalf("peek-buried: %d %v", got, err)
	}
	if n, err := tube.Kick(10); err != nil || n != 1 {
		t.Fatalf("kick: %d %v", n, err)
	}
	if got, _, err = ts.Reserve(10 * time.Second); err != nil || got != id {
		t.Fatalf("reserve after kick: %d %v", got, err)
	}
	if err := c.Touch(id); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(id); !errors.Is(err, beanstalk.ErrNotFound) {
		t.Fatalf("peek of a deleted job: %v", err)
	}

	// The reverse: enqueued over HTTP, reserved as a job.
	res, err := cl.Enqueue(ctx, []api.Message{{Topic: "emails", Payload: api.TextBody("from http")}})
	if err != nil {
		t.Fatal(err)
	}
	mid, _ := model.ParseID(res[0].ID)
	want, _ := beanstalkd.JobID(mid)
	if got, body, err := tube.PeekReady(); err != nil || got != want || string(body) != "from http" {
		t.Fatalf("peek-ready of a message due now: %d %q %v; want %d", got, body, err, want)
	}
	if got, body, err = ts.Reserve(10 * time.Second); err != nil || got != want || string(body) != "from http" {
		t.Fatalf("reserve of an HTTP message: %d %q %v; want %d", got, body, err, want)
	}
	if err := c.Delete(got); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats()
	if err != nil || st["max-job-size"] != strconv.Itoa(transport.DefaultLimits().MaxBodyBytes) || st["cmd-put"] != "3" {
		t.Fatalf("stats: %v %v", st, err)
	}
	if _, _, err := ts.Reserve(0); !errors.Is(err, beanstalk.ErrTimeout) {
		t.Fatalf("reserve of an empty tube: %v", err)
	}

	// reserve-job: a job due in an hour reserved by its id now, buried
	// and reserved by id again, deleted, then not found; and an id no job
	// has.
	rid, err := later.Put([]byte("by id"), 10, time.Hour, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := c.ReserveJob(rid); err != nil || string(body) != "by id" {
		t.Fatalf("reserve-job: %q %v", body, err)
	}
	if v, _ := cl.Get(ctx, messageID(rid)); v.State != api.StateReserved || v.Attempts != 1 {
		t.Fatalf("a job reserved by id is %s at attempt %d over HTTP", v.State, v.Attempts)
	}
	if err := c.Bury(rid, 10); err != nil {
		t.Fatal(err)
	}
	if body, err := c.ReserveJob(rid); err != nil || string(body) != "by id" {
		t.Fatalf("reserve-job of a buried job: %q %v", body, err)
	}
	if err := c.Delete(rid); err != nil {
		t.Fatal(err)
	}
	for _, job := range []uint64{rid, rid + 1} {
		if _, err := c.ReserveJob(job); !errors.Is(err, beanstalk.ErrNotFound) {
			t.Fatalf("reserve-job %d: %v; want not found", job, err)
		}
	}
}

// Through every node of a three-node cluster of two groups, followers
// among them: a job put through one node is reserved by id and released
// through a third, reserved, released, touched, buried and deleted
// through another, and kicked through the third.
func TestBeanstalkdThroughFollowers(t *testing.T) {
	const n = 3
	addrs := nettest.FreeAddrs(t, 3*n) // distinct
	raft, httpAddrs, bsAddrs := addrs[:n], addrs[n:2*n], addrs[2*n:]
	var members []string
	for i := range n {
		members = append(members, fmt.Sprintf("n%d=%s", i+1, raft[i]))
	}
	for i := range n {
		startServer(t, httpAddrs[i], "--node-id", fmt.Sprintf("n%d", i+1), "--data-dir", t.TempDir(), "--raft-addr", raft[i],
			"--initial-cluster", strings.Join(members, ","), "--groups", "2", "--beanstalkd-addr", bsAddrs[i])
	}
	ctx := t.Context()
	for _, addr := range httpAddrs {
		cl := client.New("http://" + addr)
		nettest.WaitFor(t, 30*time.Second, addr+" to be ready in every group", func() bool {
			v, err := cl.Cluster(ctx)
			return cl.Readyz(ctx) == nil && err == nil && len(v.Groups) == 2
		})
	}
	for _, tubeName := range []string{"alpha", "beta", "gamma"} {
		for i := range n {
			a, b, c := dialBeanstalk(t, bsAddrs[i]), dialBeanstalk(t, bsAddrs[(i+1)%n]), dialBeanstalk(t, bsAddrs[(i+2)%n])
			id, err := beanstalk.NewTube(a, tubeName).Put([]byte(tubeName), 1024, 0, 30*time.Second)
			if err != nil {
				t.Fatalf("put %s through n%d: %v", tubeName, i+1, err)
			}
			if body, err := c.ReserveJob(id); err != nil || string(body) != tubeName {
				t.Fatalf("reserve-job through n%d: %q %v", (i+2)%n+1, body, err)
			}
			if err := c.Release(id, 1024, 0); err != nil {
				t.Fatalf("release of a job reserved by id through n%d: %v", (i+2)%n+1, err)
			}
			ts := beanstalk.NewTubeSet(b, "default", tubeName)
			if got, _, err := ts.Reserve(10 * time.Second); err != nil || got != id {
				t.Fatalf("reserve %s through n%d: %d %v; want %d", tubeName, (i+1)%n+1, got, err, id)
			}
			if err := b.Touch(id); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(id, 1024, 0); err != nil {
				t.Fatal(err)
			}
			if err := c.KickJob(id); !errors.Is(err, beanstalk.ErrNotFound) {
				t.Fatalf("kick-job of a ready job: %v", err)
			}
			if got, _, err := ts.Reserve(10 * time.Second); err != nil || got != id {
				t.Fatalf("reserve after release: %d %v", got, err)
			}
			if err := b.Bury(id, 1024); err != nil {
				t.Fatalf("bury through n%d: %v", (i+1)%n+1, err)
			}
			// A follower reads its own state: wait until c sees the job buried.
			nettest.WaitFor(t, nettest.Patience, "the bury to reach n"+fmt.Sprint((i+2)%n+1), func() bool {
				return c.KickJob(id) == nil
			})
			if got, _, err := ts.Reserve(10 * time.Second); err != nil || got != id {
				t.Fatalf("reserve after kick: %d %v", got, err)
			}
			if err := b.Delete(id); err != nil {
				t.Fatalf("delete through n%d: %v", (i+1)%n+1, err)
			}
			if _, err := c.Peek(id); !errors.Is(err, beanstalk.ErrNotFound) {
				// A follower reads its own state: wait until it applied the delete.
				nettest.WaitFor(t, nettest.Patience, "the delete to reach every node", func() bool {
					_, err := c.Peek(id)
					return errors.Is(err, beanstalk.ErrNotFound)
				})
			}
		}
	}
}
