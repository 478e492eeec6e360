package wheel

import (
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestSmokeLifecycle(t *testing.T) {
	fs := vfs.NewStrictMem()
	s, err := Open("/db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_700_000_000_000)
	sec := SecondOf(now)
	res, err := s.Apply([]Entry{{Index: 1, Cmds: []command.Command{command.Expire{Before: sec}, command.Promote{Before: sec + HorizonSecs}}}})
	if err != nil || res[0][0].Err != nil {
		t.Fatal(err, res)
	}
	res, err = s.Apply([]Entry{{Index: 2, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: []command.NewMessage{
		{Topic: "a", Body: []byte("x"), DeliverAtMs: now + 1500, Key: "k"},
		{Topic: "a", Body: []byte("y"), DeliverAtMs: now + 3*3600*1000},
		{Topic: "a", Body: []byte("z"), DeliverAtMs: now + 1500, Key: "k"},
	}}}}})
	if err != nil {
		t.Fatal(err)
	}
	enq := res[0][0].Value.([]Enqueued)
	if len(enq) != 3 || !enq[2].Duplicate || enq[2].ID != enq[0].ID {
		t.Fatalf("enqueued %+v", enq)
	}
	v, err := s.Get(enq[1].ID)
	if err != nil || string(v.Body) != "y" || v.State != StateDelayed {
		t.Fatalf("get overflow: %+v %v", v, err)
	}
	l := NewLoader()
	s.AttachLoader(l)
	if _, err := s.LoadThrough(sec + 2); err != nil {
		t.Fatal(err)
	}
	due, _ := l.PopDue(now + 1500)
	if len(due) != 1 || string(due[0].Body) != "x" {
		t.Fatalf("due %+v", due)
	}
	res, err = s.Apply([]Entry{{Index: 3, Cmds: []command.Command{command.Lease{NowMs: now + 1500, Items: []command.LeaseItem{{ID: due[0].ID, Nonce: 7, ExpiresMs: now + 31500, RedeliverMs: now + 32500}}}}}})
	if err != nil || !res[0][0].Value.([]bool)[0] {
		t.Fatal(err, res)
	}
	tc := s.Topics()
	if tc[0].Reserved != 1 || tc[0].Delayed != 1 {
		t.Fatalf("counts %+v", tc)
	}
	res, err = s.Apply([]Entry{{Index: 4, Cmds: []command.Command{command.Ack{NowMs: now + 2000, Receipts: []model.Receipt{{ID: due[0].ID, Nonce: 7}}}}}})
	if err != nil || res[0][0].Value.(command.Counted).Done != 1 {
		t.Fatal(err, res)
	}
	if _, err := s.Get(due[0].ID); err == nil {
		t.Fatal("acked message still there")
	}
	// Crash: drop everything unsynced, reopen, replay.
	s.CrashForTest(fs)
	s2, err := Open("/db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied after crash %d", s2.AppliedIndex())
}
