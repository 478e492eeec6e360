package bench

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	if s := summarize(newHist()); s != (Summary{}) {
		t.Fatalf("empty histogram: %+v", s)
	}
	h := newHist()
	for ms := 1; ms <= 1000; ms++ {
		recordMicros(h, int64(ms)*1000)
	}
	recordMicros(h, -5)               // clamped to 0
	recordMicros(h, 10*histMaxMicros) // clamped to the maximum
	s := summarize(h)
	if s.Count != 1002 {
		t.Fatalf("count %d, want 1002", s.Count)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.002+0.001 {
			t.Errorf("%s = %v, want %v (±0.2%%)", name, got, want)
		}
	}
	near("p50", s.P50, 500)
	near("p90", s.P90, 900)
	near("p99", s.P99, 990)
	near("p99.9", s.P999, 1000)
	near("max", s.Max, float64(histMaxMicros)/1000)
	if s.Min != 0 {
		t.Errorf("min %v, want 0", s.Min)
	}
	pts := cdf(h)
	if len(pts) < 10 {
		t.Fatalf("cdf has %d points", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Ms <= pts[i-1].Ms || pts[i].Fraction < pts[i-1].Fraction {
			t.Fatalf("cdf not increasing at %d: %+v then %+v", i, pts[i-1], pts[i])
		}
	}
	if last := pts[len(pts)-1]; last.Fraction != 1 {
		t.Fatalf("cdf ends at %+v, want fraction 1", last)
	}
}

// TestLedger accounts a synthetic record of sends and receives.
func TestLedger(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	due := make([]int64, 10)
	for i := range due {
		due[i] = t0.UnixMilli() + int64(i)*100
	}
	l := newLedger(due)
	l.Sent([]int{0, 1, 2, 3, 4, 5, 6, 7, 8}) // 9's enqueue failed
	l.Failed(1)
	at := func(seq int, late time.Duration) time.Time { return time.UnixMilli(due[seq]).Add(late) }
	l.Received(at(0, 2*time.Millisecond), []int{0})
	l.Received(at(1, 3*time.Millisecond), []int{1})
	l.Received(at(1, 30*time.Second), []int{1})        // duplicate
	l.Received(at(2, -time.Millisecond), []int{2})     // early
	l.Received(at(7, 4*time.Millisecond), []int{3, 4}) // late for 3 by 404 ms
	l.Received(at(7, 5*time.Millisecond), []int{5, 6, 7, -1, 99})
	o := l.Outcome()
	want := Outcome{Messages: 10, Sent: 9, Failed: 1, Received: 8, Lost: 1, Early: 1, EarliestMs: 1, Duplicates: 1, Foreign: 2}
	o.Lateness, o.CDF = Summary{}, nil
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("outcome\n got %+v\nwant %+v", o, want)
	}
	s := l.Outcome().Lateness
	if s.Count != 7 || s.Min != 2 || math.Abs(s.Max-404) > 1 {
		t.Fatalf("lateness %+v: want 7 values from 2 ms to 404 ms", s)
	}
	if n := l.ReceivedCount(); n != 8 {
		t.Fatalf("received count %d, want 8", n)
	}
}

func TestLongestGap(t *testing.T) {
	us := func(ms int64) int64 { return ms * 1000 }
	ts := []int64{us(50), us(10), us(20), us(300), us(310), us(2000)}
	gap, start := longestGap(ts, us(0), us(400))
	if gap != 250*time.Millisecond || start.UnixMicro() != us(50) {
		t.Fatalf("gap %v from %v, want 250ms from 50ms", gap, start.UnixMicro())
	}
	gap, start = longestGap(nil, us(0), us(400))
	if gap != 400*time.Millisecond || start.UnixMicro() != 0 {
		t.Fatalf("no deliveries: gap %v from %v, want the whole window", gap, start.UnixMicro())
	}
	gap, _ = longestGap([]int64{us(10)}, us(0), us(100))
	if gap != 90*time.Millisecond {
		t.Fatalf("tail gap %v, want 90ms", gap)
	}
}

func TestTimelineRates(t *testing.T) {
	start := time.Unix(1000, 0)
	tl := newTimeline(start)
	for i := range 100 { // one second: 10 events every 10 ms
		tl.Add(start.Add(time.Duration(i)*timelineBucket), 10)
	}
	tl.Add(start.Add(-time.Second), 5) // before the start: first bucket
	rs := tl.Rates(10)
	if len(rs) != 10 {
		t.Fatalf("%d points, want 10: %+v", len(rs), rs)
	}
	if rs[0].Rate != 1050 || rs[1].Rate != 1000 || rs[9].T != 1 {
		t.Fatalf("rates %+v", rs)
	}
	if newTimeline(start).Rates(10) != nil {
		t.Fatal("an empty timeline has rates")
	}
}

func TestBody(t *testing.T) {
	pad := padding(100)
	for _, seq := range []int{0, 7, 123456789} {
		b := encodeBody(seq, 100, pad)
		if len(b) != 100 {
			t.Fatalf("body of %d is %d bytes, want 100", seq, len(b))
		}
		if got := decodeSeq(b); got != seq {
			t.Fatalf("decodeSeq(%q) = %d, want %d", b, got, seq)
		}
	}
	if b := encodeBody(123456, 3, pad); b != "123456|" {
		t.Fatalf("short body %q", b)
	}
	if b := encodeBody(1, 300, pad); len(b) != 300 || decodeSeq(b) != 1 {
		t.Fatalf("body longer than the padding: %d bytes", len(b))
	}
	for _, bad := range []string{"", "|x", "abc|", "-1|", "12"} {
		if got := decodeSeq(bad); got != -1 {
			t.Fatalf("decodeSeq(%q) = %d, want -1", bad, got)
		}
	}
}

func TestSchedules(t *testing.T) {
	due := fireSchedule(30, 10, 5000)
	if due[0] != 5000 || due[9] != 5900 || due[10] != 6000 || due[29] != 7900 {
		t.Fatalf("fire schedule %v", due)
	}
	for _, n := range []int{1, 1000, 999_983 * 2} {
		stride := backlogStride(n)
		if n > 1000 {
			continue // the permutation check below is for small n
		}
		seen := make([]bool, n)
		for i := range n {
			d := backlogDue(i, n, 0, 23*time.Hour, stride)
			if d < 0 || d >= (23*time.Hour).Milliseconds() {
				t.Fatalf("n=%d: due %d out of range", n, d)
			}
			pos := int64(i) * int64(stride) % int64(n)
			if seen[pos] {
				t.Fatalf("n=%d: position %d twice", n, pos)
			}
			seen[pos] = true
		}
	}
	if backlogStride(1_000_003*3)%1_000_003 == 0 {
		t.Fatal("stride shares a factor with n")
	}
	if got := delaySeconds(10_001, 9_000); got != 2 {
		t.Fatalf("delaySeconds(1001 ms) = %d, want 2 (rounded up)", got)
	}
	if got := delaySeconds(10_000, 9_000); got != 1 {
		t.Fatalf("delaySeconds(1000 ms) = %d, want 1", got)
	}
	if got := delaySeconds(5, 9_000); got != 0 {
		t.Fatalf("delaySeconds(past) = %d, want 0", got)
	}
}
