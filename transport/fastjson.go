package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// fastEnqueue decodes the common shape of an enqueue request without a
// general JSON decoder, which costs most of a JSON enqueue (it visits
// every byte through a function call, and every optional number is an
// allocation of its own).
//
// Invariant: it accepts a body only when the strict decoding (decodeStrict
// into api.EnqueueRequest) accepts it too and gives the same request; for
// anything else — an escape in a string, a null, an unknown key, a key
// given twice, a number that is not a plain integer, a string that is not
// valid UTF-8, malformed JSON — it answers ok=false and the caller decodes
// the body with decodeStrict, which refuses it or reads it, and whose
// errors name the field. FuzzDecodeEnqueue holds it to this.
//
// It takes up to maxBatch messages, and reserves no more ahead: a body of
// nothing but '{' must not make it allocate for millions of messages.
func fastEnqueue(data []byte, maxBatch int) (req api.EnqueueRequest, ok bool) {
	d := fastDecoder{data: data, all: string(data)}
	if !d.openList("messages") {
		return req, false
	}
	// Every message is an object, so the count of '{' (one byte: counted
	// with SIMD) bounds the batch and sizes the slabs for the common one: a
	// number and a body per message.
	n := min(bytes.Count(data, []byte{'{'}), maxBatch+1)
	d.ints = make([]int64, 0, n)
	d.strs = make([]string, 0, n)
	req.Messages = make([]api.Message, 0, n)
	if d.peek() == ']' {
		d.pos++
	} else {
		for {
			req.Messages = append(req.Messages, api.Message{})
			if len(req.Messages) > maxBatch || !d.message(&req.Messages[len(req.Messages)-1]) {
				return req, false // too many: messagesUpTo counts them without keeping them
			}
			if d.byte(']') {
				break
			}
			if !d.byte(',') {
				return req, false
			}
		}
	}
	return req, d.closeBody()
}

// fastDecoder walks one request.
type fastDecoder struct {
	data  []byte
	all   string // data as a string: bodies are slices of it, not copies
	pos   int
	topic string   // the last topic, which the next message likely repeats
	ints  []int64  // backing of the optional numbers
	strs  []string // backing of the bodies
}

// space skips JSON whitespace.
func (d *fastDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, 0 at the end.
func (d *fastDecoder) peek() byte {
	d.space()
	if d.pos == len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

// byte consumes c, after whitespace, if it comes next.
func (d *fastDecoder) byte(c byte) bool {
	if d.peek() != c {
		return false
	}
	d.pos++
	return true
}

// openList consumes the start of a body that is an object of one list,
// {"key":[.
func (d *fastDecoder) openList(key string) bool {
	return d.byte('{') && d.key() == key && d.byte(':') && d.byte('[')
}

// closeBody consumes the '}' that closes the body and reports whether
// nothing but whitespace follows it.
func (d *fastDecoder) closeBody() bool {
	if !d.byte('}') {
		return false
	}
	d.space()
	return d.pos == len(d.data)
}

// raw consumes a string and returns its bytes; ok is false for anything
// but a string without escapes or control characters in valid UTF-8.
func (d *fastDecoder) raw() (start, end int, ok bool) {
	if !d.byte('"') {
		return 0, 0, false
	}
	start = d.pos
	q := bytes.IndexByte(d.data[start:], '"')
	if q < 0 {
		return 0, 0, false
	}
	end = start + q
	span := d.data[start:end]
	if bytes.IndexByte(span, '\\') >= 0 {
		return 0, 0, false
	}
	ascii := true
	for _, c := range span {
		if c < 0x20 {
			return 0, 0, false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	d.pos = end + 1
	return start, end, ascii || utf8.Valid(span)
}

// key consumes an object key; "" when there is none the fast path takes.
func (d *fastDecoder) key() string {
	s, e, ok := d.raw()
	if !ok {
		return ""
	}
	return d.all[s:e]
}

// str consumes a string value as a string of its own.
func (d *fastDecoder) str(dst *string) bool {
	s, e, ok := d.raw()
	*dst = string(d.data[s:e])
	return ok
}

// int consumes an integer that fits int64: what encoding/json stores in an
// int64 exactly as written (no fraction, no exponent).
func (d *fastDecoder) int() (int64, bool) {
	d.space()
	s := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	digits := d.pos
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
	}
	if d.pos == digits || d.data[digits] == '0' && d.pos-digits > 1 {
		return 0, false // no digits, or a leading zero
	}
	v, err := strconv.ParseInt(d.all[s:d.pos], 10, 64)
	return v, err == nil
}

func (d *fastDecoder) intp() (*int64, bool) {
	v, ok := d.int()
	if len(d.ints) == cap(d.ints) {
		return api.Ptr(v), ok // v itself must not escape: it would cost every call an allocation
	}
	d.ints = append(d.ints, v)
	return &d.ints[len(d.ints)-1], ok
}

// message consumes one message object into m.
func (d *fastDecoder) message(m *api.Message) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint16
	for {
		k := d.key()
		bit := uint16(1) << messageKey(k)
		if k == "" || seen&bit != 0 || !d.byte(':') {
			return false
		}
		seen |= bit
		if !d.field(m, k) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// messageKey numbers the keys of a message, 15 for an unknown one.
func messageKey(k string) uint {
	switch k {
	case "topic":
		return 0
	case "body":
		return 1
	case "body_base64":
		return 2
	case "delay_ms":
		return 3
	case "deliver_at_ms":
		return 4
	case "key":
		return 5
	case "priority":
		return 6
	case "ttr_ms":
		return 7
	case "max_attempts":
		return 8
	case "headers":
		return 9
	}
	return 15
}

// field consumes the value of field k of m.
func (d *fastDecoder) field(m *api.Message, k string) bool {
	var ok bool
	switch k {
	case "topic":
		var s, e int
		if s, e, ok = d.raw(); ok {
			if d.topic != d.all[s:e] {
				d.topic = string(d.data[s:e]) // a copy: a topic outlives the request
			}
			m.Topic = d.topic
		}
	case "body", "body_base64":
		var s, e int
		s, e, ok = d.raw()
		d.strs = append(d.strs, d.all[s:e]) // read once, into the message's own []byte
		if k == "body" {
			m.Body = &d.strs[len(d.strs)-1]
		} else {
			m.BodyBase64 = &d.strs[len(d.strs)-1]
		}
	case "delay_ms":
		m.DelayMs, ok = d.intp()
	case "deliver_at_ms":
		m.DeliverAtMs, ok = d.intp()
	case "ttr_ms":
		m.TTRMs, ok = d.intp()
	case "priority":
		m.Priority, ok = d.int()
	case "max_attempts":
		var v int64
		v, ok = d.int()
		m.MaxAttempts = api.Ptr(int32(v))
		ok = ok && int64(int32(v)) == v
	case "key":
		ok = d.str(&m.Key)
	case "headers":
		ok = d.headers(m)
	}
	return ok
}

// headers consumes an object of strings; a key given twice is left to
// decodeStrict, which refuses it.
func (d *fastDecoder) headers(m *api.Message) bool {
	if !d.byte('{') {
		return false
	}
	m.Headers = map[string]string{}
	if d.byte('}') {
		return true
	}
	for {
		var k, v string
		if !d.str(&k) || !d.byte(':') || !d.str(&v) {
			return false
		}
		if _, dup := m.Headers[k]; dup {
			return false
		}
		m.Headers[k] = v
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// appendResults appends the JSON answer of an enqueue, byte for byte as
// writeJSON writes api.EnqueueResponse{Results: resultsOf(es)}, without
// a string per id. Invariant: an id is hex digits and the rest numbers and
// booleans, so nothing needs escaping (TestAppendResults holds it to
// writeJSON).
func appendResults(b []byte, es []wheel.Enqueued) []byte {
	b = append(b, `{"results":[`...)
	for i, r := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		id := r.ID.Bytes()
		b = hex.AppendEncode(b, id[:])
		b = append(b, `","deliver_at_ms":`...)
		b = strconv.AppendInt(b, r.DeliverAtMs, 10)
		b = append(b, `,"duplicate":`...)
		b = strconv.AppendBool(b, r.Duplicate)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendDelivery appends d as encoding/json writes its api.Delivery (no
// HTML escapes), and a newline: a reserve answer and a stream line are
// most of what a consumer costs the server, and the reflection of
// encoding/json, a string per id, receipt and body, and a sorted copy of
// the headers cost more than the bytes. Invariant: the bytes equal
// marshalJSON(deliveriesOf([]model.Delivery{d})[0]) (TestAppendDelivery).
func appendDelivery(b []byte, d model.Delivery) []byte {
	id := d.ID.Bytes()
	b = append(b, `{"id":"`...)
	b = hex.AppendEncode(b, id[:])
	b = append(b, `","topic":`...)
	b = appendString(b, d.Topic)
	if utf8.Valid(d.Body) {
		b = append(b, `,"body":`...)
		b = appendString(b, d.Body)
	} else {
		b = append(b, `,"body_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, d.Body)
		b = append(b, '"')
	}
	b = append(b, `,"headers":{`...)
	if len(d.Headers) > 0 { // most messages have none, and sorting none allocates still
		for i, k := range slices.Sorted(maps.Keys(d.Headers)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, d.Headers[k])
		}
	}
	b = append(b, `},"key":`...)
	b = appendString(b, d.Key)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, d.Priority, 10)
	b = append(b, `,"deliver_at_ms":`...)
	b = strconv.AppendInt(b, d.DeliverAtMs, 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(d.Attempt), 10)
	b = append(b, `,"receipt":"`...)
	rid := d.Receipt.ID.Bytes()
	b = hex.AppendEncode(b, rid[:])
	b = append(b, '.')
	b = appendHex16(b, d.Receipt.Nonce)
	b = append(b, `","lease_expires_ms":`...)
	b = strconv.AppendInt(b, d.LeaseExpiresMs, 10)
	return append(b, "}\n"...)
}

// appendHex16 appends v as 16 lower-case hex digits.
func appendHex16(b []byte, v uint64) []byte {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], v)
	return hex.AppendEncode(b, n[:])
}

// appendString appends s as a JSON string, as marshalJSON writes it:
// printable ASCII as it is, anything else through marshalJSON itself.
func appendString[S string | []byte](b []byte, s S) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			q, _ := marshalJSON(string(s)) // a string always encodes
			return append(b, q[:len(q)-1]...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendReserved appends the JSON answer of a reserve that handed out ds.
func appendReserved(b []byte, ds []model.Delivery) []byte {
	b = append(b, `{"messages":[`...)
	for i, d := range ds {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDelivery(b, d)
		b = b[:len(b)-1] // its newline
	}
	return append(b, "]}\n"...)
}

// fastReceipts decodes the common shape of an ack's, touch's or bury's
// body, {"receipts":["…",…]}, without a general JSON decoder, which costs
// an ack more than the bytes it reads. The receipts are slices of one copy
// of data.
//
// Invariant: as fastEnqueue, it accepts a body only when decodeStrict into
// api.ReceiptsRequest accepts it too and gives the same list (an empty list
// included: it answers ok=false); anything else goes to decodeStrict.
// FuzzDecodeReceipts holds it to this.
func fastReceipts(data []byte) (list []string, ok bool) {
	d := fastDecoder{data: data, all: string(data)}
	if !d.openList("receipts") {
		return nil, false
	}
	list = make([]string, 0, bytes.Count(data, []byte{','})+1)
	for {
		s, e, ok := d.raw()
		if !ok {
			return nil, false
		}
		list = append(list, d.all[s:e])
		if d.byte(']') {
			break
		}
		if !d.byte(',') {
			return nil, false
		}
	}
	if !d.closeBody() {
		return nil, false
	}
	return list, true
}

// appendCounted appends the JSON answer of an ack, nack, touch or bury
// that settled c, its count named doneKey: byte for byte what writeJSON
// writes of api.AckResponse, NackResponse, TouchResponse or BuryResponse
// (TestAppendCounted holds it to that).
func appendCounted(b []byte, doneKey string, c command.Counted) []byte {
	b = append(b, `{"`...)
	b = append(b, doneKey...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, int64(c.Done), 10)
	b = append(b, `,"stale":`...)
	b = strconv.AppendInt(b, int64(c.Stale), 10)
	return append(b, "}\n"...)
}
