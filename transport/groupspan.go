package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
)

// This file answers, on a node of many groups, the requests that span
// them (groupScopes' scopeSpan routes without ?group=). A write is split
// by group and each part served on this node as the same route with
// ?group=g (within): applied here when this node leads g, else forwarded
// to g's leader like any request, so the parts' answers read their own
// writes here too. A write all of one group that this node leads goes to
// that group's backend at once, answered as its one part would be
// (ledHere). A batch spanning groups is therefore atomic per group only:
// when one part fails, the parts that succeeded stay done, and the answer
// is the failed part's error. Reads merge each group's local read.

// subRequest is a request served within one group (within).
type subRequest struct {
	pattern string      // the route, "METHOD /path/{name}"
	path    string      // its path, with the values filled in
	values  [][2]string // the path's values: name, value
	body    any         // sent as JSON; nil: none
}

// within serves sr on this node as a client's request to group g (with
// ?group=g) with r's Authorization, and decodes its answer into out. An
// answer other than 200 is returned as an *Error naming the group.
func (s *Server) within(r *http.Request, g int, sr subRequest, out any) error {
	var body []byte
	if sr.body != nil {
		var err error
		if body, err = json.Marshal(sr.body); err != nil {
			return fmt.Errorf("transport: encoding a request to group %d: %w", g, err)
		}
	}
	method, _, _ := strings.Cut(sr.pattern, " ")
	req, err := http.NewRequestWithContext(r.Context(), method, sr.path+"?group="+strconv.Itoa(g), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("transport: a request to group %d: %w", g, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth := r.Header.Get("Authorization"); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
	for _, kv := range sr.values {
		req.SetPathValue(kv[0], kv[1])
	}
	buf := &bufferWriter{header: http.Header{}}
	if !s.serveSub(buf, req, s.routes[sr.pattern]) {
		return unavailable("group %d: the answer of its leader was cut off; retry shortly", g)
	}
	if buf.status != 0 && buf.status != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(buf.body.Bytes(), &e) != nil || e.Error.Code == "" {
			e.Error = api.ErrorDetail{Code: api.CodeInternal, Message: strings.TrimSpace(buf.body.String())}
		}
		retry, _ := strconv.Atoi(buf.header.Get("Retry-After"))
		return groupError(g, &Error{Status: buf.status, Code: e.Error.Code, Message: e.Error.Message, RetryAfter: retry})
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(buf.body.Bytes(), out); err != nil {
		return fmt.Errorf("transport: decoding group %d's answer: %w", g, err)
	}
	return nil
}

// groupError is e, group g's answer to a part, as the answer of the
// request the part is of: its status, code and Retry-After, and its
// message naming the group.
func groupError(g int, e *Error) *Error {
	return &Error{Status: e.Status, Code: e.Code, Message: fmt.Sprintf("group %d: %s", g, e.Message), RetryAfter: e.RetryAfter, Err: e.Err}
}

// ledHere answers at once a request whose parts all fall in one group
// that this node leads (and is a member of): call calls that group's
// backend with the request as decoded, where within would encode the
// part again for the group's route to decode it again. The answer, and an
// error's status, code and message, are those within gives. ok is false,
// and call is not made, when the request spans groups or this node does
// not lead its group; its parts then go through within.
func ledHere[T any](s *Server, groups []int, call func(b Backend) (T, error)) (v T, ok bool, err error) {
	if len(groups) != 1 {
		return v, false, nil
	}
	g, b := groups[0], s.group(groups[0])
	if _, isLeader, _ := b.LeaderHTTP(); !isLeader || b.Removed() != nil {
		return v, false, nil
	}
	if v, err = call(b); err != nil {
		return v, true, groupError(g, toError(err))
	}
	return v, true, nil
}

// serveSub serves req into buf and reports whether it was answered. A
// forward to a leader whose answer is cut off mid-body aborts with
// http.ErrAbortHandler, which the HTTP server recovers only on the
// request's own goroutine; a part runs on another, so it is recovered
// here.
func (s *Server) serveSub(buf *bufferWriter, req *http.Request, rt route) (answered bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p)
			}
			answered = false
		}
	}()
	s.serveRoute(&recorder{ResponseWriter: buf}, req, rt)
	return true
}

// bufferWriter is the ResponseWriter of a subRequest: it keeps the answer.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// Header returns the answer's header.
func (w *bufferWriter) Header() http.Header { return w.header }

// WriteHeader records the status.
func (w *bufferWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

// Write keeps p.
func (w *bufferWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

// enqueueSpan enqueues a batch over many groups: each group's messages,
// their due times made absolute here, as one enqueue of that group; the
// results come back in the batch's order.
func (s *Server) enqueueSpan(r *http.Request) (any, error) {
	msgs, err := s.decodeEnqueueBody(r)
	if err != nil {
		return nil, err
	}
	groups, parts := splitMessages(msgs, s.groupCount())
	// A client that knows the groups sends each topic's batches to its
	// leader, which enqueues them at once.
	if res, ok, err := ledHere(s, groups, func(b Backend) ([]wheel.Enqueued, error) { return b.Enqueue(r.Context(), msgs) }); ok {
		if err != nil {
			return nil, err
		}
		return enqueued(r, res), nil
	}
	res := make([]wheel.Enqueued, len(msgs))
	err = service.EachGroup(groups, func(g int) error {
		idx := parts[g]
		req := api.EnqueueRequest{Messages: make([]api.Message, len(idx))}
		for j, i := range idx {
			req.Messages[j] = messageOf(msgs[i])
		}
		var out api.EnqueueResponse
		if err := s.within(r, g, subRequest{pattern: "POST /v1/messages", path: "/v1/messages", body: req}, &out); err != nil {
			return err
		}
		if len(out.Results) != len(idx) {
			return fmt.Errorf("transport: group %d answered %d results for %d messages", g, len(out.Results), len(idx))
		}
		for j, i := range idx {
			id, err := wheel.ParseID(out.Results[j].ID)
			if err != nil {
				return fmt.Errorf("transport: group %d's result %d: %w", g, j, err)
			}
			res[i] = wheel.Enqueued{ID: id, DeliverAtMs: out.Results[j].DeliverAtMs, Duplicate: out.Results[j].Duplicate}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return enqueued(r, res), nil
}

// splitMessages splits a batch by the group of each message's topic, of
// n groups (split).
func splitMessages(msgs []wheel.NewMessage, n int) (groups []int, parts map[int][]int) {
	return service.Split(len(msgs), func(i int) int { return wheel.GroupOf(msgs[i].Topic, n) })
}

// splitReceipts splits receipts, given as field, by the group their ids
// name (split), refusing a receipt of a group a cluster of n groups does
// not have.
func splitReceipts(field string, rs []wheel.Receipt, n int) (groups []int, parts map[int][]int, err error) {
	for i, rc := range rs {
		if g := rc.ID.Group(); g >= n {
			return nil, nil, invalid("%s: receipt names group %d; this cluster has groups 0 to %d", index(field, i), g, n-1)
		}
	}
	groups, parts = service.Split(len(rs), func(i int) int { return rs[i].ID.Group() })
	return groups, parts, nil
}

// messageOf is the JSON form of a validated message, due at its absolute
// time.
func messageOf(m wheel.NewMessage) api.Message {
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

// settleSpan splits the receipts of an ack, nack or touch by the group
// their ids name, sends each group its part as the same route, and sums
// the counts of their answers.
func (s *Server) settleSpan(r *http.Request, st settlement) (any, error) {
	rs, err := s.receiptsOf(r, st)
	if err != nil {
		return nil, err
	}
	groups, parts, err := splitReceipts("receipts", rs, s.groupCount())
	if err != nil {
		return nil, err
	}
	if c, ok, err := ledHere(s, groups, func(b Backend) (wheel.Counted, error) { return st.do(b, r.Context(), rs) }); ok {
		return st.answer(c), err
	}
	var mu sync.Mutex
	var sum wheel.Counted
	err = service.EachGroup(groups, func(g int) error {
		part := make([]string, len(parts[g]))
		for j, i := range parts[g] {
			part[j] = (*st.receipts)[i]
		}
		var out map[string]int
		if err := s.within(r, g, subRequest{pattern: "POST " + st.path, path: st.path, body: st.part(part)}, &out); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		sum.Done += out[st.doneKey]
		sum.Stale += out["stale"]
		return nil
	})
	return st.answer(sum), err
}

func (s *Server) ackSpan(r *http.Request) (any, error) { return s.settleSpan(r, acking()) }

func (s *Server) nackSpan(r *http.Request) (any, error) { return s.settleSpan(r, s.nacking()) }

func (s *Server) touchSpan(r *http.Request) (any, error) { return s.settleSpan(r, touching()) }

// topicsSpan merges every group's topics (a topic lives in one group).
func (s *Server) topicsSpan(r *http.Request) (any, error) {
	ts, err := mergedTopics(r.Context(), s.groupCount(), s.group)
	return api.TopicsResponse{Topics: topicsOf(ts)}, err
}

// mergedTopics is the topics of n groups (group returns each one's
// backend) in one list, by name.
func mergedTopics(ctx context.Context, n int, group func(g int) Backend) ([]wheel.TopicCounts, error) {
	per := make([][]wheel.TopicCounts, n)
	err := service.EachGroup(service.All(n), func(g int) (err error) {
		per[g], err = group(g).Topics(ctx)
		return err
	})
	ts := slices.Concat(per...)
	slices.SortFunc(ts, func(a, b wheel.TopicCounts) int { return strings.Compare(a.Topic, b.Topic) })
	return ts, err
}

// readyzSpan is ready when every group is, each as readyz defines it.
func (s *Server) readyzSpan(r *http.Request) (any, error) {
	n := s.groupCount()
	st := make([]api.Status, n)
	err := service.EachGroup(service.All(n), func(g int) (err error) {
		if st[g], err = s.readyGroup(r, s.group(g), g); err != nil {
			e := toError(err)
			e.Message = fmt.Sprintf("group %d: %s", g, e.Message)
			return e
		}
		return nil
	})
	return st[0], err
}

// addNodeSpan adds the node to every group, in order.
func (s *Server) addNodeSpan(r *http.Request) (any, error) {
	n, err := s.nodeBody(r)
	if err != nil {
		return nil, err
	}
	for g := range s.groupCount() {
		if err := s.within(r, g, subRequest{pattern: "POST /v1/cluster/nodes", path: "/v1/cluster/nodes", body: n}, nil); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// removeNodeSpan removes the node from every group, in order.
//
// The node leads some groups, as every node does: removing itself, such a
// leader steps down before it can answer, and its group answers 503 while
// it elects another. The removal is then asked again until the group
// answers, for at most removeRetryTimeout; a 404 (not a member) after a
// 503 means the first ask removed it.
func (s *Server) removeNodeSpan(r *http.Request) (any, error) {
	id := r.PathValue("id")
	sr := subRequest{pattern: "DELETE /v1/cluster/nodes/{id}", path: "/v1/cluster/nodes/" + id, values: [][2]string{{"id", id}}}
	ctx, cancel := context.WithTimeout(r.Context(), removeRetryTimeout)
	defer cancel()
	for g := range s.groupCount() {
		for retried := false; ; retried = true {
			err := s.within(r, g, sr, nil)
			var e *Error
			switch {
			case err == nil:
			case errors.As(err, &e) && e.Status == http.StatusNotFound && retried:
			case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && ctx.Err() == nil:
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			default:
				return nil, err
			}
			break
		}
	}
	return api.NodeRemoved{ID: id, Removed: true}, nil
}

// removeRetryTimeout bounds how long a removal over many groups waits for
// the groups whose leader it removed to elect another.
const removeRetryTimeout = 10 * time.Second

// clusterSpan answers the cluster view: the members as group 0's leader
// sees them, and every group's leader, term and the leader's indexes.
func (s *Server) clusterSpan(r *http.Request) (any, error) {
	if local, _ := strconv.ParseBool(r.URL.Query().Get("local")); local {
		return s.cluster(r) // group 0's own view, as a member asks it
	}
	v, err := s.cluster(r)
	if err != nil {
		return nil, err
	}
	view := v.(api.Cluster)
	s.allGroups(r.Context(), r.Header.Get("Authorization"), &view)
	return view, nil
}

// allGroups sets view's groups to every group as this node sees it
// (groupStatus); auth is the Authorization to send.
func (s *Server) allGroups(ctx context.Context, auth string, view *api.Cluster) {
	n := s.groupCount()
	view.Groups = make([]api.Group, n)
	_ = service.EachGroup(service.All(n), func(g int) error {
		view.Groups[g] = s.groupStatus(ctx, g, auth)
		return nil
	})
}

// groupStatus is group g as this node sees it, with its leader's indexes:
// its own when it leads g, else what the leader says of itself.
func (s *Server) groupStatus(ctx context.Context, g int, auth string) api.Group {
	b := s.group(g)
	own, err := b.Cluster(ctx)
	if err != nil {
		return api.Group{Group: g}
	}
	me, leader := selfOf(own), api.NodeStatus{}
	if addr, isLeader, known := b.LeaderHTTP(); isLeader {
		leader = me
	} else if known && addr != "" {
		actx, cancel := context.WithTimeout(ctx, memberAskTimeout)
		defer cancel()
		if l, ok, err := s.memberOwn(actx, g, own.Leader, addr, auth); err == nil && ok {
			leader = l
		} else {
			s.log.Debug("asking a group's leader for its indexes", "group", g, "leader", addr, "err", err)
		}
	}
	leader.ID = own.Leader
	own.Nodes = []api.NodeStatus{leader}
	return withGroups(own, me, g).Groups[0]
}

// holder returns the group whose local store holds schedule name, or -1.
func (s *Server) holder(ctx context.Context, name string) (int, error) {
	n := s.groupCount()
	found := make([]bool, n)
	err := service.EachGroup(service.All(n), func(g int) error {
		sb, err := schedulerOf(s.group(g))
		if err != nil {
			return err
		}
		_, err = sb.Schedule(ctx, name)
		found[g] = err == nil
		if errors.Is(err, wheel.ErrNotFound) {
			return nil
		}
		return err
	})
	return slices.Index(found, true), err
}

// putScheduleSpan stores a schedule in the group of its topic. The body
// goes on as it came; the group's handler validates it.
func (s *Server) putScheduleSpan(r *http.Request) (any, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	// Only the topic is read here: an invalid body goes to the group of
	// what topic it names ("" when none), whose handler refuses it.
	var head struct {
		Topic string `json:"topic"`
	}
	_ = json.Unmarshal(data, &head)
	name := r.PathValue("name")
	g := wheel.GroupOf(head.Topic, s.groupCount())
	was, err := s.holder(r.Context(), name)
	if err != nil {
		return nil, err
	}
	var out api.Schedule
	if err := s.within(r, g, scheduleRequest(http.MethodPut, name, json.RawMessage(data)), &out); err != nil {
		return nil, err
	}
	// A schedule moved to a topic of another group leaves its old group,
	// so that one group holds each name. Should this fail, the client's
	// retry of the put (which replaces) removes it again.
	if was >= 0 && was != g {
		if err := s.within(r, was, scheduleRequest(http.MethodDelete, name, nil), nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scheduleRequest is the subRequest of PUT or DELETE /v1/schedules/{name}.
func scheduleRequest(method, name string, body any) subRequest {
	return subRequest{pattern: method + " /v1/schedules/{name}", path: "/v1/schedules/" + name,
		values: [][2]string{{"name", name}}, body: body}
}

// getScheduleSpan answers a schedule from the group that holds it.
func (s *Server) getScheduleSpan(r *http.Request) (any, error) {
	name := r.PathValue("name")
	g, err := s.holder(r.Context(), name)
	if err != nil {
		return nil, err
	}
	return s.getSchedule(withGroup(r, s.group(max(g, 0)), max(g, 0)))
}

// deleteScheduleSpan deletes a schedule in the group that holds it (none
// holds it: group 0 answers 404).
func (s *Server) deleteScheduleSpan(r *http.Request) (any, error) {
	name := r.PathValue("name")
	g, err := s.holder(r.Context(), name)
	if err != nil {
		return nil, err
	}
	var out api.ScheduleDeleted
	if err := s.within(r, max(g, 0), scheduleRequest(http.MethodDelete, name, nil), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// listSchedulesSpan pages the schedules of every group by name, as
// listSchedules pages one group's: each read takes the first n after a
// name from every group and keeps the first n of their union.
func (s *Server) listSchedulesSpan(r *http.Request) (any, error) {
	n := s.groupCount()
	return s.schedulesPage(r, func(after string, k int) ([]wheel.ScheduleInfo, error) {
		per := make([][]wheel.ScheduleInfo, n)
		err := service.EachGroup(service.All(n), func(g int) error {
			sb, err := schedulerOf(s.group(g))
			if err != nil {
				return err
			}
			per[g], err = sb.Schedules(r.Context(), after, k)
			return err
		})
		if err != nil {
			return nil, err
		}
		infos := slices.Concat(per...)
		slices.SortFunc(infos, func(a, b wheel.ScheduleInfo) int { return strings.Compare(a.Name, b.Name) })
		return infos[:min(len(infos), k)], nil
	})
}
