package wheel

import "fmt"

// recordVersion prefixes every encoded message payload.
const recordVersion = 1

// EncodeMessage encodes a message as the payload of a segment record or a
// Pebble value. The layout (after a version byte) is: id (12 bytes), then
// varint-framed topic, key, body, headers (count, then key/value pairs sorted
// by key), priority, deliver_at_ms, ttr_ms, max_attempts, attempts,
// enqueued_ms, receipt nonce (8 bytes little-endian), lease_expires_ms and
// lease_ms.
func EncodeMessage(dst []byte, m *Message) []byte {
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
func DecodeMessage(b []byte) (Message, error) { return decodeMessage(b, nil) }

// decodeMessage decodes a message. With intern set (bulk loads), the body
// aliases b instead of being copied, and topic names are shared.
func decodeMessage(b []byte, intern map[string]string) (Message, error) {
	d := &decoder{b: b}
	if v := d.byte(); d.err == nil && v != recordVersion {
		return Message{}, fmt.Errorf("%w: message record version %d", ErrCorruptCommand, v)
	}
	id := d.id()
	nm := d.message(intern)
	m := Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
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
		return Message{}, d.err
	}
	return m, nil
}

// EncodeTombstone encodes the payload of a tombstone record: the id whose
// earlier records in the file no longer live there.
func EncodeTombstone(id ID) []byte {
	b := id.Bytes()
	return append([]byte{recordVersion}, b[:]...)
}

// DecodeTombstone decodes a tombstone payload.
func DecodeTombstone(b []byte) (ID, error) {
	if len(b) != 1+IDLen || b[0] != recordVersion {
		return ID{}, fmt.Errorf("%w: tombstone of %d bytes", ErrCorruptCommand, len(b))
	}
	return IDFromBytes(b[1:])
}
