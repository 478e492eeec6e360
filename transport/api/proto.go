package api

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ContentTypeProto is the media type of the protobuf form of the enqueue
// call (schema in delaywheel.proto). POST /v1/messages accepts it as the
// request's Content-Type and answers in it when the Accept header names it.
const ContentTypeProto = "application/x-protobuf"

// ErrTooManyMessages is returned by UnmarshalEnqueueRequest when a batch
// holds more messages than the limit it was given; decoding stops there.
var ErrTooManyMessages = errors.New("too many messages")

// Field numbers of delaywheel.proto.
const (
	fReqMessages = 1

	fMsgTopic       = 1
	fMsgBody        = 2
	fMsgDelayMs     = 3
	fMsgDeliverAtMs = 4
	fMsgKey         = 5
	fMsgPriority    = 6
	fMsgTTRMs       = 7
	fMsgMaxAttempts = 8
	fMsgHeaders     = 9

	fRespResults = 1

	fResID          = 1
	fResDeliverAtMs = 2
	fResDuplicate   = 3
)

// AppendEnqueueRequest appends the protobuf form of req to b. A message's
// body is sent as raw bytes, whichever of body and body_base64 it was given
// in; an invalid body_base64, or both set (which the JSON form refuses), is
// an error naming the message.
func AppendEnqueueRequest(b []byte, req EnqueueRequest) ([]byte, error) {
	var m []byte
	for i := range req.Messages {
		var err error
		if m, err = appendMessage(m[:0], &req.Messages[i]); err != nil {
			return b, fmt.Errorf("messages[%d].%w", i, err)
		}
		if i == 0 {
			// Size the buffer once, from the first message, instead of
			// doubling it through the batch.
			b = slices.Grow(b, (len(m)+protowire.SizeVarint(uint64(len(m)))+1)*len(req.Messages)*9/8)
		}
		b = protowire.AppendTag(b, fReqMessages, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}

func appendMessage(b []byte, m *Message) ([]byte, error) {
	if m.Body != nil && m.BodyBase64 != nil {
		// The JSON form refuses this; the protobuf form has one body
		// field, so do not silently send one of the two.
		return b, errors.New(`body: set "body" or "body_base64", not both`)
	}
	b = appendString(b, fMsgTopic, m.Topic)
	if m.Body != nil {
		b = appendString(b, fMsgBody, *m.Body) // a text body needs no copy into a []byte first
	} else {
		body, err := m.Payload.Bytes()
		if err != nil {
			return b, err
		}
		if len(body) > 0 {
			b = protowire.AppendTag(b, fMsgBody, protowire.BytesType)
			b = protowire.AppendBytes(b, body)
		}
	}
	b = appendOptVarint(b, fMsgDelayMs, m.DelayMs)
	b = appendOptVarint(b, fMsgDeliverAtMs, m.DeliverAtMs)
	b = appendString(b, fMsgKey, m.Key)
	if m.Priority != 0 {
		b = protowire.AppendTag(b, fMsgPriority, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(m.Priority))
	}
	b = appendOptVarint(b, fMsgTTRMs, m.TTRMs)
	if m.MaxAttempts != nil {
		v := int64(*m.MaxAttempts)
		b = appendOptVarint(b, fMsgMaxAttempts, &v)
	}
	for k, v := range m.Headers {
		var e []byte
		e = appendString(e, 1, k)
		e = appendString(e, 2, v)
		b = protowire.AppendTag(b, fMsgHeaders, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b, nil
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendOptVarint(b []byte, num protowire.Number, v *int64) []byte {
	if v == nil {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(*v))
}

// UnmarshalEnqueueRequest decodes the protobuf form of an enqueue request
// strictly: unknown fields, a field given twice, wrong wire types, strings
// that are not UTF-8 and numbers that do not fit are errors naming the field
// ("messages[3].ttr_ms: …"). It stops with ErrTooManyMessages once the batch
// holds more than maxMessages.
//
// The strings of the result (topics, keys, bodies, headers) share one copy
// of data, and the optional numbers one slab, so a batch costs a handful of
// allocations rather than several per message.
func UnmarshalEnqueueRequest(data []byte, maxMessages int) (EnqueueRequest, error) {
	n := 0
	_ = eachField(data, 0, loc{msg: -1}, func(num protowire.Number, typ protowire.Type, _ uint64, _ []byte, _ int) error {
		if num == fReqMessages && typ == protowire.BytesType {
			n++
		}
		return nil
	})
	if n > maxMessages {
		return EnqueueRequest{}, fmt.Errorf("messages: %w: %d messages are over the limit of %d per request", ErrTooManyMessages, n, maxMessages)
	}
	d := &protoDecoder{all: string(data), msgs: make([]Message, 0, n), ints: make([]int64, 0, 4*n), strs: make([]string, 0, n)}
	err := eachField(data, 0, loc{msg: -1}, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte, off int) error {
		if num != fReqMessages {
			return unknownField(loc{msg: -1}, num)
		}
		where := loc{msg: len(d.msgs)}
		if typ != protowire.BytesType {
			return fmt.Errorf("%s: must be an embedded message (wire type 2), got wire type %d", where, typ)
		}
		d.msgs = append(d.msgs, Message{})
		return d.message(&d.msgs[len(d.msgs)-1], raw, off, where)
	})
	return EnqueueRequest{Messages: d.msgs}, err
}

// protoDecoder holds the shared backing of one decoded request.
type protoDecoder struct {
	all  string // the request, as one string: every decoded string is a slice of it
	msgs []Message
	ints []int64  // backing of the optional numbers
	strs []string // backing of the bodies
}

func (d *protoDecoder) int64p(v int64) *int64 {
	if len(d.ints) == cap(d.ints) {
		return Ptr(v)
	}
	d.ints = append(d.ints, v)
	return &d.ints[len(d.ints)-1]
}

func (d *protoDecoder) str(raw []byte, off int) string { return d.all[off : off+len(raw)] }

func (d *protoDecoder) utf8(path loc, raw []byte, off int, dst *string) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("%s: must be valid UTF-8", path)
	}
	*dst = d.str(raw, off)
	return nil
}

func (d *protoDecoder) message(m *Message, data []byte, base int, where loc) error {
	var seen uint16
	return eachField(data, base, where, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte, off int) error {
		name, want, ok := messageField(num)
		if !ok {
			return unknownField(where, num)
		}
		path := loc{msg: where.msg, field: name}
		if typ != want {
			return fmt.Errorf("%s: wrong wire type %d (want %d)", path, typ, want)
		}
		if num != fMsgHeaders {
			if seen&(1<<num) != 0 {
				return fmt.Errorf("%s: given more than once", path)
			}
			seen |= 1 << num
		}
		switch num {
		case fMsgTopic:
			return d.utf8(path, raw, off, &m.Topic)
		case fMsgBody:
			if len(raw) > 0 {
				d.strs = append(d.strs, d.str(raw, off))
				m.Body = &d.strs[len(d.strs)-1]
			}
		case fMsgKey:
			return d.utf8(path, raw, off, &m.Key)
		case fMsgDelayMs:
			m.DelayMs = d.int64p(int64(v))
		case fMsgDeliverAtMs:
			m.DeliverAtMs = d.int64p(int64(v))
		case fMsgPriority:
			m.Priority = protowire.DecodeZigZag(v)
		case fMsgTTRMs:
			m.TTRMs = d.int64p(int64(v))
		case fMsgMaxAttempts:
			if int64(v) < math.MinInt32 || int64(v) > math.MaxInt32 {
				return fmt.Errorf("%s: must be an integer that fits int32, got %d", path, int64(v))
			}
			m.MaxAttempts = Ptr(int32(int64(v)))
		case fMsgHeaders:
			return d.header(raw, off, path, m)
		}
		return nil
	})
}

func messageField(num protowire.Number) (name string, typ protowire.Type, ok bool) {
	switch num {
	case fMsgTopic:
		return "topic", protowire.BytesType, true
	case fMsgBody:
		return "body", protowire.BytesType, true
	case fMsgDelayMs:
		return "delay_ms", protowire.VarintType, true
	case fMsgDeliverAtMs:
		return "deliver_at_ms", protowire.VarintType, true
	case fMsgKey:
		return "key", protowire.BytesType, true
	case fMsgPriority:
		return "priority", protowire.VarintType, true
	case fMsgTTRMs:
		return "ttr_ms", protowire.VarintType, true
	case fMsgMaxAttempts:
		return "max_attempts", protowire.VarintType, true
	case fMsgHeaders:
		return "headers", protowire.BytesType, true
	}
	return "", 0, false
}

// header decodes one map entry of headers into m.
func (d *protoDecoder) header(data []byte, base int, path loc, m *Message) error {
	var (
		k, val  string
		seenKey bool
	)
	err := eachField(data, base, path, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte, off int) error {
		if num != 1 && num != 2 {
			return unknownField(path, num)
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("%s: map entry field %d: wrong wire type %d (want 2)", path, num, typ)
		}
		if num == 1 {
			seenKey = true
			return d.utf8(loc{msg: path.msg, field: path.field, extra: " key"}, raw, off, &k)
		}
		return d.utf8(loc{msg: path.msg, field: path.field, extra: "[" + quoteShort(k, seenKey) + "]"}, raw, off, &val)
	})
	if err != nil {
		return err
	}
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	if _, dup := m.Headers[k]; dup {
		return fmt.Errorf("%s: key %q given more than once", path, k)
	}
	m.Headers[k] = val
	return nil
}

func quoteShort(k string, known bool) string {
	if !known {
		return "?"
	}
	if len(k) > 40 {
		k = k[:40] + "…"
	}
	return fmt.Sprintf("%q", k)
}

func unknownField(where loc, num protowire.Number) error {
	return fmt.Errorf("%s: unknown field number %d", where, num)
}

// loc names where in a request a field is, for error messages; it is turned
// into text only when there is an error to report.
type loc struct {
	msg   int    // message index; negative: the request (or answer) itself
	field string // field name within the message
	extra string // what follows: a map key, or the name of an answer part
}

func (l loc) String() string {
	if l.msg < 0 {
		if l.extra != "" {
			return l.extra
		}
		return "request body"
	}
	s := fmt.Sprintf("messages[%d]", l.msg)
	if l.field != "" {
		s += "." + l.field
	}
	return s + l.extra
}

// eachField walks the fields of one protobuf message that starts at offset
// base of the request, calling fn with each varint value or length-delimited
// payload and the payload's offset in the request. Groups and fixed-width
// fields, which delaywheel.proto does not use, reach fn with no value, and
// its wire type check refuses them.
func eachField(data []byte, base int, where loc, fn func(num protowire.Number, typ protowire.Type, v uint64, raw []byte, off int) error) error {
	pos := 0
	for pos < len(data) {
		num, typ, n := protowire.ConsumeTag(data[pos:])
		if n < 0 {
			return fmt.Errorf("%s: malformed protobuf: %w", where, protowire.ParseError(n))
		}
		pos += n
		var (
			v   uint64
			raw []byte
			off int
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(data[pos:])
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(data[pos:])
			off = base + pos + n - len(raw)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data[pos:])
		}
		if n < 0 {
			return fmt.Errorf("%s: malformed protobuf in field %d: %w", where, num, protowire.ParseError(n))
		}
		pos += n
		if err := fn(num, typ, v, raw, off); err != nil {
			return err
		}
	}
	return nil
}

// AppendEnqueueResponse appends the protobuf form of resp to b.
func AppendEnqueueResponse(b []byte, resp EnqueueResponse) []byte {
	var e []byte
	for _, r := range resp.Results {
		e = appendString(e[:0], fResID, r.ID)
		if r.DeliverAtMs != 0 {
			e = protowire.AppendTag(e, fResDeliverAtMs, protowire.VarintType)
			e = protowire.AppendVarint(e, uint64(r.DeliverAtMs))
		}
		if r.Duplicate {
			e = protowire.AppendTag(e, fResDuplicate, protowire.VarintType)
			e = protowire.AppendVarint(e, 1)
		}
		b = protowire.AppendTag(b, fRespResults, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

// UnmarshalEnqueueResponse decodes the protobuf form of an enqueue answer.
// Unknown fields are skipped, so that a newer server's answer still decodes.
func UnmarshalEnqueueResponse(data []byte) (EnqueueResponse, error) {
	var resp EnqueueResponse
	err := eachField(data, 0, loc{msg: -1, extra: "answer"}, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte, _ int) error {
		if num != fRespResults || typ != protowire.BytesType {
			return nil
		}
		var r Result
		err := eachField(raw, 0, loc{msg: -1, extra: "result"}, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte, _ int) error {
			switch {
			case num == fResID && typ == protowire.BytesType:
				r.ID = string(raw)
			case num == fResDeliverAtMs && typ == protowire.VarintType:
				r.DeliverAtMs = int64(v)
			case num == fResDuplicate && typ == protowire.VarintType:
				r.Duplicate = v != 0
			}
			return nil
		})
		resp.Results = append(resp.Results, r)
		return err
	})
	return resp, err
}
