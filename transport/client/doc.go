// Package client is the Go client of the delaywheel HTTP API (API.md). It
// speaks the wire types of package transport/api and turns every non-2xx
// answer into an *Error.
//
// It owns nothing but the HTTP calls: no retries, no connection to the
// server's internals. Any node of a cluster can be given as the base URL;
// the nodes forward writes and reserves to the leader themselves.
package client
