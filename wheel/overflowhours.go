package wheel

import (
	"bufio"
	"encoding/binary"
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// The overflow by hour: how many overflow messages are due in each hour,
// kept in the index under 'w' hourStartMs → count.
//
// A histogram of the overflow must stay cheap with millions of messages
// beyond the horizon, so it is not computed by scanning the overflow on
// each read: a scan reads every message's bytes. Neither is it sampled,
// which would mislead just where the backlog is dense. Instead every batch
// that adds to or takes from the overflow adjusts the count of the hour the
// message is due in, from the message's due ms alone, so the counts are
// replicated state like the overflow itself (Dump lists them). A read
// scans at most one key per hour that holds messages: at most 87,600 for a
// ten-year horizon, usually a few hundred.

const pOverflowHour = 'w'

// OverflowHourMs is the granularity of the overflow counts: one hour.
const OverflowHourMs = 3_600_000

func overflowHourKey(hourMs int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pOverflowHour}, uint64(hourMs))
}

func hourOf(dueMs int64) int64 { return dueMs - dueMs%OverflowHourMs }

// overflowAdd records that d messages due at dueMs entered (d > 0) or left
// (d < 0) the overflow.
func (t *tx) overflowAdd(dueMs int64, d int64) {
	t.overDel += d
	if t.overHours == nil {
		t.overHours = map[int64]int64{}
	}
	t.overHours[hourOf(dueMs)] += d
}

// commitOverflowHours writes the batch's changes to the hour counts.
func (t *tx) commitOverflowHours() {
	for h, d := range t.overHours {
		if d == 0 {
			continue
		}
		k := overflowHourKey(h)
		n := int64(u64(t.get(k))) + d
		if n < 0 {
			t.fail(fmt.Errorf("overflow hour %d: %w: count %d", h, ErrInconsistent, n))
			return
		}
		if n == 0 {
			t.del(k)
		} else {
			t.set(k, putU64(uint64(n)))
		}
	}
}

// OverflowBucket counts the overflow messages due in [StartMs, StartMs+width).
type OverflowBucket struct {
	StartMs  int64
	Messages int64
}

// OverflowHistogram is the overflow grouped into buckets of a width.
type OverflowHistogram struct {
	BucketMs int64
	Total    int64            // every overflow message
	Buckets  []OverflowBucket // non-empty buckets, by start, at most the limit asked for
	Beyond   int64            // messages in buckets past the last one returned
}

// OverflowHistogram groups the overflow into buckets of bucketMs (a
// positive multiple of OverflowHourMs, buckets aligned on multiples of it
// since the epoch) and returns the first limit non-empty ones.
func (s *Store) OverflowHistogram(bucketMs int64, limit int) (OverflowHistogram, error) {
	if bucketMs <= 0 || bucketMs%OverflowHourMs != 0 || limit < 1 {
		return OverflowHistogram{}, fmt.Errorf("%w: bucket %d ms (a positive multiple of %d), limit %d (at least 1)",
			model.ErrInvalid, bucketMs, OverflowHourMs, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return OverflowHistogram{}, err
	}
	h := OverflowHistogram{BucketMs: bucketMs, Total: s.overflow}
	err := s.scan([]byte{pOverflowHour}, func(k, v []byte) error {
		start, n := int64(u64(k[1:])), int64(u64(v))
		start -= start % bucketMs
		switch last := len(h.Buckets) - 1; {
		case last >= 0 && h.Buckets[last].StartMs == start:
			h.Buckets[last].Messages += n
		case len(h.Buckets) < limit:
			h.Buckets = append(h.Buckets, OverflowBucket{StartMs: start, Messages: n})
		default:
			h.Beyond += n
		}
		return nil
	})
	return h, err
}

// dumpOverflowHours writes the hour counts for Dump. s.mu is held.
func (s *Store) dumpOverflowHours(bw *bufio.Writer) error {
	return s.scan([]byte{pOverflowHour}, func(k, v []byte) error {
		_, err := fmt.Fprintf(bw, "overflow-hour %d %d\n", u64(k[1:]), u64(v))
		return err
	})
}
