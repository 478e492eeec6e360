package transport

import (
	"net/http"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Handlers return (answer, nil) or (anything, err): the caller encodes the
// answer only when err is nil, so a handler may return a converted zero value
// together with a backend error.

func (s *Server) nowMs() int64 { return s.cfg.Clock().UnixMilli() }

func (s *Server) healthz(*http.Request) (any, error) { return api.Status{Status: "ok"}, nil }

func (s *Server) enqueue(r *http.Request) (any, error) {
	msgs, err := s.decodeEnqueueBody(r)
	if err != nil {
		return nil, err
	}
	res, err := routingOf(r).rt.Enqueue(r.Context(), msgs)
	if err != nil {
		return nil, err
	}
	return enqueued(r, res), nil
}

// decodeEnqueueBody reads and validates an enqueue's body, JSON or
// protobuf, into messages whose due times are absolute.
func (s *Server) decodeEnqueueBody(r *http.Request) ([]command.NewMessage, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if isMediaType(r.Header.Get("Content-Type"), api.ContentTypeProto) {
		return decodeEnqueueProto(data, s.cfg.Limits, s.nowMs())
	}
	return decodeEnqueue(data, s.cfg.Limits, s.nowMs())
}

// enqueued is the answer to an enqueue, in the media type r accepts.
func enqueued(r *http.Request, res []wheel.Enqueued) any {
	if !acceptsMediaType(r.Header.Get("Accept"), api.ContentTypeProto) {
		return stream(func(w http.ResponseWriter) error {
			return writeBody(w, http.StatusOK, "application/json", appendResults(make([]byte, 0, 16+96*len(res)), res))
		})
	}
	resp := api.EnqueueResponse{Results: resultsOf(res)}
	return stream(func(w http.ResponseWriter) error {
		return writeBody(w, http.StatusOK, api.ContentTypeProto, api.AppendEnqueueResponse(nil, resp))
	})
}

func (s *Server) get(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	v, err := s.be(r).Get(r.Context(), id)
	return viewOf(v), err
}

func (s *Server) cancel(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	return cancelled(routingOf(r).rt.Cancel(r.Context(), command.Cancel{ID: id}))
}

func (s *Server) cancelKey(r *http.Request) (any, error) {
	topic, key, err := s.pathTopicKey(r)
	if err != nil {
		return nil, err
	}
	return cancelled(routingOf(r).rt.Cancel(r.Context(), command.Cancel{Topic: topic, Key: key}))
}

func cancelled(id model.ID, err error) (any, error) {
	return api.Cancelled{ID: id.String(), State: api.StateCancelled}, err
}

func (s *Server) reschedule(r *http.Request) (any, error) {
	var req api.RescheduleRequest
	id, err := idAndBody(r, &req, false)
	if err != nil {
		return nil, err
	}
	at, err := service.ResolveDue("", req.DelayMs, req.DeliverAtMs, true, s.cfg.Limits, s.nowMs())
	if err != nil {
		return nil, err
	}
	got, err := routingOf(r).rt.Reschedule(r.Context(), id, at)
	return api.Rescheduled{ID: id.String(), DeliverAtMs: got}, err
}

func (s *Server) reserve(r *http.Request) (any, error) {
	var req api.ReserveRequest
	topic, err := s.topicAndBody(r, &req)
	if err != nil {
		return nil, err
	}
	n, waitMs, ttrMs, err := service.ValidateReserve(req, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	ds, err := s.cfg.Slots.Reserve(r.Context(), s.drain, routingOf(r).rt, topic, n, waitMs, ttrMs)
	if err != nil {
		return nil, err
	}
	return stream(func(w http.ResponseWriter) error {
		return writeBody(w, http.StatusOK, "application/json", appendReserved(make([]byte, 0, 256*len(ds)+16), ds))
	}), nil
}

func (s *Server) ack(r *http.Request) (any, error) { return s.settle(r, service.OpAck) }

func (s *Server) nack(r *http.Request) (any, error) { return s.settle(r, service.OpNack) }

func (s *Server) touch(r *http.Request) (any, error) { return s.settle(r, service.OpTouch) }

func (s *Server) bury(r *http.Request) (any, error) { return s.settle(r, service.OpBury) }

// settlement is how an ack, nack, touch or bury is routed and answered.
type settlement struct {
	path    string // the route's path
	doneKey string // the JSON field of the answer that counts the settled receipts
}

// settlementOf is the settlement of op.
func settlementOf(op service.Op) settlement {
	switch op {
	case service.OpNack:
		return settlement{"/v1/nack", "nacked"}
	case service.OpTouch:
		return settlement{"/v1/touch", "touched"}
	case service.OpBury:
		return settlement{"/v1/bury", "buried"}
	}
	return settlement{"/v1/ack", "acked"}
}

// settle settles the receipts of r's ack, nack, touch or bury in the
// groups their ids name, and sums the counts of their answers.
func (s *Server) settle(r *http.Request, op service.Op) (any, error) {
	rs, delayMs, err := s.receiptsOf(r, op)
	if err != nil {
		return nil, err
	}
	rt := routingOf(r)
	if err := rt.rt.CheckReceipts("receipts", rs); err != nil {
		return nil, err
	}
	if op == service.OpNack {
		// Checked before the request is split: it names no group, for
		// a group's name in an error says that other groups' parts may
		// be done, and none is.
		if err := service.ValidateNackDelay("delay_ms", delayMs, s.cfg.Limits); err != nil {
			return nil, err
		}
	}
	c, err := rt.rt.Settle(r.Context(), "receipts", op, rs, delayMs)
	if err != nil {
		return nil, err
	}
	key := settlementOf(op).doneKey
	return stream(func(w http.ResponseWriter) error {
		return writeBody(w, http.StatusOK, "application/json", appendCounted(make([]byte, 0, 48), key, c))
	}), nil
}

// receiptsOf decodes the request of op from r's body and parses the
// receipts it holds, and a nack's delay.
func (s *Server) receiptsOf(r *http.Request, op service.Op) (rs []model.Receipt, nackDelayMs int64, err error) {
	var req api.NackRequest
	if op == service.OpNack {
		err = decodeBody(r, &req, false)
	} else {
		req.Receipts, err = decodeReceipts(r) // an ack's, touch's or bury's body is its receipts alone
	}
	if err != nil {
		return nil, 0, err
	}
	rs, err = service.ParseReceipts("receipts", req.Receipts, s.cfg.Limits)
	return rs, req.DelayMs, err
}

// decodeReceipts decodes an api.ReceiptsRequest body: its common shape
// through fastReceipts, anything else strictly.
func decodeReceipts(r *http.Request) ([]string, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if list, ok := fastReceipts(data); ok {
		return list, nil
	}
	var rr api.ReceiptsRequest
	err = decodeStrict(data, &rr)
	return rr.Receipts, err
}

func (s *Server) topics(r *http.Request) (any, error) {
	ts, err := s.routerOf(r).Topics(r.Context())
	return api.TopicsResponse{Topics: topicsOf(ts)}, err
}

func (s *Server) dead(r *http.Request) (any, error) {
	topic, err := s.pathTopic(r)
	if err != nil {
		return nil, err
	}
	lim := s.cfg.Limits
	limit, err := queryInt(r, "limit", lim.DefaultDeadLimit, 1, lim.MaxDeadLimit)
	if err != nil {
		return nil, err
	}
	vs, err := s.be(r).Dead(r.Context(), topic, limit)
	return api.DeadResponse{Messages: viewsOf(vs)}, err
}

func (s *Server) redrive(r *http.Request) (any, error) {
	var req api.RedriveRequest
	topic, err := s.topicAndBody(r, &req)
	if err != nil {
		return nil, err
	}
	if req.IDs != nil && len(req.IDs) == 0 {
		// "ids": [] names no message; only leaving ids out means all of
		// them, so a client's filter that matched nothing redrives nothing.
		return api.RedriveResponse{}, nil
	}
	ids, err := service.ParseIDs(req.IDs, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	n, err := routingOf(r).rt.Redrive(r.Context(), topic, ids)
	return api.RedriveResponse{Redriven: n}, err
}

func (s *Server) wheel(r *http.Request) (any, error) {
	w, err := s.be(r).Wheel(r.Context())
	return WheelView(w), err
}

func (s *Server) slot(r *http.Request) (any, error) {
	raw := r.PathValue("slot")
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n >= wheel.Slots {
		return nil, notFound("slot %s: no such slot (slots are 0 to %d)", service.QuoteShort(raw), wheel.Slots-1)
	}
	records := false
	if q := r.URL.Query().Get("records"); q != "" {
		if records, err = strconv.ParseBool(q); err != nil {
			return nil, invalid("records: must be true or false, got %s", service.QuoteShort(q))
		}
	}
	si, err := s.be(r).Slot(r.Context(), n, records)
	return SlotView(si, records), err
}

// memberOf is the member record of n.
func memberOf(n api.Node) model.Member {
	return model.Member{ID: n.ID, RaftAddr: n.RaftAddr, HTTPAddr: n.HTTPAddr, GRPCAddr: n.GRPCAddr}
}

// nodeBody decodes and validates the node of POST /v1/cluster/nodes.
func (s *Server) nodeBody(r *http.Request) (api.Node, error) {
	var n api.Node
	if err := decodeBody(r, &n, false); err != nil {
		return n, err
	}
	return n, service.ValidateNode(n, s.cfg.Limits)
}

// pathID parses the {id} of the path. A malformed id is a bad argument (400),
// distinct from a well-formed id that names no message (404).
func pathID(r *http.Request) (model.ID, error) {
	return service.ParseID("id", r.PathValue("id"))
}

// pathTopic checks the {topic} of the path.
func (s *Server) pathTopic(r *http.Request) (string, error) {
	topic := r.PathValue("topic")
	return topic, service.ValidateTopic("topic", topic, s.cfg.Limits)
}

// idAndBody parses the {id} of the path and decodes the body into v (see
// decodeBody).
func idAndBody(r *http.Request, v any, allowEmpty bool) (model.ID, error) {
	id, err := pathID(r)
	if err != nil {
		return model.ID{}, err
	}
	return id, decodeBody(r, v, allowEmpty)
}

// topicAndBody checks the {topic} of the path and decodes the optional
// body into v.
func (s *Server) topicAndBody(r *http.Request, v any) (string, error) {
	topic, err := s.pathTopic(r)
	if err != nil {
		return "", err
	}
	return topic, decodeBody(r, v, true)
}

// queryInt parses an optional integer query parameter in [lo, hi].
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	q := r.URL.Query().Get(name)
	if q == "" {
		return def, nil
	}
	v, err := strconv.Atoi(q)
	if err != nil {
		return 0, invalid("%s: must be an integer between %d and %d, got %s", name, lo, hi, service.QuoteShort(q))
	}
	return v, service.InRange(name, int64(v), int64(lo), int64(hi), "")
}

// backup streams a tar of the node's state: a checkpoint of its store.
func (s *Server) backup(r *http.Request) (any, error) {
	b := s.be(r)
	return stream(func(w http.ResponseWriter) error {
		w.Header().Set("Content-Type", "application/x-tar")
		w.WriteHeader(http.StatusOK)
		_, err := b.Backup(r.Context(), w)
		return err
	}), nil
}

// openAPI answers the OpenAPI document of the API. It is open, as /healthz
// and /metrics are: it says nothing of the data, and a client needs it
// before it holds a token.
func (s *Server) openAPI(*http.Request) (any, error) {
	return stream(func(w http.ResponseWriter) error {
		return writeBody(w, http.StatusOK, "application/json", api.OpenAPI())
	}), nil
}
