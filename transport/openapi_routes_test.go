package transport

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

// TestOpenAPIHasEveryRoute holds the OpenAPI document to the route table:
// every method and path the server registers is an operation of the
// document, and every operation of the document is registered.
func TestOpenAPIHasEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not JSON: %v", err)
	}
	missing, covered := documentedRoutes(NewServer(Config{}, nil).patterns, doc.Paths)
	if len(missing) > 0 {
		t.Errorf("routes the server registers that transport/api/openapi.json lacks: %v", missing)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if op := strings.ToUpper(method) + " " + path; !covered[op] {
				t.Errorf("openapi.json documents %s, which the server does not register", op)
			}
		}
	}
}

// documentedRoutes checks the mux patterns of a server against the paths
// of an OpenAPI document: it returns the patterns the document lacks, and
// the operations ("GET /v1/wheel") the patterns cover. A pattern without
// a method (the 405 answer of a known path) needs the path only; "/", the
// 404 of unknown paths, needs nothing.
func documentedRoutes(patterns []string, paths map[string]map[string]json.RawMessage) (missing []string, covered map[string]bool) {
	covered = map[string]bool{}
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			if _, found := paths[p]; !found && p != "/" {
				missing = append(missing, p)
			}
			continue
		}
		if _, found := paths[path][strings.ToLower(method)]; !found {
			missing = append(missing, p)
			continue
		}
		covered[p] = true
	}
	slices.Sort(missing)
	return missing, covered
}
