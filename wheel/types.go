package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Wheel geometry.
const (
	Slots       = 7200 // one-second slots: a two-hour horizon
	TickMs      = 1000 // width of a slot in milliseconds
	HorizonSecs = Slots
)

// SlotOf returns the slot index of an absolute second.
func SlotOf(second int64) int { return int(((second % Slots) + Slots) % Slots) }

// SecondOf returns the absolute second containing the millisecond ms.
func SecondOf(ms int64) int64 {
	if ms < 0 {
		return (ms - TickMs + 1) / TickMs
	}
	return ms / TickMs
}

// State is where a message is in its life.
type State uint8

// Message states.
const (
	StateDelayed  State = 1
	StateReady    State = 2
	StateReserved State = 3
	StateDead     State = 4
)

// String names the state as the API does.
func (s State) String() string {
	switch s {
	case StateDelayed:
		return "delayed"
	case StateReady:
		return "ready"
	case StateReserved:
		return "reserved"
	case StateDead:
		return "dead"
	default:
		return fmt.Sprintf("state(%d)", uint8(s))
	}
}

// View is a message with its state, as inspection returns it.
type View struct {
	model.Message
	State State
}

// At is v as a reader sees it at nowMs: a delayed message whose due
// millisecond has come is ready, since it can be reserved from then on,
// though it stays in its slot until the slot expires.
func (v View) At(nowMs int64) View {
	if v.State == StateDelayed && v.DeliverAtMs <= nowMs {
		v.State = StateReady
	}
	return v
}

// TopicCounts are the per-state message counts of a topic.
type TopicCounts struct {
	Topic    string
	Delayed  int64
	Ready    int64
	Reserved int64
	Dead     int64
}

// Enqueued is the result of one scheduled message.
type Enqueued struct {
	ID          model.ID
	DeliverAtMs int64
	Duplicate   bool
}

// SlotSummary describes one non-empty slot.
type SlotSummary struct {
	Slot     int
	Second   int64
	Messages int // live message and lease records
	Bytes    int64
}

// Info describes the wheel.
type Info struct {
	CursorMs         int64
	HorizonMs        int64
	OpenSegments     int
	OverflowMessages int64
	NonEmpty         []SlotSummary
}

// SlotRecord is one decoded record of a slot file.
type SlotRecord struct {
	Offset   int64
	Type     string
	Index    uint64
	ID       model.ID
	Topic    string
	DueMs    int64
	Attempts int32
	Bytes    int
	Live     bool
}

// SlotInfo describes one slot and, on request, its records.
type SlotInfo struct {
	SlotSummary
	File    string
	Records []SlotRecord
}
