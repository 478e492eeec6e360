package transport

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// FuzzDecodeEnqueue feeds arbitrary bodies to the enqueue decoder and
// validator: they must never panic, must refuse with a 400 or 413, and what
// they accept must re-encode to a body that is accepted again as the same
// batch, and whose protobuf form is accepted as the same batch too (with
// FuzzDecodeEnqueueProto's converse, the two forms accept the same
// batches). What the fast decoder accepts, the strict decoding must accept
// as the same request.
func FuzzDecodeEnqueue(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"topic":"t","body":"x"}]}`,
		`{"messages":[{"topic":"a.b:c-d_e","body_base64":"/wAB","delay_ms":5,"key":"k","priority":-3,"ttr_ms":1,"max_attempts":1000,"headers":{"h":"v"}}]}`,
		`{"messages":[{"topic":"t","deliver_at_ms":0},{"topic":"u","deliver_at_ms":1732245600999}]}`,
		`{"messages":[{"topic":"t","delay_ms":1,"deliver_at_ms":1}]}`,
		`{"messages":[]}`,
		`{"messages":[null]}`,
		`{"messages":[{"topic":"t","body":"x","body_base64":"eA=="}]}`,
		`{"messages":[{"topic":"t","headers":{}}]} {}`,
		` { "messages" : [ {"topic":"t","body":"ü✓","delay_ms":-0,"priority":-9223372036854775808,"max_attempts":2147483647,"headers":{"a":"","b":"c"}} , {} ] } `,
		`{"messages":[{"topic":"t","Topic":"u"}]}`,
		`{"messages":[{"topic":"t","body":"a\"b","ttr_ms":1.0}]}`,
		`{"messages":[{"topic":"t","headers":{"a":"1","a":"2"}}]}`,
		`{"messages":[{"topic":"t","max_attempts":2147483648,"key":null}]}`,
		"{\"messages\":[{\"topic\":\"t\xff\"}]}",
	} {
		f.Add([]byte(seed))
	}
	lim := DefaultLimits()
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := fastEnqueue(data, lim.MaxBatch); ok {
			var strict api.EnqueueRequest
			if err := decodeStrict(data, &strict); err != nil {
				t.Fatalf("the fast decoder accepted %q, the strict decoding refuses it: %v", data, err)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("decoders differ on %q:\n fast %+v\n json %+v", data, fast, strict)
			}
		}
		req, err := parseEnqueue(data, lim)
		if err == nil {
			var msgs []command.NewMessage
			if msgs, err = validateEnqueue(req, lim, fuzzNowMs); err == nil {
				sameBatch(t, jsonForm(), req, msgs)
				sameBatch(t, protoForm(), req, msgs)
				return
			}
		}
		var e *Error
		if !errors.As(err, &e) || (e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge) || e.Message == "" {
			t.Fatalf("refusal %v is not a 400 or 413 with a message", err)
		}
	})
}

// FuzzDecodeEnqueueProto feeds arbitrary bodies to the protobuf enqueue
// decoder and validator: they must never panic, must refuse with a 400 or
// 413 (413 exactly when the batch is too long), and what they accept must
// re-encode to a body that is accepted again as the same batch, and whose
// JSON form is accepted as the same batch too.
func FuzzDecodeEnqueueProto(f *testing.F) {
	lim := DefaultLimits()
	seed := func(msgs ...api.Message) []byte {
		b, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: msgs})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	msg := func(fields []byte) []byte { return protowire.AppendBytes(tag(nil, 1, protowire.BytesType), fields) }
	topic := slices.Clip(protowire.AppendString(tag(nil, 1, protowire.BytesType), "t"))
	valid := seed(api.Message{Topic: "a.b:c-d_e", Payload: api.BinaryBody([]byte{0xff, 0x00, 0x01}), DelayMs: api.Ptr(int64(5)),
		Key: "k", Priority: -3, TTRMs: api.Ptr(int64(1)), MaxAttempts: api.Ptr(int32(1000)), Headers: map[string]string{"h": "v"}})
	for _, b := range [][]byte{
		seed(api.Message{Topic: "t", Payload: api.TextBody("x")}),
		valid,
		seed(api.Message{Topic: "t", DeliverAtMs: api.Ptr(int64(0))}, api.Message{Topic: "u", DeliverAtMs: api.Ptr(int64(fuzzNowMs + 999))}),
		seed(api.Message{Topic: "t", DelayMs: api.Ptr(int64(1)), DeliverAtMs: api.Ptr(int64(1))}), // both: refused
		seed(api.Message{Topic: "t", MaxAttempts: api.Ptr(int32(-1))}),                            // out of range
		nil,                  // no messages
		valid[:len(valid)-1], // truncated
		append(msg(topic), tag(nil, 2, protowire.VarintType)...),                                     // unknown top-level field, cut short
		msg(append(topic, protowire.AppendVarint(tag(nil, 10, protowire.VarintType), 1)...)),         // unknown message field
		msg(append(topic, protowire.AppendString(tag(nil, 1, protowire.BytesType), "u")...)),         // topic twice
		msg(protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1)),                            // wrong wire type
		msg(append(topic, protowire.AppendVarint(tag(nil, 8, protowire.VarintType), 1<<31)...)),      // max_attempts over int32
		msg(append(topic, protowire.AppendString(tag(nil, 9, protowire.BytesType), "\x0a\x01k")...)), // header entry
		msg(append(topic, protowire.AppendString(tag(nil, 5, protowire.BytesType), "\xff")...)),      // key not UTF-8
		[]byte(`{"messages":[{"topic":"t"}]}`),                                                       // JSON sent as protobuf
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := decodeEnqueueProto(data, lim, fuzzNowMs)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge) || e.Message == "" {
				t.Fatalf("refusal %v is not a 400 or 413 with a message", err)
			}
			_, derr := api.UnmarshalEnqueueRequest(data, lim.MaxBatch)
			if errors.Is(derr, api.ErrTooManyMessages) && e.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("too many messages (%v) refused as %d %q", derr, e.Status, e.Message)
			}
			return
		}
		req, err := api.UnmarshalEnqueueRequest(data, lim.MaxBatch)
		if err != nil {
			t.Fatalf("accepted %x, but it does not decode: %v", data, err)
		}
		sameBatch(t, protoForm(), req, msgs)
		// The JSON form of the same batch must be accepted as the same batch.
		for i := range req.Messages {
			body, _ := req.Messages[i].Bytes()
			req.Messages[i].Payload = api.PayloadOf(body)
		}
		sameBatch(t, jsonForm(), req, msgs)
	})
}

// fuzzNowMs is the clock of the fuzz targets.
const fuzzNowMs = 1_732_245_600_000

// form is a wire form of an enqueue request.
type form struct {
	name   string
	encode func(api.EnqueueRequest) ([]byte, error)
	decode func(data []byte, lim Limits, nowMs int64) ([]command.NewMessage, error)
}

func jsonForm() form {
	return form{"JSON form", func(r api.EnqueueRequest) ([]byte, error) { return json.Marshal(r) }, decodeEnqueue}
}

func protoForm() form {
	return form{"protobuf form", func(r api.EnqueueRequest) ([]byte, error) { return api.AppendEnqueueRequest(nil, r) }, decodeEnqueueProto}
}

// sameBatch checks that req, a request accepted as the batch want, is
// accepted as that batch again in form f.
func sameBatch(t *testing.T, f form, req api.EnqueueRequest, want []command.NewMessage) {
	t.Helper()
	body, err := f.encode(req)
	if err != nil {
		t.Fatalf("encode %+v in the %s: %v", req, f.name, err)
	}
	got, err := f.decode(body, DefaultLimits(), fuzzNowMs)
	if err != nil {
		t.Fatalf("accepted %+v but refused its %s %q: %v", req, f.name, body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the %s %q is another batch:\n%+v\n%+v", f.name, body, want, got)
	}
}
