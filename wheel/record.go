package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
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
	e := &command.Encoder{B: dst}
	e.B = append(e.B, recordVersion)
	e.ID(m.ID)
	e.Message(m.Topic, m.Key, m.Body, m.Headers, m.Priority, m.DeliverAtMs, m.TTRMs, m.MaxAttempts)
	e.Varint(int64(m.Attempts))
	e.Varint(m.EnqueuedMs)
	e.U64(m.Receipt)
	e.Varint(m.LeaseExpiresMs)
	e.Varint(m.LeaseMs)
	return e.B
}

// DecodeMessage decodes a payload written by EncodeMessage.
func DecodeMessage(b []byte) (model.Message, error) { return decodeMessage(b, nil) }

// decodeMessage decodes a message. With intern set (bulk loads), the body
// aliases b instead of being copied, and topic names are shared.
func decodeMessage(b []byte, intern map[string]string) (model.Message, error) {
	d := &command.Decoder{B: b}
	if v := d.Byte(); d.Err == nil && v != recordVersion {
		return model.Message{}, fmt.Errorf("%w: message record version %d", command.ErrCorruptCommand, v)
	}
	id := d.ID()
	nm := d.Message(intern, intern != nil)
	m := model.Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
		DeliverAtMs: nm.DeliverAtMs, TTRMs: nm.TTRMs, MaxAttempts: nm.MaxAttempts}
	m.Attempts = d.I32()
	m.EnqueuedMs = d.Varint()
	m.Receipt = d.U64()
	m.LeaseExpiresMs = d.Varint()
	m.LeaseMs = d.Varint()
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d trailing bytes in message record", command.ErrCorruptCommand, len(d.B))
	}
	if d.Err != nil {
		return model.Message{}, d.Err
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
		return model.ID{}, fmt.Errorf("%w: tombstone of %d bytes", command.ErrCorruptCommand, len(b))
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
