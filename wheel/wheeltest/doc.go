// Package wheeltest is the test kit of the wheel's users: FakeClock, a
// wheel.Clock that moves only when a test advances it, so that what waits
// on time (the loader, the dispatcher, leases, webhooks) is driven without
// the wall clock.
//
// Only tests import this package; it imports nothing of delaywheel, so that
// the wheel's own tests can use it too.
package wheeltest
