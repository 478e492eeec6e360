package wheel

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// TestIndexFormat checks that a new index records the format this version
// reads, and that a store refuses, read-write or read-only, an index that
// records another format (than indexFormat or upgradableFormat) or none,
// with an error naming the format found and the ones expected.
func TestIndexFormat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(b *pebble.DB) error
		found string
	}{
		{"later", func(db *pebble.DB) error { return db.Set(keyFormat, putU64(indexFormat+1), pebble.NoSync) }, fmt.Sprintf("format %d", indexFormat+1)},
		{"earlier", func(db *pebble.DB) error { return db.Set(keyFormat, putU64(upgradableFormat-1), pebble.NoSync) }, fmt.Sprintf("format %d", upgradableFormat-1)},
		{"none", func(db *pebble.DB) error { return db.Delete(keyFormat, pebble.NoSync) }, "no format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newStoreKit(t, Options{})
			k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500})
			if v, err := k.s.get(keyFormat); err != nil || u64(v) != indexFormat {
				t.Fatalf("format key %v, %v; want %d recorded", v, err, indexFormat)
			}
			if err := tc.set(k.s.db); err != nil {
				t.Fatal(err)
			}
			if err := k.s.Close(); err != nil {
				t.Fatal(err)
			}
			k.s = nil
			want := fmt.Sprintf("formats %d and %d only", upgradableFormat, indexFormat)
			for _, ro := range []bool{false, true} {
				opts := k.opts
				opts.ReadOnly = ro
				s, err := Open(k.dir, opts)
				if err == nil {
					s.Close()
				}
				if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.found) || !strings.Contains(err.Error(), want) {
					t.Fatalf("read-only %v: open: %v; want ErrFormat naming %q and %q", ro, err, tc.found, want)
				}
			}
		})
	}
}
