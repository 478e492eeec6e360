package model

import "errors"

// Errors the store returns; the API maps them to status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid argument")
)

// Errors of the serving layers, shared so that the HTTP API can map them to
// status codes without importing the Raft node.
var (
	// ErrUnavailable means there is no leader or the node is not caught up.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotLeader means the call must go to the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrOverloaded means back-pressure: try again later.
	ErrOverloaded = errors.New("overloaded")
	// ErrTooLarge means a body, batch or request is over its limit.
	ErrTooLarge = errors.New("too large")
)
