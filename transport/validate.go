package transport

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/wheel"
)

// Every validation function returns nil or an *Error (400 or 413) whose
// message names the field, the index within a batch, and the limit.

// decodeEnqueue decodes and validates the body of POST /v1/messages. The
// batch is validated whole: the first bad message rejects it.
func decodeEnqueue(data []byte, lim Limits, nowMs int64) ([]wheel.NewMessage, error) {
	req, err := parseEnqueue(data, lim)
	if err != nil {
		return nil, err
	}
	return validateEnqueue(req, lim, nowMs)
}

// decodeEnqueueProto decodes the protobuf form of an enqueue request
// (api.ContentTypeProto) and validates it exactly as the JSON form.
func decodeEnqueueProto(data []byte, lim Limits, nowMs int64) ([]wheel.NewMessage, error) {
	req, err := api.UnmarshalEnqueueRequestProto(data, lim.MaxBatch)
	if errors.Is(err, api.ErrTooManyMessages) {
		return nil, tooLarge("%v", err)
	}
	if err != nil {
		return nil, invalid("%v", err)
	}
	return validateEnqueueProto(req, lim, nowMs)
}

// validateEnqueueProto checks every message of a protobuf request as
// validateEnqueue does. Invariant: a body is the decoder's own copy (the
// generated decoder never aliases its input), so it becomes the message's
// body as it is, where the JSON form needs a copy into a []byte.
func validateEnqueueProto(req *pb.EnqueueRequest, lim Limits, nowMs int64) ([]wheel.NewMessage, error) {
	msgs := req.GetMessages()
	if err := checkCount("messages", len(msgs), lim.MaxBatch, false); err != nil {
		return nil, err
	}
	out := make([]wheel.NewMessage, len(msgs))
	for i, p := range msgs {
		m := api.MessageFields(p)
		body := p.GetBody()
		nm, err := validateFields(&m, body, checkBodySize("body", body, lim), "", lim, nowMs)
		if err != nil {
			where := index("messages", i)
			_, err = validateFields(&m, body, checkBodySize(fieldPath(where, "body"), body, lim), where, lim, nowMs)
			return nil, err
		}
		out[i] = nm
	}
	return out, nil
}

// parseEnqueue decodes an enqueue request strictly (see decodeStrict); an
// error names the field and the message's index. A batch over lim.MaxBatch
// is a 413 too_large.
func parseEnqueue(data []byte, lim Limits) (api.EnqueueRequest, error) {
	req, ok := fastEnqueue(data, lim.MaxBatch)
	if !ok {
		req = api.EnqueueRequest{}
		if err := decodeStrict(data, &req, messagesUpTo(lim.MaxBatch)); err != nil {
			return api.EnqueueRequest{}, err
		}
	}
	if err := checkCount("messages", len(req.Messages), lim.MaxBatch, false); err != nil {
		return api.EnqueueRequest{}, err
	}
	return req, nil
}

// validateEnqueue checks every message of req and converts it, with the
// defaults filled in and its due time made absolute.
func validateEnqueue(req api.EnqueueRequest, lim Limits, nowMs int64) ([]wheel.NewMessage, error) {
	if err := checkCount("messages", len(req.Messages), lim.MaxBatch, false); err != nil {
		return nil, err
	}
	out := make([]wheel.NewMessage, len(req.Messages))
	for i := range req.Messages {
		// Unnamed first: the names an error gives its fields are built only
		// for a message that fails, which is then checked again with them.
		nm, err := validateMessage(&req.Messages[i], "", lim, nowMs)
		if err != nil {
			_, err = validateMessage(&req.Messages[i], index("messages", i), lim, nowMs)
			return nil, err
		}
		out[i] = nm
	}
	return out, nil
}

// validateMessage checks one message; where is "messages[i]".
func validateMessage(m *api.Message, where string, lim Limits, nowMs int64) (wheel.NewMessage, error) {
	body, bodyErr := validatePayload(where, m.Payload, lim)
	return validateFields(m, body, bodyErr, where, lim, nowMs)
}

// validateFields checks one message whose body is decoded already: body,
// or bodyErr, which it reports where validateMessage always has (after the
// topic), so that both forms name the same first error.
func validateFields(m *api.Message, body []byte, bodyErr error, where string, lim Limits, nowMs int64) (wheel.NewMessage, error) {
	nm := wheel.NewMessage{Topic: m.Topic, Key: m.Key, Priority: m.Priority, Headers: m.Headers,
		TTRMs: lim.DefaultTTRMs, MaxAttempts: lim.DefaultMaxAttempts}
	var err error
	if err = validateTopic(fieldPath(where, "topic"), m.Topic, lim); err != nil {
		return nm, err
	}
	if bodyErr != nil {
		return nm, bodyErr
	}
	nm.Body = body
	if nm.DeliverAtMs, err = resolveDue(where, m.DelayMs, m.DeliverAtMs, false, lim, nowMs); err != nil {
		return nm, err
	}
	if len(m.Key) > lim.MaxKeyLen {
		return nm, invalid("%s: must be at most %d bytes, got %d", fieldPath(where, "key"), lim.MaxKeyLen, len(m.Key))
	}
	if m.TTRMs != nil {
		nm.TTRMs = *m.TTRMs
		if err = validateTTR(fieldPath(where, "ttr_ms"), nm.TTRMs, lim); err != nil {
			return nm, err
		}
	}
	if m.MaxAttempts != nil {
		nm.MaxAttempts = *m.MaxAttempts
		if err = inRange(fieldPath(where, "max_attempts"), int64(nm.MaxAttempts), 1, int64(lim.MaxAttempts), ""); err != nil {
			return nm, err
		}
	}
	if len(nm.Headers) == 0 {
		nm.Headers = nil
	}
	if len(nm.Body) == 0 {
		nm.Body = nil
	}
	return nm, validateHeaders(fieldPath(where, "headers"), m.Headers, lim)
}

// validateTopic checks a topic name: 1 to MaxTopicLen characters of
// [A-Za-z0-9._:-].
func validateTopic(name, topic string, lim Limits) error {
	ok := len(topic) >= 1 && len(topic) <= lim.MaxTopicLen
	for i := 0; ok && i < len(topic); i++ {
		c := topic[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return invalid("%s: must be 1 to %d characters of [A-Za-z0-9._:-], got %s", name, lim.MaxTopicLen, quoteShort(topic))
	}
	return nil
}

// validatePayload decodes a message body and checks its size.
func validatePayload(where string, p api.Payload, lim Limits) ([]byte, error) {
	if p.Body != nil && p.BodyBase64 != nil {
		return nil, invalid("%s: set \"body\" or \"body_base64\", not both", fieldPath(where, ""))
	}
	name := fieldPath(where, "body")
	if p.BodyBase64 != nil {
		name = fieldPath(where, "body_base64")
	}
	body, err := p.Bytes()
	if err != nil {
		return nil, invalid("%s: not valid standard base64: %v", name, errors.Unwrap(err))
	}
	return body, checkBodySize(name, body, lim)
}

// checkBodySize checks a body against MaxBodyBytes; name is its field.
func checkBodySize(name string, body []byte, lim Limits) error {
	if len(body) > lim.MaxBodyBytes {
		return tooLarge("%s: %d bytes is over the limit of %d bytes (%s)", name, len(body), lim.MaxBodyBytes, humanBytes(int64(lim.MaxBodyBytes)))
	}
	return nil
}

// resolveDue turns delay_ms or deliver_at_ms into an absolute due time:
// now+delay, a past deliver_at becomes now, neither is now (or an error when
// required), both are an error.
func resolveDue(where string, delayMs, deliverAtMs *int64, required bool, lim Limits, nowMs int64) (int64, error) {
	switch {
	case delayMs != nil && deliverAtMs != nil:
		return 0, invalid("%s: set \"delay_ms\" or \"deliver_at_ms\", not both", fieldPath(where, ""))
	case delayMs != nil:
		if err := inRange(fieldPath(where, "delay_ms"), *delayMs, 0, lim.MaxDelayMs, humanMs(lim.MaxDelayMs)); err != nil {
			return 0, err
		}
		return nowMs + *delayMs, nil
	case deliverAtMs != nil:
		at := *deliverAtMs
		if at < 0 || at > nowMs+lim.MaxDelayMs {
			return 0, invalid("%s: must be between 0 and now + %d ms (%s), i.e. at most %d; got %d",
				fieldPath(where, "deliver_at_ms"), lim.MaxDelayMs, humanMs(lim.MaxDelayMs), nowMs+lim.MaxDelayMs, at)
		}
		return max(at, nowMs), nil
	case required:
		return 0, invalid("%s: set one of \"delay_ms\" or \"deliver_at_ms\"", fieldPath(where, ""))
	default:
		return nowMs, nil
	}
}

// validateTTR checks a time-to-run.
func validateTTR(name string, ttrMs int64, lim Limits) error {
	return inRange(name, ttrMs, lim.MinTTRMs, lim.MaxTTRMs, humanMs(lim.MinTTRMs)+" to "+humanMs(lim.MaxTTRMs))
}

// validateHeaders checks the count and the sizes of a message's headers,
// and that each can be sent as an HTTP header (api.CheckHeader).
func validateHeaders(name string, h map[string]string, lim Limits) error {
	if len(h) > lim.MaxHeaders {
		return invalid("%s: at most %d headers, got %d", name, lim.MaxHeaders, len(h))
	}
	for k, v := range h {
		if len(k) == 0 || len(k) > lim.MaxHeaderKeyLen {
			return invalid("%s: key %s must be 1 to %d bytes, got %d", name, quoteShort(k), lim.MaxHeaderKeyLen, len(k))
		}
		if len(v) > lim.MaxHeaderValueLen {
			return invalid("%s[%s]: value must be at most %d bytes, got %d", name, quoteShort(k), lim.MaxHeaderValueLen, len(v))
		}
		if err := api.CheckHeader(k, v); err != nil {
			return invalid("%s[%s]: %v", name, quoteShort(k), err)
		}
	}
	return nil
}

// validateReserve checks a reserve request and returns max, wait and ttr in
// milliseconds (ttr 0 = each message's own).
func validateReserve(req api.ReserveRequest, lim Limits) (n int, waitMs, ttrMs int64, err error) {
	n = 1
	if req.Max != nil {
		n = *req.Max
		if err := inRange("max", int64(n), 1, int64(lim.MaxReserve), ""); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := inRange("wait_ms", req.WaitMs, 0, lim.MaxWaitMs, humanMs(lim.MaxWaitMs)); err != nil {
		return 0, 0, 0, err
	}
	if req.TTRMs != nil {
		if err := validateTTR("ttr_ms", *req.TTRMs, lim); err != nil {
			return 0, 0, 0, err
		}
		ttrMs = *req.TTRMs
	}
	return n, req.WaitMs, ttrMs, nil
}

// parseReceipts checks and parses the receipts of an ack, nack or touch.
func parseReceipts(list []string, lim Limits) ([]wheel.Receipt, error) {
	return parseList("receipts", list, lim, false, wheel.ParseReceipt, "a receipt (want <24 hex digit id>.<16 hex digit nonce>)")
}

// parseIDs checks and parses the message ids of a redrive (none = all).
func parseIDs(list []string, lim Limits) ([]wheel.ID, error) {
	return parseList("ids", list, lim, true, wheel.ParseID, "a message id (want 24 hex digits)")
}

// parseList checks the length of a list of strings and parses each with
// parse; an error names the element's index and what it should be.
func parseList[T any](name string, list []string, lim Limits, allowEmpty bool, parse func(string) (T, error), what string) ([]T, error) {
	if err := checkCount(name, len(list), lim.MaxBatch, allowEmpty); err != nil {
		return nil, err
	}
	out := make([]T, len(list))
	for i, s := range list {
		v, err := parse(s)
		if err != nil {
			return nil, invalid("%s: %s is not %s", index(name, i), quoteShort(s), what)
		}
		out[i] = v
	}
	return out, nil
}

// validateNode checks the body of POST /v1/cluster/nodes.
func validateNode(n api.Node, lim Limits) error {
	if n.ID == "" || len(n.ID) > lim.MaxKeyLen {
		return invalid("id: must be 1 to %d bytes, got %d", lim.MaxKeyLen, len(n.ID))
	}
	for _, a := range [...]struct{ name, addr string }{{"raft_addr", n.RaftAddr}, {"http_addr", n.HTTPAddr}} {
		if host, port, err := net.SplitHostPort(a.addr); err != nil || host == "" || port == "" {
			return invalid("%s: must be host:port, got %s", a.name, quoteShort(a.addr))
		}
	}
	return nil
}

// checkCount checks the length of a list: 1 (or 0 when allowEmpty) to max
// elements. Over max is a 413 too_large.
func checkCount(name string, n, limit int, allowEmpty bool) error {
	switch {
	case n > limit:
		return tooLarge("%s: %d entries are over the limit of %d per request", name, n, limit)
	case n == 0 && !allowEmpty:
		return invalid("%s: must hold 1 to %d entries, got none", name, limit)
	}
	return nil
}

// inRange checks lo ≤ v ≤ hi; note, if set, explains the range in words.
func inRange(name string, v, lo, hi int64, note string) error {
	if v >= lo && v <= hi {
		return nil
	}
	if note != "" {
		note = " (" + note + ")"
	}
	return invalid("%s: must be between %d and %d%s, got %d", name, lo, hi, note, v)
}

// index names an element of a list: index("messages", 3) is "messages[3]".
func index(list string, i int) string { return list + "[" + strconv.Itoa(i) + "]" }

// quoteShort quotes s for an error message, cut to a readable length.
func quoteShort(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return fmt.Sprintf("%q… (%d bytes)", s[:maxLen], len(s))
	}
	return strconv.Quote(s)
}
