package model

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"
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

// SeqOf is the Seq of the message at position pos of an entry applied by
// the store of group.
func SeqOf(group int, pos uint32) uint32 { return uint32(group)<<groupShift | pos }

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
	var b [IDLen]byte // decoded in place: an ack parses a hundred of these
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("%w: id %q is not hex", ErrInvalid, s)
	}
	id, _ := IDFromBytes(b[:])
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
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(ns)); err != nil {
		return Receipt{}, fmt.Errorf("%w: receipt %q is malformed", ErrInvalid, s)
	}
	return Receipt{ID: id, Nonce: binary.BigEndian.Uint64(b[:])}, nil
}
