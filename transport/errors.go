package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Error is an answer other than 2xx: a status, a code of package api and a
// message that names the field and the limit.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, in whole seconds, is sent as the Retry-After header when
	// positive.
	RetryAfter int
	// Err is the backend error behind the answer, if any (for logs).
	Err error

	allow string // the Allow header of a 405
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap returns the backend error behind the answer.
func (e *Error) Unwrap() error { return e.Err }

// invalid is a 400 invalid_argument.
func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: api.CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// tooLarge is a 413 too_large.
func tooLarge(format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: fmt.Sprintf(format, args...)}
}

// notFound is a 404 not_found.
func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// unavailable is a 503 unavailable with Retry-After: 1.
func unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: fmt.Sprintf(format, args...), RetryAfter: 1}
}

// methodNotAllowed is the 405 answer of a known path called with
// another method; allow lists the methods it takes.
func methodNotAllowed(method, path, allow string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Code: api.CodeMethodNotAllowed,
		Message: fmt.Sprintf("%s %s: method not allowed; use %s", method, path, allow), allow: allow}
}

// overloaded is a 429 overloaded with Retry-After: 1.
func overloaded(format string, args ...any) *Error {
	return &Error{Status: http.StatusTooManyRequests, Code: api.CodeOverloaded, Message: fmt.Sprintf(format, args...), RetryAfter: 1}
}

// The answers of a node to a request of a group it does not lead, which
// it does not forward (NotLeaderError); a Forwarder knows them in the
// answer of a leader that leads no more (parts.do).
const (
	msgMovedOn  = "this request was forwarded to a node that is not the leader (leadership is changing); retry shortly"
	msgNoLeader = "no leader is known yet (an election is in progress, or this node is cut off); retry shortly"
)

// ToError maps any error to the answer the HTTP API gives it: an *Error
// stays as it is, a backend error is classified with errors.Is, anything
// else is a 500 that does not leak its text.
func ToError(err error) *Error {
	var ge *service.GroupError
	if errors.As(err, &ge) {
		return groupError(ge.Group, ToError(ge.Err))
	}
	var nl *service.NotLeaderError
	if errors.As(err, &nl) {
		if nl.Known && nl.Leader.HTTPAddr != "" {
			return unavailable(msgMovedOn)
		}
		return unavailable(msgNoLeader)
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var se *service.Error
	if errors.As(err, &se) {
		status, code, retry := classify(se.Class)
		return &Error{Status: status, Code: code, Message: se.Msg, RetryAfter: retry}
	}
	status, code, retry := classify(err)
	msg := err.Error()
	switch {
	case status == http.StatusInternalServerError:
		msg = "internal error; see the server log"
	case errors.Is(err, model.ErrInvalid):
		// "[group g: ]invalid argument: <field>: …": the code already says
		// the class, and the message names, as every other refusal's, the
		// field. The class's words come before any of the caller's.
		msg = strings.Replace(msg, model.ErrInvalid.Error()+": ", "", 1)
	}
	return &Error{Status: status, Code: code, Message: msg, RetryAfter: retry, Err: err}
}

// classify maps a backend error class to its status, code and Retry-After.
func classify(err error) (status int, code string, retryAfter int) {
	switch {
	case errors.Is(err, model.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound, 0
	case errors.Is(err, model.ErrConflict):
		return http.StatusConflict, api.CodeConflict, 0
	case errors.Is(err, model.ErrInvalid):
		return http.StatusBadRequest, api.CodeInvalidArgument, 0
	case errors.Is(err, model.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge, 0
	case errors.Is(err, model.ErrOverloaded):
		return http.StatusTooManyRequests, api.CodeOverloaded, 1
	case errors.Is(err, model.ErrUnavailable), errors.Is(err, model.ErrNotLeader),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, api.CodeUnavailable, 1
	default:
		return http.StatusInternalServerError, api.CodeInternal, 0
	}
}
