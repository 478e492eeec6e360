package beanstalkd

import (
	"testing"
	"time"
)

// reserve-job reserves a ready, a delayed or a buried job by its id, which
// delete, release, touch and bury then settle as any reserved job; a job
// reserved already, by this connection or another, and an unknown id are
// NOT_FOUND.
func TestReserveJob(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c, other := dial(t, addr), dial(t, addr)
	ready := c.put(1024, 0, 10, "now")
	later := c.put(1024, 60, 10, "later")
	if f2, body := c.data("reserve-job "+ready, "RESERVED "+ready); body != "now" || len(f2) != 3 {
		t.Fatalf("reserve-job of a ready job: %v %q", f2, body)
	}
	c.do("reserve-job "+ready, "NOT_FOUND")     // this connection holds it
	other.do("reserve-job "+ready, "NOT_FOUND") // another does
	other.do("delete "+ready, "NOT_FOUND")
	_, st := c.data("stats-job "+ready, "OK")
	if y := yaml(st); y["state"] != "reserved" || y["reserves"] != "1" {
		t.Fatalf("stats-job: %q", st)
	}
	c.do("touch "+ready, "TOUCHED")
	c.do("delete "+ready, "DELETED")
	c.do("reserve-job "+ready, "NOT_FOUND") // deleted

	if _, body := other.data("reserve-job "+later, "RESERVED "+later); body != "later" {
		t.Fatalf("reserve-job of a delayed job: %q", body)
	}
	other.do("release "+later+" 1024 0", "RELEASED")
	other.data("reserve-job "+later, "RESERVED "+later)
	other.do("bury "+later+" 1024", "BURIED")
	other.data("reserve-job "+later, "RESERVED "+later) // buried
	_, st = other.data("stats-job "+later, "OK")
	if y := yaml(st); y["state"] != "reserved" || y["reserves"] != "1" {
		t.Fatalf("stats-job of a buried job reserved by id: %q", st)
	}
	f.advance(11 * time.Second) // its time-to-run is over: ready again
	c.data("reserve-job "+later, "RESERVED "+later)
	c.do("delete "+later, "DELETED")
	c.do("reserve-job 999999", "NOT_FOUND")
	c.do("reserve-with-timeout 0", "TIMED_OUT")
}
