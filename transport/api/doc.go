// Package api owns the wire types of the delaywheel HTTP API described in
// API.md: the JSON request and response bodies, the error body and its
// codes, and the protobuf form of the enqueue call (delaywheel.proto).
// Both the server (package transport) and the Go client (package
// transport/client) use these types, so the two cannot drift apart.
//
// # Protobuf enqueue
//
// POST /v1/messages also takes and answers [ContentTypeProto]. Decoding
// JSON is the largest single cost of an enqueue on both ends, and an
// enqueue is the call a producer makes most; the protobuf form carries the
// same fields (the body as raw bytes instead of text or base64) and is
// validated by the same rules, with errors naming the same fields
// ("messages[3].ttr_ms: …"). Every other call is JSON only, and error
// bodies are always JSON.
//
// The codec is written by hand on protowire rather than generated, so that
// this package needs no protobuf runtime and no generated code, and so that
// decoding is strict the way the JSON decoder is: an unknown field, a field
// given twice or a string that is not UTF-8 is an error naming the field.
// The decoded strings of one request share one copy of it, and its optional
// numbers one slab, so a batch costs a few allocations rather than several
// per message. Answers skip unknown fields, so a newer server's answer still
// decodes.
//
// It depends on the standard library and protowire only, so that the Go
// client does not pull in the server's storage. It must not hold behaviour
// beyond small helpers on the types themselves: validation and conversion
// from the domain types live in package transport.
package api
