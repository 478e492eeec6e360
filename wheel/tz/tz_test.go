package tz

import (
	"errors"
	"testing"
	"time"
)

// The embedded database answers the zones' rules without the host's
// zoneinfo: Berlin's summer time starts on the last Sunday of March at
// 01:00 UTC, and the host's "Local" is refused.
func TestLoad(t *testing.T) {
	t.Setenv("ZONEINFO", t.TempDir()+"/none.zip")
	berlin, err := Load("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC).In(berlin)
	after := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC).In(berlin)
	if _, off := before.Zone(); off != 3600 {
		t.Fatalf("before the change: offset %d, want 3600", off)
	}
	if _, off := after.Zone(); off != 7200 {
		t.Fatalf("after the change: offset %d, want 7200", off)
	}
	for _, name := range []string{"", "UTC"} {
		if loc, err := Load(name); err != nil || loc != time.UTC {
			t.Fatalf("Load(%q) = %v, %v; want UTC", name, loc, err)
		}
	}
	for _, name := range []string{"Local", "Mars/Olympus", "../etc/passwd", "europe/berlin"} {
		if _, err := Load(name); !errors.Is(err, ErrUnknownZone) {
			t.Fatalf("Load(%q): %v, want ErrUnknownZone", name, err)
		}
	}
}
