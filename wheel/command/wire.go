package command

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Encoder appends the primitives every delaywheel encoding is built of:
// log entries here, and the engine's stored records.
type Encoder struct{ B []byte }

// Uvarint appends v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.B = binary.AppendUvarint(e.B, v) }

// Varint appends v as a zig-zag varint.
func (e *Encoder) Varint(v int64) { e.B = binary.AppendVarint(e.B, v) }

// U64 appends v as 8 bytes, little-endian.
func (e *Encoder) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }

// Str appends s, prefixed by its length.
func (e *Encoder) Str(s string) { e.Uvarint(uint64(len(s))); e.B = append(e.B, s...) }

// Bytes appends p, prefixed by its length.
func (e *Encoder) Bytes(p []byte) { e.Uvarint(uint64(len(p))); e.B = append(e.B, p...) }

// ID appends the 12-byte binary form of id.
func (e *Encoder) ID(id model.ID) { b := id.Bytes(); e.B = append(e.B, b[:]...) }

// Message writes the fields every message encoding starts with.
func (e *Encoder) Message(topic, key string, body []byte, h map[string]string, prio, due, ttr int64, maxAttempts int32) {
	e.Str(topic)
	e.Str(key)
	e.Bytes(body)
	e.Headers(h)
	e.Varint(prio)
	e.Varint(due)
	e.Varint(ttr)
	e.Varint(int64(maxAttempts))
}

// Headers appends h: its count, then its pairs sorted by key.
func (e *Encoder) Headers(h map[string]string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.Uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.Str(k)
		e.Str(h[k])
	}
}

// Receipts appends rs: their count, then each id and nonce.
func (e *Encoder) Receipts(rs []model.Receipt) {
	e.Uvarint(uint64(len(rs)))
	for _, r := range rs {
		e.ID(r.ID)
		e.U64(r.Nonce)
	}
}

// Decoder reads what an Encoder wrote. The first failure is kept in Err,
// and every read after it returns zero values.
type Decoder struct {
	B   []byte
	Err error
}

// Fail records that what could not be decoded, unless a failure is kept already.
func (d *Decoder) Fail(what string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: truncated or invalid %s", ErrCorruptCommand, what)
	}
	d.B = nil
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.B) < 1 {
		d.Fail("byte")
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}

// consumed drops the n bytes a varint read took; n <= 0 (no varint) is
// recorded as a failure to read what, and reported false.
func (d *Decoder) consumed(n int, what string) bool {
	if n <= 0 {
		d.Fail(what)
		return false
	}
	d.B = d.B[n:]
	return true
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.B)
	if !d.consumed(n, "uvarint") {
		return 0
	}
	return v
}

// Varint reads a zig-zag varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.B)
	if !d.consumed(n, "varint") {
		return 0
	}
	return v
}

// I32 reads a varint that must fit an int32.
func (d *Decoder) I32() int32 {
	v := d.Varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.Fail("int32")
		return 0
	}
	return int32(v)
}

// Count reads a length and checks that at least min bytes per element remain,
// so a corrupt length cannot make the decoder allocate without bound.
func (d *Decoder) Count(min int) int {
	v := d.Uvarint()
	if d.Err != nil {
		return 0
	}
	if v > uint64(len(d.B)/min) {
		d.Fail("count")
		return 0
	}
	return int(v)
}

// U64 reads 8 bytes, little-endian.
func (d *Decoder) U64() uint64 {
	if len(d.B) < 8 {
		d.Fail("uint64")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.B)
	d.B = d.B[8:]
	return v
}

// Take reads the next n bytes, aliasing the input.
func (d *Decoder) Take(n uint64) []byte {
	if d.Err != nil || n > uint64(len(d.B)) {
		d.Fail("bytes")
		return nil
	}
	p := d.B[:n:n]
	d.B = d.B[n:]
	return p
}

// Str reads a length-prefixed string.
func (d *Decoder) Str() string { return string(d.Take(d.Uvarint())) }

// Bytes reads a length-prefixed byte string into a copy.
func (d *Decoder) Bytes() []byte { return append([]byte(nil), d.Take(d.Uvarint())...) }

// ID reads the 12-byte binary form of an id.
func (d *Decoder) ID() model.ID {
	p := d.Take(model.IDLen)
	if d.Err != nil {
		return model.ID{}
	}
	id, _ := model.IDFromBytes(p)
	return id
}

// Message reads the fields Encoder.Message wrote. With alias set the body
// aliases the input instead of being copied; with intern set (bulk loads)
// topic names are shared.
func (d *Decoder) Message(intern map[string]string, alias bool) NewMessage {
	var nm NewMessage
	if intern != nil {
		raw := d.Take(d.Uvarint())
		topic, ok := intern[string(raw)]
		if !ok {
			topic = string(raw)
			intern[topic] = topic
		}
		nm.Topic = topic
	} else {
		nm.Topic = d.Str()
	}
	nm.Key = d.Str()
	if alias {
		if b := d.Take(d.Uvarint()); len(b) > 0 { // an empty body decodes as nil, as copied
			nm.Body = b
		}
	} else {
		nm.Body = d.Bytes()
	}
	nm.Headers = d.Headers()
	nm.Priority = d.Varint()
	nm.DeliverAtMs = d.Varint()
	nm.TTRMs = d.Varint()
	nm.MaxAttempts = d.I32()
	return nm
}

// Headers reads what Encoder.Headers wrote.
func (d *Decoder) Headers() map[string]string {
	n := d.Count(2)
	if n == 0 {
		return nil
	}
	h := make(map[string]string, n)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Str()
		h[k] = d.Str()
	}
	return h
}

// Receipts reads what Encoder.Receipts wrote.
func (d *Decoder) Receipts() []model.Receipt {
	n := d.Count(model.IDLen + 8)
	rs := make([]model.Receipt, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		rs = append(rs, model.Receipt{ID: d.ID(), Nonce: d.U64()})
	}
	return rs
}

// Webhook appends w, as SetWebhook and the stored webhook carry it.
func (e *Encoder) Webhook(w Webhook) {
	e.Str(w.Topic)
	e.Str(w.URL)
	e.Str(w.Secret)
	e.Varint(w.TimeoutMs)
	e.Varint(w.MaxConcurrency)
	e.Varint(w.RatePerS)
}

// Webhook reads what Encoder.Webhook wrote.
func (d *Decoder) Webhook() Webhook {
	return Webhook{Topic: d.Str(), URL: d.Str(), Secret: d.Str(), TimeoutMs: d.Varint(), MaxConcurrency: d.Varint(), RatePerS: d.Varint()}
}

// ScheduleSpec appends sp, as SetSchedule and the stored schedule carry it.
func (e *Encoder) ScheduleSpec(sp *ScheduleSpec) {
	e.Str(sp.Name)
	e.Str(sp.Cron)
	e.Str(sp.Timezone)
	e.Varint(sp.EveryMs)
	e.Varint(sp.StartAtMs)
	e.Varint(sp.EndAtMs)
	e.Message(sp.Topic, "", sp.Body, sp.Headers, sp.Priority, 0, sp.TTRMs, sp.MaxAttempts)
}

// ScheduleSpec reads what Encoder.ScheduleSpec wrote.
func (d *Decoder) ScheduleSpec() ScheduleSpec {
	sp := ScheduleSpec{Name: d.Str(), Cron: d.Str(), Timezone: d.Str(), EveryMs: d.Varint(), StartAtMs: d.Varint(), EndAtMs: d.Varint()}
	m := d.Message(nil, false)
	sp.Topic, sp.Body, sp.Headers, sp.Priority, sp.TTRMs, sp.MaxAttempts = m.Topic, m.Body, m.Headers, m.Priority, m.TTRMs, m.MaxAttempts
	if m.Key != "" || m.DeliverAtMs != 0 {
		d.Fail("schedule spec")
	}
	return sp
}

// AdvanceItems appends items: their count, then each name and occurrence.
func (e *Encoder) AdvanceItems(items []AdvanceItem) {
	e.Uvarint(uint64(len(items)))
	for _, it := range items {
		e.Str(it.Name)
		e.Varint(it.FromMs)
	}
}

// AdvanceItems reads what Encoder.AdvanceItems wrote.
func (d *Decoder) AdvanceItems() []AdvanceItem {
	n := d.Count(2)
	items := make([]AdvanceItem, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		items = append(items, AdvanceItem{Name: d.Str(), FromMs: d.Varint()})
	}
	return items
}
