package wheel

import (
	"bufio"
	"flag"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Benchmarks on the real file system. For example:
//
//	go test ./wheel -run XXX -bench . -benchtime 3x
//	DELAYWHEEL_BACKLOG=1 go test ./wheel -run XXX -bench Backlog -benchtime 1x -backlog.n 1000000 -timeout 1h

var (
	benchBacklog  = flag.Bool("backlog", false, "run BenchmarkBacklog (also DELAYWHEEL_BACKLOG=1)")
	benchBacklogN = flag.Int("backlog.n", 10_000_000, "messages BenchmarkBacklog schedules")
)

const benchBatch = 1000 // messages per Apply

// benchBodies returns n random (incompressible) 100-byte bodies.
func benchBodies(rng *rand.Rand, n int) [][]byte {
	out := make([][]byte, n)
	buf := make([]byte, 100*n)
	rng.Read(buf)
	for i := range out {
		out[i] = buf[i*100 : (i+1)*100 : (i+1)*100]
	}
	return out
}

var benchMaxOpen = flag.Int("bench.maxopen", 0, "Options.MaxOpenSegments for BenchmarkSchedule (0: the default)")

// benchStore opens a store in a fresh directory and starts its wheel at
// the second of now.
func benchStore(b *testing.B, opts Options, now int64) (*Store, string) {
	b.Helper()
	dir := b.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Apply([]Entry{{Index: 1, Cmds: []command.Command{command.Expire{Before: now / TickMs}}}}); err != nil {
		b.Fatal(err)
	}
	return s, dir
}

// BenchmarkSchedule applies batches of 1,000 messages with 100-byte
// bodies and reports messages per second. The simulated clock moves 10 ms
// per batch (100,000 msgs/s). With sync=batch every Apply is durable
// (Options.SyncEveryBatch); with sync=second the store is synced once per
// simulated second (every 100 batches), as the Expire of each second does
// under Raft. Before timing, every slot file of the horizon is created.
func BenchmarkSchedule(b *testing.B) {
	for _, bc := range []struct {
		name string
		due  func(rng *rand.Rand, now int64) int64
	}{
		// Due in the next few seconds, as a steady load of short delays.
		{"near", func(rng *rand.Rand, now int64) int64 { return now + 1000 + rng.Int63n(3000) }},
		// Spread over the whole two-hour horizon: one file per second.
		{"horizon", func(rng *rand.Rand, now int64) int64 { return now + rng.Int63n(Slots*TickMs) }},
		// Beyond the horizon: Pebble overflow.
		{"overflow", func(rng *rand.Rand, now int64) int64 { return now + Slots*TickMs + rng.Int63n(22*3600_000) }},
	} {
		for _, syncEvery := range []bool{true, false} {
			name := bc.name + "/sync=batch"
			if !syncEvery {
				name = bc.name + "/sync=second"
			}
			b.Run(name, func(b *testing.B) {
				now := int64(1_700_000_000_000)
				s, _ := benchStore(b, Options{SyncEveryBatch: syncEvery, MaxOpenSegments: *benchMaxOpen}, now)
				rng := rand.New(rand.NewSource(1))
				bodies := benchBodies(rng, benchBatch)
				body := bodies[0]
				msgs := make([]command.NewMessage, benchBatch)
				idx := uint64(1)
				// Steady state: every slot file of the horizon exists already
				// (a file is created once per lap, when its second enters the
				// horizon).
				var warm []command.NewMessage
				for sec := int64(0); sec < Slots; sec++ {
					warm = append(warm, command.NewMessage{Topic: "bench", Body: body, DeliverAtMs: now + sec*TickMs})
				}
				idx++
				if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: warm}}}}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Sync(); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(benchBatch * 100)
				b.ResetTimer()
				start := time.Now()
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					now += 10
					for j := range msgs {
						msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j], DeliverAtMs: bc.due(rng, now)}
					}
					idx++
					if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: msgs}}}}); err != nil {
						b.Fatal(err)
					}
					if !syncEvery && (i%100 == 99 || i == b.N-1) {
						if _, err := s.Sync(); err != nil {
							b.Fatal(err)
						}
					}
				}
				el := time.Since(start)
				b.ReportMetric(float64(b.N*benchBatch)/el.Seconds(), "msgs/s")
				b.ReportMetric(float64(el.Microseconds())/float64(b.N)/1000, "ms/batch")
				b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*benchBatch)/1000, "cpu-µs/msg")
			})
		}
	}
}

// BenchmarkLoadSlot times loading one slot of 100,000 messages into a
// fresh loader: what the leader does for each second it is about to fire.
func BenchmarkLoadSlot(b *testing.B) {
	const n = 100_000
	now := int64(1_700_000_000_000)
	s, _ := benchStore(b, Options{}, now)
	rng := rand.New(rand.NewSource(1))
	bodies := benchBodies(rng, benchBatch)
	slot := now/TickMs + 5
	idx := uint64(1)
	for i := 0; i < n; i += benchBatch {
		msgs := make([]command.NewMessage, benchBatch)
		for j := range msgs {
			msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j], Priority: int64(rng.Intn(3)), DeliverAtMs: slot*TickMs + rng.Int63n(TickMs)}
		}
		idx++
		if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: msgs}}}}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := NewLoader()
		s.AttachLoader(l)
		got, err := s.LoadThrough(slot)
		if err != nil {
			b.Fatal(err)
		}
		if got != n || l.Len() != n {
			b.Fatalf("loaded %d, want %d", got, n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/slot")
}

// BenchmarkBacklog schedules a large backlog spread over 24 hours (most of
// it beyond the horizon, in overflow) and reports the resident memory and
// disk use per message. It is big: it runs only with -backlog or
// DELAYWHEEL_BACKLOG=1; -backlog.n sets its size.
func BenchmarkBacklog(b *testing.B) {
	if !*benchBacklog && os.Getenv("DELAYWHEEL_BACKLOG") != "1" {
		b.Skip("set DELAYWHEEL_BACKLOG=1 or -backlog to run")
	}
	n := *benchBacklogN
	for i := 0; i < b.N; i++ {
		now := int64(1_700_000_000_000)
		s, dir := benchStore(b, Options{}, now)
		rng := rand.New(rand.NewSource(int64(i)))
		bodies := benchBodies(rng, benchBatch)
		msgs := make([]command.NewMessage, benchBatch)
		idx := uint64(1)
		rssBefore := residentBytes(b)
		start := time.Now()
		for done := 0; done < n; done += benchBatch {
			m := min(benchBatch, n-done)
			for j := 0; j < m; j++ {
				rng.Read(bodies[j]) // fresh random bytes: nothing to compress
				msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j], DeliverAtMs: now + rng.Int63n(24*3600_000)}
			}
			idx++
			if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: msgs[:m]}}}}); err != nil {
				b.Fatal(err)
			}
			if idx%100 == 0 { // a checkpoint now and then, as under Raft
				if _, err := s.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := s.Sync(); err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		w, err := s.Wheel()
		if err != nil {
			b.Fatal(err)
		}
		rss := residentBytes(b)
		disk := dirBytes(b, dir)
		raw := float64(n) * 100
		b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
		b.ReportMetric(float64(rss)/float64(n), "rss-B/msg")
		b.ReportMetric(float64(rss-rssBefore)/float64(n), "rss-growth-B/msg")
		b.ReportMetric(float64(disk)/float64(n), "disk-B/msg")
		b.ReportMetric(float64(disk)/raw, "disk/raw")
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(w.OverflowMessages)/float64(n), "overflow-frac")
		b.Logf("%d messages in %v: rss %.1f MiB (before %.1f MiB), disk %.1f MiB, %d slot files, %d in overflow",
			n, el.Round(time.Millisecond), float64(rss)/(1<<20), float64(rssBefore)/(1<<20), float64(disk)/(1<<20), len(w.NonEmpty), w.OverflowMessages)
	}
}

// residentBytes is VmRSS of this process after a garbage collection.
func residentBytes(b *testing.B) int64 {
	runtime.GC()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkPromoteTick is one second of a long backlog: the wheel expires a
// second and promotes the next second beyond the horizon from the
// overflow, which holds 1,000 messages per second. The promoted keys of the
// earlier seconds are deleted but stay in the index as tombstones until a
// compaction drops them; the cost of a tick must not grow with them.
func BenchmarkPromoteTick(b *testing.B) {
	const perSec = 1000
	secs := b.N + 1
	now := int64(1_700_000_000_000)
	s, _ := benchStore(b, Options{}, now)
	start := now / TickMs
	rng := rand.New(rand.NewSource(1))
	bodies := benchBodies(rng, benchBatch)
	idx := uint64(1)
	msgs := make([]command.NewMessage, perSec)
	for sec := 0; sec < secs; sec++ {
		for j := range msgs {
			due := (start+Slots+int64(sec))*TickMs + int64(j)
			msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j%len(bodies)], DeliverAtMs: due}
		}
		idx++
		if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: msgs}}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sec := start + int64(i) + 1
		idx++
		res, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Expire{Before: sec}, command.Promote{Before: sec + Slots}}}})
		if err != nil {
			b.Fatal(err)
		}
		if n := res[0][1].Value.(int); n != perSec {
			b.Fatalf("tick %d promoted %d, want %d", i, n, perSec)
		}
	}
}

// BenchmarkFire is the leader's delivery path for one second of 1,000
// messages: it loads the slot, pops its messages at their due time,
// applies their Leases in entries of 100 items, then their Acks, and
// expires the second. The messages were enqueued without keys and the
// index was flushed, so their state is read through Pebble's tables.
func BenchmarkFire(b *testing.B) {
	const perSec, perEntry = 1000, 100
	now := int64(1_700_000_000_000)
	s, _ := benchStore(b, Options{}, now)
	start := now / TickMs
	rng := rand.New(rand.NewSource(1))
	bodies := benchBodies(rng, benchBatch)
	apply := benchApplier(b, s)
	msgs := make([]command.NewMessage, perSec)
	for sec := int64(1); sec <= int64(b.N); sec++ {
		for j := range msgs {
			msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j], DeliverAtMs: (start+sec)*TickMs + rng.Int63n(TickMs)}
		}
		apply(command.Schedule{NowMs: now, Messages: msgs})
	}
	if _, err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	l := NewLoader()
	s.AttachLoader(l)
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		sec := start + int64(i) + 1
		if _, err := s.LoadThrough(sec); err != nil {
			b.Fatal(err)
		}
		nowMs := (sec + 1) * TickMs
		due, _ := l.PopDue(nowMs - 1)
		if len(due) != perSec {
			b.Fatalf("second %d: %d due, want %d", sec, len(due), perSec)
		}
		benchLeaseAck(b, apply, l, due, nowMs, perEntry, rng)
		apply(command.Expire{Before: sec + 1})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*perSec)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N*perSec), "cpu-µs/msg")
}

// benchApplier returns a function that applies its commands to s as the
// next log entry and returns their results.
func benchApplier(b *testing.B, s *Store) func(cmds ...command.Command) []command.Result {
	idx := s.AppliedIndex()
	return func(cmds ...command.Command) []command.Result {
		b.Helper()
		idx++
		res, err := s.Apply([]Entry{{Index: idx, Cmds: cmds}})
		if err != nil {
			b.Fatal(err)
		}
		return res[0]
	}
}

// benchLeaseAck hands out msgs, popped from l at nowMs, as a leader does:
// it claims each, leases them in entries of perEntry items, then acks them
// in entries as large. Every message must be claimable and every ack done.
func benchLeaseAck(b *testing.B, apply func(cmds ...command.Command) []command.Result, l *Loader, msgs []model.Message, nowMs int64, perEntry int, rng *rand.Rand) {
	b.Helper()
	var receipts []model.Receipt
	for k := 0; k < len(msgs); k += perEntry {
		items := make([]command.LeaseItem, 0, perEntry)
		for _, m := range msgs[k:min(k+perEntry, len(msgs))] {
			if !l.Claim(m.ID) {
				b.Fatalf("message %s not claimable", m.ID)
			}
			it := command.LeaseItem{ID: m.ID, Nonce: rng.Uint64(), ExpiresMs: nowMs + 30_000, RedeliverMs: nowMs + 30_000}
			items = append(items, it)
			receipts = append(receipts, model.Receipt{ID: m.ID, Nonce: it.Nonce})
		}
		apply(command.Lease{NowMs: nowMs, Items: items})
	}
	for k := 0; k < len(receipts); k += perEntry {
		if c := apply(command.Ack{NowMs: nowMs + 1, Receipts: receipts[k:min(k+perEntry, len(receipts))]})[0].Value.(command.Counted); c.Done != min(perEntry, len(receipts)-k) {
			b.Fatalf("acked %+v", c)
		}
	}
}

// BenchmarkDrainReady is a consumer catching up on a topic's ready queue:
// 10,000 messages expire into it, then each round reads its head (Ready,
// as a reserve does) and leases what it read, 100 at a time, until it is
// empty. The leases delete the head's keys, so the reads pass over keys
// deleted since the index last compacted. It reports the time per read.
func BenchmarkDrainReady(b *testing.B) {
	const n, perRead = 10_000, 100
	now := int64(1_700_000_000_000)
	s, _ := benchStore(b, Options{}, now)
	bodies := benchBodies(rand.New(rand.NewSource(1)), benchBatch)
	start := now / TickMs
	idx := uint64(1)
	var reading time.Duration
	reads := 0
	for i := 0; i < b.N; i++ {
		sec := start + 1 + int64(i)
		for k := 0; k < n; k += benchBatch {
			msgs := make([]command.NewMessage, benchBatch)
			for j := range msgs {
				msgs[j] = command.NewMessage{Topic: "bench", Body: bodies[j], DeliverAtMs: sec*TickMs + int64(j)}
			}
			idx++
			if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: msgs}}}}); err != nil {
				b.Fatal(err)
			}
		}
		idx++
		if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Expire{Before: sec + 1}}}}); err != nil {
			b.Fatal(err)
		}
		nowMs := (sec + 1) * TickMs
		for left := n; left > 0; left -= perRead {
			t := time.Now()
			views, err := s.Ready("bench", perRead, nil)
			reading += time.Since(t)
			reads++
			if err != nil || len(views) != min(perRead, left) {
				b.Fatalf("read %d ready, %v; want %d", len(views), err, min(perRead, left))
			}
			items := make([]command.LeaseItem, len(views))
			for j, v := range views {
				items[j] = command.LeaseItem{ID: v.ID, Nonce: 1, ExpiresMs: nowMs + 3600_000, RedeliverMs: nowMs + 3600_000}
			}
			idx++
			if _, err := s.Apply([]Entry{{Index: idx, Cmds: []command.Command{command.Lease{NowMs: nowMs, Items: items}}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(reading.Microseconds())/float64(reads), "µs/read")
}

// BenchmarkScheduleOccurrences is one second of 10,000 schedules firing
// every second, phases spread over the second, as a leader's store sees
// it: 20 looks for due schedules (DueSchedules) each followed by its
// AdvanceSchedules entry, enqueuing occurrences 2 s ahead; then the slot
// of the second is loaded, its occurrences popped, leased and acked in
// entries of 100, and the second expired. A follower applies the same
// entries without the looks and the loader. It reports the time per
// occurrence, and the process's CPU time per occurrence, which counts the
// index's flushes and compactions in the background too.
func BenchmarkScheduleOccurrences(b *testing.B) {
	const n, looks, perEntry, aheadMs = 10_000, 20, 100, 2000
	now := int64(1_700_000_000_000)
	s, _ := benchStore(b, Options{}, now)
	body := benchBodies(rand.New(rand.NewSource(1)), 1)[0]
	apply := benchApplier(b, s)
	start := now/TickMs*TickMs + TickMs
	for i := range n {
		sp := command.ScheduleSpec{Name: "s" + strconv.Itoa(i), Topic: "bench", Body: body, EveryMs: 1000, StartAtMs: start + int64(i)*1000/n}
		if r := apply(command.SetSchedule{NowMs: now, Spec: sp}); r[0].Err != nil {
			b.Fatal(r[0].Err)
		}
	}
	l := NewLoader()
	s.AttachLoader(l)
	rng := rand.New(rand.NewSource(2))
	second := func(sec int64, timed bool) {
		for k := range looks {
			nowMs := sec*TickMs + int64(k)*TickMs/looks
			due, err := s.DueSchedules(nowMs+aheadMs, 5000)
			if err != nil {
				b.Fatal(err)
			}
			if len(due) > 0 {
				apply(command.AdvanceSchedules{NowMs: nowMs, Items: due})
			}
		}
		if _, err := s.LoadThrough(sec); err != nil {
			b.Fatal(err)
		}
		nowMs := (sec + 1) * TickMs
		msgs, _ := l.PopDue(nowMs - 1)
		if timed && len(msgs) != n {
			b.Fatalf("second %d: %d occurrences due, want %d", sec, len(msgs), n)
		}
		benchLeaseAck(b, apply, l, msgs, nowMs, perEntry, rng)
		apply(command.Expire{Before: sec + 1})
	}
	sec := now / TickMs
	for ; sec < start/TickMs+2; sec++ { // until the occurrences of every second are 2 s ahead
		second(sec, false)
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		second(sec, true)
		sec++
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/occurrence")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N*n), "cpu-µs/occurrence")
}
