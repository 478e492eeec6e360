//go:build !linux || !cgo

package main

// trimCHeap does nothing. Without cgo, Pebble allocates from Go's heap,
// which the runtime returns to the kernel itself. With cgo elsewhere than
// Linux, Pebble allocates with C's calloc and nothing trims that heap.
func trimCHeap() {}
