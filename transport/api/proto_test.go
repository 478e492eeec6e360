package api_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/transport/api"
)

// Field numbers of delaywheel.proto, spelled out again so that the tests do
// not borrow them from the code under test.
const (
	pReqMessages = 1

	pTopic       = 1
	pBody        = 2
	pDelayMs     = 3
	pDeliverAtMs = 4
	pKey         = 5
	pPriority    = 6
	pTTRMs       = 7
	pMaxAttempts = 8
	pHeaders     = 9

	pResults     = 1
	pResID       = 1
	pResDeliver  = 2
	pResDuplicat = 3
)

// wire builds protobuf bytes by hand, field by field, the way any protobuf
// library lays them out. Every method returns a new slice, so that a prefix
// can be extended in several ways.
type wire []byte

func (w wire) bytes(num protowire.Number, b []byte) wire {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.BytesType)
	return protowire.AppendBytes(w, b)
}

func (w wire) str(num protowire.Number, s string) wire { return w.bytes(num, []byte(s)) }

func (w wire) varint(num protowire.Number, v uint64) wire {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.VarintType)
	return protowire.AppendVarint(w, v)
}

func (w wire) fixed32(num protowire.Number, v uint32) wire {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.Fixed32Type)
	return protowire.AppendFixed32(w, v)
}

// header is one map entry of Message.headers.
func header(k, v string) []byte { return wire(nil).str(1, k).str(2, v) }

// request wraps encoded messages into an EnqueueRequest.
func request(msgs ...wire) []byte {
	var w wire
	for _, m := range msgs {
		w = w.bytes(pReqMessages, m)
	}
	return slices.Clip(w)
}

func TestProtoRequestRoundTrip(t *testing.T) {
	binary := []byte{0xff, 0xfe, 0x00, 0xc3, 0x28, 'x'} // not UTF-8
	cases := []struct {
		name string
		in   api.Message
		want api.Message // what decoding gives back
	}{
		{
			name: "every field",
			in: api.Message{Topic: "orders.close", Payload: api.TextBody("close order 42"), DelayMs: api.Ptr(int64(1800000)),
				Key: "order-42", Priority: 3, TTRMs: api.Ptr(int64(5000)), MaxAttempts: api.Ptr(int32(7)),
				Headers: map[string]string{"tenant": "a", "trace": "ü-✓", "empty": ""}},
			want: api.Message{Topic: "orders.close", Payload: api.TextBody("close order 42"), DelayMs: api.Ptr(int64(1800000)),
				Key: "order-42", Priority: 3, TTRMs: api.Ptr(int64(5000)), MaxAttempts: api.Ptr(int32(7)),
				Headers: map[string]string{"tenant": "a", "trace": "ü-✓", "empty": ""}},
		},
		{
			name: "only topic: absent optionals stay absent",
			in:   api.Message{Topic: "t"},
			want: api.Message{Topic: "t"},
		},
		{
			name: "explicit zeros are kept apart from absent",
			in:   api.Message{Topic: "t", DelayMs: api.Ptr(int64(0)), TTRMs: api.Ptr(int64(0)), MaxAttempts: api.Ptr(int32(0))},
			want: api.Message{Topic: "t", DelayMs: api.Ptr(int64(0)), TTRMs: api.Ptr(int64(0)), MaxAttempts: api.Ptr(int32(0))},
		},
		{
			name: "explicit zero deliver_at",
			in:   api.Message{Topic: "t", DeliverAtMs: api.Ptr(int64(0))},
			want: api.Message{Topic: "t", DeliverAtMs: api.Ptr(int64(0))},
		},
		{
			name: "negative numbers",
			in: api.Message{Topic: "t", Priority: -3, DelayMs: api.Ptr(int64(-1)), DeliverAtMs: api.Ptr(int64(math.MinInt64)),
				TTRMs: api.Ptr(int64(math.MaxInt64)), MaxAttempts: api.Ptr(int32(math.MinInt32))},
			want: api.Message{Topic: "t", Priority: -3, DelayMs: api.Ptr(int64(-1)), DeliverAtMs: api.Ptr(int64(math.MinInt64)),
				TTRMs: api.Ptr(int64(math.MaxInt64)), MaxAttempts: api.Ptr(int32(math.MinInt32))},
		},
		{
			name: "extreme priority and max_attempts",
			in:   api.Message{Topic: "t", Priority: math.MinInt64, MaxAttempts: api.Ptr(int32(math.MaxInt32))},
			want: api.Message{Topic: "t", Priority: math.MinInt64, MaxAttempts: api.Ptr(int32(math.MaxInt32))},
		},
		{
			name: "binary body given as text",
			in:   api.Message{Topic: "t", Payload: api.TextBody(string(binary))},
			want: api.Message{Topic: "t", Payload: api.TextBody(string(binary))},
		},
		{
			name: "body_base64 travels as raw bytes",
			in:   api.Message{Topic: "t", Payload: api.BinaryBody(binary)},
			want: api.Message{Topic: "t", Payload: api.TextBody(string(binary))},
		},
		{
			name: "empty body is no body",
			in:   api.Message{Topic: "t", Payload: api.TextBody("")},
			want: api.Message{Topic: "t"},
		},
		{
			name: "empty header map is no headers",
			in:   api.Message{Topic: "t", Headers: map[string]string{}},
			want: api.Message{Topic: "t"},
		},
	}
	// Each case alone, then all of them in one batch.
	var all, allWant []api.Message
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			roundTrip(t, []api.Message{tc.in}, []api.Message{tc.want})
		})
		all, allWant = append(all, tc.in), append(allWant, tc.want)
	}
	t.Run("batch", func(t *testing.T) { roundTrip(t, all, allWant) })
}

func roundTrip(t *testing.T, in, want []api.Message) {
	t.Helper()
	b, err := api.AppendEnqueueRequest([]byte("prefix"), api.EnqueueRequest{Messages: in})
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if !strings.HasPrefix(string(b), "prefix") {
		t.Fatalf("AppendEnqueueRequest dropped what it appends to: %q", b)
	}
	got, err := api.UnmarshalEnqueueRequest(b[len("prefix"):], len(in))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got.Messages, want) {
		t.Fatalf("round trip:\n got %s\nwant %s", dump(got.Messages), dump(want))
	}
}

// dump spells out messages with their optional fields dereferenced.
func dump(ms []api.Message) string {
	var sb strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&sb, "{topic=%q body=%s body_base64=%s delay=%s at=%s key=%q prio=%d ttr=%s attempts=%s headers=%q} ",
			m.Topic, deref(m.Body), deref(m.BodyBase64), deref(m.DelayMs), deref(m.DeliverAtMs), m.Key, m.Priority,
			deref(m.TTRMs), deref(m.MaxAttempts), m.Headers)
	}
	return sb.String()
}

func deref[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", fmt.Sprint(*p))
}

func TestProtoRequestEncodeErrors(t *testing.T) {
	_, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: []api.Message{
		{Topic: "t"}, {Topic: "t", Payload: api.Payload{BodyBase64: api.Ptr("!!")}},
	}})
	if err == nil || !strings.HasPrefix(err.Error(), "messages[1].body_base64: ") {
		t.Fatalf("invalid body_base64: error %v, want one naming messages[1].body_base64", err)
	}
	// Setting both bodies is refused by the JSON form; the protobuf form has
	// one body field, so the encoder must not silently pick one.
	_, err = api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: []api.Message{
		{Topic: "t", Payload: api.Payload{Body: api.Ptr("x"), BodyBase64: api.Ptr("eQ==")}},
	}})
	if err == nil || !strings.HasPrefix(err.Error(), "messages[0]") || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("body and body_base64: error %v, want one naming messages[0] and saying not both", err)
	}
}

// TestProtoIndependentEncoding decodes bytes laid out by hand as a protobuf
// library emits them (fields in number order, int32 sign-extended to ten
// bytes, sint64 zig-zagged, a map entry as key then value, proto3 optional
// zeros present), so that the codec is not only checked against itself.
func TestProtoIndependentEncoding(t *testing.T) {
	m1 := wire(nil).
		str(pTopic, "orders.close").
		bytes(pBody, []byte{0x00, 0xff, 'a'}).
		varint(pDelayMs, 0). // optional int64 delay_ms = 0: present
		str(pKey, "k-1").
		varint(pPriority, protowire.EncodeZigZag(-5)).
		varint(pTTRMs, 30000).
		varint(pMaxAttempts, u64(-1)). // int32 -1: ten bytes
		bytes(pHeaders, header("a", "1")).
		bytes(pHeaders, header("b", ""))
	m2 := wire(nil).
		str(pTopic, "u").
		varint(pDeliverAtMs, 1732245600999).
		varint(pMaxAttempts, 1000)
	data := request(m1, m2)
	if n := len(protowire.AppendVarint(nil, u64(-1))); n != 10 {
		t.Fatalf("int32 -1 should take 10 bytes, took %d", n)
	}
	got, err := api.UnmarshalEnqueueRequest(data, 2)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := []api.Message{
		{Topic: "orders.close", Payload: api.TextBody("\x00\xffa"), DelayMs: api.Ptr(int64(0)), Key: "k-1", Priority: -5,
			TTRMs: api.Ptr(int64(30000)), MaxAttempts: api.Ptr(int32(-1)), Headers: map[string]string{"a": "1", "b": ""}},
		{Topic: "u", DeliverAtMs: api.Ptr(int64(1732245600999)), MaxAttempts: api.Ptr(int32(1000))},
	}
	if !reflect.DeepEqual(got.Messages, want) {
		t.Fatalf("decoded\n %s\nwant %s", dump(got.Messages), dump(want))
	}
	// Fields in any order decode the same: parsers must accept that.
	shuffled := request(wire(nil).
		bytes(pHeaders, header("b", "")).
		varint(pMaxAttempts, u64(-1)).
		bytes(pHeaders, wire(nil).str(2, "1").str(1, "a")). // value before key
		varint(pTTRMs, 30000).
		varint(pPriority, protowire.EncodeZigZag(-5)).
		str(pKey, "k-1").
		varint(pDelayMs, 0).
		bytes(pBody, []byte{0x00, 0xff, 'a'}).
		str(pTopic, "orders.close"), m2)
	got, err = api.UnmarshalEnqueueRequest(shuffled, 2)
	if err != nil {
		t.Fatalf("decode shuffled: %v", err)
	}
	if !reflect.DeepEqual(got.Messages, want) {
		t.Fatalf("decoded shuffled\n %s\nwant %s", dump(got.Messages), dump(want))
	}
	// And our encoding of the same batch is byte-for-byte what a library
	// emits, headers aside (map order is not fixed).
	noHeaders := want[1]
	b, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: []api.Message{noHeaders}})
	check(t, "encode", err)
	if string(b) != string(request(m2)) {
		t.Fatalf("encoding %x, want %x", b, request(m2))
	}
}

// u64 is v as a varint carries it: two's complement, sign-extended.
func u64(v int64) uint64 { return uint64(v) }

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestProtoRequestDecodeErrors(t *testing.T) {
	topic := wire(nil).str(pTopic, "t")
	ok := request(topic)
	cases := []struct {
		name string
		data []byte
		want string // prefix of the error: the field path
		also string // and a part of the rest
	}{
		{"unknown top-level field", wire(ok).append(wire(nil).varint(2, 1)...), "request body: ", "unknown field number 2"},
		{"unknown top-level bytes field", wire(nil).str(15, "x"), "request body: ", "unknown field number 15"},
		{"unknown message field", request(topic, topic.varint(10, 1)), "messages[1]: ", "unknown field number 10"},
		{"unknown header entry field", request(topic.bytes(pHeaders, wire(header("k", "v")).varint(3, 1))), "messages[0].headers: ", "unknown field number 3"},
		{"topic twice", request(topic.str(pTopic, "u")), "messages[0].topic: ", "more than once"},
		{"body twice", request(topic.str(pBody, "a").str(pBody, "b")), "messages[0].body: ", "more than once"},
		{"delay twice", request(topic.varint(pDelayMs, 1).varint(pDelayMs, 2)), "messages[0].delay_ms: ", "more than once"},
		{"deliver_at twice", request(topic.varint(pDeliverAtMs, 1).varint(pDeliverAtMs, 1)), "messages[0].deliver_at_ms: ", "more than once"},
		{"key twice", request(topic.str(pKey, "a").str(pKey, "a")), "messages[0].key: ", "more than once"},
		{"priority twice", request(topic.varint(pPriority, 2).varint(pPriority, 4)), "messages[0].priority: ", "more than once"},
		{"ttr twice", request(topic.varint(pTTRMs, 1).varint(pTTRMs, 1)), "messages[0].ttr_ms: ", "more than once"},
		{"max_attempts twice", request(topic, topic.varint(pMaxAttempts, 1).varint(pMaxAttempts, 1)), "messages[1].max_attempts: ", "more than once"},
		{"messages as varint", wire(nil).varint(pReqMessages, 1), "messages[0]: ", "wire type 0"},
		{"topic as varint", request(wire(nil).varint(pTopic, 1)), "messages[0].topic: ", "wrong wire type 0 (want 2)"},
		{"body as fixed32", request(topic.fixed32(pBody, 1)), "messages[0].body: ", "wrong wire type 5 (want 2)"},
		{"delay as bytes", request(topic.str(pDelayMs, "5")), "messages[0].delay_ms: ", "wrong wire type 2 (want 0)"},
		{"priority as fixed32", request(topic.fixed32(pPriority, 1)), "messages[0].priority: ", "wrong wire type 5 (want 0)"},
		{"max_attempts as fixed64", request(topic.appendFixed64(pMaxAttempts, 1)), "messages[0].max_attempts: ", "wrong wire type 1 (want 0)"},
		{"headers as varint", request(topic.varint(pHeaders, 1)), "messages[0].headers: ", "wrong wire type 0 (want 2)"},
		{"header key as varint", request(topic.bytes(pHeaders, wire(nil).varint(1, 1))), "messages[0].headers: ", "wire type 0"},
		{"topic not UTF-8", request(wire(nil).str(pTopic, "t\xff")), "messages[0].topic: ", "UTF-8"},
		{"key not UTF-8", request(topic.str(pKey, "\xc3\x28")), "messages[0].key: ", "UTF-8"},
		{"header key not UTF-8", request(topic.bytes(pHeaders, header("k\xff", "v"))), "messages[0].headers key: ", "UTF-8"},
		{"header value not UTF-8", request(topic.bytes(pHeaders, header("k", "\xed\xa0\x80"))), `messages[0].headers["k"]: `, "UTF-8"},
		{"max_attempts over int32", request(topic.varint(pMaxAttempts, 1<<31)), "messages[0].max_attempts: ", "fits int32, got 2147483648"},
		{"max_attempts under int32", request(topic.varint(pMaxAttempts, u64(math.MinInt32-1))), "messages[0].max_attempts: ", "fits int32, got -2147483649"},
		{"max_attempts as uint32", request(topic.varint(pMaxAttempts, math.MaxUint32)), "messages[0].max_attempts: ", "fits int32"},
		{"duplicate header key", request(topic.bytes(pHeaders, header("k", "1")).bytes(pHeaders, header("j", "2")).bytes(pHeaders, header("k", "3"))), "messages[0].headers: ", `key "k" given more than once`},
		{"truncated tag", wire(ok).append(0x0a), "request body: ", "malformed protobuf"},
		{"truncated length", wire(ok).append(0x0a, 0x80), "request body: ", "malformed protobuf"},
		{"length past the end", wire(ok).append(0x0a, 0x05, 'a'), "request body: ", "malformed protobuf"},
		{"truncated varint in message", request(wire(topic).append(pDelayMs<<3, 0xff)), "messages[0]: ", "malformed protobuf"},
		{"truncated string in message", request(wire(topic).append(pKey<<3|2, 0x04, 'a')), "messages[0]: ", "malformed protobuf"},
		{"truncated header entry", request(topic.bytes(pHeaders, []byte{0x0a, 0x03, 'k'})), "messages[0].headers: ", "malformed protobuf"},
		{"field number zero", request(wire(topic).append(0x00, 0x00)), "messages[0]: ", "malformed protobuf"},
		{"stray end group", request(wire(topic).append(pKey<<3 | 4)), "messages[0]", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := api.UnmarshalEnqueueRequest(tc.data, 10)
			if err == nil {
				t.Fatalf("%x decoded without error", tc.data)
			}
			if !strings.HasPrefix(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.also) {
				t.Fatalf("error %q, want it to start %q and contain %q", err, tc.want, tc.also)
			}
			if errors.Is(err, api.ErrTooManyMessages) {
				t.Fatalf("error %q claims too many messages", err)
			}
		})
	}
}

func (w wire) appendFixed64(num protowire.Number, v uint64) wire {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.Fixed64Type)
	return protowire.AppendFixed64(w, v)
}

func (w wire) append(b ...byte) wire { return append(slices.Clip(w), b...) }

func TestProtoRequestTruncated(t *testing.T) {
	b, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: []api.Message{{Topic: "orders", Payload: api.TextBody("body"),
		DelayMs: api.Ptr(int64(1 << 40)), Key: "k", Priority: -1, Headers: map[string]string{"h": "v"}}}})
	check(t, "encode", err)
	// Every non-empty proper prefix of a one-message request cuts the
	// message's length-delimited field short.
	for n := 1; n < len(b); n++ {
		if _, err := api.UnmarshalEnqueueRequest(b[:n], 10); err == nil || !strings.HasPrefix(err.Error(), "request body: malformed protobuf") {
			t.Fatalf("prefix of %d of %d bytes: error %v", n, len(b), err)
		}
	}
	// An empty body is a valid, empty request: the count check is the
	// validator's, as for {"messages":[]}.
	req, err := api.UnmarshalEnqueueRequest(nil, 10)
	if err != nil || len(req.Messages) != 0 {
		t.Fatalf("empty input: %+v, %v", req, err)
	}
}

func TestProtoTooManyMessages(t *testing.T) {
	one := wire(nil).str(pTopic, "t")
	for _, tc := range []struct {
		n, limit int
		tooMany  bool
	}{
		{0, 0, false},
		{1, 0, true},
		{3, 3, false},
		{4, 3, true},
		{10001, 10000, true},
	} {
		msgs := make([]wire, tc.n)
		for i := range msgs {
			msgs[i] = one
		}
		req, err := api.UnmarshalEnqueueRequest(request(msgs...), tc.limit)
		if got := errors.Is(err, api.ErrTooManyMessages); got != tc.tooMany {
			t.Fatalf("%d messages, limit %d: error %v, want too many = %v", tc.n, tc.limit, err, tc.tooMany)
		}
		if tc.tooMany {
			if !strings.HasPrefix(err.Error(), "messages: ") || len(req.Messages) != 0 {
				t.Fatalf("%d messages, limit %d: %d messages, error %q", tc.n, tc.limit, len(req.Messages), err)
			}
			continue
		}
		if err != nil || len(req.Messages) != tc.n {
			t.Fatalf("%d messages, limit %d: got %d, %v", tc.n, tc.limit, len(req.Messages), err)
		}
	}
	// The limit counts messages, not other fields: a malformed extra field
	// is reported as what it is.
	_, err := api.UnmarshalEnqueueRequest(request(one, one, wire(nil).varint(pMaxAttempts, 1<<40)), 3)
	if err == nil || errors.Is(err, api.ErrTooManyMessages) || !strings.HasPrefix(err.Error(), "messages[2].max_attempts") {
		t.Fatalf("error %v, want one naming messages[2].max_attempts", err)
	}
}

// TestProtoDecodeCopies checks that the decoded strings do not alias the
// input buffer, which the server reuses.
func TestProtoDecodeCopies(t *testing.T) {
	data := request(wire(nil).str(pTopic, "topic").str(pBody, "body").str(pKey, "key").bytes(pHeaders, header("hk", "hv")))
	req, err := api.UnmarshalEnqueueRequest(data, 1)
	check(t, "decode", err)
	for i := range data {
		data[i] = 'X'
	}
	m := req.Messages[0]
	if m.Topic != "topic" || *m.Body != "body" || m.Key != "key" || m.Headers["hk"] != "hv" {
		t.Fatalf("decoded strings changed with the input: %s", dump(req.Messages))
	}
}

func TestProtoResponseRoundTrip(t *testing.T) {
	for _, results := range [][]api.Result{
		nil,
		{{ID: "000000000000000100000000", DeliverAtMs: 1732245600000}},
		{
			{ID: "000000000000000100000000", DeliverAtMs: 1732247400000, Duplicate: true},
			{ID: "000000000000000100000001", DeliverAtMs: 0},
			{}, // all zero: still one result
			{ID: "x", DeliverAtMs: -1},
			{ID: "y", DeliverAtMs: math.MaxInt64},
		},
	} {
		b := api.AppendEnqueueResponse([]byte{0xAA}, api.EnqueueResponse{Results: results})
		if b[0] != 0xAA {
			t.Fatalf("AppendEnqueueResponse dropped what it appends to")
		}
		got, err := api.UnmarshalEnqueueResponse(b[1:])
		check(t, "decode", err)
		if len(got.Results) != len(results) || (len(results) > 0 && !reflect.DeepEqual(got.Results, results)) {
			t.Fatalf("round trip %+v, want %+v", got.Results, results)
		}
	}
}

func TestProtoResponseDecoding(t *testing.T) {
	// As a library emits it, with fields a newer server might add.
	data := wire(nil).
		bytes(pResults, wire(nil).str(pResID, "a").varint(pResDeliver, 5).varint(pResDuplicat, 1).varint(9, 7)).
		varint(2, 3).
		bytes(pResults, wire(nil).str(pResID, "b").fixed32(10, 1))
	got, err := api.UnmarshalEnqueueResponse(data)
	check(t, "decode", err)
	want := []api.Result{{ID: "a", DeliverAtMs: 5, Duplicate: true}, {ID: "b"}}
	if !reflect.DeepEqual(got.Results, want) {
		t.Fatalf("decoded %+v, want %+v", got.Results, want)
	}
	for _, bad := range [][]byte{
		{0x0a},                   // truncated tag
		{0x0a, 0x05, 0x0a},       // result cut short
		{0x0a, 0x02, 0x10, 0x80}, // deliver_at varint cut short
	} {
		if _, err := api.UnmarshalEnqueueResponse(bad); err == nil {
			t.Fatalf("%x decoded without error", bad)
		}
	}
}
