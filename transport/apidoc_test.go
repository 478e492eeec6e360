package transport

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// apiDoc is the reference of the HTTP API, relative to this package.
const apiDoc = "api/API.md"

// documentedRoute finds the routes a heading of the reference names, each
// written as "`METHOD /path`", as the server's route table spells them.
var documentedRoute = regexp.MustCompile("`([A-Z]+ /[^`\\s]*)`")

// headingLine is a Markdown heading.
var headingLine = regexp.MustCompile(`(?m)^#{2,6} .*$`)

// TestAPIDocNamesEveryRoute: every route of the server's route table has a
// heading of its own in api/API.md, so that a route added to the server
// without its reference fails here.
func TestAPIDocNamesEveryRoute(t *testing.T) {
	doc, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatalf("reading the API reference: %v", err)
	}
	documented := map[string]bool{}
	for _, h := range headingLine.FindAll(doc, -1) {
		for _, m := range documentedRoute.FindAllSubmatch(h, -1) {
			documented[string(m[1])] = true
		}
	}
	s := NewServer(Config{}, nil)
	routes := s.routeList()
	if len(routes) == 0 {
		t.Fatal("the server registers no routes")
	}
	var missing []string
	for _, rt := range routes {
		if !documented[rt.pattern] {
			missing = append(missing, rt.pattern)
		}
	}
	slices.Sort(missing)
	for _, pattern := range missing {
		t.Errorf("%s: the route %q has no heading \"`%s`\"", apiDoc, pattern, pattern)
	}
}
