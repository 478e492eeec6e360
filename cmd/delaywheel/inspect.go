package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The commands that describe a timing wheel, wheel and slot: a running
// node's (--addr) or a stopped node's data directory (--data-dir).

// offlineReader reads the wheel of a stopped node's data directory.
type offlineReader interface {
	Wheel() (wheel.Info, error)
	Slot(slot int, records bool) (wheel.SlotInfo, error)
	Close() error
}

// openOfflineFunc opens a data directory for offlineReader; nil when the
// binary has no offline mode.
type openOfflineFunc func(dataDir string) (offlineReader, error)

// errNoOffline answers --data-dir when there is no offline reader.
var errNoOffline = errors.New("offline mode not available: --data-dir cannot be read by this build; use --addr")

// readOffline reads a data directory with read, and keeps the answer's JSON
// for --json as if a node had sent it.
func readOffline[T any](a *admin, s *session, read func(offlineReader) (T, error)) (T, error) {
	var zero T
	if a.openOffline == nil {
		return zero, errNoOffline
	}
	dir, err := groupDataDir(s.c)
	if err != nil {
		return zero, err
	}
	r, err := a.openOffline(dir)
	if err != nil {
		return zero, fmt.Errorf("opening %s: %w", s.c.String("data-dir"), err)
	}
	v, err := read(r)
	if cerr := r.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", s.c.String("data-dir"), cerr)
	}
	if err != nil {
		return zero, err
	}
	s.raw, err = json.Marshal(v)
	return v, err
}

func (a *admin) wheel(c *cli.Context) error {
	return show(c, 0, 0, func(s *session) (api.Wheel, error) {
		if !c.IsSet("data-dir") {
			return online(s, s.api.GroupWheel)
		}
		return readOffline(a, s, func(r offlineReader) (api.Wheel, error) {
			info, err := r.Wheel()
			return transport.WheelView(info), err
		})
	}, func(tw io.Writer, w api.Wheel) {
		row(tw, "cursor:", instant(w.CursorMs))
		row(tw, "horizon:", instant(w.HorizonMs))
		row(tw, "slots:", fmt.Sprintf("%d of %d ms", w.Slots, w.TickMs))
		row(tw, "open segments:", w.OpenSegments)
		row(tw, "overflow messages:", w.OverflowMessages)
		row(tw)
		row(tw, "SLOT", "SECOND", "DUE", "MESSAGES", "BYTES")
		for _, n := range w.NonEmpty {
			row(tw, n.Slot, n.Second, instant(n.Second*w.TickMs), n.Messages, n.Bytes)
		}
	})
}

func (a *admin) slot(c *cli.Context) error {
	records := c.Bool("records")
	return show(c, 1, 1, func(s *session) (api.Slot, error) {
		n, err := strconv.Atoi(c.Args().Get(0))
		if err != nil || n < 0 || n >= wheel.Slots {
			return api.Slot{}, fmt.Errorf("slot %q: want a number from 0 to %d", c.Args().Get(0), wheel.Slots-1)
		}
		if !c.IsSet("data-dir") {
			return online(s, func(ctx context.Context, g int) (api.Slot, error) { return s.api.GroupSlot(ctx, g, n, records) })
		}
		return readOffline(a, s, func(r offlineReader) (api.Slot, error) {
			info, err := r.Slot(n, records)
			return transport.SlotView(info, records), err
		})
	}, func(w io.Writer, sl api.Slot) {
		row(w, "slot:", sl.Slot)
		row(w, "second:", fmt.Sprintf("%d (%s)", sl.Second, instant(sl.Second*wheel.TickMs)))
		row(w, "file:", sl.File)
		row(w, "messages:", sl.Messages)
		row(w, "bytes:", sl.Bytes)
		if !records {
			return
		}
		row(w)
		row(w, "OFFSET", "TYPE", "INDEX", "ID", "TOPIC", "DUE", "ATTEMPTS", "BYTES", "LIVE")
		for _, r := range sl.Records {
			row(w, r.Offset, r.Type, r.Index, r.ID, r.Topic, instant(r.DueMs), r.Attempts, r.Bytes, r.Live)
		}
	})
}

// groupFlag is --group, the group whose data a command reads (what: the
// verb of its usage).
func groupFlag(what string) cli.Flag {
	return &cli.IntFlag{Name: "group", Usage: what + " Raft group `G` of a node of --groups N (0 to N-1)", DefaultText: "0"}
}

// online asks the node for group --group's answer.
func online[T any](s *session, ofGroup func(context.Context, int) (T, error)) (T, error) {
	g := s.c.Int("group")
	if g < 0 {
		var zero T
		return zero, fmt.Errorf("--group %d: want a group from 0 to N-1 of a node of --groups N", g)
	}
	v, err := ofGroup(s.c.Context, g)
	if g != 0 && client.HasCode(err, api.CodeInvalidArgument) {
		err = fmt.Errorf("--group %d: %w", g, err)
	}
	return v, err
}

// groupDataDir is where group --group keeps its data in --data-dir.
func groupDataDir(c *cli.Context) (string, error) {
	dir, err := replication.GroupDataDir(c.String("data-dir"), c.Int("group"))
	if errors.Is(err, model.ErrInvalid) {
		err = fmt.Errorf("--group: %w", err)
	}
	return dir, err
}
