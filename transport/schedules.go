package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Page sizes of GET /v1/schedules.
const (
	defaultScheduleLimit = 100
	maxScheduleLimit     = 1000
)

// putSchedule stores a schedule in the group of r (?group=, default 0).
func (s *Server) putSchedule(r *http.Request) (any, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return s.putScheduleIn(r.Context(), groupOf(r), r.PathValue("name"), data)
}

// putScheduleIn stores schedule name, as body data gives it, in group g:
// the body goes on as it came to a leader elsewhere, which validates it.
func (s *Server) putScheduleIn(ctx context.Context, g int, name string, data []byte) (api.Schedule, error) {
	return inGroup(ctx, s, g, func(b Backend) (api.Schedule, error) {
		var req api.ScheduleRequest
		if err := decodeData(data, &req, false); err != nil {
			return api.Schedule{}, err
		}
		spec, err := validateSchedule(name, req, s.cfg.Limits, s.nowMs())
		if err != nil {
			return api.Schedule{}, err
		}
		info, err := b.SetSchedule(ctx, spec)
		return scheduleOf(info), err
	}, http.MethodPut, "/v1/schedules/"+api.PathSegment(name), jsonWire(data))
}

// validateSchedule checks a schedule as sent and returns its spec, with
// the message defaults filled in.
func validateSchedule(name string, req api.ScheduleRequest, lim Limits, nowMs int64) (command.ScheduleSpec, error) {
	m := api.Message{Topic: req.Topic, Payload: req.Payload, Priority: req.Priority, TTRMs: req.TTRMs,
		MaxAttempts: req.MaxAttempts, Headers: req.Headers}
	nm, err := service.ValidateMessage(&m, "", lim, nowMs)
	if err != nil {
		return command.ScheduleSpec{}, err
	}
	spec := command.ScheduleSpec{Name: name, Topic: nm.Topic, Cron: req.Cron, Timezone: req.Timezone, EveryMs: req.EveryMs,
		StartAtMs: req.StartAtMs, EndAtMs: req.EndAtMs, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
		TTRMs: nm.TTRMs, MaxAttempts: nm.MaxAttempts}
	if err := wheel.ValidateSchedule(&spec, nowMs); err != nil {
		return spec, invalidFrom(err)
	}
	return spec, nil
}

// invalidFrom is the 400 of an error wrapping model.ErrInvalid, its
// message starting with the field it names.
func invalidFrom(err error) error {
	if !errors.Is(err, model.ErrInvalid) {
		return err
	}
	return invalid("%s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
}

// getSchedule answers a schedule from the group that holds it, of r's
// groups (every group, or the one ?group= names).
func (s *Server) getSchedule(r *http.Request) (any, error) {
	rt, name := s.routerOf(r), r.PathValue("name")
	g, _, err := holder(r.Context(), rt, name)
	if err != nil {
		return nil, err
	}
	info, err := rt.Group(g).Schedule(r.Context(), name)
	return scheduleOf(info), err
}

// deleteSchedule deletes a schedule in the group that holds it, of r's
// groups (none holds it: the first answers 404).
func (s *Server) deleteSchedule(r *http.Request) (any, error) {
	name := r.PathValue("name")
	g, _, err := holder(r.Context(), s.routerOf(r), name)
	if err != nil {
		return nil, err
	}
	return s.deleteScheduleIn(r.Context(), g, name)
}

// deleteScheduleIn deletes schedule name in group g.
func (s *Server) deleteScheduleIn(ctx context.Context, g int, name string) (api.ScheduleDeleted, error) {
	return inGroup(ctx, s, g, func(b Backend) (api.ScheduleDeleted, error) {
		return api.ScheduleDeleted{Name: name, Deleted: true}, b.DeleteSchedule(ctx, name)
	}, http.MethodDelete, "/v1/schedules/"+api.PathSegment(name), nil)
}

// scheduleScan bounds the stored schedules one GET /v1/schedules?topic=
// reads: the schedules are kept by name, not by topic, so a page of one
// topic's schedules is found by reading them all, a bounded run at a time.
const scheduleScan = 10_000

// listSchedules answers GET /v1/schedules: up to limit schedules in name
// order after ?after=, of every group (the one ?group= names), with next
// set when more may follow; with ?topic=, only that topic's (see
// pageSchedules).
func (s *Server) listSchedules(r *http.Request) (any, error) {
	limit, err := queryInt(r, "limit", defaultScheduleLimit, 1, maxScheduleLimit)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	if q.Has("topic") {
		if err := service.ValidateTopic("topic", q.Get("topic"), s.cfg.Limits); err != nil {
			return nil, err
		}
	}
	rt := s.routerOf(r)
	read := func(after string, n int) ([]wheel.ScheduleInfo, error) { return rt.Schedules(r.Context(), after, n) }
	return pageSchedules(read, q.Get("after"), q.Get("topic"), limit, scheduleScan)
}

// pageSchedules reads through read (up to n schedules after a name, in
// name order) one page of up to limit schedules after after, of topic
// only unless it is "". Next is set when more may follow: the name of the
// page's last schedule, or of the last one read. A page of one
// topic reads at most scan schedules, so it may hold fewer than limit
// (even none) while Next is set.
func pageSchedules(read func(after string, n int) ([]wheel.ScheduleInfo, error), after, topic string, limit, scan int) (api.ScheduleList, error) {
	out := api.ScheduleList{Schedules: []api.Schedule{}}
	batch := limit + 1 // unfiltered, one read answers the page
	if topic != "" {
		batch = maxScheduleLimit
	}
	for scanned := 0; ; {
		ask := min(batch, scan-scanned)
		infos, err := read(after, ask)
		if err != nil {
			return api.ScheduleList{}, err
		}
		for _, info := range infos {
			if topic == "" || info.Topic == topic {
				if len(out.Schedules) == limit {
					out.Next = out.Schedules[limit-1].Name
					return out, nil
				}
				out.Schedules = append(out.Schedules, scheduleOf(info))
			}
			after = info.Name
		}
		scanned += len(infos)
		switch {
		case len(infos) < ask:
			return out, nil // no more schedules
		case scanned >= scan:
			out.Next = after
			return out, nil
		}
	}
}

// scheduleOf is the API view of a stored schedule.
func scheduleOf(info wheel.ScheduleInfo) api.Schedule {
	out := api.Schedule{Name: info.Name, Topic: info.Topic, Cron: info.Cron, Timezone: info.Timezone, EveryMs: info.EveryMs,
		Headers: headersOf(info.Headers), Priority: info.Priority, TTRMs: info.TTRMs, MaxAttempts: info.MaxAttempts,
		StartAtMs: info.StartAtMs, EndAtMs: info.EndAtMs, CreatedMs: info.CreatedMs, Fired: info.Fired}
	if len(info.Body) > 0 {
		out.Payload = api.PayloadOf(info.Body)
	}
	if info.LastMs != 0 {
		out.LastAtMs = &info.LastMs
	}
	if info.NextMs != 0 {
		out.NextAtMs = &info.NextMs
	}
	return out
}
