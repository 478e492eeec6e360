package command

import (
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Kind tags a command in its encoding.
type Kind uint8

// Command kinds. The values are part of the log format: never reuse one.
const (
	KindSchedule   Kind = 1
	KindCancel     Kind = 2
	KindReschedule Kind = 3
	KindLease      Kind = 4
	KindAck        Kind = 5
	KindNack       Kind = 6
	KindTouch      Kind = 7
	KindExpire     Kind = 8
	KindPromote    Kind = 9
	KindRedrive    Kind = 10
	KindSetNode    Kind = 11
	KindRemoveNode Kind = 12
	KindBury       Kind = 13
	// 14 is taken.
	KindSetWebhook    Kind = 15
	KindDeleteWebhook Kind = 16

	KindSetSchedule      Kind = 17
	KindDeleteSchedule   Kind = 18
	KindAdvanceSchedules Kind = 19
	// KindSetNodeGRPC is a SetNode whose node has a gRPC address: the
	// fields of KindSetNode and then that address. A SetNode without one
	// keeps KindSetNode, so that its entry reads as it always did.
	KindSetNodeGRPC Kind = 20
	// KindDeadLetter moves a reserved message to its topic's dead letters.
	KindDeadLetter Kind = 21
	// KindLeaseBuried redrives one dead message and leases it, in one
	// apply. A binary older than it cannot decode it.
	KindLeaseBuried Kind = 22
)

// Command is one change to the store. Commands are pure data: applying one
// depends only on the store's state and the command, never on the clock.
type Command interface {
	Kind() Kind
}

// NewMessage is a message to schedule. DeliverAtMs is absolute: the leader
// turns a delay into an instant before proposing.
type NewMessage struct {
	Topic       string
	Key         string
	Body        []byte
	Headers     map[string]string
	Priority    int64
	DeliverAtMs int64
	TTRMs       int64
	MaxAttempts int32
}

// Schedule adds messages. IDs are (log index, position).
type Schedule struct {
	NowMs    int64
	Messages []NewMessage
}

// Cancel removes a delayed or ready message, by ID or, when Topic is set, by key.
type Cancel struct {
	ID    model.ID
	Topic string
	Key   string
}

// Reschedule moves a delayed or ready message to a new instant.
type Reschedule struct {
	ID          model.ID
	DeliverAtMs int64
}

// LeaseItem is one hand-off the leader made.
type LeaseItem struct {
	ID          model.ID
	Nonce       uint64
	ExpiresMs   int64 // the receipt is stale after this
	RedeliverMs int64 // when the message comes back unless acked (≥ ExpiresMs)
}

// Lease records hand-offs: each message becomes reserved, and its
// redelivery is written into the wheel at RedeliverMs.
type Lease struct {
	NowMs int64
	Items []LeaseItem
}

// Ack finishes reserved messages.
type Ack struct {
	NowMs    int64
	Receipts []model.Receipt
}

// Nack returns reserved messages to delayed, due at NowMs+DelayMs.
type Nack struct {
	NowMs    int64
	DelayMs  int64
	Receipts []model.Receipt
}

// Touch extends leases by their time-to-run from NowMs.
type Touch struct {
	NowMs    int64
	Receipts []model.Receipt
}

// Bury moves reserved messages whose last allowed lease ended before NowMs
// to their topics' dead letters, without waiting for their slot to
// expire. A receipt that no longer holds the message (acked, nacked,
// touched past NowMs, or with attempts left) is counted stale and changes
// nothing.
type Bury struct {
	NowMs    int64
	Receipts []model.Receipt
}

// DeadLetter moves reserved messages to their topics' dead letters at
// once, whatever their attempts: a consumer's refusal of a message
// (beanstalkd's bury). A receipt that no longer holds its message is
// counted stale and changes nothing.
type DeadLetter struct {
	NowMs    int64
	Receipts []model.Receipt
}

// settlement is a command encoded as its instant and receipts alone: Ack,
// Touch, Bury and DeadLetter.
type settlement interface {
	settles() (nowMs int64, rs []model.Receipt)
}

func (c Ack) settles() (int64, []model.Receipt)        { return c.NowMs, c.Receipts }
func (c Touch) settles() (int64, []model.Receipt)      { return c.NowMs, c.Receipts }
func (c Bury) settles() (int64, []model.Receipt)       { return c.NowMs, c.Receipts }
func (c DeadLetter) settles() (int64, []model.Receipt) { return c.NowMs, c.Receipts }

// Expire fires every slot whose second is before Before: their remaining
// messages move to ready (or dead), and the files are deleted. The cursor
// moves to Before.
type Expire struct {
	Before int64 // absolute second
}

// Promote moves overflow messages due before the second Before into the
// wheel (or straight to ready when already due).
type Promote struct {
	Before int64 // absolute second
}

// Redrive moves dead messages of a topic back to ready with attempts reset.
// No IDs means all of them.
type Redrive struct {
	NowMs int64
	Topic string
	IDs   []model.ID
}

// LeaseBuried moves one dead message of Topic back to ready, as a Redrive
// of it does (attempts reset), and leases it, as a Lease of Item does, in
// one apply: beanstalkd's reserve-job of a buried job. Its result is a
// Lease's, of the one item.
type LeaseBuried struct {
	NowMs int64
	Topic string
	Item  LeaseItem
}

// SetNode records a node's metadata.
type SetNode struct{ Node model.Member }

// RemoveNode forgets a node's metadata.
type RemoveNode struct{ ID string }

// Kind implements Command.
func (Schedule) Kind() Kind { return KindSchedule }

// Kind implements Command.
func (Cancel) Kind() Kind { return KindCancel }

// Kind implements Command.
func (Reschedule) Kind() Kind { return KindReschedule }

// Kind implements Command.
func (Lease) Kind() Kind { return KindLease }

// Kind implements Command.
func (Ack) Kind() Kind { return KindAck }

// Kind implements Command.
func (Nack) Kind() Kind { return KindNack }

// Kind implements Command.
func (Touch) Kind() Kind { return KindTouch }

// Kind implements Command.
func (Expire) Kind() Kind { return KindExpire }

// Kind implements Command.
func (Promote) Kind() Kind { return KindPromote }

// Kind implements Command.
func (Redrive) Kind() Kind { return KindRedrive }

// Kind implements Command.
func (c SetNode) Kind() Kind {
	if c.Node.GRPCAddr != "" {
		return KindSetNodeGRPC
	}
	return KindSetNode
}

// Kind implements Command.
func (RemoveNode) Kind() Kind { return KindRemoveNode }

// Kind implements Command.
func (Bury) Kind() Kind { return KindBury }

// Kind implements Command.
func (DeadLetter) Kind() Kind { return KindDeadLetter }

// Kind implements Command.
func (LeaseBuried) Kind() Kind { return KindLeaseBuried }

// Webhook is a topic's push endpoint: while a topic has one, the leader
// POSTs its due messages to URL instead of handing them to consumers.
// It is replicated state (SetWebhook, DeleteWebhook).
type Webhook struct {
	Topic          string
	URL            string
	Secret         string // signs each request; never shown back
	TimeoutMs      int64  // per request
	MaxConcurrency int64  // requests in flight at once
	RatePerS       int64  // requests started per second; 0: no limit
}

// SetWebhook sets or replaces a topic's webhook.
type SetWebhook struct{ Webhook Webhook }

// DeleteWebhook removes a topic's webhook; ErrNotFound when it has none.
type DeleteWebhook struct{ Topic string }

// Kind implements Command.
func (SetWebhook) Kind() Kind { return KindSetWebhook }

// Kind implements Command.
func (DeleteWebhook) Kind() Kind { return KindDeleteWebhook }

// ScheduleSpec is a recurring schedule as a client sets it: when it fires
// (Cron in Timezone, or every EveryMs from StartAtMs) and the message each
// occurrence enqueues.
type ScheduleSpec struct {
	Name        string
	Topic       string
	Cron        string // five fields, or six with seconds first
	Timezone    string // IANA name; "" is UTC
	EveryMs     int64
	StartAtMs   int64 // no occurrence before it; 0: from when it is set
	EndAtMs     int64 // no occurrence after it; 0: none
	Body        []byte
	Headers     map[string]string
	Priority    int64
	TTRMs       int64
	MaxAttempts int32
}

// SetSchedule creates or replaces a recurring schedule. Its first
// occurrence is the first at or after both NowMs (the leader's time) and
// StartAtMs. Its result is the stored ScheduleInfo.
type SetSchedule struct {
	NowMs int64
	Spec  ScheduleSpec
}

// DeleteSchedule removes a recurring schedule. Occurrences already
// enqueued are ordinary messages and stay. Its result is an error wrapping
// ErrNotFound when there was none.
type DeleteSchedule struct{ Name string }

// AdvanceItem names a schedule and the occurrence the leader saw as its
// next one.
type AdvanceItem struct {
	Name   string
	FromMs int64
}

// AdvanceSchedules enqueues, for each item whose schedule's next
// occurrence is still FromMs, that occurrence (a message due at FromMs,
// keyed OccurrenceKey), and moves the schedule to its following
// occurrence. Other items are stale and change nothing, which makes a
// retry after a leader change harmless. Its result is AdvanceResult.
//
// The following occurrence is chosen so that a live leader never skips
// one, and an outage costs one late occurrence, not a burst:
//
//   - FromMs >= SinceMs (the occurrence is the stamping leader's, however
//     late it advances it): the first after FromMs. A leader that falls
//     behind catches up occurrence by occurrence.
//   - FromMs < SinceMs (it came due before that leader took over, while
//     no leader advanced schedules): the first after max(FromMs, NowMs),
//     so the occurrences missed meanwhile fire once, late.
//
// Both instants are the leader's, stamped into the command: applying reads
// no clock, so every replica moves the schedule alike.
type AdvanceSchedules struct {
	// NowMs is the leader's time when it proposed the advance.
	NowMs int64
	// SinceMs is the earliest occurrence the proposing leader answers
	// for: the leader's time at its scheduler's first look in its term,
	// from which it has advanced schedules continuously, less the
	// scheduler's look-ahead. The margin makes the few occurrences due
	// just before the leader took over (no more than a look-ahead's worth,
	// which the leader before would have enqueued by then had it run on)
	// its own, caught up rather than collapsed into one. 0 counts every
	// occurrence as the leader's.
	SinceMs int64
	Items   []AdvanceItem
}

// AdvanceResult counts what an AdvanceSchedules did: occurrences enqueued,
// occurrences whose key already held a message (not enqueued again), and
// stale items.
type AdvanceResult struct {
	Fired     int
	Duplicate int
	Stale     int
}

// Kind implements Command.
func (SetSchedule) Kind() Kind { return KindSetSchedule }

// Kind implements Command.
func (DeleteSchedule) Kind() Kind { return KindDeleteSchedule }

// Kind implements Command.
func (AdvanceSchedules) Kind() Kind { return KindAdvanceSchedules }

// Result is what applying one command produced: a value (for Schedule,
// []Enqueued; for Cancel, ID; for Reschedule, int64; for Lease and
// LeaseBuried, []bool saying which items took effect; for Ack/Nack/Touch/Bury/DeadLetter, Counted; for Redrive,
// int; for Promote, int) or an error.
type Result struct {
	Value any
	Err   error
}

// Counted is the result of Ack, Nack, Touch, Bury and DeadLetter.
type Counted struct {
	Done  int
	Stale int
}
