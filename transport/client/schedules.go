package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/api"
)

func schedulePath(name string) string { return "/v1/schedules/" + api.PathSegment(name) }

// SetSchedule creates or replaces the recurring schedule name.
func (c *Client) SetSchedule(ctx context.Context, name string, req api.ScheduleRequest) (api.Schedule, error) {
	return call[api.Schedule](ctx, c, http.MethodPut, schedulePath(name), req)
}

// GetSchedule returns a schedule with its last and next occurrence.
func (c *Client) GetSchedule(ctx context.Context, name string) (api.Schedule, error) {
	return call[api.Schedule](ctx, c, http.MethodGet, schedulePath(name), nil)
}

// DeleteSchedule removes a schedule; occurrences already enqueued stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := call[api.ScheduleDeleted](ctx, c, http.MethodDelete, schedulePath(name), nil)
	return err
}

// Schedules lists up to limit schedules (0: the server's default) whose
// names sort after after; the answer's Next is the after of the next page.
func (c *Client) Schedules(ctx context.Context, after string, limit int) (api.ScheduleList, error) {
	return c.schedules(ctx, "", after, limit)
}

// TopicSchedules lists the schedules of topic as Schedules lists them
// all. A page may hold fewer than limit schedules, even none, while Next
// is set: the server reads a bounded run of schedules per page.
func (c *Client) TopicSchedules(ctx context.Context, topic, after string, limit int) (api.ScheduleList, error) {
	return c.schedules(ctx, topic, after, limit)
}

func (c *Client) schedules(ctx context.Context, topic, after string, limit int) (api.ScheduleList, error) {
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/schedules"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return call[api.ScheduleList](ctx, c, http.MethodGet, path, nil)
}
