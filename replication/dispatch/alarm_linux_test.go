package dispatch

import (
	"testing"
	"time"
)

func TestAlarmFiresNotBeforeItsInstant(t *testing.T) {
	a, err := newAlarm()
	if err != nil {
		t.Fatal(err)
	}
	// A later setting replaces an earlier one.
	if _, ok := a.at(time.Now().Add(time.Hour)); !ok {
		t.Fatal("cannot arm the alarm")
	}
	for range 3 {
		at := time.Now().Add(2 * time.Millisecond)
		c, ok := a.at(at)
		if !ok {
			t.Fatal("cannot arm the alarm")
		}
		<-c
		if now := time.Now(); now.Before(at) {
			t.Fatalf("fired %v before its instant", at.Sub(now))
		}
	}
	// An instant already past fires at once.
	c, _ := a.at(time.Now().Add(-time.Second))
	<-c

	a.close()
	if _, ok := a.at(time.Now()); ok {
		t.Fatal("a closed alarm can be armed")
	}
}
