package api

// ScheduleRequest is the body of PUT /v1/schedules/{name}: set cron (five
// fields, or six with seconds first, or a descriptor such as @daily; see
// API.md) with an optional IANA timezone, or every_ms, not both.
type ScheduleRequest struct {
	Topic    string `json:"topic"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"` // default UTC
	EveryMs  int64  `json:"every_ms,omitempty"`
	Payload
	Headers     map[string]string `json:"headers,omitempty"`
	Priority    int64             `json:"priority,omitempty"`
	TTRMs       *int64            `json:"ttr_ms,omitempty"`
	MaxAttempts *int32            `json:"max_attempts,omitempty"`
	StartAtMs   int64             `json:"start_at_ms,omitempty"` // no occurrence before it
	EndAtMs     int64             `json:"end_at_ms,omitempty"`   // no occurrence after it; 0: none
}

// Schedule is a stored recurring schedule and where its calendar stands.
type Schedule struct {
	Name     string `json:"name"`
	Topic    string `json:"topic"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	EveryMs  int64  `json:"every_ms,omitempty"`
	Payload
	Headers     map[string]string `json:"headers,omitempty"`
	Priority    int64             `json:"priority"`
	TTRMs       int64             `json:"ttr_ms"`
	MaxAttempts int32             `json:"max_attempts"`
	StartAtMs   int64             `json:"start_at_ms"`
	EndAtMs     int64             `json:"end_at_ms,omitempty"`
	// CreatedMs is when the schedule was last set.
	CreatedMs int64 `json:"created_ms"`
	// LastAtMs is the last occurrence enqueued; null before the first.
	LastAtMs *int64 `json:"last_at_ms"`
	// NextAtMs is the next occurrence; null once the schedule has ended.
	NextAtMs *int64 `json:"next_at_ms"`
	// Fired counts the occurrences enqueued since the schedule was set.
	Fired int64 `json:"fired"`
}

// ScheduleList is the answer of GET /v1/schedules, in name order. When
// more follow, Next is the name to pass as ?after= for the next page.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	Next      string     `json:"next,omitempty"`
}

// ScheduleDeleted is the answer of DELETE /v1/schedules/{name}.
type ScheduleDeleted struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}
