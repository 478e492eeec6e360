//go:build !linux || !cgo

package main

// trimCHeap does nothing: without cgo, Pebble allocates from Go's heap,
// which the runtime returns to the kernel itself.
func trimCHeap() {}
