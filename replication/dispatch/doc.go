// Package dispatch owns the leader's dispatcher: the tick loop that stamps
// Expire and Promote into the log as the clock moves, the precision heap
// (a wheel.Loader) kept loaded a little ahead of the cursor, the fire loop
// that pops each message at its due millisecond, and the hand-offs to
// waiting consumers, each leased by one Lease entry.
//
// The dispatcher reaches the Raft node only through the small Node
// interface: propose commands (and wait for their results, or submit them
// and wait later), ask whether the leadership lease is held, and read the
// current store to attach its loader. The node owns the lease itself (its
// confirmations come from Raft: VerifyLeader rounds and committed
// proposals) and starts a dispatcher on each election it wins.
//
// # Answering a hand-off
//
// A first hand-off is answered as soon as its Lease entry is in the
// leader's log order, without waiting for the commit, while the node holds
// its leadership lease: a quorum confirmed it at most half a heartbeat
// timeout ago. No follower votes for another candidate until it has not
// heard from the leader for a whole heartbeat timeout, so within that
// window no other leader can exist, and a deposed leader (paused,
// partitioned) cannot deliver. An ack the consumer sends afterwards is
// ordered after the Lease. Such a Lease rides with the node's next entry
// (Replica.SubmitRider): it reaches Raft just before the next entry the
// node submits, most often an ack, or within a millisecond, and shares its
// write and fsync; it is in the log order from the moment it is queued.
// If the leader dies before the Lease commits, the next leader delivers
// the message again (at-least-once, a duplicate only where the leader
// changed). If the entry fails while the node stays
// leader (back-pressure, a leadership transfer under way), the dispatcher
// holds the message back until the lease it was answered with ends, as a
// committed lease would, and only then hands it out again. Without the
// lease (just elected, quorum contact lost, leadership being handed
// over), a hand-off is answered only once its Lease has committed.
//
// A redelivery of an expired lease is always answered at commit: its Lease
// races the consumer's own ack, touch or nack of the previous attempt, and
// must not be handed out if one of those wins. A first hand-off's Lease is
// refused only if a cancel or reschedule races it.
//
// # Streams
//
// A stream (Stream) is a long-lived consumer of one topic: a loop that
// calls Reserve, the same long-poll and hand-off every reserve takes, for
// as many messages as its window (max_inflight unsettled deliveries) and
// its buffer (streamBuffer unread deliveries) have room, so a stream
// delivery is a reserve's delivery, with the same receipt, lease and
// at-least-once reasoning as above. The dispatcher never waits on a
// stream: a waiter's channel is buffered, and a stream whose reader is
// slow stops asking. A delivery leaves the window as soon as its
// consumer's ack or nack is on its way: read up the stream by the
// transport, or submitted to the log by the node (Settling), so that how
// far the apply trails the commit never holds deliveries back; or when its
// lease has ended, which the stream reads from the store (a touch may have
// moved it). The stream keeps a settling receipt apart until the node
// reports its ack applied (Settled; the dispatcher maps each receipt to
// its stream). Closing a stream proposes a Nack with no delay for its
// unsettled receipts: they come due at once, and the attempt they were
// handed out for counts. Its owner's Close (which comes once the acks it
// read are in the log) releases the settling ones too, whose nack then
// finds an applied ack's lease over and changes nothing, or brings back a
// delivery whose ack failed; an end the dispatcher brings (Seal) leaves
// them to their acks, which may still be on their way. A stream ends with
// ErrNotLeader when the dispatcher stops; its leases then end on their
// own and the next leader redelivers.
//
// # Reserve by id
//
// ReserveID (beanstalkd's reserve-job, POST /v1/messages/{id}/reserve)
// leases one message by its id, whatever its due time, with the same
// Lease entry a hand-off makes (a dead message's LeaseBuried redrives it
// in the same apply): it is the one way a message leaves before it is
// due, because its client named it. It marks the message in flight
// as a hand-off does, so that neither takes it from the other, and it is
// answered only once its Lease commits.
//
// # Lateness
//
// The path from a due millisecond to the answer is kept short, because
// every step of it is lateness: the fire loop wakes on a precise alarm
// (waker: a timerfd on Linux with the system clock) or on a timer for the
// same instant, whichever the runtime gets to first, an arriving reserve
// pops what came due itself rather than wait for the fire loop, the
// consumer's goroutine submits its Lease entry itself (Raft batches
// concurrent entries into one write), and a goroutine per Lease waits for
// its commit, so a commit stall holds up no hand-off while the lease is
// held. A wake-up is only a hint to look: what the clock says is due is
// what is popped, so no message is handed out early. A hand-off whose
// Lease entry fails (refused by back-pressure, lost with the leadership)
// before anyone was answered gives its popped messages back to the due
// list at once, unless a batch changed them since (wheel.Loader.Unclaim),
// rather than leave them to their slot's expiry.
package dispatch
