package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

const nowMs = transporttest.StartMs

// seen is what the server got: one entry per request.
type seen struct {
	contentType, accept string
	body                []byte
}

// recordingServer is a real node behind its server, on a clock that
// stands still, with edit applied to the server's config; it records the
// requests the server gets.
type recordingServer struct {
	*transporttest.Node
	mu   sync.Mutex
	reqs []seen
}

func newRecordingServer(t *testing.T, edit ...func(*transport.Config)) *recordingServer {
	t.Helper()
	s := &recordingServer{}
	s.Node = transporttest.Start(t, transporttest.Options{
		Server: func(c *transport.Config) {
			for _, f := range edit {
				f(c)
			}
		},
		Handler: func(_ string, inner http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					t.Errorf("read request: %v", err)
				}
				s.mu.Lock()
				s.reqs = append(s.reqs, seen{r.Header.Get("Content-Type"), r.Header.Get("Accept"), body})
				s.mu.Unlock()
				r.Body = io.NopCloser(bytes.NewReader(body))
				inner.ServeHTTP(w, r)
			})
		},
	})
	return s
}

func (s *recordingServer) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

func enqueueBatch() []api.Message {
	return []api.Message{
		{Topic: "orders", Payload: api.TextBody("close 42"), DelayMs: api.Ptr(int64(1500)), Key: "o-42", Priority: -2,
			TTRMs: api.Ptr(int64(2000)), MaxAttempts: api.Ptr(int32(4)), Headers: map[string]string{"tenant": "a"}},
		{Topic: "orders", Payload: api.BinaryBody([]byte{0xff, 0x00}), DeliverAtMs: api.Ptr(nowMs + 99)},
		{Topic: "other", DelayMs: api.Ptr(int64(0))},
		{Topic: "orders", Key: "o-42", Payload: api.TextBody("again")}, // a duplicate
	}
}

func TestEnqueueEncodings(t *testing.T) {
	for _, tc := range []struct {
		name              string
		opts              []client.Option
		wantType, wantAcc string
	}{
		{"protobuf by default", nil, api.ContentTypeProto, api.ContentTypeProto},
		{"WithJSON", []client.Option{client.WithJSON()}, "application/json", "application/json"},
		{"WithRawResponse", []client.Option{client.WithRawResponse(func([]byte) {})}, "application/json", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecordingServer(t)
			c := client.New(srv.URL, tc.opts...)
			ctx := t.Context()
			res, err := c.Enqueue(ctx, enqueueBatch())
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 || reqs[0].contentType != tc.wantType || reqs[0].accept != tc.wantAcc {
				t.Fatalf("server saw %+v, want Content-Type %q and Accept %q", reqs, tc.wantType, tc.wantAcc)
			}
			if tc.wantType == api.ContentTypeProto {
				if _, err := api.UnmarshalEnqueueRequest(reqs[0].body, 10); err != nil {
					t.Fatalf("body is not protobuf: %v", err)
				}
			} else if !bytes.HasPrefix(reqs[0].body, []byte(`{"messages":[`)) {
				t.Fatalf("body is not JSON: %q", reqs[0].body)
			}

			if len(res) != 4 {
				t.Fatalf("%d results for 4 messages: %+v", len(res), res)
			}
			want := []api.Result{
				{ID: res[0].ID, DeliverAtMs: nowMs + 1500},
				{ID: res[1].ID, DeliverAtMs: nowMs + 99},
				{ID: res[2].ID, DeliverAtMs: nowMs},
				{ID: res[0].ID, DeliverAtMs: nowMs + 1500, Duplicate: true},
			}
			if !reflect.DeepEqual(res, want) {
				t.Fatalf("results %+v\nwant    %+v", res, want)
			}
			if res[0].ID == res[1].ID || res[1].ID == res[2].ID || len(res[0].ID) != 24 {
				t.Fatalf("ids %q %q %q", res[0].ID, res[1].ID, res[2].ID)
			}
			// What the server stored is the batch.
			for i, m := range enqueueBatch()[:3] {
				v, err := c.Get(ctx, res[i].ID)
				if err != nil {
					t.Fatalf("get messages[%d]: %v", i, err)
				}
				got, _ := v.Bytes()
				body, _ := m.Bytes()
				if v.Topic != m.Topic || !bytes.Equal(got, body) || v.Key != m.Key || v.Priority != m.Priority ||
					v.DeliverAtMs != want[i].DeliverAtMs || len(v.Headers) != len(m.Headers) || v.Headers["tenant"] != m.Headers["tenant"] {
					t.Fatalf("messages[%d] stored as %+v, sent %+v", i, v, m)
				}
			}
		})
	}
}

// TestEnqueueResultsMatchJSON enqueues the same batch through a protobuf
// and a JSON client on two identical servers.
func TestEnqueueResultsMatchJSON(t *testing.T) {
	viaProto, err := client.New(newRecordingServer(t).URL).Enqueue(t.Context(), enqueueBatch())
	if err != nil {
		t.Fatal(err)
	}
	viaJSON, err := client.New(newRecordingServer(t).URL, client.WithJSON()).Enqueue(t.Context(), enqueueBatch())
	if err != nil {
		t.Fatal(err)
	}
	// Ids are log positions, so each node names its own; the rest matches.
	if len(viaProto) != len(viaJSON) {
		t.Fatalf("protobuf %+v\n    JSON %+v", viaProto, viaJSON)
	}
	for i, p := range viaProto {
		j := viaJSON[i]
		if p.DeliverAtMs != j.DeliverAtMs || p.Duplicate != j.Duplicate || (p.ID == viaProto[0].ID) != (j.ID == viaJSON[0].ID) {
			t.Fatalf("results[%d]: protobuf %+v, JSON %+v", i, p, j)
		}
	}
}

func TestEnqueueProtoRefusals(t *testing.T) {
	srv := newRecordingServer(t, func(c *transport.Config) { c.Limits.MaxBatch = 2 })
	c := client.New(srv.URL)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		msgs   []api.Message
		status int
		code   string
		want   string
	}{
		{"bad topic", []api.Message{{Topic: "t"}, {Topic: "a b"}}, http.StatusBadRequest, api.CodeInvalidArgument, "messages[1].topic: must be 1 to 200 characters"},
		{"explicit zero ttr", []api.Message{{Topic: "t", TTRMs: api.Ptr(int64(0))}}, http.StatusBadRequest, api.CodeInvalidArgument, "messages[0].ttr_ms: must be between 1"},
		{"no messages", nil, http.StatusBadRequest, api.CodeInvalidArgument, "messages: must hold 1 to 2 entries"},
		{"too many", []api.Message{{Topic: "t"}, {Topic: "t"}, {Topic: "t"}}, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "messages: too many messages: 3 messages are over the limit of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Enqueue(ctx, tc.msgs)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != tc.status || ce.Code != tc.code || !strings.Contains(ce.Message, tc.want) {
				t.Fatalf("results %+v, error %v; want %d %s containing %q", res, err, tc.status, tc.code, tc.want)
			}
		})
	}
	// What the protobuf form cannot carry fails before anything is sent.
	before := len(srv.requests())
	for _, m := range []api.Message{
		{Topic: "t", Payload: api.Payload{BodyBase64: api.Ptr("!!")}},
		{Topic: "t", Payload: api.Payload{Body: api.Ptr("x"), BodyBase64: api.Ptr("eQ==")}},
	} {
		if _, err := c.Enqueue(ctx, []api.Message{{Topic: "t"}, m}); err == nil || !strings.Contains(err.Error(), "messages[1].body") {
			t.Fatalf("%+v: error %v, want one naming messages[1].body", m.Payload, err)
		}
		var ce *client.Error
		_, err := c.Enqueue(ctx, []api.Message{m})
		if errors.As(err, &ce) {
			t.Fatalf("%+v: refused by the server (%v), want a local error", m.Payload, err)
		}
	}
	if n := len(srv.requests()); n != before {
		t.Fatalf("%d requests sent for bodies the client cannot encode", n-before)
	}
	if topics, err := c.Topics(ctx); err != nil || len(topics) != 0 {
		t.Fatalf("topics after refusals %+v (error %v), want none", topics, err)
	}
}

// TestEnqueueProtoBadAnswer checks that an answer that does not decode, or
// does not match the batch, is an error.
func TestEnqueueProtoBadAnswer(t *testing.T) {
	one := api.AppendEnqueueResponse(nil, api.EnqueueResponse{Results: []api.Result{{ID: "000000000000000100000000", DeliverAtMs: 5}}})
	for _, tc := range []struct {
		name   string
		answer []byte
		n      int
		want   string
	}{
		{"too few results", one, 2, "1 results for 2 messages"},
		{"too many results", append(append([]byte(nil), one...), one...), 1, "2 results for 1 messages"},
		{"truncated", one[:len(one)-1], 1, "decode answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", api.ContentTypeProto)
				_, _ = w.Write(tc.answer)
			}))
			defer srv.Close()
			msgs := make([]api.Message, tc.n)
			for i := range msgs {
				msgs[i] = api.Message{Topic: "t"}
			}
			res, err := client.New(srv.URL).Enqueue(t.Context(), msgs)
			if err == nil || !strings.Contains(err.Error(), tc.want) || res != nil {
				t.Fatalf("results %+v, error %v; want an error containing %q", res, err, tc.want)
			}
		})
	}
	// In JSON too.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"results":[{"id":"000000000000000100000000","deliver_at_ms":5}]}`))
	}))
	defer srv.Close()
	if res, err := client.New(srv.URL, client.WithJSON()).Enqueue(t.Context(), []api.Message{{Topic: "t"}, {Topic: "t"}}); err == nil || !strings.Contains(err.Error(), "1 results for 2 messages") || res != nil {
		t.Fatalf("JSON: results %+v, error %v; want an error naming 1 result for 2 messages", res, err)
	}
	// The answer it should get decodes.
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(one) }))
	defer srv.Close()
	res, err := client.New(srv.URL).Enqueue(t.Context(), []api.Message{{Topic: "t"}})
	if err != nil || len(res) != 1 || res[0] != (api.Result{ID: "000000000000000100000000", DeliverAtMs: 5}) {
		t.Fatalf("results %+v, error %v", res, err)
	}
}
