package wheeltest_test

import (
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

var _ wheel.Clock = (*wheeltest.FakeClock)(nil)

// TestFakeClockFiresWhenDue checks that After fires once the clock reaches
// its time, not before, and never moves backwards.
func TestFakeClockFiresWhenDue(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	c := wheeltest.NewFakeClock(start)
	ch := c.After(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired before its time")
	default:
	}
	c.Advance(time.Millisecond)
	select {
	case got := <-ch:
		if want := start.Add(time.Second); !got.Equal(want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("did not fire at its time")
	}
	c.Set(start)
	if got, want := c.Now(), start.Add(time.Second); !got.Equal(want) {
		t.Fatalf("Set moved the clock back to %v, want %v", got, want)
	}
}
