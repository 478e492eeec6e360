package transport

import "github.com/delaywheel/delaywheel/transport/service"

// Backend is what the HTTP server needs from the node: one Raft group,
// the service's one interface (service.Backend). Every method may return
// the wheel errors; the server maps them to status codes. The server
// validates requests before calling, and calls the write methods and
// Reserve only while LeaderHTTP says this node leads.
type Backend = service.Backend
