package service_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Two header names that differ only in case name one HTTP header, of which
// a webhook request could carry only one value: the message is refused,
// naming both, as a name given twice is.
func TestHeaderNamesDifferingInCaseAreRefused(t *testing.T) {
	m := api.Message{Topic: "t", Payload: api.TextBody("x"), Headers: map[string]string{"X-A": "1", "x-a": "2", "X-B": "3"}}
	_, err := service.ValidateMessage(&m, "messages[0]", service.DefaultLimits(), 0)
	if !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("ValidateMessage: %v, want an invalid argument", err)
	}
	const want = `messages[0].headers["x-a"]: names the same HTTP header as "X-A"`
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("ValidateMessage: %q, want it to say %q", err, want)
	}
	m.Headers = map[string]string{"X-A": "1", "X-B": "2"}
	if _, err := service.ValidateMessage(&m, "messages[0]", service.DefaultLimits(), 0); err != nil {
		t.Fatalf("distinct headers: %v", err)
	}
}

// A message with many bad headers is refused naming the same one (the
// first in name order) on every call, and so on every API.
func TestBadHeadersNamedInOrder(t *testing.T) {
	h := map[string]string{"Host": "h", "X A": "v", "Connection": "c", "X-B": "a\nb", "Trailer": "t",
		"Content-Length": "1", "X:C": "v", "Transfer-Encoding": "te"}
	m := api.Message{Topic: "t", Headers: h}
	const want = `messages[0].headers["Connection"]: name is reserved`
	for range 20 {
		_, err := service.ValidateMessage(&m, "messages[0]", service.DefaultLimits(), 0)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("ValidateMessage: %v, want it to start %q", err, want)
		}
	}
}
