package wheel

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Pebble key space. Every key starts with one prefix byte:
//
//	'd' topicID id                     → message: a topic's dead letters
//	'e' index                          → where an entry put its new messages (placed.go)
//	'f' maxSecond index                → marker: an entry's placements, by their last slot
//	'h' topic                          → the topic's webhook (webhook.go)
//	'k' topicID key                    → id: the pending message holding a key
//	'm' id                             → meta (state and location of a message), or a gone mark (placed.go)
//	'n' node id                        → node metadata
//	'o' due_ms id                      → type byte + message: overflow beyond the horizon
//	'q' name                           → a recurring schedule's calendar (schedule.go)
//	'r' topicID due_ms prio^ id        → message: a topic's ready queue
//	's' name                           → scalars: applied index, cursor, next topic id, overflow count, schedules
//	't' topic                          → topicID
//	'u' name                           → a recurring schedule (schedule.go)
//	'v' next_ms name                   → empty: the schedules by next occurrence
//	'w' hour_ms                        → count of overflow messages due in that hour (overflowhours.go)
//	'x' topicID                        → counts (delayed, ready, reserved, dead)
//	'y' second                         → segment length: the bytes of the slot file the state covers
//
// Integers in keys are big-endian so keys sort numerically; due_ms is never
// negative, and prio^ is the priority with its sign bit flipped and then
// inverted so that higher priorities sort first.
//
// The keys nearly every batch rewrites (scalars, counts, segment lengths)
// sort after the metas, whose ids only grow. A table flushed from a
// memtable spans from its lowest to its highest key; with these keys below
// the metas, every table would span the whole meta range and each
// compaction into a level would rewrite all of that level's meta tables.
const (
	pMeta     = 'm'
	pKey      = 'k'
	pOverflow = 'o'
	pReady    = 'r'
	pDead     = 'd'
	pSegLen   = 'y'
	pTopic    = 't'
	pCounts   = 'x'
	pNode     = 'n'
	pWebhook  = 'h'
	pScalar   = 's'
)

// indexFormat is the version of the index's layout (these keys, the meta
// encoding, the placements of placed.go), recorded under keyFormat
// when the index is created. A store opens an index of this format, or of
// upgradableFormat, which a read-write open records as this one.
const indexFormat = 8

// upgradableFormat is the one earlier format a store reads as indexFormat,
// unchanged. Format 8 adds to format 7 only that a message enqueued without
// a key beyond the horizon may have no meta key: its entry's placement
// (placed with overflowOff) implies its meta, and the entry's placedBy key
// is marked placedOverflow. In format 7 every message in the overflow has a
// meta key of its own and no placement, and every placedBy key is marked
// present, so a format 7 index is a format 8 index in which no message
// relies on an overflow placement: every read, Promote, Expire
// (dropPlacements and keepOverflowMetas see no placedOverflow mark) and
// ending of a message finds its meta key first, as format 8 does for a
// message with a key. A later format that breaks this invariant must
// migrate such an index or stop reading it.
const upgradableFormat = 7

var (
	keyApplied   = []byte("sapplied")
	keyCursor    = []byte("scursor")
	keyNextTopic = []byte("snexttopic")
	keyOverflow  = []byte("soverflow")
	keyFormat    = []byte("sformat")
)

func metaKey(id model.ID) []byte { return appendMetaKey(make([]byte, 0, 1+model.IDLen), id) }

// appendMetaKey appends the meta key of id to dst.
func appendMetaKey(dst []byte, id model.ID) []byte {
	b := id.Bytes()
	return append(append(dst, pMeta), b[:]...)
}

func keyIndexKey(tid uint32, key string) []byte {
	k := make([]byte, 0, 5+len(key))
	k = append(k, pKey)
	k = binary.BigEndian.AppendUint32(k, tid)
	return append(k, key...)
}

func overflowKey(dueMs int64, id model.ID) []byte {
	k := make([]byte, 0, 1+8+model.IDLen)
	k = append(k, pOverflow)
	k = binary.BigEndian.AppendUint64(k, uint64(dueMs))
	b := id.Bytes()
	return append(k, b[:]...)
}

func prioBits(p int64) uint64 { return ^(uint64(p) ^ (1 << 63)) }

func readyPrefix(tid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{pReady}, tid)
}

func readyKey(tid uint32, dueMs, prio int64, id model.ID) []byte {
	k := make([]byte, 0, 1+4+8+8+model.IDLen)
	k = append(k, readyPrefix(tid)...)
	k = binary.BigEndian.AppendUint64(k, uint64(dueMs))
	k = binary.BigEndian.AppendUint64(k, prioBits(prio))
	b := id.Bytes()
	return append(k, b[:]...)
}

func deadPrefix(tid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{pDead}, tid)
}

func deadKey(tid uint32, id model.ID) []byte {
	b := id.Bytes()
	return append(deadPrefix(tid), b[:]...)
}

func segLenKey(second int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pSegLen}, uint64(second))
}

func topicKey(name string) []byte { return append([]byte{pTopic}, name...) }

func countsKey(tid uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{pCounts}, tid)
}

func nodeKey(id string) []byte { return append([]byte{pNode}, id...) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// location says where a message's full record lives.
type location uint8

const (
	locSegment  location = 1
	locOverflow location = 2
	locReady    location = 3
	locDead     location = 4
)

// meta is the index entry of a message: its state and where its full record
// is.
type meta struct {
	State      State
	Loc        location
	TopicID    uint32
	DueMs      int64 // deliver_at_ms of the record at Loc
	Priority   int64
	Second     int64 // locSegment: the slot second
	Offset     int64 // locSegment: the record's offset in the file
	Receipt    uint64
	LeaseExpMs int64
	// Keyed says the message holds Key in the key index. Invariant: a
	// message that is not dead holds the key its record names, and its
	// meta says so, so that ending it frees the key reading neither its
	// record nor the key index. A dead message has freed its key (a newer
	// message may hold it since) and is never Keyed.
	Keyed bool
	Key   string
}

// The meta encoding: metaTag, state (its top bit: Keyed), location, then
// varints, then, when Keyed, the key. A meta is written to the index at
// least once and rewritten by every compaction that carries it, so it is
// kept small: a delayed message in a slot file takes about 17 bytes. The
// slot second is stored as its difference from the second of DueMs, which
// for a record in a slot file is 0. A keyed message's meta carries its key
// as well, which the key index also holds: the index spends the key's
// length again on a pending keyed message, and its ack reads two keys
// fewer (the record and the key index entry).
const (
	metaTag  = 0xC2
	keyedBit = 0x80
	// metaMaxLen bounds the encoding of a meta without a key; a key adds
	// its length and the length's varint.
	metaMaxLen = 3 + binary.MaxVarintLen32 + 6*binary.MaxVarintLen64
)

// appendTo appends the encoding of m to b.
func (m *meta) appendTo(b []byte) []byte {
	st := byte(m.State)
	if m.Keyed {
		st |= keyedBit
	}
	e := &command.Encoder{B: append(b, metaTag, st, byte(m.Loc))}
	e.Uvarint(uint64(m.TopicID))
	e.Varint(m.DueMs)
	e.Varint(m.Priority)
	e.Varint(m.Second - m.secondBase())
	e.Varint(m.Offset)
	e.Uvarint(m.Receipt)
	e.Varint(m.LeaseExpMs)
	if m.Keyed {
		e.Str(m.Key)
	}
	return e.B
}

// encode returns the encoding of m in a new slice.
func (m *meta) encode() []byte { return m.appendTo(make([]byte, 0, metaMaxLen+len(m.Key))) }

// secondBase is what Second is stored relative to: the second of DueMs
// for a record in a slot file, 0 elsewhere.
func (m *meta) secondBase() int64 {
	if m.Loc == locSegment {
		return SecondOf(m.DueMs)
	}
	return 0
}

func decodeMeta(b []byte) (meta, error) {
	d := &command.Decoder{B: b}
	if d.Byte() != metaTag {
		return meta{}, fmt.Errorf("%w: meta of %d bytes", command.ErrCorruptCommand, len(b))
	}
	st := d.Byte()
	m := meta{State: State(st &^ keyedBit), Keyed: st&keyedBit != 0, Loc: location(d.Byte())}
	tid := d.Uvarint()
	m.DueMs = d.Varint()
	m.Priority = d.Varint()
	m.Second = d.Varint() + m.secondBase()
	m.Offset = d.Varint()
	m.Receipt = d.Uvarint()
	m.LeaseExpMs = d.Varint()
	if m.Keyed {
		m.Key = d.Str()
	}
	switch {
	case d.Err != nil:
		return meta{}, fmt.Errorf("meta of %d bytes: %w", len(b), d.Err)
	case len(d.B) != 0 || tid > math.MaxUint32 || (m.Keyed && m.Key == ""):
		return meta{}, fmt.Errorf("%w: malformed meta of %d bytes", command.ErrCorruptCommand, len(b))
	}
	m.TopicID = uint32(tid)
	return m, nil
}

// counts are a topic's per-state message counts.
type counts struct{ Delayed, Ready, Reserved, Dead int64 }

func (c *counts) add(s State, d int64) {
	switch s {
	case StateDelayed:
		c.Delayed += d
	case StateReady:
		c.Ready += d
	case StateReserved:
		c.Reserved += d
	case StateDead:
		c.Dead += d
	}
}

func (c counts) encode() []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b[0:], uint64(c.Delayed))
	binary.BigEndian.PutUint64(b[8:], uint64(c.Ready))
	binary.BigEndian.PutUint64(b[16:], uint64(c.Reserved))
	binary.BigEndian.PutUint64(b[24:], uint64(c.Dead))
	return b
}

func decodeCounts(b []byte) counts {
	if len(b) != 32 {
		return counts{}
	}
	return counts{
		Delayed:  int64(binary.BigEndian.Uint64(b[0:])),
		Ready:    int64(binary.BigEndian.Uint64(b[8:])),
		Reserved: int64(binary.BigEndian.Uint64(b[16:])),
		Dead:     int64(binary.BigEndian.Uint64(b[24:])),
	}
}

func u64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func putU64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// MaxDueMs is the largest due time the wheel stores (year 2255 or so).
const MaxDueMs = math.MaxInt64 / 1024

// segLen is the recorded state of one slot file.
type segLen struct {
	Length int64 // bytes the index covers
	Live   int64 // live message and lease records
	Bytes  int64 // payload bytes of every message and lease record appended (a tombstone does not subtract)
}

func (l segLen) encode() []byte {
	b := putU64(uint64(l.Length))
	b = append(b, putU64(uint64(l.Live))...)
	return append(b, putU64(uint64(l.Bytes))...)
}

func decodeSegLen(b []byte) segLen {
	if len(b) != 24 {
		return segLen{}
	}
	return segLen{Length: int64(u64(b[0:8])), Live: int64(u64(b[8:16])), Bytes: int64(u64(b[16:24]))}
}

func encodeNode(n model.Member) []byte {
	e := &command.Encoder{}
	e.Str(n.ID)
	e.Str(n.RaftAddr)
	e.Str(n.HTTPAddr)
	if n.GRPCAddr != "" {
		e.Str(n.GRPCAddr)
	}
	return e.B
}

// decodeNode decodes a node's record. A record written before members
// recorded their gRPC address ends after the HTTP address: its GRPCAddr
// is empty (unknown).
func decodeNode(b []byte) (model.Member, error) {
	d := &command.Decoder{B: b}
	n := model.Member{ID: d.Str(), RaftAddr: d.Str(), HTTPAddr: d.Str()}
	if d.Err == nil && len(d.B) > 0 {
		n.GRPCAddr = d.Str()
	}
	return n, d.Err
}
