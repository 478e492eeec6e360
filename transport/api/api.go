package api

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/delaywheel/delaywheel/replication/view"
)

// Error codes of the error body, one per status (see API.md, beside it).
const (
	CodeInvalidArgument = "invalid_argument" // 400
	CodeUnauthenticated = "unauthenticated"  // 401
	CodeNotFound        = "not_found"        // 404
	CodeConflict        = "conflict"         // 409
	CodeTooLarge        = "too_large"        // 413
	CodeOverloaded      = "overloaded"       // 429
	CodeUnavailable     = "unavailable"      // 503
	CodeInternal        = "internal"         // 500
	// CodeMethodNotAllowed answers a known path called with another method.
	CodeMethodNotAllowed = "method_not_allowed" // 405
)

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: a code from the list above and a message
// a person can act on.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Ptr returns a pointer to v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }

// Payload is a message body on the wire: "body" when it is UTF-8 text,
// "body_base64" otherwise. A request may set at most one of the two; an
// answer sets exactly one.
type Payload struct {
	Body       *string `json:"body,omitempty"`
	BodyBase64 *string `json:"body_base64,omitempty"`
}

// TextBody is the payload of a UTF-8 text body.
func TextBody(s string) Payload { return Payload{Body: &s} }

// BinaryBody is the payload of an arbitrary body, sent as base64.
func BinaryBody(b []byte) Payload {
	s := base64.StdEncoding.EncodeToString(b)
	return Payload{BodyBase64: &s}
}

// PayloadOf is the payload of b: text when b is valid UTF-8, base64 otherwise.
func PayloadOf(b []byte) Payload {
	if utf8.Valid(b) {
		return TextBody(string(b))
	}
	return BinaryBody(b)
}

// Bytes returns the body the payload carries (empty when it carries none).
func (p Payload) Bytes() ([]byte, error) {
	switch {
	case p.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*p.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("body_base64: %w", err)
		}
		return b, nil
	case p.Body != nil:
		return []byte(*p.Body), nil
	default:
		return nil, nil
	}
}

// Message is one message of an enqueue request. Optional numbers are
// pointers so that an explicit value (even 0) can be told from an omitted one.
type Message struct {
	Topic string `json:"topic"`
	Payload
	DelayMs     *int64            `json:"delay_ms,omitempty"`      // or DeliverAtMs; neither = now
	DeliverAtMs *int64            `json:"deliver_at_ms,omitempty"` // absolute; past = now
	Key         string            `json:"key,omitempty"`
	Priority    int64             `json:"priority,omitempty"`
	TTRMs       *int64            `json:"ttr_ms,omitempty"`       // default 30 s
	MaxAttempts *int32            `json:"max_attempts,omitempty"` // default 10
	Headers     map[string]string `json:"headers,omitempty"`
}

// EnqueueRequest is the body of POST /v1/messages.
type EnqueueRequest struct {
	Messages []Message `json:"messages"`
}

// Result is the outcome of one enqueued message.
type Result struct {
	ID          string `json:"id"`
	DeliverAtMs int64  `json:"deliver_at_ms"`
	Duplicate   bool   `json:"duplicate"`
}

// EnqueueResponse answers POST /v1/messages: one result per message, in order.
type EnqueueResponse struct {
	Results []Result `json:"results"`
}

// Message states as the API names them.
const (
	StateDelayed   = "delayed"
	StateReady     = "ready"
	StateReserved  = "reserved"
	StateDead      = "dead"
	StateCancelled = "cancelled"
)

// MessageView answers GET /v1/messages/{id} and lists dead letters. A dead
// letter's DeliverAtMs is when it would have been due again had it had
// attempts left; EnqueuedMs is when it was enqueued.
type MessageView struct {
	ID          string            `json:"id"`
	Topic       string            `json:"topic"`
	State       string            `json:"state"`
	DeliverAtMs int64             `json:"deliver_at_ms"`
	EnqueuedMs  int64             `json:"enqueued_ms"`
	Attempts    int32             `json:"attempts"`
	Key         string            `json:"key"`
	Priority    int64             `json:"priority"`
	Headers     map[string]string `json:"headers"`
	Payload
}

// Cancelled answers a cancel by id or by key.
type Cancelled struct {
	ID    string `json:"id"`
	State string `json:"state"` // always "cancelled"
}

// RescheduleRequest is the body of POST /v1/messages/{id}/reschedule: exactly
// one of the two fields.
type RescheduleRequest struct {
	DelayMs     *int64 `json:"delay_ms,omitempty"`
	DeliverAtMs *int64 `json:"deliver_at_ms,omitempty"`
}

// Rescheduled answers a reschedule.
type Rescheduled struct {
	ID          string `json:"id"`
	DeliverAtMs int64  `json:"deliver_at_ms"`
}

// ReserveRequest is the body of POST /v1/topics/{topic}/reserve.
type ReserveRequest struct {
	Max    *int   `json:"max,omitempty"`     // 1 … 1000, default 1
	WaitMs int64  `json:"wait_ms,omitempty"` // long-poll up to this long, default 0
	TTRMs  *int64 `json:"ttr_ms,omitempty"`  // lease length; default each message's own
}

// Delivery is one reserved message.
type Delivery struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	Payload
	Headers        map[string]string `json:"headers"`
	Key            string            `json:"key"`
	Priority       int64             `json:"priority"`
	DeliverAtMs    int64             `json:"deliver_at_ms"`
	Attempt        int32             `json:"attempt"`
	Receipt        string            `json:"receipt"`
	LeaseExpiresMs int64             `json:"lease_expires_ms"`
}

// ReserveResponse answers a reserve; Messages is empty (never null) on timeout.
type ReserveResponse struct {
	Messages []Delivery `json:"messages"`
}

// ReceiptsRequest is the body of POST /v1/ack and POST /v1/touch.
type ReceiptsRequest struct {
	Receipts []string `json:"receipts"`
}

// NackRequest is the body of POST /v1/nack.
type NackRequest struct {
	Receipts []string `json:"receipts"`
	DelayMs  int64    `json:"delay_ms,omitempty"`
}

// AckResponse answers POST /v1/ack.
type AckResponse struct {
	Acked int `json:"acked"`
	Stale int `json:"stale"`
}

// NackResponse answers POST /v1/nack.
type NackResponse struct {
	Nacked int `json:"nacked"`
	Stale  int `json:"stale"`
}

// BuryResponse answers POST /v1/bury.
type BuryResponse struct {
	Buried int `json:"buried"`
	Stale  int `json:"stale"`
}

// TouchResponse answers POST /v1/touch.
type TouchResponse struct {
	Touched int `json:"touched"`
	Stale   int `json:"stale"`
}

// TopicCounts are a topic's message counts by state.
type TopicCounts struct {
	Topic    string `json:"topic"`
	Delayed  int64  `json:"delayed"`
	Ready    int64  `json:"ready"`
	Reserved int64  `json:"reserved"`
	Dead     int64  `json:"dead"`
}

// TopicsResponse answers GET /v1/topics.
type TopicsResponse struct {
	Topics []TopicCounts `json:"topics"`
}

// DeadResponse answers GET /v1/topics/{topic}/dead.
type DeadResponse struct {
	Messages []MessageView `json:"messages"`
}

// RedriveRequest is the optional body of POST /v1/topics/{topic}/dead/redrive;
// no ids (nil, left out of the JSON) means every dead message of the
// topic, an empty list none.
type RedriveRequest struct {
	IDs []string `json:"ids,omitzero"`
}

// RedriveResponse answers a redrive.
type RedriveResponse struct {
	Redriven int `json:"redriven"`
}

// SlotSummary describes one non-empty slot of the wheel.
type SlotSummary struct {
	Slot     int   `json:"slot"`
	Second   int64 `json:"second"`
	Messages int   `json:"messages"`
	Bytes    int64 `json:"bytes"`
}

// Wheel answers GET /v1/wheel.
type Wheel struct {
	Slots            int           `json:"slots"`
	TickMs           int64         `json:"tick_ms"`
	CursorMs         int64         `json:"cursor_ms"`
	HorizonMs        int64         `json:"horizon_ms"`
	OpenSegments     int           `json:"open_segments"`
	OverflowMessages int64         `json:"overflow_messages"`
	NonEmpty         []SlotSummary `json:"nonempty"`
}

// SlotRecord is one record of a slot file.
type SlotRecord struct {
	Offset   int64  `json:"offset"`
	Type     string `json:"type"`
	Index    uint64 `json:"index"`
	ID       string `json:"id"`
	Topic    string `json:"topic"`
	DueMs    int64  `json:"due_ms"`
	Attempts int32  `json:"attempts"`
	Bytes    int    `json:"bytes"`
	Live     bool   `json:"live"`
}

// Slot answers GET /v1/wheel/slots/{slot}; Records only with ?records=true.
type Slot struct {
	Slot     int          `json:"slot"`
	Second   int64        `json:"second"`
	File     string       `json:"file"`
	Messages int          `json:"messages"`
	Bytes    int64        `json:"bytes"`
	Records  []SlotRecord `json:"records,omitzero"` // nil unless asked for
}

// Node is a cluster member's addresses: the body of POST /v1/cluster/nodes.
type Node = view.Node

// NodeStatus is a member as GET /v1/cluster reports it.
type NodeStatus = view.NodeStatus

// Cluster answers GET /v1/cluster.
type Cluster = view.Cluster

// Group is one Raft group in GET /v1/cluster: its leader, term, the
// leader's indexes and how far the answering node lags behind.
type Group = view.Group

// NodeRemoved answers DELETE /v1/cluster/nodes/{id}.
type NodeRemoved struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

// Status answers /healthz and /readyz when they succeed. A ready node's
// /readyz also gives its applied index and the leader's commit index it
// has reached.
type Status struct {
	Status            string `json:"status"`
	AppliedIndex      uint64 `json:"applied_index,omitempty"`
	LeaderCommitIndex uint64 `json:"leader_commit_index,omitempty"`
}
