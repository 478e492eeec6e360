package transport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// parts is the service's Forwarder, of every front end: it sends a part
// of a request, decoded and validated here, to its group's leader as the
// same route of the leader's HTTP API (with ?group=g on a cluster of many
// groups), marked forwarded (ForwardedHeader), with the caller's
// Authorization, and reads the leader's answer, an error body as the
// *Error it stands for, so that the caller gets the leader's status,
// code, message and Retry-After. Every node serves its HTTP API and its
// member record holds its address, so a part reaches its leader this way
// whatever else the leader serves. The message routes of the HTTP API,
// and the routers of the other front ends (NewForwarder), ask it; the
// admin routes and the stream are passed on whole (forward).
type parts struct {
	groups []Backend // the node's groups, group g at g
	scheme string    // of the leaders' HTTP API
	client *http.Client
	auth   string // the Authorization of a call whose caller carries none
}

// newParts returns the parts of the groups, cfg's defaults set.
func newParts(cfg Config, groups []Backend) parts {
	return parts{groups: groups, scheme: cfg.LeaderScheme, client: &http.Client{Transport: cfg.LeaderTransport}}
}

// NewForwarder returns the Forwarder of a front end of the node's groups
// (group g's backend at groups[g], as NewServer's) other than the
// HTTP API, for its router (service.NewRouter): the one the HTTP API
// forwards with, configured as the HTTP server by cfg (its leader scheme
// and transport), which passes the caller's Authorization on (WithCaller),
// else cfg's token.
func NewForwarder(cfg Config, groups ...Backend) service.Forwarder {
	cfg = cfg.WithDefaults()
	p := newParts(cfg, groups)
	if cfg.AuthToken != "" {
		p.auth = "Bearer " + cfg.AuthToken
	}
	return p
}

// callerKey is the context key of the caller of a request that spans
// groups.
type callerKey struct{}

// caller is who asked a request that spans groups.
type caller struct {
	auth      string // its Authorization
	forwarded bool   // another node forwarded it
}

// withCaller returns r's context carrying r's caller.
func withCaller(r *http.Request) context.Context {
	return WithCaller(r.Context(), r.Header.Get("Authorization"), r.Header.Get(ForwardedHeader) != "")
}

// WithCaller returns ctx carrying the caller of a call of any front end,
// which the Forwarder reads: its Authorization, passed on to the leader,
// and whether another node forwarded the call, which is then passed on
// no further.
func WithCaller(ctx context.Context, auth string, forwarded bool) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{auth: auth, forwarded: forwarded})
}

// callerOf is the caller ctx carries.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// Reaches reports whether a part of ctx's request can be forwarded to the
// leader at to: no node forwarded the request, and to has an HTTP
// address.
func (p parts) Reaches(ctx context.Context, to model.Member) bool {
	return !callerOf(ctx).forwarded && to.HTTPAddr != ""
}

// do sends the part of group g, method path with body (see send), to
// the leader at to, decodes its answer into out (nil: none) and returns
// the index the leader had applied once it answered.
func (p parts) do(ctx context.Context, to model.Member, g int, method, path string, body, out any) (uint64, error) {
	if !p.Reaches(ctx, to) {
		return 0, service.ErrNoForward
	}
	ctx, cancel := untilNewLeader(ctx, p.groups[g], to.HTTPAddr)
	defer cancel()
	return p.send(ctx, to.HTTPAddr, method, path+groupQuery(len(p.groups), "?", g), cmp.Or(callerOf(ctx).auth, p.auth), body, out)
}

// send sends method path to the node at addr, marked forwarded (so that
// it answers itself), with auth (if any) as its Authorization and body
// (nil: none; a wire: as it is; else as JSON); decodes its answer into
// out (nil: none; a *wire: as it is); and returns the index its answer
// names (AppliedIndexHeader; 0: none). An answer other than 200 is the
// *Error it stands for: its status, code, message and Retry-After.
func (p parts) send(ctx context.Context, addr, method, path, auth string, body, out any) (uint64, error) {
	var rd io.Reader = http.NoBody
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case wire:
		rd, ctype = bytes.NewReader(b.data), b.ctype
	default:
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("transport: encoding a request to %s: %w", addr, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.scheme+"://"+addr+path, rd)
	if err != nil {
		return 0, fmt.Errorf("transport: a request to %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", ctype)
	raw, isRaw := out.(*wire)
	if isRaw {
		req.Header.Set("Accept", raw.ctype)
	}
	req.Header.Set(ForwardedHeader, "1")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		e := unavailable("forwarding to the leader at %s failed: %v; retry shortly", addr, err)
		e.Err = err
		return 0, e
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, unavailable("the answer of the leader at %s was cut off; retry shortly", addr)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			e.Error = api.ErrorDetail{Code: api.CodeInternal, Message: strings.TrimSpace(string(data))}
		}
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		refused := &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, RetryAfter: retry}
		if resp.StatusCode == http.StatusServiceUnavailable && (e.Error.Message == msgMovedOn || e.Error.Message == msgNoLeader) {
			refused.Err = model.ErrNotLeader // addr leads the group no more
		}
		return 0, refused
	}
	index, _ := strconv.ParseUint(resp.Header.Get(AppliedIndexHeader), 10, 64)
	if isRaw {
		raw.data = data
	} else if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("transport: decoding the answer of %s: %w", addr, err)
		}
	}
	return index, nil
}

// wire is a body as it goes over the wire: its bytes and media type. As
// do's out, it asks for an answer of that media type, and takes its bytes.
type wire struct {
	data  []byte
	ctype string
}

// jsonWire is a JSON body, sent as it came.
func jsonWire(data []byte) wire { return wire{data, "application/json"} }

// Enqueue sends an enqueue, its due times absolute, and reads its answer,
// in protobuf: of the forms of an enqueue, the one cheapest to write and
// to read at both ends.
func (p parts) Enqueue(ctx context.Context, to model.Member, msgs []command.NewMessage) ([]wheel.Enqueued, uint64, error) {
	g := model.GroupOf(msgs[0].Topic, len(p.groups))
	body, err := proto.Marshal(protoOf(msgs))
	if err != nil {
		return nil, 0, fmt.Errorf("transport: encoding a request to group %d: %w", g, err)
	}
	answer := wire{ctype: api.ContentTypeProto}
	index, err := p.do(ctx, to, g, http.MethodPost, "/v1/messages", wire{body, api.ContentTypeProto}, &answer)
	if err != nil {
		return nil, 0, err
	}
	out, err := api.UnmarshalEnqueueResponse(answer.data)
	if err != nil {
		return nil, 0, fmt.Errorf("transport: group %d's answer: %w", g, err)
	}
	if len(out.Results) != len(msgs) {
		return nil, 0, fmt.Errorf("transport: group %d answered %d results for %d messages", g, len(out.Results), len(msgs))
	}
	res := make([]wheel.Enqueued, len(msgs))
	for i, r := range out.Results {
		id, err := model.ParseID(r.ID)
		if err != nil {
			return nil, 0, fmt.Errorf("transport: group %d's result %d: %w", g, i, err)
		}
		res[i] = wheel.Enqueued{ID: id, DeliverAtMs: r.DeliverAtMs, Duplicate: r.Duplicate}
	}
	return res, index, nil
}

// protoOf is the protobuf form of validated messages, each due at its
// absolute time.
func protoOf(msgs []command.NewMessage) *pb.EnqueueRequest {
	req := &pb.EnqueueRequest{Messages: make([]*pb.Message, len(msgs))}
	ms := make([]pb.Message, len(msgs)) // one allocation for the batch
	for i, m := range msgs {
		p := &ms[i]
		p.Topic, p.Body, p.DeliverAtMs, p.Key = m.Topic, m.Body, &msgs[i].DeliverAtMs, m.Key
		p.Priority, p.Headers = m.Priority, m.Headers
		if m.TTRMs > 0 {
			p.TtrMs = &msgs[i].TTRMs
		}
		if m.MaxAttempts > 0 {
			p.MaxAttempts = &msgs[i].MaxAttempts
		}
		req.Messages[i] = p
	}
	return req
}

// Settle sends an ack, nack, touch or bury.
func (p parts) Settle(ctx context.Context, to model.Member, op service.Op, rs []model.Receipt, nackDelayMs int64) (command.Counted, uint64, error) {
	list := make([]string, len(rs))
	for i, r := range rs {
		list[i] = r.String()
	}
	st := settlementOf(op)
	var body any = api.ReceiptsRequest{Receipts: list}
	if op == service.OpNack {
		body = api.NackRequest{Receipts: list, DelayMs: nackDelayMs}
	}
	var out map[string]int
	index, err := p.do(ctx, to, rs[0].ID.Group(), http.MethodPost, st.path, body, &out)
	return command.Counted{Done: out[st.doneKey], Stale: out["stale"]}, index, err
}

// Cancel sends a cancel by id or by topic and key.
func (p parts) Cancel(ctx context.Context, to model.Member, c command.Cancel) (model.ID, uint64, error) {
	g, path := c.ID.Group(), "/v1/messages/"+api.PathSegment(c.ID.String())
	if c.Topic != "" {
		g, path = model.GroupOf(c.Topic, len(p.groups)), "/v1/topics/"+api.PathSegment(c.Topic)+"/keys/"+api.PathSegment(c.Key)
	}
	var out api.Cancelled
	index, err := p.do(ctx, to, g, http.MethodDelete, path, nil, &out)
	if err != nil {
		return model.ID{}, 0, err
	}
	id, err := model.ParseID(out.ID)
	return id, index, err
}

// Reschedule sends a reschedule to an absolute time.
func (p parts) Reschedule(ctx context.Context, to model.Member, id model.ID, deliverAtMs int64) (int64, uint64, error) {
	var out api.Rescheduled
	index, err := p.do(ctx, to, id.Group(), http.MethodPost, "/v1/messages/"+api.PathSegment(id.String())+"/reschedule",
		api.RescheduleRequest{DeliverAtMs: &deliverAtMs}, &out)
	return out.DeliverAtMs, index, err
}

// Reserve sends a reserve.
func (p parts) Reserve(ctx context.Context, to model.Member, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, uint64, error) {
	req := api.ReserveRequest{Max: &max, WaitMs: wait.Milliseconds()}
	if ttr > 0 {
		ms := ttr.Milliseconds()
		req.TTRMs = &ms
	}
	g := model.GroupOf(topic, len(p.groups))
	var out api.ReserveResponse
	index, err := p.do(ctx, to, g, http.MethodPost, "/v1/topics/"+api.PathSegment(topic)+"/reserve", req, &out)
	if err != nil {
		return nil, 0, err
	}
	ds := make([]model.Delivery, len(out.Messages))
	for i, d := range out.Messages {
		if ds[i], err = deliveryFrom(d); err != nil {
			return nil, 0, fmt.Errorf("transport: group %d's delivery %d: %w", g, i, err)
		}
	}
	return ds, index, nil
}

// deliveryFrom is the delivery d, as the leader sent it.
func deliveryFrom(d api.Delivery) (model.Delivery, error) {
	r, err := model.ParseReceipt(d.Receipt)
	if err != nil {
		return model.Delivery{}, err
	}
	body, err := d.Payload.Bytes()
	if err != nil {
		return model.Delivery{}, err
	}
	m := model.Message{ID: r.ID, Topic: d.Topic, Key: d.Key, Body: body, Headers: d.Headers, Priority: d.Priority,
		DeliverAtMs: d.DeliverAtMs, Attempts: d.Attempt, Receipt: r.Nonce, LeaseExpiresMs: d.LeaseExpiresMs}
	return model.Delivery{Message: m, Attempt: d.Attempt, Receipt: r}, nil
}

// Redrive sends a redrive (all of the topic's dead when ids is empty).
func (p parts) Redrive(ctx context.Context, to model.Member, topic string, ids []model.ID) (int, uint64, error) {
	var req api.RedriveRequest
	for _, id := range ids {
		req.IDs = append(req.IDs, id.String())
	}
	var out api.RedriveResponse
	index, err := p.do(ctx, to, model.GroupOf(topic, len(p.groups)), http.MethodPost, "/v1/topics/"+api.PathSegment(topic)+"/dead/redrive", req, &out)
	return out.Redriven, index, err
}
