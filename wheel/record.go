package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// recordVersion prefixes every encoded message payload.
const recordVersion = 1

// EncodeMessage encodes a message as the payload of a segment record or a
// Pebble value. The layout (after a version byte) is: id (12 bytes), then
// varint-framed topic, key, body, headers (count, then key/value pairs sorted
// by key), priority, deliver_at_ms, ttr_ms, max_attempts, attempts,
// enqueued_ms, receipt nonce (8 bytes little-endian), lease_expires_ms and
// lease_ms.
func EncodeMessage(dst []byte, m *model.Message) []byte {
	e := &encoder{b: dst}
	e.b = append(e.b, recordVersion)
	e.id(m.ID)
	e.message(m.Topic, m.Key, m.Body, m.Headers, m.Priority, m.DeliverAtMs, m.TTRMs, m.MaxAttempts)
	e.varint(int64(m.Attempts))
	e.varint(m.EnqueuedMs)
	e.u64(m.Receipt)
	e.varint(m.LeaseExpiresMs)
	e.varint(m.LeaseMs)
	return e.b
}

// DecodeMessage decodes a payload written by EncodeMessage.
func DecodeMessage(b []byte) (model.Message, error) { return decodeMessage(b, nil) }

// decodeMessage decodes a message. With intern set (bulk loads), the body
// aliases b instead of being copied, and topic names are shared.
func decodeMessage(b []byte, intern map[string]string) (model.Message, error) {
	d := &decoder{b: b}
	if v := d.byte(); d.err == nil && v != recordVersion {
		return model.Message{}, fmt.Errorf("%w: message record version %d", ErrCorruptCommand, v)
	}
	id := d.id()
	nm := d.message(intern, intern != nil)
	m := model.Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
		DeliverAtMs: nm.DeliverAtMs, TTRMs: nm.TTRMs, MaxAttempts: nm.MaxAttempts}
	m.Attempts = d.i32()
	m.EnqueuedMs = d.varint()
	m.Receipt = d.u64()
	m.LeaseExpiresMs = d.varint()
	m.LeaseMs = d.varint()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in message record", ErrCorruptCommand, len(d.b))
	}
	if d.err != nil {
		return model.Message{}, d.err
	}
	return m, nil
}

// EncodeTombstone encodes the payload of a tombstone record: the id whose
// earlier records in the file no longer live there.
func EncodeTombstone(id model.ID) []byte {
	b := id.Bytes()
	return append([]byte{recordVersion}, b[:]...)
}

// DecodeTombstone decodes a tombstone payload.
func DecodeTombstone(b []byte) (model.ID, error) {
	if len(b) != 1+model.IDLen || b[0] != recordVersion {
		return model.ID{}, fmt.Errorf("%w: tombstone of %d bytes", ErrCorruptCommand, len(b))
	}
	return model.IDFromBytes(b[1:])
}

// liveEntries returns the records of a slot file that still live there:
// for each id the last record, unless it is a tombstone. Records keep their
// file order. Every removal from a slot writes a tombstone before the id can
// be written there again, so an id without a tombstone appears once and is
// live; only ids with tombstones need tracking.
func liveEntries(entries []segment.Entry) []segment.Entry {
	var tombed map[model.ID]int // id → position of its last record
	for _, e := range entries {
		if e.Type == segment.TypeTombstone {
			if id, ok := payloadID(e.Payload); ok {
				if tombed == nil {
					tombed = map[model.ID]int{}
				}
				tombed[id] = -1
			}
		}
	}
	if tombed == nil {
		return entries
	}
	for i, e := range entries {
		if id, ok := payloadID(e.Payload); ok {
			if _, t := tombed[id]; t {
				tombed[id] = i
			}
		}
	}
	out := make([]segment.Entry, 0, len(entries))
	for i, e := range entries {
		if e.Type == segment.TypeTombstone {
			continue
		}
		if id, ok := payloadID(e.Payload); ok {
			if last, t := tombed[id]; t && last != i {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// payloadID reads the id every message and tombstone payload starts with.
func payloadID(p []byte) (model.ID, bool) {
	if len(p) < 1+model.IDLen || p[0] != recordVersion {
		return model.ID{}, false
	}
	id, err := model.IDFromBytes(p[1 : 1+model.IDLen])
	return id, err == nil
}
