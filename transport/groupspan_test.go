package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// leadingGroup is one group of a node that leads it, knows no schedule
// and no other node, and is ready unless ready says why not; removed is
// its Removed.
type leadingGroup struct {
	transport.Backend
	ready, removed error
}

func (leadingGroup) Leader() (model.Member, bool, bool) { return model.Member{}, true, true }
func (leadingGroup) LeaderHTTP() (string, bool, bool)   { return "", true, true }
func (leadingGroup) Indexes() (uint64, uint64)          { return 1, 1 }
func (leadingGroup) LeaderCommit() uint64               { return 1 }
func (l leadingGroup) Ready() error                     { return l.ready }
func (l leadingGroup) Removed() error                   { return l.removed }
func (leadingGroup) Schedule(_ context.Context, name string) (wheel.ScheduleInfo, error) {
	return wheel.ScheduleInfo{}, fmt.Errorf("%w: schedule %q", model.ErrNotFound, name)
}
func (l leadingGroup) DeleteSchedule(ctx context.Context, name string) error {
	_, err := l.Schedule(ctx, name)
	return err
}
func (leadingGroup) RemoveNode(_ context.Context, id string, _ func(context.Context, uint64) error) error {
	return fmt.Errorf("%w: node %q is not a member", model.ErrNotFound, id)
}

// leadingGroups is a node of the groups in gs, group 0 first.
type leadingGroups struct{ gs []leadingGroup }

func (l leadingGroups) serve(t *testing.T) *httptest.Server {
	t.Helper()
	groups := make([]transport.Backend, len(l.gs))
	for g, b := range l.gs {
		groups[g] = b
	}
	srv := httptest.NewServer(transport.NewServer(transport.Config{AuthToken: "tok"}, groups...).Handler())
	t.Cleanup(srv.Close)
	return srv
}

// A node told of its removal by some of its groups only (the others no
// longer hear a leader) says it was removed, in the words of a node of
// one group, not what a group that has not told it yet says.
func TestReadyzRemovedFromSomeGroups(t *testing.T) {
	noLeader := fmt.Errorf("no leader is known yet")
	removed := leadingGroup{ready: replication.ErrRemoved, removed: replication.ErrRemoved}
	one := leadingGroups{gs: []leadingGroup{removed}}.serve(t)
	some := leadingGroups{gs: []leadingGroup{{ready: noLeader}, removed, {ready: noLeader}}}.serve(t)
	want := doURL(t, http.MethodGet, one.URL+"/readyz", "")
	equal(t, "readyz of a removed node of one group", want.status, http.StatusServiceUnavailable)
	a := doURL(t, http.MethodGet, some.URL+"/readyz", "")
	equal(t, "readyz of a node removed from group 1 of 3", a.status, http.StatusServiceUnavailable)
	if got, w := a.errBody(t).Message, want.errBody(t).Message; got != w || !strings.Contains(got, "removed from the cluster") {
		t.Fatalf("readyz of a node removed from group 1 of 3: %q; want %q", got, w)
	}

	// Not removed, the group that is not ready is named.
	lagging := leadingGroups{gs: []leadingGroup{{}, {ready: noLeader}}}.serve(t)
	a = doURL(t, http.MethodGet, lagging.URL+"/readyz", "")
	if e := a.errBody(t); a.status != http.StatusServiceUnavailable || e.Message != "group 1: not ready: no leader is known yet" {
		t.Fatalf("readyz of a node whose group 1 hears no leader: %d %q", a.status, e.Message)
	}
}

// An unknown schedule or node is answered as on a node of one group,
// naming no group the caller did not ask about.
func TestGroupsNotFoundNamesNoGroup(t *testing.T) {
	one := leadingGroups{gs: []leadingGroup{{}}}.serve(t)
	many := leadingGroups{gs: []leadingGroup{{}, {}, {}}}.serve(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/schedules/nosuch"},
		{http.MethodDelete, "/v1/schedules/nosuch"},
		{http.MethodDelete, "/v1/cluster/nodes/n9"},
	} {
		want := doURL(t, tc.method, one.URL+tc.path, "", "Authorization", "Bearer tok")
		a := doURL(t, tc.method, many.URL+tc.path, "", "Authorization", "Bearer tok")
		what := tc.method + " " + tc.path
		equal(t, what, a.status, http.StatusNotFound)
		equal(t, what+" on one group", want.status, http.StatusNotFound)
		if got, w := a.errBody(t).Message, want.errBody(t).Message; got != w || strings.Contains(got, "group") {
			t.Fatalf("%s: %q; want %q", what, got, w)
		}
	}
}
