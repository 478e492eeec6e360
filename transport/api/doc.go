// Package api owns the wire types of the delaywheel HTTP API described in
// API.md: the JSON request and response bodies, the error body and its
// codes, and the protobuf form of the enqueue call (delaywheel.proto,
// encoded and decoded by hand with protowire, no generated code). Both the
// server (package transport) and the Go client (package transport/client)
// use these types, so the two cannot drift apart.
//
// It depends on the standard library and protowire only, so that the Go
// client does not pull in the server's storage. It must not hold behaviour beyond small
// helpers on the types themselves: validation and conversion from the
// domain types live in package transport.
package api
