package transport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// protoBody is the protobuf form of an enqueue request of msgs.
func protoBody(t *testing.T, msgs ...api.Message) string {
	t.Helper()
	b, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: msgs})
	check(t, "encode protobuf", err)
	return string(b)
}

// jsonBody is the JSON form of an enqueue request of msgs.
func jsonBody(t *testing.T, msgs ...api.Message) string {
	t.Helper()
	b, err := json.Marshal(api.EnqueueRequest{Messages: msgs})
	check(t, "encode JSON", err)
	return string(b)
}

// enqueueProto posts a protobuf enqueue body; header adds name, value pairs.
func (e *env) enqueueProto(body string, header ...string) answer {
	e.t.Helper()
	return e.do(http.MethodPost, "/v1/messages", body, append([]string{"Content-Type", api.ContentTypeProto}, header...)...)
}

// jsonResults decodes a 200 JSON enqueue answer strictly.
func (a answer) jsonResults(t *testing.T) []api.Result {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	equal(t, "answer content type", a.header.Get("Content-Type"), "application/json")
	var resp api.EnqueueResponse
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	check(t, "decode JSON answer", dec.Decode(&resp))
	return resp.Results
}

// protoResults decodes a 200 protobuf enqueue answer.
func (a answer) protoResults(t *testing.T) []api.Result {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	equal(t, "answer content type", a.header.Get("Content-Type"), api.ContentTypeProto)
	resp, err := api.UnmarshalEnqueueResponse(a.body)
	check(t, "decode protobuf answer", err)
	return resp.Results
}

// stored is what the node holds for the message with the given id.
func (e *env) stored(id string) wheel.View {
	e.t.Helper()
	wid, err := model.ParseID(id)
	check(e.t, "parse id", err)
	v, err := e.Node.Node.Get(e.t.Context(), wid)
	check(e.t, "get "+id, err)
	return v
}

// protoBatch is a batch that uses every field of a message.
func protoBatch() []api.Message {
	return []api.Message{
		{Topic: "orders.close", Payload: api.TextBody("close order 42"), DelayMs: api.Ptr(int64(1800000)), Key: "order-42",
			Priority: -3, TTRMs: api.Ptr(int64(5000)), MaxAttempts: api.Ptr(int32(3)), Headers: map[string]string{"tenant": "a", "trace": "ü✓", "e": ""}},
		{Topic: "orders.close", Payload: api.BinaryBody([]byte{0xff, 0x00, 0x01}), DelayMs: api.Ptr(int64(0))},
		{Topic: "t", Payload: api.TextBody("past"), DeliverAtMs: api.Ptr(startMs - 5000)},
		{Topic: "t", DeliverAtMs: api.Ptr(startMs + 60000), Key: "k2", Priority: 1 << 40},
		{Topic: "t"},
		{Topic: "orders.close", Key: "order-42", DelayMs: api.Ptr(int64(5))}, // duplicate of the first
	}
}

// TestProtoEnqueueStoresWhatJSONStores enqueues one batch as JSON on one
// server and as protobuf on another, and compares the answers and what the
// two nodes hold.
func TestProtoEnqueueStoresWhatJSONStores(t *testing.T) {
	batch := protoBatch()
	ej, ep := newEnv(t), newEnv(t)
	fromJSON := ej.do(http.MethodPost, "/v1/messages", jsonBody(t, batch...), "Content-Type", "application/json").jsonResults(t)
	fromProto := ep.enqueueProto(protoBody(t, batch...), "Accept", api.ContentTypeProto).protoResults(t)

	// Ids are log positions, so each node names its own; the rest matches.
	equal(t, "results", len(fromProto), len(batch))
	equal(t, "JSON results", len(fromJSON), len(batch))
	for i := range fromProto {
		equal(t, fmt.Sprintf("results[%d] due", i), fromProto[i].DeliverAtMs, fromJSON[i].DeliverAtMs)
		equal(t, fmt.Sprintf("results[%d] duplicate", i), fromProto[i].Duplicate, fromJSON[i].Duplicate)
	}
	equal(t, "delayed", fromProto[0].DeliverAtMs, startMs+1800000)
	equal(t, "zero delay", fromProto[1].DeliverAtMs, startMs)
	equal(t, "past deliver_at", fromProto[2].DeliverAtMs, startMs)
	equal(t, "future deliver_at", fromProto[3].DeliverAtMs, startMs+60000)
	equal(t, "duplicate", fromProto[5].Duplicate, true)
	equal(t, "duplicate id", fromProto[5].ID, fromProto[0].ID)
	equal(t, "JSON duplicate id", fromJSON[5].ID, fromJSON[0].ID)

	for i := range fromProto[:5] {
		pid, jid := fromProto[i].ID, fromJSON[i].ID
		gj := ej.do(http.MethodGet, "/v1/messages/"+jid, "")
		gp := ep.do(http.MethodGet, "/v1/messages/"+pid, "")
		equal(t, fmt.Sprintf("messages[%d] GET status", i), gp.status, http.StatusOK)
		if !bytes.Equal(gp.body, bytes.Replace(gj.body, []byte(jid), []byte(pid), 1)) {
			t.Fatalf("messages[%d] views differ:\nprotobuf %s\n    JSON %s", i, gp.body, gj.body)
		}
		// The view leaves out ttr and max_attempts: compare what is stored.
		sj, sp := ej.stored(jid), ep.stored(pid)
		sj.ID = sp.ID
		if !reflect.DeepEqual(sp, sj) {
			t.Fatalf("messages[%d] stored differently:\nprotobuf %+v\n    JSON %+v", i, sp, sj)
		}
	}
	// And what is stored is the batch, not merely the same on both sides.
	var v api.MessageView
	check(t, "decode view", json.Unmarshal(ep.do(http.MethodGet, "/v1/messages/"+fromProto[1].ID, "").body, &v))
	if v.BodyBase64 == nil || *v.BodyBase64 != "/wAB" {
		t.Fatalf("binary body stored as %+v", v.Payload)
	}
	first := ep.stored(fromProto[0].ID)
	want := model.Message{ID: first.ID, Topic: "orders.close", Key: "order-42", Body: []byte("close order 42"),
		Headers: map[string]string{"tenant": "a", "trace": "ü✓", "e": ""}, Priority: -3, DeliverAtMs: startMs + 1800000,
		TTRMs: 5000, MaxAttempts: 3, EnqueuedMs: startMs}
	if !reflect.DeepEqual(first.Message, want) {
		t.Fatalf("stored %+v\nwant   %+v", first.Message, want)
	}
	defaults := ep.stored(fromProto[4].ID)
	if defaults.TTRMs != 30000 || defaults.MaxAttempts != 10 || defaults.Body != nil || defaults.Headers != nil {
		t.Fatalf("defaults not filled in as for JSON: %+v", defaults.Message)
	}
}

// TestProtoAnswerFormat checks which Accept headers get a protobuf answer
// and which Content-Types are decoded as protobuf.
func TestProtoAnswerFormat(t *testing.T) {
	e := newEnv(t)
	msg := api.Message{Topic: "t", DelayMs: api.Ptr(int64(7))}
	for _, tc := range []struct {
		name        string
		contentType string
		accept      string
		wantProto   bool
	}{
		{"protobuf in, no Accept", api.ContentTypeProto, "", false},
		{"protobuf in, Accept JSON", api.ContentTypeProto, "application/json", false},
		{"protobuf in, Accept any", api.ContentTypeProto, "*/*", false},
		{"protobuf in, Accept application/*", api.ContentTypeProto, "application/*", false},
		{"protobuf in, Accept protobuf", api.ContentTypeProto, api.ContentTypeProto, true},
		{"protobuf in, Accept protobuf in a list", api.ContentTypeProto, "application/json;q=0.9, application/x-protobuf;q=0.5", true},
		{"protobuf in, Accept protobuf upper case", api.ContentTypeProto, "APPLICATION/X-PROTOBUF", true},
		{"protobuf in, Accept protobuf q=0", api.ContentTypeProto, "application/x-protobuf;q=0, application/json", false},
		{"protobuf in, Accept protobuf bad q", api.ContentTypeProto, "application/x-protobuf;q=x", false},
		{"protobuf in, Accept similar type", api.ContentTypeProto, "application/x-protobuffer", false},
		{"protobuf with parameters", "application/x-protobuf; proto=delaywheel.v1.EnqueueRequest", api.ContentTypeProto, true},
		{"protobuf upper case", "Application/X-Protobuf", "", false},
		{"JSON in, Accept protobuf", "application/json", api.ContentTypeProto, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := protoBody(t, msg)
			if !isProto(tc.contentType) {
				body = jsonBody(t, msg)
			}
			header := []string{"Content-Type", tc.contentType}
			if tc.accept != "" {
				header = append(header, "Accept", tc.accept)
			}
			a := e.do(http.MethodPost, "/v1/messages", body, header...)
			var res []api.Result
			if tc.wantProto {
				res = a.protoResults(t)
			} else {
				res = a.jsonResults(t)
			}
			if len(res) != 1 || len(res[0].ID) != 24 || res[0].DeliverAtMs != startMs+7 || res[0].Duplicate {
				t.Fatalf("results %+v", res)
			}
		})
	}
	// A protobuf body sent as JSON (or with no type) is read as JSON.
	for _, ct := range []string{"application/json", "", "application/protobuf"} {
		a := e.do(http.MethodPost, "/v1/messages", protoBody(t, msg), "Content-Type", ct)
		equal(t, "status of protobuf sent as "+ct, a.status, http.StatusBadRequest)
		if got := a.errBody(t); !strings.Contains(got.Message, "JSON") {
			t.Fatalf("protobuf sent as %q: %q does not mention JSON", ct, got.Message)
		}
	}
}

func isProto(contentType string) bool {
	return strings.HasPrefix(strings.ToLower(contentType), api.ContentTypeProto)
}

// Hand-built protobuf, for what AppendEnqueueRequest cannot express.
type pw []byte

func (w pw) str(num protowire.Number, s string) pw {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.BytesType)
	return protowire.AppendString(w, s)
}

func (w pw) varint(num protowire.Number, v uint64) pw {
	w = protowire.AppendTag(slices.Clip(w), num, protowire.VarintType)
	return protowire.AppendVarint(w, v)
}

// pmsgs wraps encoded messages into an enqueue request.
func pmsgs(ms ...pw) string {
	var w pw
	for _, m := range ms {
		w = w.str(1, string(m))
	}
	return string(w)
}

// jsonOnlyCases are the enqueueCases that the protobuf form cannot express:
// JSON syntax and JSON types, names given twice or in another case,
// strings that are not UTF-8 (protoCases sends those its own way), and
// the choice between body and body_base64.
// protoCases holds their protobuf counterparts.
var jsonOnlyCases = []string{
	"malformed JSON", "syntax error", "empty body", "not an object", "two values", "unknown top field",
	"unknown message field", "topic not a string", "body and base64", "bad base64", "fractional delay",
	"string delay", "huge delay", "max_attempts overflow", "priority not int", "header value not string",
	"field twice", "messages twice", "header twice", "field in another case", "body not UTF-8",
	"body half a surrogate pair", "key not UTF-8", "header value not UTF-8", "batch over limit, bad past it",
	"batch over limit, bad within it", "batch over limit, duplicate field within it",
	"body not a string",
}

// asProto turns a JSON enqueue case's body into protobuf, or reports that
// the protobuf form cannot express it.
func asProto(body string) (string, bool) {
	var req api.EnqueueRequest
	if jsonv2.Unmarshal([]byte(body), &req, jsonv2.RejectUnknownMembers(true)) != nil {
		return "", false
	}
	b, err := api.AppendEnqueueRequest(nil, req)
	if err != nil {
		return "", false
	}
	return string(b), true
}

func protoCases() []badRequest {
	bad := func(name, body string, status int, want ...string) badRequest {
		code := api.CodeInvalidArgument
		if status == http.StatusRequestEntityTooLarge {
			code = api.CodeTooLarge
		}
		return badRequest{name, http.MethodPost, "/v1/messages", body, status, code, want}
	}
	const b = http.StatusBadRequest
	ok := pw(nil).str(1, "t").str(2, "x")
	return []badRequest{
		bad("empty body", "", b, "messages: must hold 1 to 10000 entries, got none"),
		bad("unknown top field", pmsgs(ok)+string(pw(nil).varint(2, 1)), b, "request body: unknown field number 2"),
		bad("unknown message field", pmsgs(ok, ok.varint(15, 1)), b, "messages[1]: unknown field number 15"),
		bad("unknown header entry field", pmsgs(ok.str(9, string(pw(nil).str(1, "k").str(3, "v")))), b, "messages[0].headers: unknown field number 3"),
		bad("messages not a message", string(pw(nil).varint(1, 1)), b, "messages[0]: must be an embedded message"),
		bad("topic wrong wire type", pmsgs(pw(nil).varint(1, 5)), b, "messages[0].topic: wrong wire type 0 (want 2)"),
		bad("delay wrong wire type", pmsgs(ok.str(3, "5")), b, "messages[0].delay_ms: wrong wire type 2 (want 0)"),
		bad("topic twice", pmsgs(ok.str(1, "u")), b, "messages[0].topic: given more than once"),
		bad("delay twice", pmsgs(ok, ok, ok.varint(3, 1).varint(3, 1)), b, "messages[2].delay_ms: given more than once"),
		bad("topic not UTF-8", pmsgs(pw(nil).str(1, "t\xff")), b, "messages[0].topic: must be valid UTF-8"),
		bad("key not UTF-8", pmsgs(ok.str(5, "\xc3\x28")), b, "messages[0].key: must be valid UTF-8"),
		bad("header value not UTF-8", pmsgs(ok.str(9, string(pw(nil).str(1, "k").str(2, "\xff")))), b, `messages[0].headers["k"]: must be valid UTF-8`),
		bad("duplicate header key", pmsgs(ok.str(9, string(pw(nil).str(1, "k"))).str(9, string(pw(nil).str(1, "k")))), b, `messages[0].headers["k"]: given more than once`),
		bad("max_attempts overflow", pmsgs(ok.varint(8, 1<<32)), b, "messages[0].max_attempts: must be an integer that fits int32, got 4294967296"),
		bad("max_attempts negative", pmsgs(ok.varint(8, uint64(1<<64-1))), b, "messages[0].max_attempts: must be between 1 and 1000", "got -1"),
		bad("delay over int64", pmsgs(ok.varint(3, 1<<63)), b, "messages[0].delay_ms: must be between 0 and 315360000000"),
		bad("truncated", pmsgs(ok)[:3], b, "request body: malformed protobuf"),
		bad("truncated inside a message", pmsgs(append(slices.Clip(ok), 0x18)), b, "messages[0]: malformed protobuf"),
		bad("JSON sent as protobuf", msgs(okMsg), b, "request body: "),
	}
}

// TestProtoValidation sends every enqueue rule of TestValidation in
// protobuf, plus the protobuf form's own, and checks the same answer and
// that the store holds nothing after.
func TestProtoValidation(t *testing.T) {
	e := newEnv(t)
	var cases, skipped []string
	run := func(tc badRequest, body string, fix func(string) string) {
		t.Run(tc.name, func(t *testing.T) {
			a := e.enqueueProto(body, "Accept", api.ContentTypeProto)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			equal(t, "error content type", a.header.Get("Content-Type"), "application/json")
			got := a.errBody(t)
			t.Logf("%d %s: %s", a.status, got.Code, got.Message)
			equal(t, "code", got.Code, tc.code)
			for _, w := range tc.want {
				if w = fix(w); !strings.Contains(got.Message, w) {
					t.Errorf("message %q does not contain %q", got.Message, w)
				}
			}
		})
	}
	for _, tc := range enqueueCases() {
		body, ok := asProto(tc.body)
		if !ok {
			skipped = append(skipped, tc.name)
			continue
		}
		cases = append(cases, tc.name)
		// The protobuf form has one body field, whichever the JSON used,
		// and its decoder counts the batch itself, in messages.
		run(tc, body, strings.NewReplacer("body_base64", "body", "entries", "messages").Replace)
	}
	for _, tc := range protoCases() {
		run(tc, tc.body, func(w string) string { return w })
	}
	sort.Strings(skipped)
	want := slices.Sorted(slices.Values(jsonOnlyCases))
	if !slices.Equal(skipped, want) {
		t.Fatalf("JSON-only cases %q, want %q", skipped, want)
	}
	if len(cases) < 20 {
		t.Fatalf("only %d JSON cases carried over to protobuf: %q", len(cases), cases)
	}
	topics, err := e.c.Topics(t.Context())
	check(t, "topics", err)
	equal(t, "topics after refusals", len(topics), 0)
}

func TestProtoTooLarge(t *testing.T) {
	e := newEnv(t)
	one := api.Message{Topic: "t"}
	batch := make([]api.Message, 10001)
	for i := range batch {
		batch[i] = one
	}
	small := newEnv(t, func(c *transport.Config) { c.Limits.MaxBatch = 2; c.Limits.MaxRequestBytes = 100 })
	for _, tc := range []struct {
		name string
		e    *env
		body string
		want string
	}{
		{"default batch limit", e, protoBody(t, batch...), "messages: too many messages: 10001 messages are over the limit of 10000 per request"},
		{"configured batch limit", small, protoBody(t, one, one, one), "messages: too many messages: 3 messages are over the limit of 2 per request"},
		{"request size", small, protoBody(t, api.Message{Topic: "t", Payload: api.TextBody(strings.Repeat("x", 101))}), "request body: over the limit of 100 bytes"},
		{"body size", e, protoBody(t, one, api.Message{Topic: "t", Payload: api.TextBody(strings.Repeat("x", 1<<20+1))}), "messages[1].body: 1048577 bytes is over the limit of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.e.enqueueProto(tc.body, "Accept", api.ContentTypeProto)
			equal(t, "status", a.status, http.StatusRequestEntityTooLarge)
			got := a.errBody(t)
			equal(t, "code", got.Code, api.CodeTooLarge)
			if !strings.Contains(got.Message, tc.want) {
				t.Fatalf("message %q does not contain %q", got.Message, tc.want)
			}
		})
	}
	// Right at the limits is fine.
	res := small.enqueueProto(protoBody(t, one, one), "Accept", api.ContentTypeProto).protoResults(t)
	equal(t, "results at the batch limit", len(res), 2)
	equal(t, "topics after the refusals", e.topicCount(), 0)
	equal(t, "topics after the accepted enqueue", small.topicCount(), 1)
}

// TestProtoForwarded checks that a follower passes a protobuf enqueue and
// its protobuf answer through unchanged.
func TestProtoForwarded(t *testing.T) {
	t.Parallel() // a two-node cluster spends its start waiting for an election
	p := newForwardPair(t)
	a := p.follower.enqueueProto(protoBody(t, protoBatch()...), "Accept", api.ContentTypeProto)
	res := a.protoResults(t)
	equal(t, "results", len(res), len(protoBatch()))
	equal(t, "duplicate", res[5].Duplicate, true)
	r := <-p.seen
	equal(t, "forwarded content type", r.Header.Get("Content-Type"), api.ContentTypeProto)
	equal(t, "forwarded accept", r.Header.Get("Accept"), api.ContentTypeProto)
	equal(t, "forwarded path", r.URL.Path, "/v1/messages")
}
