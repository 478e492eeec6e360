package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// maxResponseBytes bounds what the client reads of an answer.
const maxResponseBytes = 256 << 20

// Client calls one delaywheel node. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
	raw   func(body []byte)
	json  bool
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" with every call.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the client use hc. A Timeout set on hc does not cut a
// long-poll reserve short: Reserve extends it by the wait it asks for.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRawResponse calls fn with the body of every 2xx answer before it is
// decoded (the command-line tool prints it).
func WithRawResponse(fn func(body []byte)) Option { return func(c *Client) { c.raw = fn } }

// WithJSON makes Enqueue send JSON instead of protobuf, for servers or
// proxies that only pass JSON.
func WithJSON() Option { return func(c *Client) { c.json = true } }

// WriteBufferSize is the write buffer of the client's connections. It
// holds an enqueue of 100 messages of 100 bytes with its headers, so that
// the request leaves in one write; with net/http's 4 KiB default, the
// headers and the body's start go in one write and the rest in another,
// and the server wakes for each.
const WriteBufferSize = 64 << 10

// New returns a client of the node at baseURL ("http://127.0.0.1:7070"; a
// bare "host:port" means http).
func New(baseURL string, opts ...Option) *Client {
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	// Keep enough idle connections for concurrent callers: the default of
	// two per host makes a busy producer open a connection per request.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.WriteBufferSize = WriteBufferSize
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: &http.Client{Transport: tr}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is a non-2xx answer. Use errors.As to get it from a returned error.
type Error struct {
	Status     int           // HTTP status
	Code       string        // api.Code…, "" when the body was not an error body
	Message    string        // what went wrong, naming the field and the limit
	RetryAfter time.Duration // from the Retry-After header, 0 when absent

	cause error // the context's error when its end cut a gRPC call
}

// Unwrap returns the context's error when the end of the call's context
// cut the call short (over gRPC; over HTTP such an error is not an
// *Error), so that errors.Is finds context.Canceled or
// context.DeadlineExceeded.
func (e *Error) Unwrap() error { return e.cause }

// Error implements error.
func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("delaywheel: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	}
	return fmt.Sprintf("delaywheel: %d %s: %s", e.Status, e.Code, e.Message)
}

// HasCode reports whether err is an *Error with the given api code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Enqueue schedules a batch of messages and returns one result per message.
// It sends the batch in protobuf (api.ContentTypeProto), which costs both
// sides far less than JSON, unless the client was made WithJSON or
// WithRawResponse.
func (c *Client) Enqueue(ctx context.Context, msgs []api.Message) ([]api.Result, error) {
	const path = "/v1/messages"
	req := api.EnqueueRequest{Messages: msgs}
	var out api.EnqueueResponse
	if c.json || c.raw != nil {
		var err error
		if out, err = call[api.EnqueueResponse](ctx, c, http.MethodPost, path, req); err != nil {
			return nil, err
		}
	} else {
		body, err := api.AppendEnqueueRequest(nil, req)
		if err != nil {
			return nil, fmt.Errorf("delaywheel: encode POST %s: %w", path, err)
		}
		data, err := c.roundTrip(ctx, http.MethodPost, path, body, true, api.ContentTypeProto)
		if err != nil {
			return nil, err
		}
		if out, err = api.UnmarshalEnqueueResponse(data); err != nil {
			return nil, fmt.Errorf("delaywheel: POST %s: decode answer: %w", path, err)
		}
	}
	// Results pair with messages by position: a count that differs pairs
	// none of them.
	if len(out.Results) != len(msgs) {
		return nil, fmt.Errorf("delaywheel: POST %s: %d results for %d messages", path, len(out.Results), len(msgs))
	}
	return out.Results, nil
}

// untimed is c, or, when its HTTP client has a Timeout, a copy of c whose
// HTTP client has none.
func (c *Client) untimed() *Client {
	if c.hc.Timeout <= 0 {
		return c
	}
	hc := *c.hc
	hc.Timeout = 0
	cp := *c
	cp.hc = &hc
	return &cp
}

// Get returns a pending message.
func (c *Client) Get(ctx context.Context, id string) (api.MessageView, error) {
	return call[api.MessageView](ctx, c, http.MethodGet, "/v1/messages/"+api.PathSegment(id), nil)
}

// Cancel cancels a delayed or ready message by id.
func (c *Client) Cancel(ctx context.Context, id string) (api.Cancelled, error) {
	return call[api.Cancelled](ctx, c, http.MethodDelete, "/v1/messages/"+api.PathSegment(id), nil)
}

// CancelKey cancels the pending message with key on topic.
func (c *Client) CancelKey(ctx context.Context, topic, key string) (api.Cancelled, error) {
	return call[api.Cancelled](ctx, c, http.MethodDelete, topicPath(topic, "keys", key), nil)
}

// Reschedule moves a delayed or ready message: set exactly one of
// req.DelayMs and req.DeliverAtMs.
func (c *Client) Reschedule(ctx context.Context, id string, req api.RescheduleRequest) (api.Rescheduled, error) {
	return call[api.Rescheduled](ctx, c, http.MethodPost, "/v1/messages/"+api.PathSegment(id)+"/reschedule", req)
}

// Reserve takes up to req.Max due messages of topic, long-polling up to
// req.WaitMs for the first. It returns an empty list when the wait passes.
// The wait is bounded by ctx, not by the HTTP client's Timeout.
func (c *Client) Reserve(ctx context.Context, topic string, req api.ReserveRequest) ([]api.Delivery, error) {
	cc := c
	if c.hc.Timeout > 0 && req.WaitMs > 0 {
		cc = c.untimed()
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.hc.Timeout+time.Duration(req.WaitMs)*time.Millisecond)
		defer cancel()
	}
	out, err := call[api.ReserveResponse](ctx, cc, http.MethodPost, topicPath(topic, "reserve"), req)
	return out.Messages, err
}

// Ack finishes reserved messages.
func (c *Client) Ack(ctx context.Context, receipts []string) (api.AckResponse, error) {
	return call[api.AckResponse](ctx, c, http.MethodPost, "/v1/ack", api.ReceiptsRequest{Receipts: receipts})
}

// Nack returns reserved messages to delayed, due delayMs from now.
func (c *Client) Nack(ctx context.Context, receipts []string, delayMs int64) (api.NackResponse, error) {
	return call[api.NackResponse](ctx, c, http.MethodPost, "/v1/nack", api.NackRequest{Receipts: receipts, DelayMs: delayMs})
}

// Touch extends the leases of reserved messages by their time-to-run.
func (c *Client) Touch(ctx context.Context, receipts []string) (api.TouchResponse, error) {
	return call[api.TouchResponse](ctx, c, http.MethodPost, "/v1/touch", api.ReceiptsRequest{Receipts: receipts})
}

// Bury moves reserved messages to their topics' dead letters at once,
// whatever their attempts; Redrive makes them ready again.
func (c *Client) Bury(ctx context.Context, receipts []string) (api.BuryResponse, error) {
	return call[api.BuryResponse](ctx, c, http.MethodPost, "/v1/bury", api.ReceiptsRequest{Receipts: receipts})
}

// Topics returns every topic's counts by state.
func (c *Client) Topics(ctx context.Context) ([]api.TopicCounts, error) {
	out, err := call[api.TopicsResponse](ctx, c, http.MethodGet, "/v1/topics", nil)
	return out.Topics, err
}

// Dead lists up to limit dead messages of topic (0: the server's default).
func (c *Client) Dead(ctx context.Context, topic string, limit int) ([]api.MessageView, error) {
	path := topicPath(topic, "dead")
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	out, err := call[api.DeadResponse](ctx, c, http.MethodGet, path, nil)
	return out.Messages, err
}

// Redrive moves dead messages of topic back to ready, those of ids (all
// when ids is nil, none when it is empty), and returns how many moved.
func (c *Client) Redrive(ctx context.Context, topic string, ids []string) (int, error) {
	out, err := call[api.RedriveResponse](ctx, c, http.MethodPost, topicPath(topic, "dead", "redrive"), api.RedriveRequest{IDs: ids})
	return out.Redriven, err
}

// Wheel describes the timing wheel of the node (of group 0 on a node of
// many groups).
func (c *Client) Wheel(ctx context.Context) (api.Wheel, error) {
	return call[api.Wheel](ctx, c, http.MethodGet, "/v1/wheel", nil)
}

// GroupWheel describes the timing wheel of group g (GET /v1/wheel?group=g).
func (c *Client) GroupWheel(ctx context.Context, g int) (api.Wheel, error) {
	return call[api.Wheel](ctx, c, http.MethodGet, "/v1/wheel?group="+strconv.Itoa(g), nil)
}

// Slot describes one slot of the wheel and, when records is set, its records.
func (c *Client) Slot(ctx context.Context, slot int, records bool) (api.Slot, error) {
	return call[api.Slot](ctx, c, http.MethodGet, slotPath(slot, records, ""), nil)
}

// GroupSlot is Slot of group g's wheel.
func (c *Client) GroupSlot(ctx context.Context, g, slot int, records bool) (api.Slot, error) {
	return call[api.Slot](ctx, c, http.MethodGet, slotPath(slot, records, "group="+strconv.Itoa(g)), nil)
}

// slotPath is the path of a slot's view, with query (when not empty) and
// records=true when records is set.
func slotPath(slot int, records bool, query string) string {
	if records {
		query = strings.TrimPrefix(query+"&records=true", "&")
	}
	path := "/v1/wheel/slots/" + strconv.Itoa(slot)
	if query != "" {
		path += "?" + query
	}
	return path
}

// Cluster returns the cluster view of the node.
func (c *Client) Cluster(ctx context.Context) (api.Cluster, error) {
	return call[api.Cluster](ctx, c, http.MethodGet, "/v1/cluster", nil)
}

// ClusterLocal returns the answering node's own view (GET
// /v1/cluster?local=true): who it follows, its state and indexes, at once,
// without asking the leader or the other members.
func (c *Client) ClusterLocal(ctx context.Context) (api.Cluster, error) {
	return call[api.Cluster](ctx, c, http.MethodGet, "/v1/cluster?local=true", nil)
}

// AddNode adds a voter to the cluster.
func (c *Client) AddNode(ctx context.Context, n api.Node) error {
	_, err := call[api.Node](ctx, c, http.MethodPost, "/v1/cluster/nodes", n)
	return err
}

// RemoveNode removes a member from the cluster.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	_, err := call[api.NodeRemoved](ctx, c, http.MethodDelete, "/v1/cluster/nodes/"+api.PathSegment(id), nil)
	return err
}

// Healthz returns nil while the node serves.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := call[api.Status](ctx, c, http.MethodGet, "/healthz", nil)
	return err
}

// Readyz returns nil while the node is ready: it knows a leader, has
// caught up with the leader's commit index since it started, and trails it
// by at most its --ready-max-lag.
func (c *Client) Readyz(ctx context.Context) error {
	_, err := call[api.Status](ctx, c, http.MethodGet, "/readyz", nil)
	return err
}

// Backup streams a consistent backup of the node's state (a tar) into w and
// checks that the stream is a whole tar, so a cut transfer is an error. On
// a node of many groups it is group 0's.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return c.backup(ctx, "/v1/backup", w)
}

// GroupBackup is Backup of group g (GET /v1/backup?group=g).
func (c *Client) GroupBackup(ctx context.Context, g int, w io.Writer) (int64, error) {
	return c.backup(ctx, "/v1/backup?group="+strconv.Itoa(g), w)
}

// backup streams the backup at path into w.
func (c *Client) backup(ctx context.Context, path string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil, "", "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	cw := &countWriter{w: w}
	tr := tar.NewReader(io.TeeReader(resp.Body, cw))
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cw.n, fmt.Errorf("delaywheel: backup stream is damaged or cut: %w", err)
		}
	}
	if _, err := io.Copy(cw, resp.Body); err != nil { // the tar's end padding
		return cw.n, fmt.Errorf("delaywheel: backup: %w", err)
	}
	return cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// topicPath is /v1/topics/{topic}/{rest...}, each part path-escaped.
func topicPath(topic string, rest ...string) string {
	var b strings.Builder
	b.WriteString("/v1/topics/")
	b.WriteString(api.PathSegment(topic))
	for _, r := range rest {
		b.WriteByte('/')
		b.WriteString(api.PathSegment(r))
	}
	return b.String()
}

// call sends in (when not nil) as JSON and decodes a 2xx answer as T.
func call[T any](ctx context.Context, c *Client, method, path string, in any) (T, error) {
	var out T
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return out, fmt.Errorf("delaywheel: encode %s %s: %w", method, path, err)
		}
		body = b
	}
	data, err := c.roundTrip(ctx, method, path, body, in != nil, "application/json")
	if err != nil {
		return out, err
	}
	if c.raw != nil {
		c.raw(data)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("delaywheel: %s %s: decode answer: %w", method, path, err)
	}
	return out, nil
}

// roundTrip sends one request (body, when hasBody, in the media type
// contentType; the answer asked for in the same type) and returns the body of
// a 2xx answer, or the *Error of any other.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte, hasBody bool, contentType string) ([]byte, error) {
	var rd io.Reader
	sent := ""
	if hasBody {
		rd, sent = bytes.NewReader(body), contentType
	}
	resp, err := c.send(ctx, method, path, rd, contentType, sent)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("delaywheel: %s %s: read answer: %w", method, path, err)
	}
	return data, nil
}

// send sends one request with the client's token, asking for the media
// type accept ("": any) and sending body (nil: none) in contentType, and
// returns a 2xx answer for the caller to read and close, or the *Error of
// any other.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader, accept, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("delaywheel: %s %s: %w", method, path, err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("delaywheel: %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		return nil, errorOf(resp, data)
	}
	return resp, nil
}

// errorOf builds the *Error of a non-2xx answer.
func errorOf(resp *http.Response, data []byte) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	var body api.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	if len(e.Message) > 512 {
		e.Message = e.Message[:512] + "…"
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
