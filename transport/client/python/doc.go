// Package python holds the example Python client of delaywheel
// (example.py: the HTTP API with Python's standard library, the gRPC API
// with stubs generated at run time from transport/api/delaywheel.proto by
// Debian's protoc and grpc_python_plugin) and the test that runs it against
// a real server. It has no Go API.
package python
