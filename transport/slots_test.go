package transport_test

import (
	"errors"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
)

// Slots hand out at most their limit, take back what is released, and
// take the default limits for zero fields.
func TestSlots(t *testing.T) {
	p := transport.NewSlots(transport.Limits{MaxWaiters: 1, MaxStreams: 1})
	release, err := p.AcquireWaiter()
	if err != nil {
		t.Fatal(err)
	}
	var e *transport.Error
	if _, err := p.AcquireWaiter(); !errors.As(err, &e) || e.Code != api.CodeOverloaded {
		t.Fatalf("a second waiter of 1: %v; want overloaded", err)
	}
	if _, err := p.AcquireStream(); err != nil {
		t.Fatalf("a stream beside the waiter: %v", err)
	}
	release()
	if _, err := p.AcquireWaiter(); err != nil {
		t.Fatalf("a waiter after the release: %v", err)
	}
	d := transport.NewSlots(transport.Limits{})
	for range 3 {
		if _, err := d.AcquireWaiter(); err != nil {
			t.Fatalf("default limits: %v", err)
		}
		if _, err := d.AcquireStream(); err != nil {
			t.Fatalf("default limits: %v", err)
		}
	}
}
