package bench

import (
	"strings"
	"testing"
	"time"
)

func TestSteady(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name string
		rss  []int64
		want bool
	}{
		{"too few readings", []int64{40 * mib, 40 * mib, 40 * mib, 40 * mib}, false},
		{"flat", []int64{40 * mib, 40 * mib, 40 * mib, 40 * mib, 40 * mib}, true},
		{"within 1 MiB", []int64{40 * mib, 40*mib + mib/2, 40 * mib, 41 * mib, 40 * mib}, true},
		{"still falling", []int64{90 * mib, 70 * mib, 50 * mib, 45 * mib, 44 * mib}, false},
		{"falling, then flat for the last five", []int64{90 * mib, 70 * mib, 50 * mib, 50 * mib, 50 * mib, 50 * mib, 50 * mib}, true},
		{"within 1% of a large value", []int64{2000 * mib, 2010 * mib, 2015 * mib, 2005 * mib, 2012 * mib}, true},
		{"beyond 1% of a large value", []int64{2000 * mib, 2030 * mib, 2015 * mib, 2005 * mib, 2012 * mib}, false},
		{"unknown reading", []int64{40 * mib, -1, 40 * mib, 40 * mib, 40 * mib}, false},
	} {
		if got := steady(c.rss); got != c.want {
			t.Errorf("%s: steady(%v) = %v, want %v", c.name, c.rss, got, c.want)
		}
	}
}

func TestPerMsg(t *testing.T) {
	if got := perMsg(3000, 1000); got != 3 {
		t.Fatalf("perMsg(3000, 1000) = %v", got)
	}
	if got := perMsg(-1, 1000); got != -1 {
		t.Fatalf("perMsg(unknown) = %v, want -1", got)
	}
	if got := perMsg(3000, 0); got != -1 {
		t.Fatalf("perMsg(no pending) = %v, want -1", got)
	}
}

// TestUnsettledNote: the note names the phase, the limit and when the
// reading was taken.
func TestUnsettledNote(t *testing.T) {
	got := unsettledNote("after the restart", 61400*time.Millisecond)
	for _, want := range []string{"after the restart", "within 60 s", "more than 1% and 1 MiB", "5 readings", "61 s after"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
}
