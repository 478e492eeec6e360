package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// CommandKind tags a command in its encoding.
type CommandKind uint8

// Command kinds. The values are part of the log format: never reuse one.
const (
	KindSchedule   CommandKind = 1
	KindCancel     CommandKind = 2
	KindReschedule CommandKind = 3
	KindLease      CommandKind = 4
	KindAck        CommandKind = 5
	KindNack       CommandKind = 6
	KindTouch      CommandKind = 7
	KindExpire     CommandKind = 8
	KindPromote    CommandKind = 9
	KindRedrive    CommandKind = 10
	KindSetNode    CommandKind = 11
	KindRemoveNode CommandKind = 12
	KindBury       CommandKind = 13
	// 14 is taken.
	KindSetWebhook    CommandKind = 15
	KindDeleteWebhook CommandKind = 16

	KindSetSchedule      CommandKind = 17
	KindDeleteSchedule   CommandKind = 18
	KindAdvanceSchedules CommandKind = 19
	// KindSetNodeGRPC is a SetNode whose node has a gRPC address: the
	// fields of KindSetNode and then that address. A SetNode without one
	// keeps KindSetNode, so that its entry reads as it always did.
	KindSetNodeGRPC CommandKind = 20
)

// Command is one change to the store. Commands are pure data: applying one
// depends only on the store's state and the command, never on the clock.
type Command interface {
	Kind() CommandKind
}

// NewMessage is a message to schedule. DeliverAtMs is absolute: the leader
// turns a delay into an instant before proposing.
type NewMessage struct {
	Topic       string
	Key         string
	Body        []byte
	Headers     map[string]string
	Priority    int64
	DeliverAtMs int64
	TTRMs       int64
	MaxAttempts int32
}

// Schedule adds messages. IDs are (log index, position).
type Schedule struct {
	NowMs    int64
	Messages []NewMessage
}

// Cancel removes a delayed or ready message, by ID or, when Topic is set, by key.
type Cancel struct {
	ID    model.ID
	Topic string
	Key   string
}

// Reschedule moves a delayed or ready message to a new instant.
type Reschedule struct {
	ID          model.ID
	DeliverAtMs int64
}

// LeaseItem is one hand-off the leader made.
type LeaseItem struct {
	ID          model.ID
	Nonce       uint64
	ExpiresMs   int64 // the receipt is stale after this
	RedeliverMs int64 // when the message comes back unless acked (≥ ExpiresMs)
}

// Lease records hand-offs: each message becomes reserved, and its
// redelivery is written into the wheel at RedeliverMs.
type Lease struct {
	NowMs int64
	Items []LeaseItem
}

// Ack finishes reserved messages.
type Ack struct {
	NowMs    int64
	Receipts []model.Receipt
}

// Nack returns reserved messages to delayed, due at NowMs+DelayMs.
type Nack struct {
	NowMs    int64
	DelayMs  int64
	Receipts []model.Receipt
}

// Touch extends leases by their time-to-run from NowMs.
type Touch struct {
	NowMs    int64
	Receipts []model.Receipt
}

// Bury moves reserved messages whose last allowed lease ended before NowMs
// to their topics' dead letters, without waiting for their slot to
// expire. A receipt that no longer holds the message (acked, nacked,
// touched past NowMs, or with attempts left) is counted stale and changes
// nothing.
type Bury struct {
	NowMs    int64
	Receipts []model.Receipt
}

// Expire fires every slot whose second is before Before: their remaining
// messages move to ready (or dead), and the files are deleted. The cursor
// moves to Before.
type Expire struct {
	Before int64 // absolute second
}

// Promote moves overflow messages due before the second Before into the
// wheel (or straight to ready when already due).
type Promote struct {
	Before int64 // absolute second
}

// Redrive moves dead messages of a topic back to ready with attempts reset.
// No IDs means all of them.
type Redrive struct {
	NowMs int64
	Topic string
	IDs   []model.ID
}

// SetNode records a node's metadata.
type SetNode struct{ Node model.Member }

// RemoveNode forgets a node's metadata.
type RemoveNode struct{ ID string }

// Kind implements Command.
func (Schedule) Kind() CommandKind   { return KindSchedule }
func (Cancel) Kind() CommandKind     { return KindCancel }
func (Reschedule) Kind() CommandKind { return KindReschedule }
func (Lease) Kind() CommandKind      { return KindLease }
func (Ack) Kind() CommandKind        { return KindAck }
func (Nack) Kind() CommandKind       { return KindNack }
func (Touch) Kind() CommandKind      { return KindTouch }
func (Expire) Kind() CommandKind     { return KindExpire }
func (Promote) Kind() CommandKind    { return KindPromote }
func (Redrive) Kind() CommandKind    { return KindRedrive }
func (c SetNode) Kind() CommandKind {
	if c.Node.GRPCAddr != "" {
		return KindSetNodeGRPC
	}
	return KindSetNode
}
func (RemoveNode) Kind() CommandKind { return KindRemoveNode }
func (Bury) Kind() CommandKind       { return KindBury }

// Result is what applying one command produced: a value (for Schedule,
// []Enqueued; for Cancel, ID; for Reschedule, int64; for Lease, []bool
// saying which items took effect; for Ack/Nack/Touch, Counted; for Redrive,
// int; for Promote, int) or an error.
type Result struct {
	Value any
	Err   error
}

// Counted is the result of Ack, Nack and Touch.
type Counted struct {
	Done  int
	Stale int
}

// entryVersion prefixes every encoded log entry.
const entryVersion = 1

// ErrCorruptCommand means a log entry could not be decoded.
var ErrCorruptCommand = errors.New("corrupt command")

// encodedSize estimates the encoding of cmds, so that a large Schedule is
// encoded into one allocation.
func encodedSize(cmds []Command) int {
	n := 256
	for _, c := range cmds {
		if s, ok := c.(Schedule); ok {
			for i := range s.Messages {
				m := &s.Messages[i]
				n += 48 + len(m.Topic) + len(m.Key) + len(m.Body)
				for k, v := range m.Headers {
					n += 4 + len(k) + len(v)
				}
			}
		}
	}
	return n
}

// EncodeCommands encodes a list of commands as one log entry.
func EncodeCommands(cmds []Command) []byte {
	e := &encoder{b: make([]byte, 0, encodedSize(cmds))}
	e.b = append(e.b, entryVersion)
	e.uvarint(uint64(len(cmds)))
	for _, c := range cmds {
		e.b = append(e.b, byte(c.Kind()))
		switch c := c.(type) {
		case Schedule:
			e.varint(c.NowMs)
			e.uvarint(uint64(len(c.Messages)))
			for i := range c.Messages {
				m := &c.Messages[i]
				e.message(m.Topic, m.Key, m.Body, m.Headers, m.Priority, m.DeliverAtMs, m.TTRMs, m.MaxAttempts)
			}
		case Cancel:
			e.id(c.ID)
			e.str(c.Topic)
			e.str(c.Key)
		case Reschedule:
			e.id(c.ID)
			e.varint(c.DeliverAtMs)
		case Lease:
			e.varint(c.NowMs)
			e.uvarint(uint64(len(c.Items)))
			for _, it := range c.Items {
				e.id(it.ID)
				e.u64(it.Nonce)
				e.varint(it.ExpiresMs)
				e.varint(it.RedeliverMs)
			}
		case Ack:
			e.varint(c.NowMs)
			e.receipts(c.Receipts)
		case Nack:
			e.varint(c.NowMs)
			e.varint(c.DelayMs)
			e.receipts(c.Receipts)
		case Touch:
			e.varint(c.NowMs)
			e.receipts(c.Receipts)
		case Bury:
			e.varint(c.NowMs)
			e.receipts(c.Receipts)
		case Expire:
			e.varint(c.Before)
		case Promote:
			e.varint(c.Before)
		case Redrive:
			e.varint(c.NowMs)
			e.str(c.Topic)
			e.uvarint(uint64(len(c.IDs)))
			for _, id := range c.IDs {
				e.id(id)
			}
		case SetNode:
			e.str(c.Node.ID)
			e.str(c.Node.RaftAddr)
			e.str(c.Node.HTTPAddr)
			if c.Node.GRPCAddr != "" {
				e.str(c.Node.GRPCAddr)
			}
		case RemoveNode:
			e.str(c.ID)
		case SetWebhook:
			e.webhook(c.Webhook)
		case DeleteWebhook:
			e.str(c.Topic)
		case SetSchedule:
			e.varint(c.NowMs)
			e.scheduleSpec(&c.Spec)
		case DeleteSchedule:
			e.str(c.Name)
		case AdvanceSchedules:
			e.varint(c.NowMs)
			e.varint(c.SinceMs)
			e.advanceItems(c.Items)
		default:
			panic(fmt.Sprintf("wheel: encode unknown command %T", c))
		}
	}
	return e.b
}

// DecodeCommands decodes a log entry written by EncodeCommands. A
// Schedule's message bodies alias b: b must not change while the commands
// are in use.
func DecodeCommands(b []byte) ([]Command, error) {
	d := &decoder{b: b}
	if v := d.byte(); d.err == nil && v != entryVersion {
		return nil, fmt.Errorf("%w: entry version %d", ErrCorruptCommand, v)
	}
	n := d.count(1)
	cmds := make([]Command, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		switch k := CommandKind(d.byte()); k {
		case KindSchedule:
			c := Schedule{NowMs: d.varint()}
			m := d.count(4)
			c.Messages = make([]NewMessage, m)
			// The bodies alias the entry: applying it copies each body into
			// a slot file or the index, and whatever outlives the apply
			// (a placed message's event) takes its own copy, so no body pins
			// the entry.
			for j := 0; j < m && d.err == nil; j++ {
				c.Messages[j] = d.message(nil, true)
			}
			cmds = append(cmds, c)
		case KindCancel:
			cmds = append(cmds, Cancel{ID: d.id(), Topic: d.str(), Key: d.str()})
		case KindReschedule:
			cmds = append(cmds, Reschedule{ID: d.id(), DeliverAtMs: d.varint()})
		case KindLease:
			c := Lease{NowMs: d.varint()}
			m := d.count(model.IDLen + 8 + 2)
			c.Items = make([]LeaseItem, m)
			for j := 0; j < m && d.err == nil; j++ {
				c.Items[j] = LeaseItem{ID: d.id(), Nonce: d.u64(), ExpiresMs: d.varint(), RedeliverMs: d.varint()}
			}
			cmds = append(cmds, c)
		case KindAck:
			cmds = append(cmds, Ack{NowMs: d.varint(), Receipts: d.receipts()})
		case KindNack:
			cmds = append(cmds, Nack{NowMs: d.varint(), DelayMs: d.varint(), Receipts: d.receipts()})
		case KindTouch:
			cmds = append(cmds, Touch{NowMs: d.varint(), Receipts: d.receipts()})
		case KindBury:
			cmds = append(cmds, Bury{NowMs: d.varint(), Receipts: d.receipts()})
		case KindExpire:
			cmds = append(cmds, Expire{Before: d.varint()})
		case KindPromote:
			cmds = append(cmds, Promote{Before: d.varint()})
		case KindRedrive:
			c := Redrive{NowMs: d.varint(), Topic: d.str()}
			m := d.count(model.IDLen)
			for j := 0; j < m && d.err == nil; j++ {
				c.IDs = append(c.IDs, d.id())
			}
			cmds = append(cmds, c)
		case KindSetNode:
			cmds = append(cmds, SetNode{Node: model.Member{ID: d.str(), RaftAddr: d.str(), HTTPAddr: d.str()}})
		case KindSetNodeGRPC:
			cmds = append(cmds, SetNode{Node: model.Member{ID: d.str(), RaftAddr: d.str(), HTTPAddr: d.str(), GRPCAddr: d.str()}})
		case KindRemoveNode:
			cmds = append(cmds, RemoveNode{ID: d.str()})
		case KindSetWebhook:
			cmds = append(cmds, SetWebhook{Webhook: d.webhook()})
		case KindDeleteWebhook:
			cmds = append(cmds, DeleteWebhook{Topic: d.str()})
		case KindSetSchedule:
			cmds = append(cmds, SetSchedule{NowMs: d.varint(), Spec: d.scheduleSpec()})
		case KindDeleteSchedule:
			cmds = append(cmds, DeleteSchedule{Name: d.str()})
		case KindAdvanceSchedules:
			cmds = append(cmds, AdvanceSchedules{NowMs: d.varint(), SinceMs: d.varint(), Items: d.advanceItems()})
		default:
			if d.err == nil {
				d.err = fmt.Errorf("%w: unknown command kind %d", ErrCorruptCommand, k)
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorruptCommand, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return cmds, nil
}

type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) u64(v uint64)     { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) id(id model.ID)   { b := id.Bytes(); e.b = append(e.b, b[:]...) }

// message writes the fields every message encoding starts with.
func (e *encoder) message(topic, key string, body []byte, h map[string]string, prio, due, ttr int64, maxAttempts int32) {
	e.str(topic)
	e.str(key)
	e.bytes(body)
	e.headers(h)
	e.varint(prio)
	e.varint(due)
	e.varint(ttr)
	e.varint(int64(maxAttempts))
}

func (e *encoder) headers(h map[string]string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(h[k])
	}
}

func (e *encoder) receipts(rs []model.Receipt) {
	e.uvarint(uint64(len(rs)))
	for _, r := range rs {
		e.id(r.ID)
		e.u64(r.Nonce)
	}
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or invalid %s", ErrCorruptCommand, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) i32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int32")
		return 0
	}
	return int32(v)
}

// count reads a length and checks that at least min bytes per element remain,
// so a corrupt length cannot make the decoder allocate without bound.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)/min) {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail("uint64")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) take(n uint64) []byte {
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("bytes")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) str() string   { return string(d.take(d.uvarint())) }
func (d *decoder) bytes() []byte { return append([]byte(nil), d.take(d.uvarint())...) }

func (d *decoder) id() model.ID {
	p := d.take(model.IDLen)
	if d.err != nil {
		return model.ID{}
	}
	id, _ := model.IDFromBytes(p)
	return id
}

// message reads the fields encoder.message wrote. With alias set the body
// aliases the input instead of being copied; with intern set (bulk loads)
// topic names are shared.
func (d *decoder) message(intern map[string]string, alias bool) NewMessage {
	var nm NewMessage
	if intern != nil {
		raw := d.take(d.uvarint())
		topic, ok := intern[string(raw)]
		if !ok {
			topic = string(raw)
			intern[topic] = topic
		}
		nm.Topic = topic
	} else {
		nm.Topic = d.str()
	}
	nm.Key = d.str()
	if alias {
		if b := d.take(d.uvarint()); len(b) > 0 { // an empty body decodes as nil, as copied
			nm.Body = b
		}
	} else {
		nm.Body = d.bytes()
	}
	nm.Headers = d.headers()
	nm.Priority = d.varint()
	nm.DeliverAtMs = d.varint()
	nm.TTRMs = d.varint()
	nm.MaxAttempts = d.i32()
	return nm
}

func (d *decoder) headers() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	h := make(map[string]string, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		h[k] = d.str()
	}
	return h
}

func (d *decoder) receipts() []model.Receipt {
	n := d.count(model.IDLen + 8)
	rs := make([]model.Receipt, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		rs = append(rs, model.Receipt{ID: d.id(), Nonce: d.u64()})
	}
	return rs
}
