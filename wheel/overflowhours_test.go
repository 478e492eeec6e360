package wheel

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestOverflowHistogram(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("/db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	const h = OverflowHourMs
	const day = 24 * h
	now := int64(1_700_000_000_000) - int64(1_700_000_000_000)%day // on a day
	sec := SecondOf(now)
	apply := func(index uint64, cmds ...command.Command) []command.Result {
		t.Helper()
		res, err := s.Apply([]Entry{{Index: index, Cmds: cmds}})
		if err != nil || res[0][0].Err != nil {
			t.Fatal(err, res)
		}
		return res[0]
	}
	apply(1, command.Expire{Before: sec}, command.Promote{Before: sec + HorizonSecs})
	var msgs []command.NewMessage
	for _, due := range []int64{now + 3*h, now + 3*h + 10, now + 4*h + 5, now + 30*h, now + 1000} {
		msgs = append(msgs, command.NewMessage{Topic: "a", Body: []byte("x"), DeliverAtMs: due})
	}
	enq := apply(2, command.Schedule{NowMs: now, Messages: msgs})[0].Value.([]Enqueued)
	want := func(bucketMs int64, limit int, w OverflowHistogram) {
		t.Helper()
		got, err := s.OverflowHistogram(bucketMs, limit)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Fatalf("histogram(%d, %d) = %+v, %v; want %+v", bucketMs, limit, got, err, w)
		}
	}
	want(h, 10, OverflowHistogram{BucketMs: h, Total: 4, Buckets: []OverflowBucket{{now + 3*h, 2}, {now + 4*h, 1}, {now + 30*h, 1}}})
	want(h, 2, OverflowHistogram{BucketMs: h, Total: 4, Buckets: []OverflowBucket{{now + 3*h, 2}, {now + 4*h, 1}}, Beyond: 1})
	want(day, 10, OverflowHistogram{BucketMs: day, Total: 4, Buckets: []OverflowBucket{{now, 3}, {now + day, 1}}})

	// A cancel and a promotion take their messages out of their hours.
	apply(3, command.Cancel{ID: enq[1].ID})
	cur := SecondOf(now + 4*h)
	apply(4, command.Expire{Before: cur}, command.Promote{Before: cur + HorizonSecs})
	want(h, 10, OverflowHistogram{BucketMs: h, Total: 1, Buckets: []OverflowBucket{{now + 30*h, 1}}})

	for _, bad := range []int64{0, -h, h / 2, h + 1} {
		if _, err := s.OverflowHistogram(bad, 1); !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("bucket %d: %v, want ErrInvalid", bad, err)
		}
	}

	// The counts are part of the index: a reopened store has them as they were.
	var before, after []byte
	dump := func() []byte {
		var b bytes.Buffer
		if err := s.Dump(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	before = dump()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open("/db", Options{FS: fs}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after = dump()
	if string(before) != string(after) {
		t.Fatalf("dump after reopening:\n%s\nwant:\n%s", after, before)
	}
	want(h, 10, OverflowHistogram{BucketMs: h, Total: 1, Buckets: []OverflowBucket{{now + 30*h, 1}}})
}
