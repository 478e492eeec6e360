package transport

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestReadAllSized: a body is read whole whatever length it announced,
// and a read error is returned.
func TestReadAllSized(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB, over maxBodyPrealloc
	for _, c := range []struct {
		name      string
		n         int
		announced int64
	}{
		{"exact", 20_000, 20_000},
		{"unknown", 20_000, -1},
		{"announced short", 20_000, 100},
		{"announced long", 20_000, 1 << 30},
		{"empty", 0, 0},
		{"over the preallocation", len(body), int64(len(body))},
	} {
		got, err := readAllSized(iotest.HalfReader(bytes.NewReader(body[:c.n])), c.announced)
		if err != nil || !bytes.Equal(got, body[:c.n]) {
			t.Errorf("%s: read %d bytes, err %v; want %d bytes", c.name, len(got), err, c.n)
		}
	}
	boom := errors.New("boom")
	if _, err := readAllSized(iotest.ErrReader(boom), 10); !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want %v", err, boom)
	}
}

// TestAppendResults: the enqueue answer written by hand is the bytes
// writeJSON writes.
func TestAppendResults(t *testing.T) {
	for _, es := range [][]wheel.Enqueued{
		nil,
		{{ID: model.ID{Index: 1, Seq: 2}, DeliverAtMs: 1_732_245_600_000}},
		{{ID: model.ID{Index: 1<<64 - 1, Seq: 1<<32 - 1}, DeliverAtMs: -1, Duplicate: true}, {ID: model.ID{Index: 9}}},
	} {
		w := httptest.NewRecorder()
		writeJSON(w, http.StatusOK, api.EnqueueResponse{Results: resultsOf(es)})
		if got := string(appendResults(nil, es)); got != w.Body.String() {
			t.Errorf("appendResults %q\n   writeJSON %q", got, w.Body.String())
		}
	}
}

// BenchmarkParseEnqueue decodes the bench's enqueue body: 100 messages of
// 100-byte bodies with an absolute due time.
func BenchmarkParseEnqueue(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"messages":[`)
	for i := range 100 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"topic":"bench","body":"` + strings.Repeat("x", 100) + `","deliver_at_ms":1732247400000}`)
	}
	body.WriteString(`]}`)
	lim := DefaultLimits()
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseEnqueue(body.Bytes(), lim); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAPIPath: a JSON pointer is named as the API names fields.
func TestAPIPath(t *testing.T) {
	for ptr, want := range map[jsontext.Pointer]string{
		"":                            "request body",
		"/messages":                   "messages",
		"/messages/2/body":            "messages[2].body",
		"/receipts/10":                "receipts[10]",
		"/headers/X-A":                `headers["X-A"]`,
		"/messages/0/headers/X-A":     `messages[0].headers["X-A"]`,
		"/messages/0/headers/0":       `messages[0].headers["0"]`,
		"/messages/0/headers/":        `messages[0].headers[""]`,
		"/messages/0/headers/a~1b~0c": `messages[0].headers["a/b~c"]`,
	} {
		if got := apiPath(ptr); got != want {
			t.Errorf("apiPath(%q) = %s, want %s", ptr, got, want)
		}
	}
}

// TestAppendCounted: the settle answers written by hand are the bytes
// writeJSON writes.
func TestAppendCounted(t *testing.T) {
	for _, c := range []command.Counted{{}, {Done: 100}, {Done: 3, Stale: 1 << 40}} {
		for _, op := range []service.Op{service.OpAck, service.OpNack, service.OpTouch, service.OpBury} {
			want := map[service.Op]any{
				service.OpAck:   api.AckResponse{Acked: c.Done, Stale: c.Stale},
				service.OpNack:  api.NackResponse{Nacked: c.Done, Stale: c.Stale},
				service.OpTouch: api.TouchResponse{Touched: c.Done, Stale: c.Stale},
				service.OpBury:  api.BuryResponse{Buried: c.Done, Stale: c.Stale},
			}[op]
			w := httptest.NewRecorder()
			writeJSON(w, http.StatusOK, want)
			if got := string(appendCounted(nil, settlementOf(op).doneKey, c)); got != w.Body.String() {
				t.Errorf("appendCounted %q\n   writeJSON %q", got, w.Body.String())
			}
		}
	}
}

// FuzzDecodeReceipts holds fastReceipts to the strict decoding: what it
// accepts, decodeStrict accepts too, as the same list.
func FuzzDecodeReceipts(f *testing.F) {
	for _, seed := range []string{
		`{"receipts":["0000000000000007000000010000.1234567890abcdef"]}`,
		` { "receipts" : [ "a" , "b" ] } `,
		`{"receipts":[]}`,
		`{"receipts":null}`,
		`{"receipts":["a"],"receipts":["b"]}`,
		`{"Receipts":["a"]}`,
		`{"receipts":["a\"b"]}`,
		`{"receipts":["a"]} {}`,
		"{\"receipts\":[\"\xff\"]}",
		`{"receipts":["a",]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := fastReceipts(data)
		if !ok {
			return
		}
		var strict api.ReceiptsRequest
		if err := decodeStrict(data, &strict); err != nil {
			t.Fatalf("the fast decoder accepted %q, the strict decoding refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, strict.Receipts) {
			t.Fatalf("decoders differ on %q:\n fast %q\n json %q", data, fast, strict.Receipts)
		}
	})
}
