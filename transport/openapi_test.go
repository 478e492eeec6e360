package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// The test servers of this package validate every request they get and
// every answer they give against the OpenAPI document (transport/api/
// openapi.json) with libopenapi-validator, and fail the test on any that
// does not match: the document is kept true by the whole test suite, not
// by a copy of its examples.

// sendsMalformedRequests reports whether test is one of those that send,
// on purpose, requests the document does not allow (malformed JSON, a
// field out of range, a bad id, topic or query parameter), to check that
// the server refuses them. Their requests are not validated when the
// server refuses them with a 4xx; a request of theirs that the server
// accepts is, and every answer is, as in any other test.
func sendsMalformedRequests(test string) bool {
	test, _, _ = strings.Cut(test, "/") // a subtest is its test's
	switch test {
	case "TestValidation", "TestGetByKey", "TestScheduleBadInput", "TestSchedulesOfOneTopic",
		"TestFollowerForwardsWrites", "TestGroupsClusterReadyAndRange", "TestGroupsOneGroupAtItsLeader",
		"TestErrorsNotHTMLEscaped",
		"TestStreamValidation", "TestWebhookValidation", "TestWheelOverflow",
		"TestProtoAnswerFormat": // protobuf bytes sent as JSON
		return true
	}
	return false
}

// openAPIValidator builds a validator of the document: an NDJSON answer
// is checked line by line (the document's schema of a stream is the array
// of its lines, as OpenAPI 3.2 reads sequential media types).
func openAPIValidator(t testing.TB) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	v, errs := validator.NewValidator(doc, config.WithBodyDecoder(transport.ContentTypeNDJSON, content.DecoderFunc(decodeNDJSON)))
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	return v
}

// decodeNDJSON decodes an NDJSON body as the array of its lines. Empty
// lines (keepalives) are skipped, and so is a last line without its
// newline: the answer was cut there (the client went away).
func decodeNDJSON(in *content.DecodeInput) (any, error) {
	lines := []any{}
	r := bufio.NewReader(in.Body)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return lines, nil // EOF (a read of a byte slice fails no other way)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", len(lines)+1, err)
		}
		lines = append(lines, v)
	}
}

// TestOpenAPIDocumentIsValid checks the document against the OpenAPI 3.1
// schema, and that every $ref resolves (building the validator's model).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	v := openAPIValidator(t)
	ok, errs := v.ValidateDocument()
	for _, e := range errs {
		t.Errorf("openapi.json: %s", describe(e))
	}
	if !ok && len(errs) == 0 {
		t.Error("openapi.json is not a valid OpenAPI document")
	}
	var head struct {
		OpenAPI string `json:"openapi"`
	}
	check(t, "decode openapi.json", json.Unmarshal(api.OpenAPI(), &head))
	if !strings.HasPrefix(head.OpenAPI, "3.1.") {
		t.Errorf("openapi.json is OpenAPI %q, want 3.1", head.OpenAPI)
	}
}

// TestOpenAPIServed checks that GET /v1/openapi.json serves the document,
// without the token.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, func(c *transport.Config) { c.AuthToken = "secret" })
	a := e.do(http.MethodGet, "/v1/openapi.json", "")
	equal(t, "status", a.status, http.StatusOK)
	equal(t, "content type", a.header.Get("Content-Type"), "application/json")
	if !bytes.Equal(a.body, api.OpenAPI()) {
		t.Fatal("GET /v1/openapi.json is not transport/api/openapi.json")
	}
}

// validatedOptions returns o with each node's handler (after o's own
// wrapper, if any) wrapped in validating.
func validatedOptions(t testing.TB, o transporttest.Options) transporttest.Options {
	v := openAPIValidator(t)
	inner := o.Handler
	o.Handler = func(id string, h http.Handler) http.Handler {
		if inner != nil {
			h = inner(id, h)
		}
		return validating(t, v, h)
	}
	return o
}

// validating serves h and checks each request and its answer against the
// document, failing t on any error (see sendsMalformedRequests for the
// requests that may not match). A route the document does not have must
// be answered 404 or 405, as the server's fallbacks answer unknown routes.
func validating(t testing.TB, v validator.Validator, h http.Handler) http.Handler {
	malformed := sendsMalformedRequests(t.Name())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("%s %s: reading the request body: %v", r.Method, r.URL, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(rec, r)

		req := r.Clone(context.Background())
		req.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) > 0 && req.Header.Get("Content-Type") == "" {
			// The server reads a body without a Content-Type as JSON, as
			// the document says; the requests of raw tests send none.
			req.Header.Set("Content-Type", "application/json")
		}
		what := fmt.Sprintf("%s %s (status %d)", r.Method, r.URL, rec.code())
		if _, errs := v.ValidateHttpRequestSync(req); len(errs) > 0 {
			switch {
			case unknownRoute(errs):
				if c := rec.code(); c != http.StatusNotFound && c != http.StatusMethodNotAllowed {
					t.Errorf("%s: a route openapi.json does not have answered %d, want 404 or 405", what, c)
				}
				return
			case malformed && rec.code() >= 400 && rec.code() < 500:
			default:
				report(t, what+": the request does not match openapi.json", errs)
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		sent := rec.body()
		if r.Method == http.MethodHead {
			sent = nil // net/http sends a HEAD's answer without what the handler wrote
		}
		resp := &http.Response{StatusCode: rec.code(), Header: rec.Header().Clone(), Request: req,
			Body: io.NopCloser(bytes.NewReader(sent))}
		if _, errs := v.ValidateHttpResponse(req, resp); len(errs) > 0 {
			report(t, fmt.Sprintf("%s: the answer does not match openapi.json: %.500s", what, rec.body()), errs)
		}
	})
}

// unknownRoute reports whether errs say the document has no such path or
// no such method on it.
func unknownRoute(errs []*valerrors.ValidationError) bool {
	for _, e := range errs {
		if (e.ValidationType == helpers.PathValidation || e.ValidationType == helpers.RequestValidation) &&
			(e.ValidationSubType == helpers.ValidationMissing || e.ValidationSubType == helpers.ValidationMissingOperation) {
			return true
		}
	}
	return false
}

func report(t testing.TB, what string, errs []*valerrors.ValidationError) {
	t.Helper()
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n\t%s", describe(e))
	}
	t.Errorf("%s:%s", what, b.String())
}

// describe is a validation error with the schema errors behind it.
func describe(e *valerrors.ValidationError) string {
	s := e.Message + ": " + e.Reason
	for _, se := range e.SchemaValidationErrors {
		s += fmt.Sprintf("\n\t\t%s at %s (%s)", se.Reason, se.FieldPath, se.KeywordLocation)
	}
	return s
}

// teeWriter passes an answer on and keeps a copy of its status and body.
type teeWriter struct {
	http.ResponseWriter
	mu     sync.Mutex
	status int
	buf    bytes.Buffer
}

func (w *teeWriter) WriteHeader(status int) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = status
	}
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(status)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.buf.Write(p)
	w.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush a stream and set its deadlines.
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *teeWriter) code() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *teeWriter) body() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes())
}

// The kit's starters, with every server validating (validatedOptions):
// the tests of this package start their nodes through these.

func startNode(t testing.TB, o transporttest.Options) *transporttest.Node {
	t.Helper()
	return transporttest.Start(t, validatedOptions(t, o))
}

func startCluster(t testing.TB, n int, o transporttest.Options) *transporttest.Cluster {
	t.Helper()
	return transporttest.StartCluster(t, n, validatedOptions(t, o))
}

func startGroups(t testing.TB, n, groups int, o transporttest.Options) *transporttest.GroupsCluster {
	t.Helper()
	return transporttest.StartGroups(t, n, groups, validatedOptions(t, o))
}

func startJoiner(t testing.TB, id string, o transporttest.Options) *transporttest.Node {
	t.Helper()
	return transporttest.StartJoiner(t, id, validatedOptions(t, o))
}

// TestValidatingFailsOnMismatch checks that the validating wrapper fails
// a test on an answer the document does not allow, on a request it does
// not allow, and on a route it does not have that a server answers.
func TestValidatingFailsOnMismatch(t *testing.T) {
	v := openAPIValidator(t)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		answer                   string
	}{
		{"answer off the schema", http.MethodGet, "/healthz", "", http.StatusOK, `{"status":"fine"}`},
		{"undocumented status", http.MethodGet, "/healthz", "", http.StatusAccepted, `{"status":"ok"}`},
		{"request off the schema", http.MethodPost, "/v1/ack", `{"receipts":[]}`, http.StatusOK, `{"acked":0,"stale":0}`},
		{"unknown field", http.MethodPost, "/v1/ack", `{"receipts":["000000000000000600000000.cb4c85756d97e985"],"x":1}`, http.StatusOK, `{"acked":1,"stale":0}`},
		{"stream line off the schema", http.MethodGet, "/v1/topics/t/stream", "", http.StatusOK, "\n{\"id\":\"x\"}\n"},
		{"route not documented", http.MethodGet, "/v1/nothing", "", http.StatusOK, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			h := validating(rec, v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ct := "application/json"
				if strings.HasSuffix(r.URL.Path, "/stream") {
					ct = transport.ContentTypeNDJSON
				}
				w.Header().Set("Content-Type", ct)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.answer)
			}))
			req := httptest.NewRequestWithContext(t.Context(), tc.method, tc.path, strings.NewReader(tc.body))
			h.ServeHTTP(httptest.NewRecorder(), req)
			if len(rec.errs) == 0 {
				t.Fatalf("%s %s answered %d %s: no error", tc.method, tc.path, tc.status, tc.answer)
			}
		})
	}
	t.Run("a good exchange", func(t *testing.T) {
		rec := &recordingTB{TB: t}
		h := validating(rec, v, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status":"ok"}`)
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/healthz", nil))
		if len(rec.errs) > 0 {
			t.Fatalf("a good answer: %v", rec.errs)
		}
	})
}

// recordingTB records the errors a test would fail with.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
