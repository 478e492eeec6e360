package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestGetByKey(t *testing.T) {
	e := newEnv(t)
	res := e.mustEnqueue(api.Message{Topic: "k", Payload: api.TextBody("x"), Key: "order-42", DelayMs: api.Ptr(int64(60_000))})
	a := e.do(http.MethodGet, "/v1/topics/k/keys/order-42", "")
	equal(t, "status", a.status, http.StatusOK)
	var v api.MessageView
	check(t, "decode", json.Unmarshal(a.body, &v))
	equal(t, "id", v.ID, res[0].ID)
	equal(t, "key", v.Key, "order-42")
	equal(t, "state", v.State, api.StateDelayed)

	for _, c := range []struct {
		path   string
		status int
		field  string
	}{
		{"/v1/topics/k/keys/order-43", http.StatusNotFound, ""},
		{"/v1/topics/nope/keys/order-42", http.StatusNotFound, ""},
		{"/v1/topics/bad%20topic/keys/order-42", http.StatusBadRequest, "topic:"},
		{"/v1/topics/k/keys/" + strings.Repeat("x", 1000), http.StatusBadRequest, "key:"},
	} {
		a := e.do(http.MethodGet, c.path, "")
		equal(t, "status of "+c.path[:min(len(c.path), 40)], a.status, c.status)
		if d := a.errBody(t); !strings.HasPrefix(d.Message, c.field) {
			t.Fatalf("%s: %q, want it to name %s", c.path, d.Message, c.field)
		}
	}
	_, err := e.c.CancelKey(t.Context(), "k", "order-42")
	check(t, "cancel", err)
	equal(t, "after the cancel", e.do(http.MethodGet, "/v1/topics/k/keys/order-42", "").status, http.StatusNotFound)
}

func TestConsoleRoutes(t *testing.T) {
	e := newEnv(t)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.URL+"/ui", nil)
	check(t, "request", err)
	resp, err := http.DefaultTransport.RoundTrip(req)
	check(t, "GET /ui", err)
	resp.Body.Close()
	equal(t, "GET /ui", resp.StatusCode, http.StatusMovedPermanently)
	equal(t, "Location", resp.Header.Get("Location"), "/ui/")
	a := e.do(http.MethodGet, "/ui/", "")
	equal(t, "GET /ui/", a.status, http.StatusOK)
	equal(t, "content type", a.header.Get("Content-Type"), "text/html; charset=utf-8")
	if !strings.Contains(string(a.body), "delaywheel console") {
		t.Fatalf("the page: %.200s", a.body)
	}
}
