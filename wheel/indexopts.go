package wheel

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
)

// The index's Pebble options: its comparer, levels and logging.

// LogWriteStalls makes el log each of Pebble's write stalls: a warning
// with the reason when writes stop, and its length when they resume. Every
// write to the database waits out a stall, so on the node every proposal
// does.
func LogWriteStalls(el *pebble.EventListener, log *slog.Logger) {
	var began atomic.Int64
	el.WriteStallBegin = func(info pebble.WriteStallBeginInfo) {
		began.Store(time.Now().UnixNano())
		log.Warn("pebble stopped writes", "reason", info.Reason)
	}
	el.WriteStallEnd = func() {
		log.Warn("pebble resumed writes", "stalled", time.Duration(time.Now().UnixNano()-began.Load()).Round(time.Millisecond))
	}
}

// pebbleLogger is Pebble's logger, writing to l: Pebble's informational
// lines at debug level, its errors as errors.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// indexComparer is Pebble's default order (bytewise, under the same name,
// so an index written without it opens with it) with a Split that makes
// every whole key its own prefix: the bloom filters already hold whole keys
// (a table's filter takes the whole key where Split is unset), and a
// Split lets an iterator's SeekPrefixGE consult them, so that one iterator
// can look up many absent keys (tx.keysHeld).
func indexComparer() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Split = func(a []byte) int { return len(a) }
	return &c
}

// indexLevels configures Pebble's levels for the index: no block
// compression unless asked for. Index values are compact binary that snappy
// barely shrinks, while compressing every block written by a flush or
// compaction, and decompressing it on every read, costs CPU on the path of
// every enqueue.
//
// Every table carries a bloom filter (10 bits a key, about 1% false
// positives). Most reads of the index are point lookups of keys written
// at random (a message's meta, by id) and every table's key range spans
// them, so without a filter a lookup reads a block of each level-0 table
// and each level; delivering a message looks up its meta more than once.
func indexLevels(compress bool) []pebble.LevelOptions {
	lv := make([]pebble.LevelOptions, 7)
	for i := range lv {
		lv[i].FilterPolicy = bloom.FilterPolicy(10)
		lv[i].FilterType = pebble.TableFilter
		lv[i].Compression = pebble.NoCompression
		if compress {
			lv[i].Compression = pebble.SnappyCompression
		}
	}
	return lv
}
