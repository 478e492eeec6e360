package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// Scheduler is implemented by backends that keep recurring schedules
// (/v1/schedules).
type Scheduler interface {
	// SetSchedule creates or replaces a schedule and returns it as stored.
	SetSchedule(ctx context.Context, spec wheel.ScheduleSpec) (wheel.ScheduleInfo, error)
	// DeleteSchedule removes a schedule; occurrences already enqueued stay.
	DeleteSchedule(ctx context.Context, name string) error
	// Schedule returns a stored schedule.
	Schedule(ctx context.Context, name string) (wheel.ScheduleInfo, error)
	// Schedules returns up to limit schedules whose names sort after after.
	Schedules(ctx context.Context, after string, limit int) ([]wheel.ScheduleInfo, error)
}

// Page sizes of GET /v1/schedules.
const (
	defaultScheduleLimit = 100
	maxScheduleLimit     = 1000
)

func (s *Server) scheduler() (Scheduler, error) {
	sb, ok := s.b.(Scheduler)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: api.CodeInternal, Message: "this node keeps no schedules"}
	}
	return sb, nil
}

func (s *Server) putSchedule(r *http.Request) (any, error) {
	sb, err := s.scheduler()
	if err != nil {
		return nil, err
	}
	var req api.ScheduleRequest
	if err := decodeBody(r, &req, false); err != nil {
		return nil, err
	}
	spec, err := validateSchedule(r.PathValue("name"), req, s.cfg.Limits, s.nowMs())
	if err != nil {
		return nil, err
	}
	info, err := sb.SetSchedule(r.Context(), spec)
	return scheduleOf(info), err
}

// validateSchedule checks a schedule as sent and returns its spec, with
// the message defaults filled in.
func validateSchedule(name string, req api.ScheduleRequest, lim Limits, nowMs int64) (wheel.ScheduleSpec, error) {
	m := api.Message{Topic: req.Topic, Payload: req.Payload, Priority: req.Priority, TTRMs: req.TTRMs,
		MaxAttempts: req.MaxAttempts, Headers: req.Headers}
	nm, err := validateMessage(&m, "", lim, nowMs)
	if err != nil {
		return wheel.ScheduleSpec{}, err
	}
	spec := wheel.ScheduleSpec{Name: name, Topic: nm.Topic, Cron: req.Cron, Timezone: req.Timezone, EveryMs: req.EveryMs,
		StartAtMs: req.StartAtMs, EndAtMs: req.EndAtMs, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
		TTRMs: nm.TTRMs, MaxAttempts: nm.MaxAttempts}
	if err := wheel.ValidateSchedule(&spec); err != nil {
		return spec, invalidFrom(err)
	}
	return spec, nil
}

// invalidFrom is the 400 of an error wrapping wheel.ErrInvalid, its
// message starting with the field it names.
func invalidFrom(err error) error {
	if !errors.Is(err, wheel.ErrInvalid) {
		return err
	}
	return invalid("%s", strings.TrimPrefix(err.Error(), wheel.ErrInvalid.Error()+": "))
}

func (s *Server) getSchedule(r *http.Request) (any, error) {
	sb, err := s.scheduler()
	if err != nil {
		return nil, err
	}
	info, err := sb.Schedule(r.Context(), r.PathValue("name"))
	return scheduleOf(info), err
}

func (s *Server) deleteSchedule(r *http.Request) (any, error) {
	sb, err := s.scheduler()
	if err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	return api.ScheduleDeleted{Name: name, Deleted: true}, sb.DeleteSchedule(r.Context(), name)
}

func (s *Server) listSchedules(r *http.Request) (any, error) {
	sb, err := s.scheduler()
	if err != nil {
		return nil, err
	}
	limit, err := queryInt(r, "limit", defaultScheduleLimit, 1, maxScheduleLimit)
	if err != nil {
		return nil, err
	}
	infos, err := sb.Schedules(r.Context(), r.URL.Query().Get("after"), limit+1)
	if err != nil {
		return nil, err
	}
	out := api.ScheduleList{Schedules: make([]api.Schedule, 0, min(len(infos), limit))}
	for i, info := range infos {
		if i == limit {
			out.Next = infos[i-1].Name
			break
		}
		out.Schedules = append(out.Schedules, scheduleOf(info))
	}
	return out, nil
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
