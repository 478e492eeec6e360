package api

import (
	"net/url"
	"strings"
)

// PathSegment is s escaped as one segment of a request path. "." and ".."
// (a topic, key, schedule or node may be named so) are escaped too: left
// as they are they would be path steps, which a router resolves away, so
// the request would reach another route.
func PathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}
