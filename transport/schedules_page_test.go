package transport

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// A page of one topic's schedules reads no more than its bound: it stops
// there with next set, fewer than limit schedules (or none) in hand, and
// the pages that follow next find every schedule of the topic once.
func TestPageSchedulesBoundsItsScan(t *testing.T) {
	var all []wheel.ScheduleInfo
	for i := range 50 {
		topic := "other"
		if i%7 == 3 {
			topic = "mine"
		}
		all = append(all, wheel.ScheduleInfo{ScheduleSpec: command.ScheduleSpec{Name: fmt.Sprintf("s%02d", i), Topic: topic}})
	}
	scanned := 0
	read := func(after string, n int) ([]wheel.ScheduleInfo, error) {
		if n <= 0 {
			t.Fatalf("read of %d schedules", n)
		}
		i, _ := slices.BinarySearchFunc(all, after, func(s wheel.ScheduleInfo, name string) int { return strings.Compare(s.Name, name) })
		if i < len(all) && all[i].Name == after {
			i++
		}
		out := all[i:min(len(all), i+n)]
		scanned += len(out)
		return out, nil
	}
	var got []string
	after, pages := "", 0
	for {
		scanned = 0
		p, err := pageSchedules(read, after, "mine", 2, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Schedules) > 2 || scanned > 10 {
			t.Fatalf("page after %q: %d schedules, %d read", after, len(p.Schedules), scanned)
		}
		for _, s := range p.Schedules {
			if s.Topic != "mine" {
				t.Fatalf("page after %q holds %+v", after, s)
			}
			got = append(got, s.Name)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	want := []string{"s03", "s10", "s17", "s24", "s31", "s38", "s45"}
	if !slices.Equal(got, want) {
		t.Fatalf("schedules of the topic over %d pages: %v, want %v", pages, got, want)
	}
	if pages < 5 {
		t.Fatalf("%d pages: the scan of 10 was not bounded", pages)
	}

	p, err := pageSchedules(read, "", "", 3, 10)
	if err != nil || len(p.Schedules) != 3 || p.Next != "s02" {
		t.Fatalf("unfiltered page: %+v, %v", p, err)
	}
}
