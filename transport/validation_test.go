package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
)

// badRequest is a request the server must refuse without calling the backend.
type badRequest struct {
	name         string
	method, path string
	body         string
	status       int
	code         string
	want         []string // substrings of the message
}

// msgs is an enqueue body of the given message objects.
func msgs(objs ...string) string { return `{"messages":[` + strings.Join(objs, ",") + `]}` }

// many repeats obj n times, comma-separated.
func many(obj string, n int) string { return strings.TrimSuffix(strings.Repeat(obj+",", n), ",") }

const okMsg = `{"topic":"t","body":"x"}`

const (
	receipt  = "0000000000000001000000000000000000000000000000ab" // 24+... not a receipt
	goodRec  = "000000000000000100000000.00000000000000ab"
	msgID    = "000000000000000100000000"
	group5ID = "000000000000000a05000000" // an id of group 5
)

func enqueueCases() []badRequest {
	bad := func(name, body string, status int, want ...string) badRequest {
		code := api.CodeInvalidArgument
		if status == http.StatusRequestEntityTooLarge {
			code = api.CodeTooLarge
		}
		return badRequest{name, http.MethodPost, "/v1/messages", body, status, code, want}
	}
	const b, big = http.StatusBadRequest, http.StatusRequestEntityTooLarge
	headers65 := make([]string, 65)
	for i := range headers65 {
		headers65[i] = fmt.Sprintf(`"h%d":"v"`, i)
	}
	return []badRequest{
		bad("malformed JSON", `{"messages":[`, b, "malformed JSON"),
		bad("syntax error", `{"messages":[}`, b, "malformed JSON at byte"),
		bad("empty body", ``, b, "request body", "empty"),
		bad("not an object", `[1]`, b, "must be an object"),
		bad("two values", msgs(okMsg)+` {}`, b, "exactly one JSON value"),
		bad("unknown top field", `{"messages":[`+okMsg+`],"extra":1}`, b, `unknown field "extra"`),
		bad("unknown message field", msgs(okMsg, `{"topic":"t","colour":"red"}`), b, `messages[1]`, `unknown field "colour"`),
		bad("no messages", `{"messages":[]}`, b, "messages: must hold 1 to 10000"),
		bad("null messages", `{"messages":null}`, b, "messages: must hold 1 to 10000"),
		bad("batch over limit", msgs(many(`{"topic":"t"}`, 10001)), big, "messages: 10001 entries are over the limit of 10000"),
		// Messages past the limit are counted, not decoded.
		bad("batch over limit, bad past it", msgs(many(`{"topic":"t","body":"\u0078"}`, 10000), `{"topic":5}`, `{}`), big, "messages: 10002 entries are over the limit of 10000"),
		// Over the limit is 413 whatever the messages hold, as a protobuf
		// body and gRPC answer it: not the first bad message's 400.
		bad("batch over limit, bad within it", msgs(`{"topic":"t","colour":"red"}`, many(okMsg, 10000)), big, "messages: 10001 entries are over the limit of 10000"),
		bad("batch over limit, duplicate field within it", msgs(`{"topic":"t","topic":"u"}`, many(okMsg, 10000)), big, "messages: 10001 entries are over the limit of 10000"),
		bad("missing topic", msgs(okMsg, `{"body":"x"}`), b, "messages[1].topic: must be 1 to 200 characters of [A-Za-z0-9._:-]"),
		bad("topic bad char", msgs(`{"topic":"a b"}`), b, `messages[0].topic`, `"a b"`),
		bad("topic too long", msgs(`{"topic":"`+strings.Repeat("a", 201)+`"}`), b, "messages[0].topic: must be 1 to 200"),
		bad("topic not a string", msgs(`{"topic":5}`), b, "messages[0].topic: must be a string"),
		bad("body not a string", msgs(okMsg, okMsg, `{"topic":"t","body":5}`), b, "messages[2].body: must be a string, got JSON number"),
		bad("body and base64", msgs(`{"topic":"t","body":"x","body_base64":"eA=="}`), b, `messages[0]: set "body" or "body_base64", not both`),
		bad("bad base64", msgs(`{"topic":"t","body_base64":"!!"}`), b, "messages[0].body_base64: not valid standard base64"),
		bad("body over limit", msgs(`{"topic":"t","body":"`+strings.Repeat("x", 1<<20+1)+`"}`), big, "messages[0].body: 1048577 bytes is over the limit of 1048576 bytes (1 MiB)"),
		bad("base64 body over limit", msgs(`{"topic":"t","body_base64":"`+strings.Repeat("AAAA", (1<<20)/3+1)+`"}`), big, "messages[0].body_base64", "over the limit of 1048576"),
		bad("negative delay", msgs(okMsg, okMsg, okMsg, `{"topic":"t","delay_ms":-1}`), b, "messages[3].delay_ms: must be between 0 and 315360000000 (10 years)"),
		bad("delay over max", msgs(`{"topic":"t","delay_ms":315360000001}`), b, "messages[0].delay_ms: must be between 0 and 315360000000 (10 years)"),
		bad("fractional delay", msgs(`{"topic":"t","delay_ms":1.5}`), b, "messages[0].delay_ms: must be an integer"),
		bad("string delay", msgs(`{"topic":"t","delay_ms":"5"}`), b, "messages[0].delay_ms: must be an integer"),
		bad("huge delay", msgs(`{"topic":"t","delay_ms":1e30}`), b, "messages[0].delay_ms: must be an integer"),
		bad("negative deliver_at", msgs(`{"topic":"t","deliver_at_ms":-1}`), b, "messages[0].deliver_at_ms: must be between 0 and now + 315360000000 ms (10 years)"),
		bad("deliver_at too far", msgs(fmt.Sprintf(`{"topic":"t","deliver_at_ms":%d}`, startMs+315360000001)), b, "messages[0].deliver_at_ms", "10 years"),
		bad("delay and deliver_at", msgs(`{"topic":"t","delay_ms":0,"deliver_at_ms":0}`), b, `messages[0]: set "delay_ms" or "deliver_at_ms", not both`),
		bad("key too long", msgs(`{"topic":"t","key":"`+strings.Repeat("k", 257)+`"}`), b, "messages[0].key: must be at most 256 bytes, got 257"),
		bad("ttr zero", msgs(`{"topic":"t","ttr_ms":0}`), b, "messages[0].ttr_ms: must be between 1 and 86400000 (1 ms to 1 day)"),
		bad("ttr over max", msgs(`{"topic":"t","ttr_ms":86400001}`), b, "messages[0].ttr_ms: must be between 1 and 86400000"),
		bad("max_attempts zero", msgs(`{"topic":"t","max_attempts":0}`), b, "messages[0].max_attempts: must be between 1 and 1000"),
		bad("max_attempts over max", msgs(`{"topic":"t","max_attempts":1001}`), b, "messages[0].max_attempts: must be between 1 and 1000"),
		bad("max_attempts overflow", msgs(`{"topic":"t","max_attempts":4294967296}`), b, "messages[0].max_attempts: must be an integer"),
		bad("priority not int", msgs(`{"topic":"t","priority":"high"}`), b, "messages[0].priority: must be an integer"),
		bad("too many headers", msgs(`{"topic":"t","headers":{`+strings.Join(headers65, ",")+`}}`), b, "messages[0].headers: at most 64 headers, got 65"),
		bad("header key too long", msgs(`{"topic":"t","headers":{"`+strings.Repeat("k", 257)+`":"v"}}`), b, "messages[0].headers: key", "must be 1 to 256 bytes"),
		bad("empty header key", msgs(`{"topic":"t","headers":{"":"v"}}`), b, "messages[0].headers: key \"\" must be 1 to 256 bytes"),
		bad("header value too long", msgs(`{"topic":"t","headers":{"k":"`+strings.Repeat("v", 4097)+`"}}`), b, `messages[0].headers["k"]: value must be at most 4096 bytes`),
		bad("header value not string", msgs(`{"topic":"t","headers":{"k":1}}`), b, "messages[0].headers", "must be a string"),
		// Strict input: nothing is read one way when it could be read
		// another, and a header must be sendable as an HTTP header.
		bad("field twice", msgs(okMsg, `{"topic":"t","body":"x","topic":"u"}`), b, "messages[1].topic: given more than once"),
		bad("messages twice", `{"messages":[`+okMsg+`],"messages":[`+okMsg+`]}`, b, "messages: given more than once"),
		bad("header twice", msgs(okMsg, okMsg, `{"topic":"t","headers":{"X-A":"1","X-A":"2"}}`), b, `messages[2].headers["X-A"]: given more than once`),
		bad("field in another case", msgs(`{"topic":"t","Body":"x"}`), b, `messages[0]: unknown field "Body"`),
		bad("body not UTF-8", msgs(okMsg, okMsg, `{"topic":"t","body":"a`+"\xff"+`b"}`), b, `messages[2].body: must be valid UTF-8; send other bytes as "body_base64"`),
		bad("body half a surrogate pair", msgs(`{"topic":"t","body":"\ud800"}`), b, `messages[0].body: must be valid UTF-8; send other bytes as "body_base64"`),
		bad("key not UTF-8", msgs(`{"topic":"t","key":"`+"\xc3\x28"+`"}`), b, "messages[0].key: must be valid UTF-8"),
		bad("header value not UTF-8", msgs(`{"topic":"t","headers":{"X-A":"`+"\xff"+`"}}`), b, `messages[0].headers["X-A"]: must be valid UTF-8`),
		bad("header name not a token", msgs(`{"topic":"t","headers":{"X A":"v"}}`), b, `messages[0].headers["X A"]: name is not an HTTP token`),
		bad("header name with a colon", msgs(okMsg, `{"topic":"t","headers":{"X-A:":"v"}}`), b, `messages[1].headers["X-A:"]: name is not an HTTP token`),
		bad("header value with CR LF", msgs(`{"topic":"t","headers":{"X-A":"a\r\nInjected: 1"}}`), b, `messages[0].headers["X-A"]: value holds a character HTTP does not allow`),
		bad("header value with LF", msgs(`{"topic":"t","headers":{"X-A":"a\nb"}}`), b, `messages[0].headers["X-A"]: value holds`),
		bad("header value with NUL", msgs(`{"topic":"t","headers":{"X-A":"a\u0000b"}}`), b, `messages[0].headers["X-A"]: value holds`),
		bad("header Host", msgs(`{"topic":"t","headers":{"Host":"example.com"}}`), b, `messages[0].headers["Host"]: name is reserved: the HTTP client sets Host itself`),
		bad("header Content-Length", msgs(`{"topic":"t","headers":{"content-length":"5"}}`), b, `messages[0].headers["content-length"]: name is reserved`),
		bad("header Transfer-Encoding", msgs(`{"topic":"t","headers":{"Transfer-Encoding":"chunked"}}`), b, `messages[0].headers["Transfer-Encoding"]: name is reserved`),
		bad("header Connection", msgs(`{"topic":"t","headers":{"CONNECTION":"close"}}`), b, `messages[0].headers["CONNECTION"]: name is reserved`),
		bad("header Trailer", msgs(`{"topic":"t","headers":{"Trailer":"X"}}`), b, `messages[0].headers["Trailer"]: name is reserved`),
	}
}

func otherCases() []badRequest {
	inv := func(name, method, path, body string, want ...string) badRequest {
		return badRequest{name, method, path, body, http.StatusBadRequest, api.CodeInvalidArgument, want}
	}
	nf := func(name, method, path, body string, want ...string) badRequest {
		return badRequest{name, method, path, body, http.StatusNotFound, api.CodeNotFound, want}
	}
	const post, get, del = http.MethodPost, http.MethodGet, http.MethodDelete
	return []badRequest{
		inv("get bad id", get, "/v1/messages/xyz", "", `id: must be a message id (24 hex digits, not all zero), got "xyz"`),
		inv("get zero id", get, "/v1/messages/000000000000000000000000", "", "id: must be a message id"),
		nf("get unknown id", get, "/v1/messages/"+msgID, "", "not found: message "+msgID),
		inv("cancel bad id", del, "/v1/messages/nothex", "", `got "nothex"`),
		inv("reschedule bad id", post, "/v1/messages/12/reschedule", `{"delay_ms":1}`, `id: must be a message id`),
		inv("reschedule neither", post, "/v1/messages/"+msgID+"/reschedule", `{}`, `set one of "delay_ms" or "deliver_at_ms"`),
		inv("reschedule both", post, "/v1/messages/"+msgID+"/reschedule", `{"delay_ms":1,"deliver_at_ms":1}`, "not both"),
		inv("reschedule delay range", post, "/v1/messages/"+msgID+"/reschedule", `{"delay_ms":-5}`, "delay_ms: must be between 0 and 315360000000 (10 years)"),
		inv("reschedule unknown field", post, "/v1/messages/"+msgID+"/reschedule", `{"delay":1}`, `unknown field "delay"`),
		inv("reschedule empty body", post, "/v1/messages/"+msgID+"/reschedule", ``, "empty"),
		inv("cancel key bad topic", del, "/v1/topics/a%20b/keys/k", "", "topic: must be 1 to 200 characters"),
		inv("cancel key too long", del, "/v1/topics/t/keys/"+strings.Repeat("k", 257), "", "key: must be 1 to 256 bytes, got 257"),
		inv("reserve bad topic", post, "/v1/topics/a!b/reserve", `{}`, "topic: must be 1 to 200 characters"),
		inv("reserve max zero", post, "/v1/topics/t/reserve", `{"max":0}`, "max: must be between 1 and 1000"),
		inv("reserve max over", post, "/v1/topics/t/reserve", `{"max":1001}`, "max: must be between 1 and 1000"),
		inv("reserve wait negative", post, "/v1/topics/t/reserve", `{"wait_ms":-1}`, "wait_ms: must be between 0 and 300000 (5 minutes)"),
		inv("reserve wait over", post, "/v1/topics/t/reserve", `{"wait_ms":300001}`, "wait_ms: must be between 0 and 300000"),
		inv("reserve ttr zero", post, "/v1/topics/t/reserve", `{"ttr_ms":0}`, "ttr_ms: must be between 1 and 86400000"),
		inv("reserve unknown field", post, "/v1/topics/t/reserve", `{"max":1,"timeout":5}`, `unknown field "timeout"`),
		inv("ack no receipts", post, "/v1/ack", `{"receipts":[]}`, "receipts: must hold 1 to 10000"),
		inv("ack bad receipt", post, "/v1/ack", `{"receipts":["`+goodRec+`","`+receipt+`"]}`, "receipts[1]:", "is not a receipt"),
		badRequest{"ack too many", post, "/v1/ack", `{"receipts":[` + many(`"`+goodRec+`"`, 10001) + `]}`, http.StatusRequestEntityTooLarge, api.CodeTooLarge, []string{"receipts: 10001 entries are over the limit of 10000"}},
		inv("ack unknown field", post, "/v1/ack", `{"receipts":["`+goodRec+`"],"delay_ms":5}`, `unknown field "delay_ms"`),
		inv("nack delay negative", post, "/v1/nack", `{"receipts":["`+goodRec+`"],"delay_ms":-1}`, "delay_ms: must be between 0 and 315360000000 (10 years)"),
		inv("nack bad receipt", post, "/v1/nack", `{"receipts":["x"]}`, "receipts[0]:"),
		inv("nack bad receipt and delay", post, "/v1/nack", `{"receipts":["x"],"delay_ms":-1}`, `receipts[0]: "x" is not a receipt`),
		inv("touch bad receipt", post, "/v1/touch", `{"receipts":["`+msgID+`.zz"]}`, "receipts[0]:"),
		inv("touch empty body", post, "/v1/touch", ``, "empty"),
		inv("dead bad topic", get, "/v1/topics/bad%2Ftopic/dead", "", "topic: must be 1 to 200"),
		inv("dead limit zero", get, "/v1/topics/t/dead?limit=0", "", "limit: must be between 1 and 1000"),
		inv("dead limit over", get, "/v1/topics/t/dead?limit=1001", "", "limit: must be between 1 and 1000"),
		inv("dead limit not int", get, "/v1/topics/t/dead?limit=ten", "", "limit: must be an integer between 1 and 1000"),
		inv("redrive bad id", post, "/v1/topics/t/dead/redrive", `{"ids":["`+msgID+`","nope"]}`, `ids[1]: "nope" is not a message id`),
		inv("redrive unknown field", post, "/v1/topics/t/dead/redrive", `{"all":true}`, `unknown field "all"`),
		nf("slot over", get, "/v1/wheel/slots/7200", "", "slots are 0 to 7199"),
		nf("slot negative", get, "/v1/wheel/slots/-1", "", "slots are 0 to 7199"),
		nf("slot not int", get, "/v1/wheel/slots/abc", "", "no such slot"),
		inv("slot records not bool", get, "/v1/wheel/slots/5?records=maybe", "", "records: must be true or false"),
		inv("add node no id", post, "/v1/cluster/nodes", `{"raft_addr":"h:1","http_addr":"h:2"}`, "id: must be 1 to 256 bytes"),
		inv("add node bad raft addr", post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h","http_addr":"h:2"}`, `raft_addr: must be host:port, got "h"`),
		inv("add node bad http addr", post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h:1","http_addr":""}`, "http_addr: must be host:port"),
		inv("add node bad grpc addr", post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h:1","http_addr":"h:2","grpc_addr":"h"}`, `grpc_addr: must be host:port, got "h"`),
		inv("add node unknown field", post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h:1","http_addr":"h:2","voter":true}`, `unknown field "voter"`),
		// Strict input on every body.
		inv("add node id twice", post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h:1","http_addr":"h:2","id":"n3"}`, "id: given more than once"),
		inv("add node id not UTF-8", post, "/v1/cluster/nodes", `{"id":"n`+"\xff"+`","raft_addr":"h:1","http_addr":"h:2"}`, "id: must be valid UTF-8"),
		inv("reschedule delay twice", post, "/v1/messages/"+msgID+"/reschedule", `{"delay_ms":1,"delay_ms":2}`, "delay_ms: given more than once"),
		inv("reserve max twice", post, "/v1/topics/t/reserve", `{"max":1,"max":1000}`, "max: given more than once"),
		inv("reserve in another case", post, "/v1/topics/t/reserve", `{"MAX":1}`, `request body: unknown field "MAX"`),
		inv("ack receipts twice", post, "/v1/ack", `{"receipts":["`+goodRec+`"],"receipts":[]}`, "receipts: given more than once"),
		inv("nack receipt not UTF-8", post, "/v1/nack", `{"receipts":["`+goodRec+`","`+"\xff"+`"]}`, "receipts[1]: must be valid UTF-8"),
		inv("redrive ids twice", post, "/v1/topics/t/dead/redrive", `{"ids":[],"ids":["`+msgID+`"]}`, "ids: given more than once"),
		// A cluster of one group has no group 5: an id or a receipt naming
		// it is refused, as gRPC refuses it.
		inv("get id of a group the cluster lacks", get, "/v1/messages/"+group5ID, "", "id: message id "+group5ID+" names group 5; this cluster has groups 0 to 0"),
		inv("get id of a group the cluster lacks in group 0", get, "/v1/messages/"+group5ID+"?group=0", "", "id: message id "+group5ID+" names group 5"),
		inv("cancel id of a group the cluster lacks", del, "/v1/messages/"+group5ID, "", "id: message id "+group5ID+" names group 5"),
		inv("reschedule id of a group the cluster lacks", post, "/v1/messages/"+group5ID+"/reschedule", `{"delay_ms":1}`, "id: message id "+group5ID+" names group 5"),
		inv("ack receipt of a group the cluster lacks", post, "/v1/ack", `{"receipts":["`+goodRec+`","`+group5ID+`.00000000000000ab"]}`, "receipts[1]: receipt names group 5; this cluster has groups 0 to 0"),
		inv("nack receipt of a group the cluster lacks", post, "/v1/nack", `{"receipts":["`+group5ID+`.00000000000000ab"]}`, "receipts[0]: receipt names group 5"),
	}
}

// TestValidation checks that every rule answers 4xx with a message naming
// the field, the index and the limit, and that the backend saw nothing.
func TestValidation(t *testing.T) {
	e := newEnv(t)
	for _, tc := range append(enqueueCases(), otherCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(tc.method, tc.path, tc.body, "Content-Type", "application/json")
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			got := a.errBody(t)
			t.Logf("%d %s: %s", a.status, got.Code, got.Message)
			equal(t, "code", got.Code, tc.code)
			for _, w := range tc.want {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message %q does not contain %q", got.Message, w)
				}
			}
			// Fields are named as the API names them, never as Go does.
			for _, goName := range []string{"Payload", "Go ", "api."} {
				if strings.Contains(got.Message, goName) {
					t.Errorf("message %q names a Go field or type (%q)", got.Message, goName)
				}
			}
		})
	}
	equal(t, "topics after refusals", e.topicCount(), 0)
}

// TestErrorsNotHTMLEscaped: an error body quotes the input as it was
// sent: '<', '>' and '&' are not escaped.
func TestErrorsNotHTMLEscaped(t *testing.T) {
	e := newEnv(t)
	a := e.do(http.MethodPost, "/v1/messages", msgs(`{"topic":"t","headers":{"<a&b>":"v"}}`))
	equal(t, "status", a.status, http.StatusBadRequest)
	if want := `messages[0].headers[\"<a&b>\"]: name is not an HTTP token`; !strings.Contains(string(a.body), want) {
		t.Fatalf("error body %s does not hold %s", a.body, want)
	}
	equal(t, "topics after refusals", e.topicCount(), 0)
}

func TestOversizeRequest(t *testing.T) {
	e := newEnv(t)
	body := msgs(`{"topic":"t","body":"` + strings.Repeat("x", 32<<20) + `"}`)
	a := e.do(http.MethodPost, "/v1/messages", body)
	equal(t, "status", a.status, http.StatusRequestEntityTooLarge)
	got := a.errBody(t)
	equal(t, "code", got.Code, api.CodeTooLarge)
	if !strings.Contains(got.Message, "over the limit of 33554432 bytes (32 MiB)") {
		t.Fatalf("message %q", got.Message)
	}

	small := newEnv(t, func(c *transport.Config) { c.Limits.MaxRequestBytes = 100 })
	a = small.do(http.MethodPost, "/v1/ack", `{"receipts":["`+strings.Repeat(goodRec+`","`, 5)+goodRec+`"]}`)
	equal(t, "small limit status", a.status, http.StatusRequestEntityTooLarge)
	equal(t, "topics after refusals", e.topicCount()+small.topicCount(), 0)
}

func TestDefaultsAndLimitEdges(t *testing.T) {
	e := newEnv(t)
	res := e.mustEnqueue(
		api.Message{Topic: strings.Repeat("a", 200), DelayMs: api.Ptr(int64(315360000000)), Key: strings.Repeat("k", 256),
			TTRMs: api.Ptr(int64(86400000)), MaxAttempts: api.Ptr(int32(1000))},
		api.Message{Topic: "A-Z.a_z:0-9", DeliverAtMs: api.Ptr(startMs + 315360000000), TTRMs: api.Ptr(int64(1)), MaxAttempts: api.Ptr(int32(1))},
		api.Message{Topic: "t", Payload: api.TextBody(strings.Repeat("x", 1<<20))},
	)
	equal(t, "max delay", res[0].DeliverAtMs, startMs+315360000000)
	equal(t, "max deliver_at", res[1].DeliverAtMs, startMs+315360000000)
	ds, err := e.c.Reserve(t.Context(), "t", api.ReserveRequest{})
	check(t, "reserve defaults", err)
	equal(t, "default max", len(ds), 1)
	equal(t, "default ttr", ds[0].LeaseExpiresMs, startMs+30000)
	a := e.do(http.MethodPost, "/v1/topics/t/reserve", "")
	equal(t, "empty reserve body", a.status, http.StatusOK)
	if !strings.Contains(string(a.body), `"messages":[]`) {
		t.Fatalf("empty reserve should list no messages: %s", a.body)
	}
}
