// Package api owns the wire types of the delaywheel HTTP API described in
// API.md, beside it: the JSON request and response bodies, the error body and its
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
// The schema is delaywheel.proto, the one source of the protobuf form and
// of the gRPC service; its Go code is generated into package pb (run go
// generate; .ci/protocheck fails when the checked-in code is stale). This
// package converts between the generated types and its own, and decodes the
// HTTP enqueue body strictly the way the JSON decoder is: before the
// generated decoder runs, a walk over the schema's descriptor refuses an
// unknown field, a field given twice, a wrong wire type or a string that is
// not UTF-8, naming the field. Answers skip unknown fields, so a newer
// server's answer still decodes.
//
// # OpenAPI
//
// openapi.json is the OpenAPI 3.1 document of the whole HTTP API, embedded
// and served at GET /v1/openapi.json ([OpenAPI]). It is written by hand
// from these types and the server's routes; the tests of package transport
// fail when a route the server registers is missing from it, and validate
// every request and answer of their test servers against it.
//
// It also says which message headers the API takes ([CheckHeader]): each
// must be sendable as an HTTP header, the rule the enqueue enforces on
// every API and the webhook sender follows.
//
// It depends on the standard library, the protobuf runtime and
// golang.org/x/net/http/httpguts only, so that the Go client does not pull
// in the server's storage. It must not hold behaviour
// beyond small helpers on the types themselves: validation and conversion
// from the domain types live in package transport.
package api

//go:generate protoc --proto_path=. --go_out=. --go_opt=module=github.com/delaywheel/delaywheel/transport/api --go-grpc_out=. --go-grpc_opt=module=github.com/delaywheel/delaywheel/transport/api delaywheel.proto
