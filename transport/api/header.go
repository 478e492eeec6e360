package api

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// CheckHeader says why a message header cannot be sent as an HTTP header
// as it is, or returns nil: its name must be an HTTP token and not one the
// HTTP client writes itself (the request's host and framing: Host,
// Content-Length, Transfer-Encoding, Trailer, Connection, in any case),
// and its value must hold no CR, LF, NUL or other control character but
// tab. The enqueue refuses such a header (on every API), and a webhook
// request leaves out one stored before the rule.
func CheckHeader(name, value string) error {
	switch {
	case !httpguts.ValidHeaderFieldName(name):
		return errors.New("name is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~; no spaces or separators)")
	case !httpguts.ValidHeaderFieldValue(value):
		return errors.New("value holds a character HTTP does not allow in a header (CR, LF, NUL or another control character)")
	}
	for _, reserved := range [...]string{"Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection"} {
		if strings.EqualFold(name, reserved) {
			return fmt.Errorf("name is reserved: the HTTP client sets %s itself", reserved)
		}
	}
	return nil
}
