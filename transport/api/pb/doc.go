// Package pb owns the Go code generated from ../delaywheel.proto by protoc,
// protoc-gen-go and protoc-gen-go-grpc: the protobuf messages and the gRPC
// client and server stubs of the Delaywheel service. Only this file is
// written by hand; regenerate the rest with `go generate ./transport/api/`
// using the plugin versions .ci/protocheck pins (protoc-gen-go v1.36.12,
// protoc-gen-go-grpc v1.6.2), and .ci/protocheck fails when it is stale.
package pb
