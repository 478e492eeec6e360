package service

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/textproto"
	"slices"
	"strconv"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The validation every front end shares: each function returns nil or an
// *Error of class model.ErrInvalid, model.ErrTooLarge or
// model.ErrNotFound whose message names the field, the index within a
// batch, and the limit, so that every API answers a request alike.

// Invalid is a refusal of class model.ErrInvalid.
func Invalid(format string, args ...any) *Error { return refuse(model.ErrInvalid, format, args...) }

// TooLarge is a refusal of class model.ErrTooLarge.
func TooLarge(format string, args ...any) *Error { return refuse(model.ErrTooLarge, format, args...) }

// NotFound is a refusal of class model.ErrNotFound.
func NotFound(format string, args ...any) *Error { return refuse(model.ErrNotFound, format, args...) }

// ValidateEnqueueProto checks every message of a protobuf request as
// ValidateEnqueue does. Invariant: a body is the decoder's own copy (the
// generated decoder never aliases its input), so it becomes the message's
// body as it is, where the JSON form needs a copy into a []byte.
func ValidateEnqueueProto(req *pb.EnqueueRequest, lim Limits, nowMs int64) ([]command.NewMessage, error) {
	msgs := req.GetMessages()
	if err := CheckCount("messages", len(msgs), lim.MaxBatch, false); err != nil {
		return nil, err
	}
	out := make([]command.NewMessage, len(msgs))
	for i, p := range msgs {
		m := api.MessageFields(p)
		body := p.GetBody()
		nm, err := validateFields(&m, body, CheckBodySize("body", body, lim), "", lim, nowMs)
		if err != nil {
			where := Index("messages", i)
			_, err = validateFields(&m, body, CheckBodySize(FieldPath(where, "body"), body, lim), where, lim, nowMs)
			return nil, err
		}
		out[i] = nm
	}
	return out, nil
}

// ValidateEnqueue checks every message of req and converts it, with the
// defaults filled in and its due time made absolute.
func ValidateEnqueue(req api.EnqueueRequest, lim Limits, nowMs int64) ([]command.NewMessage, error) {
	if err := CheckCount("messages", len(req.Messages), lim.MaxBatch, false); err != nil {
		return nil, err
	}
	out := make([]command.NewMessage, len(req.Messages))
	for i := range req.Messages {
		// Unnamed first: the names an error gives its fields are built only
		// for a message that fails, which is then checked again with them.
		nm, err := ValidateMessage(&req.Messages[i], "", lim, nowMs)
		if err != nil {
			_, err = ValidateMessage(&req.Messages[i], Index("messages", i), lim, nowMs)
			return nil, err
		}
		out[i] = nm
	}
	return out, nil
}

// ValidateMessage checks one message; where is "messages[i]".
func ValidateMessage(m *api.Message, where string, lim Limits, nowMs int64) (command.NewMessage, error) {
	body, bodyErr := validatePayload(where, m.Payload, lim)
	return validateFields(m, body, bodyErr, where, lim, nowMs)
}

// validateFields checks one message whose body is decoded already: body,
// or bodyErr, which it reports where validateMessage always has (after the
// topic), so that both forms name the same first error.
func validateFields(m *api.Message, body []byte, bodyErr error, where string, lim Limits, nowMs int64) (command.NewMessage, error) {
	nm := command.NewMessage{Topic: m.Topic, Key: m.Key, Priority: m.Priority, Headers: m.Headers,
		TTRMs: lim.DefaultTTRMs, MaxAttempts: lim.DefaultMaxAttempts}
	var err error
	if err = ValidateTopic(FieldPath(where, "topic"), m.Topic, lim); err != nil {
		return nm, err
	}
	if bodyErr != nil {
		return nm, bodyErr
	}
	nm.Body = body
	if nm.DeliverAtMs, err = ResolveDue(where, m.DelayMs, m.DeliverAtMs, false, lim, nowMs); err != nil {
		return nm, err
	}
	if len(m.Key) > lim.MaxKeyLen {
		return nm, Invalid("%s: must be at most %d bytes, got %d", FieldPath(where, "key"), lim.MaxKeyLen, len(m.Key))
	}
	if m.TTRMs != nil {
		nm.TTRMs = *m.TTRMs
		if err = ValidateTTR(FieldPath(where, "ttr_ms"), nm.TTRMs, lim); err != nil {
			return nm, err
		}
	}
	if m.MaxAttempts != nil {
		nm.MaxAttempts = *m.MaxAttempts
		if err = InRange(FieldPath(where, "max_attempts"), int64(nm.MaxAttempts), 1, int64(lim.MaxAttempts), ""); err != nil {
			return nm, err
		}
	}
	if len(nm.Headers) == 0 {
		nm.Headers = nil
	}
	if len(nm.Body) == 0 {
		nm.Body = nil
	}
	return nm, validateHeaders(FieldPath(where, "headers"), m.Headers, lim)
}

// ValidateTopic checks a topic name: 1 to MaxTopicLen characters of
// [A-Za-z0-9._:-].
func ValidateTopic(name, topic string, lim Limits) error {
	ok := len(topic) >= 1 && len(topic) <= lim.MaxTopicLen
	for i := 0; ok && i < len(topic); i++ {
		c := topic[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return Invalid("%s: must be 1 to %d characters of [A-Za-z0-9._:-], got %s", name, lim.MaxTopicLen, QuoteShort(topic))
	}
	return nil
}

// validatePayload decodes a message body and checks its size.
func validatePayload(where string, p api.Payload, lim Limits) ([]byte, error) {
	if p.Body != nil && p.BodyBase64 != nil {
		return nil, Invalid("%s: set \"body\" or \"body_base64\", not both", FieldPath(where, ""))
	}
	name := FieldPath(where, "body")
	if p.BodyBase64 != nil {
		name = FieldPath(where, "body_base64")
	}
	body, err := p.Bytes()
	if err != nil {
		return nil, Invalid("%s: not valid standard base64: %v", name, errors.Unwrap(err))
	}
	return body, CheckBodySize(name, body, lim)
}

// CheckBodySize checks a body against MaxBodyBytes; name is its field.
func CheckBodySize(name string, body []byte, lim Limits) error {
	if len(body) > lim.MaxBodyBytes {
		return TooLarge("%s: %d bytes is over the limit of %s", name, len(body), LimitBytes(int64(lim.MaxBodyBytes)))
	}
	return nil
}

// ResolveDue turns delay_ms or deliver_at_ms into an absolute due time:
// now+delay, a past deliver_at becomes now, neither is now (or an error when
// required), both are an error.
func ResolveDue(where string, delayMs, deliverAtMs *int64, required bool, lim Limits, nowMs int64) (int64, error) {
	switch {
	case delayMs != nil && deliverAtMs != nil:
		return 0, Invalid("%s: set \"delay_ms\" or \"deliver_at_ms\", not both", FieldPath(where, ""))
	case delayMs != nil:
		if err := InRange(FieldPath(where, "delay_ms"), *delayMs, 0, lim.MaxDelayMs, HumanMs(lim.MaxDelayMs)); err != nil {
			return 0, err
		}
		return nowMs + *delayMs, nil
	case deliverAtMs != nil:
		at := *deliverAtMs
		if at < 0 || at > nowMs+lim.MaxDelayMs {
			return 0, Invalid("%s: must be between 0 and now + %d ms (%s), i.e. at most %d; got %d",
				FieldPath(where, "deliver_at_ms"), lim.MaxDelayMs, HumanMs(lim.MaxDelayMs), nowMs+lim.MaxDelayMs, at)
		}
		return max(at, nowMs), nil
	case required:
		return 0, Invalid("%s: set one of \"delay_ms\" or \"deliver_at_ms\"", FieldPath(where, ""))
	default:
		return nowMs, nil
	}
}

// ValidateTTR checks a time-to-run.
func ValidateTTR(name string, ttrMs int64, lim Limits) error {
	return InRange(name, ttrMs, lim.MinTTRMs, lim.MaxTTRMs, HumanMs(lim.MinTTRMs)+" to "+HumanMs(lim.MaxTTRMs))
}

// validateHeaders checks the count and the sizes of a message's headers,
// and that each can be sent as an HTTP header (api.CheckHeader).
func validateHeaders(name string, h map[string]string, lim Limits) error {
	if len(h) > lim.MaxHeaders {
		return Invalid("%s: at most %d headers, got %d", name, lim.MaxHeaders, len(h))
	}
	for k, v := range h {
		if checkHeader(name, k, v, lim) != nil {
			// The first bad one in name order, so that every call names
			// the same: a map's order changes from one call to the next.
			for _, k := range slices.Sorted(maps.Keys(h)) {
				if err := checkHeader(name, k, h[k], lim); err != nil {
					return err
				}
			}
		}
	}
	return sameHeaderTwice(name, h)
}

// checkHeader checks one header of a message; name is the headers' field.
func checkHeader(name, k, v string, lim Limits) error {
	if len(k) == 0 || len(k) > lim.MaxHeaderKeyLen {
		return Invalid("%s: key %s must be 1 to %d bytes, got %d", name, QuoteShort(k), lim.MaxHeaderKeyLen, len(k))
	}
	if len(v) > lim.MaxHeaderValueLen {
		return Invalid("%s[%s]: value must be at most %d bytes, got %d", name, QuoteShort(k), lim.MaxHeaderValueLen, len(v))
	}
	if err := api.CheckHeader(k, v); err != nil {
		return Invalid("%s[%s]: %v", name, QuoteShort(k), err)
	}
	return nil
}

// sameHeaderTwice refuses two names that differ only in case: HTTP header
// names are case-insensitive, so a webhook request could carry only one of
// them. The names are checked in order, so the error names the same pair
// on every call.
func sameHeaderTwice(name string, h map[string]string) error {
	if len(h) < 2 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(h))
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		canon := textproto.CanonicalMIMEHeaderKey(k)
		if first, dup := seen[canon]; dup {
			return Invalid("%s[%s]: names the same HTTP header as %s (header names are case-insensitive)", name, QuoteShort(k), QuoteShort(first))
		}
		seen[canon] = k
	}
	return nil
}

// ValidateReserve checks a reserve request and returns max, wait and ttr in
// milliseconds (ttr 0 = each message's own).
func ValidateReserve(req api.ReserveRequest, lim Limits) (n int, waitMs, ttrMs int64, err error) {
	n = 1
	if req.Max != nil {
		n = *req.Max
		if err := InRange("max", int64(n), 1, int64(lim.MaxReserve), ""); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := InRange("wait_ms", req.WaitMs, 0, lim.MaxWaitMs, HumanMs(lim.MaxWaitMs)); err != nil {
		return 0, 0, 0, err
	}
	if req.TTRMs != nil {
		if err := ValidateTTR("ttr_ms", *req.TTRMs, lim); err != nil {
			return 0, 0, 0, err
		}
		ttrMs = *req.TTRMs
	}
	return n, req.WaitMs, ttrMs, nil
}

// ParseReceipts checks and parses the receipts of an ack, nack, touch or
// bury, given as field name ("receipts"; a stream's "ack" or "nack").
func ParseReceipts(name string, list []string, lim Limits) ([]model.Receipt, error) {
	return parseList(name, list, lim, false, model.ParseReceipt, "a receipt (want <24 hex digit id>.<16 hex digit nonce>)")
}

// ParseIDs checks and parses the message ids of a redrive (none = all).
func ParseIDs(list []string, lim Limits) ([]model.ID, error) {
	return parseList("ids", list, lim, true, model.ParseID, "a message id (want 24 hex digits)")
}

// parseList checks the length of a list of strings and parses each with
// parse; an error names the element's index and what it should be.
func parseList[T any](name string, list []string, lim Limits, allowEmpty bool, parse func(string) (T, error), what string) ([]T, error) {
	if err := CheckCount(name, len(list), lim.MaxBatch, allowEmpty); err != nil {
		return nil, err
	}
	out := make([]T, len(list))
	for i, s := range list {
		v, err := parse(s)
		if err != nil {
			return nil, Invalid("%s: %s is not %s", Index(name, i), QuoteShort(s), what)
		}
		out[i] = v
	}
	return out, nil
}

// ValidateNode checks the body of POST /v1/cluster/nodes.
func ValidateNode(n api.Node, lim Limits) error {
	if n.ID == "" || len(n.ID) > lim.MaxKeyLen {
		return Invalid("id: must be 1 to %d bytes, got %d", lim.MaxKeyLen, len(n.ID))
	}
	for _, a := range [...]struct{ name, addr string }{{"raft_addr", n.RaftAddr}, {"http_addr", n.HTTPAddr}, {"grpc_addr", n.GRPCAddr}} {
		if a.addr == "" && a.name == "grpc_addr" {
			continue // optional: a node that serves no gRPC
		}
		if host, port, err := net.SplitHostPort(a.addr); err != nil || host == "" || port == "" {
			return Invalid("%s: must be host:port, got %s", a.name, QuoteShort(a.addr))
		}
	}
	return nil
}

// CheckCount checks the length of a list: 1 (or 0 when allowEmpty) to max
// elements. Over max is a 413 too_large.
func CheckCount(name string, n, limit int, allowEmpty bool) error {
	switch {
	case n > limit:
		return TooLarge("%s: %d entries are over the limit of %d per request", name, n, limit)
	case n == 0 && !allowEmpty:
		return Invalid("%s: must hold 1 to %d entries, got none", name, limit)
	}
	return nil
}

// InRange checks lo ≤ v ≤ hi; note, if set, explains the range in words.
func InRange(name string, v, lo, hi int64, note string) error {
	if v >= lo && v <= hi {
		return nil
	}
	if note != "" {
		note = " (" + note + ")"
	}
	return Invalid("%s: must be between %d and %d%s, got %d", name, lo, hi, note, v)
}

// Index names an element of a list: Index("messages", 3) is "messages[3]".
func Index(list string, i int) string { return list + "[" + strconv.Itoa(i) + "]" }

// QuoteShort quotes s for an error message, cut to a readable length.
func QuoteShort(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return fmt.Sprintf("%q… (%d bytes)", s[:maxLen], len(s))
	}
	return strconv.Quote(s)
}

// ValidateReschedule resolves the new due time of a reschedule: exactly one
// of delayMs and deliverAtMs must be set.
func ValidateReschedule(delayMs, deliverAtMs *int64, lim Limits, nowMs int64) (int64, error) {
	return ResolveDue("", delayMs, deliverAtMs, true, lim, nowMs)
}

// ValidateNackDelay checks the delay of a nack, given as field (delay_ms
// of a Nack call, nack_delay_ms of a Subscribe request).
func ValidateNackDelay(field string, delayMs int64, lim Limits) error {
	return InRange(field, delayMs, 0, lim.MaxDelayMs, HumanMs(lim.MaxDelayMs))
}

// ValidateDeadLimit checks the limit of a dead-letter listing; nil (left
// out) is the default, and an explicit 0 is out of range, as ?limit=0 is.
func ValidateDeadLimit(limit *int32, lim Limits) (int, error) {
	if limit == nil {
		return lim.DefaultDeadLimit, nil
	}
	return int(*limit), InRange("limit", int64(*limit), 1, int64(lim.MaxDeadLimit), "")
}

// ValidateSlot checks a slot number; an unknown slot is a 404.
func ValidateSlot(n int) error {
	if n < 0 || n >= wheel.Slots {
		return NotFound("slot %d: no such slot (slots are 0 to %d)", n, wheel.Slots-1)
	}
	return nil
}

// ParseID parses a message id given as field name.
func ParseID(name, raw string) (model.ID, error) {
	id, err := model.ParseID(raw)
	if err != nil {
		return model.ID{}, Invalid("%s: must be a message id (24 hex digits, not all zero), got %s", name, QuoteShort(raw))
	}
	return id, nil
}

// FieldPath joins a location and a field name: "messages[3]" and "delay_ms"
// give "messages[3].delay_ms". With neither it names the request body.
func FieldPath(where, field string) string {
	switch {
	case where != "" && field != "":
		return where + "." + field
	case where != "":
		return where
	case field != "":
		return field
	default:
		return "request body"
	}
}

// ValidateKey checks the key of a cancel by key.
func ValidateKey(key string, lim Limits) error {
	if key == "" || len(key) > lim.MaxKeyLen {
		return Invalid("key: must be 1 to %d bytes, got %d", lim.MaxKeyLen, len(key))
	}
	return nil
}

// ValidateStream checks the options of a stream (max_inflight and ttr_ms,
// each optional) and returns them.
func ValidateStream(maxInflight, ttrMs *int64, lim Limits) (model.ConsumerOptions, error) {
	opt := model.ConsumerOptions{MaxInflight: lim.DefaultInflight}
	if maxInflight != nil {
		if err := InRange("max_inflight", *maxInflight, 1, int64(lim.MaxInflight), ""); err != nil {
			return opt, err
		}
		opt.MaxInflight = int(*maxInflight)
	}
	if ttrMs != nil {
		if err := InRange("ttr_ms", *ttrMs, lim.MinTTRMs, lim.MaxTTRMs, ""); err != nil {
			return opt, err
		}
		opt.TTR = time.Duration(*ttrMs) * time.Millisecond
	}
	return opt, nil
}
