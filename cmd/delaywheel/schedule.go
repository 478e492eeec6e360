package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
)

// The schedule commands: set, ls, get and rm of recurring schedules.

func scheduleCommand() *cli.Command {
	a := &admin{}
	return &cli.Command{
		Name: "schedule", Usage: "set, list, show and remove recurring schedules",
		Subcommands: []*cli.Command{
			withHTTPFlags(&cli.Command{
				Name: "set", Usage: "create or replace a schedule: each occurrence enqueues BODY to --topic",
				ArgsUsage: "NAME --topic T (--cron EXPR [--tz ZONE] | --every D) BODY (BODY - reads stdin)",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "topic", Usage: "enqueue each occurrence to this topic", Required: true},
					&cli.StringFlag{Name: "cron", Usage: "cron `EXPR`: five fields, or six with seconds first"},
					&cli.StringFlag{Name: "tz", Usage: "IANA time `ZONE` of --cron (e.g. Europe/Berlin)", DefaultText: "UTC"},
					&cli.DurationFlag{Name: "every", Usage: "fixed interval `D` (at least 1s), from --start"},
					&cli.StringFlag{Name: "start", Usage: "no occurrence before instant `T`: RFC 3339 or Unix milliseconds"},
					&cli.StringFlag{Name: "end", Usage: "no occurrence after instant `T`: RFC 3339 or Unix milliseconds"},
				}, messageFlags()...),
				Action: a.scheduleSet,
			}),
			withHTTPFlags(&cli.Command{
				Name: "ls", Usage: "list schedules in name order",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "limit", Usage: "at most this many", DefaultText: "100, set by the server"},
					&cli.StringFlag{Name: "after", Usage: "start after this `NAME` (the next page)"},
				},
				Action: a.scheduleList,
			}),
			withHTTPFlags(&cli.Command{Name: "get", Usage: "show a schedule with its last and next occurrence", ArgsUsage: "NAME", Action: a.scheduleGet}),
			withHTTPFlags(&cli.Command{Name: "rm", Usage: "remove a schedule (occurrences already enqueued stay)", ArgsUsage: "NAME", Action: a.scheduleRemove}),
		},
	}
}

func (a *admin) scheduleSet(c *cli.Context) error {
	return show(c, 2, 2, func(s *session) (api.Schedule, error) {
		req, err := scheduleRequestOf(c)
		if err != nil {
			return api.Schedule{}, err
		}
		return s.cl.SetSchedule(c.Context, c.Args().Get(0), req)
	}, scheduleTable)
}

// scheduleRequestOf builds the request of schedule set from its arguments
// and flags; the message flags are those of push.
func scheduleRequestOf(c *cli.Context) (api.ScheduleRequest, error) {
	m, err := messageOf(c)
	if err != nil {
		return api.ScheduleRequest{}, err
	}
	req := api.ScheduleRequest{Topic: c.String("topic"), Cron: c.String("cron"), Timezone: c.String("tz"),
		EveryMs: c.Duration("every").Milliseconds(), Payload: m.Payload, Headers: m.Headers, Priority: m.Priority,
		TTRMs: m.TTRMs, MaxAttempts: m.MaxAttempts}
	for flag, dst := range map[string]*int64{"start": &req.StartAtMs, "end": &req.EndAtMs} {
		if c.IsSet(flag) {
			if *dst, err = parseInstant(c.String(flag)); err != nil {
				return req, fmt.Errorf("--%s: %w", flag, err)
			}
		}
	}
	return req, nil
}

func (a *admin) scheduleGet(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.Schedule, error) {
		return s.cl.GetSchedule(c.Context, c.Args().Get(0))
	}, scheduleTable)
}

func (a *admin) scheduleRemove(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (string, error) {
		return c.Args().Get(0), s.cl.DeleteSchedule(c.Context, c.Args().Get(0))
	}, func(w io.Writer, name string) { row(w, "removed:", name) })
}

func (a *admin) scheduleList(c *cli.Context) error {
	return show(c, 0, 0, func(s *session) (api.ScheduleList, error) {
		return s.cl.Schedules(c.Context, c.String("after"), c.Int("limit"))
	}, func(w io.Writer, l api.ScheduleList) {
		row(w, "NAME", "TOPIC", "WHEN", "LAST", "NEXT", "FIRED")
		for _, s := range l.Schedules {
			row(w, s.Name, s.Topic, scheduleWhen(s), optInstant(s.LastAtMs), optInstant(s.NextAtMs), s.Fired)
		}
		if l.Next != "" {
			row(w, "more: --after "+l.Next)
		}
	})
}

func scheduleTable(w io.Writer, s api.Schedule) {
	row(w, "name:", s.Name)
	row(w, "topic:", s.Topic)
	row(w, "when:", scheduleWhen(s))
	row(w, "start:", instant(s.StartAtMs))
	row(w, "end:", instant(s.EndAtMs))
	row(w, "last:", optInstant(s.LastAtMs))
	row(w, "next:", optInstant(s.NextAtMs))
	row(w, "fired:", s.Fired)
	row(w, "priority:", s.Priority)
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		row(w, "header:", k+"="+s.Headers[k])
	}
	row(w, "body:", bodyText(s.Payload))
}

// scheduleWhen says when a schedule fires: its cron expression and zone,
// or its interval.
func scheduleWhen(s api.Schedule) string {
	if s.Cron == "" {
		return fmt.Sprintf("every %dms", s.EveryMs)
	}
	tz := s.Timezone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("cron %q %s", s.Cron, tz)
}

// optInstant renders an instant that may be absent ("-").
func optInstant(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return instant(*ms)
}
