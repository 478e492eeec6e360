package transport

import (
	"context"
	"net/http"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/wheel"
)

// The validation of the HTTP API, for other front ends of the same Backend
// (the gRPC server): each returns nil or an *Error whose message names the
// field and the limit, exactly as the HTTP answer would.

// WithDefaults returns cfg with every unset field at its default.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// ToError maps any error to the answer the HTTP API gives it: an *Error
// stays as it is, a backend error is classified with errors.Is, anything
// else is a 500 that does not leak its text.
func ToError(err error) *Error { return toError(err) }

// ValidateEnqueueProto checks every message of req and converts it, with
// the defaults filled in and its due time made absolute; the bodies become
// the messages' as they are.
func ValidateEnqueueProto(req *pb.EnqueueRequest, lim Limits, nowMs int64) ([]wheel.NewMessage, error) {
	return validateEnqueueProto(req, lim, nowMs)
}

// ValidateReschedule resolves the new due time of a reschedule: exactly one
// of delayMs and deliverAtMs must be set.
func ValidateReschedule(delayMs, deliverAtMs *int64, lim Limits, nowMs int64) (int64, error) {
	return resolveDue("", delayMs, deliverAtMs, true, lim, nowMs)
}

// ValidateReserve checks a reserve request and returns max, wait and ttr in
// milliseconds (ttr 0 = each message's own).
func ValidateReserve(req api.ReserveRequest, lim Limits) (n int, waitMs, ttrMs int64, err error) {
	return validateReserve(req, lim)
}

// ValidateNackDelay checks the delay_ms of a nack.
func ValidateNackDelay(delayMs int64, lim Limits) error {
	return inRange("delay_ms", delayMs, 0, lim.MaxDelayMs, humanMs(lim.MaxDelayMs))
}

// ValidateTopic checks a topic name given as field name.
func ValidateTopic(name, topic string, lim Limits) error { return validateTopic(name, topic, lim) }

// ValidateKey checks the key of a cancel by key.
func ValidateKey(key string, lim Limits) error {
	if key == "" || len(key) > lim.MaxKeyLen {
		return invalid("key: must be 1 to %d bytes, got %d", lim.MaxKeyLen, len(key))
	}
	return nil
}

// ValidateDeadLimit checks the limit of a dead-letter listing; nil (left
// out) is the default, and an explicit 0 is out of range, as ?limit=0 is.
func ValidateDeadLimit(limit *int32, lim Limits) (int, error) {
	if limit == nil {
		return lim.DefaultDeadLimit, nil
	}
	return int(*limit), inRange("limit", int64(*limit), 1, int64(lim.MaxDeadLimit), "")
}

// ValidateSlot checks a slot number; an unknown slot is a 404.
func ValidateSlot(n int) error {
	if n < 0 || n >= wheel.Slots {
		return notFound("slot %d: no such slot (slots are 0 to %d)", n, wheel.Slots-1)
	}
	return nil
}

// ParseID parses a message id given as field name.
func ParseID(name, raw string) (wheel.ID, error) {
	id, err := wheel.ParseID(raw)
	if err != nil {
		return wheel.ID{}, invalid("%s: must be a message id (24 hex digits, not all zero), got %s", name, quoteShort(raw))
	}
	return id, nil
}

// ParseReceipts checks and parses the receipts of an ack, nack or touch.
func ParseReceipts(list []string, lim Limits) ([]wheel.Receipt, error) {
	return parseReceipts(list, lim)
}

// ParseIDs checks and parses the message ids of a redrive (none = all).
func ParseIDs(list []string, lim Limits) ([]wheel.ID, error) { return parseIDs(list, lim) }

// Overloaded is the 429 answer of a node whose long-poll slots are all
// taken; limit is their number.
func Overloaded(limit int) *Error {
	return overloaded("too many consumers are long-polling this node (limit %d); retry later, use a shorter wait_ms, or spread consumers over the nodes", limit)
}

// ClusterView returns the cluster view GET /v1/cluster answers: on the
// leader, what each member says of itself; on a follower, the leader's
// view, or its own when no leader can be asked. auth is the Authorization
// header to send to the other members.
//
// On a node of many groups, it is GET /v1/cluster's view of group 0 with
// every group in Groups.
func (s *Server) ClusterView(ctx context.Context, auth string) (api.Cluster, error) {
	view, err := s.clusterView(ctx, 0, false, false, auth)
	if err == nil && s.grouped != nil {
		s.allGroups(ctx, auth, &view)
	}
	return view, err
}

// ValidateStream checks the options of a stream (max_inflight and ttr_ms,
// each optional) and returns them.
func ValidateStream(maxInflight, ttrMs *int64, lim Limits) (wheel.StreamOptions, error) {
	opt := wheel.StreamOptions{MaxInflight: lim.DefaultInflight}
	if maxInflight != nil {
		if err := inRange("max_inflight", *maxInflight, 1, int64(lim.MaxInflight), ""); err != nil {
			return opt, err
		}
		opt.MaxInflight = int(*maxInflight)
	}
	if ttrMs != nil {
		if err := inRange("ttr_ms", *ttrMs, lim.MinTTRMs, lim.MaxTTRMs, ""); err != nil {
			return opt, err
		}
		opt.TTR = time.Duration(*ttrMs) * time.Millisecond
	}
	return opt, nil
}

// StreamsFull is the 429 answer of a node whose stream slots are all
// taken; limit is their number.
func StreamsFull(limit int) *Error {
	return overloaded("too many streams are open on this node (limit %d); retry later or spread consumers over the nodes", limit)
}

// Unauthenticated is the 401 answer of a call without the right token;
// its message says which.
func Unauthenticated(missing bool) *Error {
	if missing {
		return &Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated,
			Message: "missing bearer token: send \"Authorization: Bearer <token>\""}
	}
	return &Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated, Message: "wrong bearer token"}
}

// Invalid is a 400 invalid_argument answer; its message names the field
// and the limit.
func Invalid(format string, args ...any) *Error { return invalid(format, args...) }
