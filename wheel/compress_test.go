package wheel

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// TestCompressIndex checks that CompressIndex reaches the index's files:
// compressible bodies beyond the horizon (which live in the index) take far
// less room with it than without.
func TestCompressIndex(t *testing.T) {
	size := func(compress bool) int64 {
		k := newStoreKit(t, Options{CompressIndex: compress})
		body := []byte(strings.Repeat("compressible body ", 64))
		for b := 0; b < 4; b++ {
			msgs := make([]command.NewMessage, 500)
			for i := range msgs {
				msgs[i] = command.NewMessage{Topic: "a", Body: body, DeliverAtMs: t0 + 3*86_400_000 + int64(b*1000+i)}
			}
			k.schedule(t0, msgs...)
		}
		if _, err := k.s.Checkpoint("/cp"); err != nil {
			t.Fatal(err)
		}
		names, err := k.fs.List("/cp/index")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, name := range names {
			if strings.HasSuffix(name, ".sst") {
				st, err := k.fs.Stat("/cp/index/" + name)
				if err != nil {
					t.Fatal(err)
				}
				n += st.Size()
			}
		}
		return n
	}
	plain, packed := size(false), size(true)
	if plain == 0 || packed*3 > plain {
		t.Fatalf("index tables: %d bytes uncompressed, %d compressed; want compression to save over two thirds", plain, packed)
	}
}

// TestIndexTablesCarryBloomFilters checks that the index's tables are
// written with the bloom filter point lookups rely on to skip tables.
func TestIndexTablesCarryBloomFilters(t *testing.T) {
	k := newStoreKit(t, Options{})
	msgs := make([]command.NewMessage, 200)
	for i := range msgs {
		msgs[i] = command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1000 + int64(i)}
	}
	k.schedule(t0, msgs...)
	if err := k.s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := k.s.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, lv := range levels {
		for _, tbl := range lv {
			tables++
			if got := tbl.Properties.FilterPolicyName; got != bloom.FilterPolicy(10).Name() {
				t.Errorf("table %s: filter policy %q, want %q", tbl.FileNum, got, bloom.FilterPolicy(10).Name())
			}
		}
	}
	if tables == 0 {
		t.Fatal("no table after a flush")
	}
}
