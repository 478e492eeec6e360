package transport

import (
	"bytes"
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

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// parts is the service's Forwarder of the HTTP API: it sends a part of a
// request spanning groups to its group's leader as the same route with
// ?group=g, marked forwarded (ForwardedHeader), with the caller's
// Authorization, and reads the leader's answer, an error body as the
// *Error it stands for. The routes of one group are not split: a follower
// passes them on whole (forward), so the router never asks parts to
// cancel, reschedule, reserve or redrive.
type parts struct {
	s      *Server
	client *http.Client
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
	return context.WithValue(r.Context(), callerKey{}, caller{auth: r.Header.Get("Authorization"), forwarded: r.Header.Get(ForwardedHeader) != ""})
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

// do sends the part of group g, method path with body as JSON (nil:
// none), to the leader at to, decodes its answer into out (nil: none)
// and returns the index the leader had applied once it answered.
func (p parts) do(ctx context.Context, to model.Member, g int, method, path string, body, out any) (uint64, error) {
	if !p.Reaches(ctx, to) {
		return 0, service.ErrNoForward
	}
	var rd io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("transport: encoding a request to group %d: %w", g, err)
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := untilNewLeader(ctx, p.s.svc.Group(g), to.HTTPAddr)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.s.cfg.LeaderScheme+"://"+to.HTTPAddr+path+p.s.groupQuery("?", g), rd)
	if err != nil {
		return 0, fmt.Errorf("transport: a request to group %d: %w", g, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ForwardedHeader, "1")
	if auth := callerOf(ctx).auth; auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		e := unavailable("forwarding to the leader at %s failed: %v; retry shortly", to.HTTPAddr, err)
		e.Err = err
		return 0, e
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, unavailable("the answer of the leader at %s was cut off; retry shortly", to.HTTPAddr)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			e.Error = api.ErrorDetail{Code: api.CodeInternal, Message: strings.TrimSpace(string(data))}
		}
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return 0, &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, RetryAfter: retry}
	}
	index, _ := strconv.ParseUint(resp.Header.Get(AppliedIndexHeader), 10, 64)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("transport: decoding group %d's answer: %w", g, err)
		}
	}
	return index, nil
}

// Enqueue sends an enqueue, its due times absolute.
func (p parts) Enqueue(ctx context.Context, to model.Member, msgs []command.NewMessage) ([]wheel.Enqueued, uint64, error) {
	req := api.EnqueueRequest{Messages: make([]api.Message, len(msgs))}
	for i, m := range msgs {
		req.Messages[i] = messageOf(m)
	}
	g := model.GroupOf(msgs[0].Topic, p.s.svc.Count())
	var out api.EnqueueResponse
	index, err := p.do(ctx, to, g, http.MethodPost, "/v1/messages", req, &out)
	if err != nil {
		return nil, 0, err
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

// messageOf is the JSON form of a validated message, due at its absolute
// time.
func messageOf(m command.NewMessage) api.Message {
	at, ttr, attempts := m.DeliverAtMs, m.TTRMs, m.MaxAttempts
	out := api.Message{Topic: m.Topic, Payload: api.PayloadOf(m.Body), DeliverAtMs: &at, Key: m.Key,
		Priority: m.Priority, Headers: m.Headers}
	if ttr > 0 {
		out.TTRMs = &ttr
	}
	if attempts > 0 {
		out.MaxAttempts = &attempts
	}
	return out
}

// Settle sends an ack, nack or touch.
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

// Cancel is not asked of parts (the route is forwarded whole).
func (parts) Cancel(context.Context, model.Member, command.Cancel) (model.ID, uint64, error) {
	return model.ID{}, 0, service.ErrNoForward
}

// Reschedule is not asked of parts (the route is forwarded whole).
func (parts) Reschedule(context.Context, model.Member, model.ID, int64) (int64, uint64, error) {
	return 0, 0, service.ErrNoForward
}

// Reserve is not asked of parts (the route is forwarded whole).
func (parts) Reserve(context.Context, model.Member, string, int, time.Duration, time.Duration) ([]model.Delivery, uint64, error) {
	return nil, 0, service.ErrNoForward
}

// Redrive is not asked of parts (the route is forwarded whole).
func (parts) Redrive(context.Context, model.Member, string, []model.ID) (int, uint64, error) {
	return 0, 0, service.ErrNoForward
}
