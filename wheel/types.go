package wheel

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// Wheel geometry.
const (
	Slots       = 7200 // one-second slots: a two-hour horizon
	TickMs      = 1000 // width of a slot in milliseconds
	HorizonSecs = Slots
)

// SlotOf returns the slot index of an absolute second.
func SlotOf(second int64) int { return int(((second % Slots) + Slots) % Slots) }

// SecondOf returns the absolute second containing the millisecond ms.
func SecondOf(ms int64) int64 {
	if ms < 0 {
		return (ms - TickMs + 1) / TickMs
	}
	return ms / TickMs
}

// Errors the store returns; the API maps them to status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid argument")
)

// ID identifies a message: the Raft index of the command that created it and
// its Seq: the group of the store that applied it in the top byte, the
// message's position in its entry in the low 24 bits. IDs of one group
// therefore sort by creation, and those of group 0 are the position alone.
type ID struct {
	Index uint64
	Seq   uint32
}

// Group is the Raft group whose store created the message.
func (id ID) Group() int { return int(id.Seq >> groupShift) }

// groupShift places the group in an id's Seq, above its position.
const groupShift = 24

// Limits of the group and position an id's Seq holds.
const (
	// MaxGroups is how many groups a cluster may have: a group is a byte.
	MaxGroups = 1 << (32 - groupShift)
	// MaxEntryMessages is how many messages one log entry may enqueue:
	// their positions fill the low 24 bits of Seq, below the group.
	MaxEntryMessages = 1 << groupShift
)

// seqOf is the Seq of the message at position pos of an entry applied by
// the store of group.
func seqOf(group int, pos uint32) uint32 { return uint32(group)<<groupShift | pos }

// GroupOf returns the group of n that topic belongs to: its FNV-1a 64-bit
// hash modulo n. Every n below 2 puts every topic in group 0.
func GroupOf(topic string, n int) int {
	if n < 2 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(topic))
	return int(h.Sum64() % uint64(n))
}

// IDLen is the length of an ID's binary form.
const IDLen = 12

// String renders the ID as 24 lower-case hex digits.
func (id ID) String() string {
	b := id.Bytes()
	return hex.EncodeToString(b[:])
}

// Bytes is the big-endian binary form, which sorts like the ID.
func (id ID) Bytes() [IDLen]byte {
	var b [IDLen]byte
	binary.BigEndian.PutUint64(b[0:8], id.Index)
	binary.BigEndian.PutUint32(b[8:12], id.Seq)
	return b
}

// IsZero reports whether id is the zero ID, which no message has.
func (id ID) IsZero() bool { return id.Index == 0 && id.Seq == 0 }

// Less orders IDs by creation.
func (id ID) Less(o ID) bool {
	if id.Index != o.Index {
		return id.Index < o.Index
	}
	return id.Seq < o.Seq
}

// IDFromBytes decodes a binary ID.
func IDFromBytes(b []byte) (ID, error) {
	if len(b) != IDLen {
		return ID{}, fmt.Errorf("%w: id has %d bytes, want %d", ErrInvalid, len(b), IDLen)
	}
	return ID{Index: binary.BigEndian.Uint64(b[0:8]), Seq: binary.BigEndian.Uint32(b[8:12])}, nil
}

// ParseID parses the String form of an ID.
func ParseID(s string) (ID, error) {
	if len(s) != 2*IDLen {
		return ID{}, fmt.Errorf("%w: id %q must be %d hex digits", ErrInvalid, s, 2*IDLen)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return ID{}, fmt.Errorf("%w: id %q is not hex", ErrInvalid, s)
	}
	id, _ := IDFromBytes(b)
	if id.IsZero() {
		return ID{}, fmt.Errorf("%w: id %q is zero", ErrInvalid, s)
	}
	return id, nil
}

// Receipt names one hand-off of a message to a consumer.
type Receipt struct {
	ID    ID
	Nonce uint64
}

// String renders the receipt as "<id>.<nonce hex>".
func (r Receipt) String() string { return fmt.Sprintf("%s.%016x", r.ID, r.Nonce) }

// ParseReceipt parses the String form of a receipt.
func ParseReceipt(s string) (Receipt, error) {
	ids, ns, ok := strings.Cut(s, ".")
	if !ok || len(ns) != 16 {
		return Receipt{}, fmt.Errorf("%w: receipt %q is malformed", ErrInvalid, s)
	}
	id, err := ParseID(ids)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: receipt %q is malformed", ErrInvalid, s)
	}
	b, err := hex.DecodeString(ns)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: receipt %q is malformed", ErrInvalid, s)
	}
	return Receipt{ID: id, Nonce: binary.BigEndian.Uint64(b)}, nil
}

// State is where a message is in its life.
type State uint8

// Message states.
const (
	StateDelayed  State = 1
	StateReady    State = 2
	StateReserved State = 3
	StateDead     State = 4
)

// String names the state as the API does.
func (s State) String() string {
	switch s {
	case StateDelayed:
		return "delayed"
	case StateReady:
		return "ready"
	case StateReserved:
		return "reserved"
	case StateDead:
		return "dead"
	default:
		return fmt.Sprintf("state(%d)", uint8(s))
	}
}

// Message is a message with everything the wheel knows of it.
type Message struct {
	ID          ID
	Topic       string
	Key         string
	Body        []byte
	Headers     map[string]string
	Priority    int64
	DeliverAtMs int64 // when it is next due
	TTRMs       int64 // lease length once reserved
	MaxAttempts int32
	Attempts    int32 // deliveries so far
	EnqueuedMs  int64

	// Set while reserved.
	Receipt        uint64 // nonce of the current hand-off
	LeaseExpiresMs int64  // after this instant the receipt is stale
	LeaseMs        int64  // length of the current lease; Touch extends by it
}

// View is a message with its state, as inspection returns it.
type View struct {
	Message
	State State
}

// At is v as a reader sees it at nowMs: a delayed message whose due
// millisecond has come is ready, since it can be reserved from then on,
// though it stays in its slot until the slot expires.
func (v View) At(nowMs int64) View {
	if v.State == StateDelayed && v.DeliverAtMs <= nowMs {
		v.State = StateReady
	}
	return v
}

// Delivery is one hand-off of a message to a consumer.
type Delivery struct {
	Message
	Attempt int32 // 1 for the first delivery
	Receipt Receipt
}

// TopicCounts are the per-state message counts of a topic.
type TopicCounts struct {
	Topic    string
	Delayed  int64
	Ready    int64
	Reserved int64
	Dead     int64
}

// Enqueued is the result of one scheduled message.
type Enqueued struct {
	ID          ID
	DeliverAtMs int64
	Duplicate   bool
}

// SlotSummary describes one non-empty slot.
type SlotSummary struct {
	Slot     int
	Second   int64
	Messages int // live message and lease records
	Bytes    int64
}

// WheelInfo describes the wheel.
type WheelInfo struct {
	CursorMs         int64
	HorizonMs        int64
	OpenSegments     int
	OverflowMessages int64
	NonEmpty         []SlotSummary
}

// SlotRecord is one decoded record of a slot file.
type SlotRecord struct {
	Offset   int64
	Type     string
	Index    uint64
	ID       ID
	Topic    string
	DueMs    int64
	Attempts int32
	Bytes    int
	Live     bool
}

// SlotInfo describes one slot and, on request, its records.
type SlotInfo struct {
	SlotSummary
	File    string
	Records []SlotRecord
}

// Node is a cluster member's metadata, replicated through the log.
type Node struct {
	ID       string
	RaftAddr string
	HTTPAddr string
	// GRPCAddr is the member's gRPC API address; empty: unknown (it
	// serves none, or it was recorded before members recorded one).
	GRPCAddr string
}

// Errors of the serving layers, shared so that the HTTP API can map them to
// status codes without importing the Raft node.
var (
	// ErrUnavailable means there is no leader or the node is not caught up.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotLeader means the call must go to the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrOverloaded means back-pressure: try again later.
	ErrOverloaded = errors.New("overloaded")
	// ErrTooLarge means a body, batch or request is over its limit.
	ErrTooLarge = errors.New("too large")
)
