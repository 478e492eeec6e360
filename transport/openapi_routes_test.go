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

// TestOpenAPISharedBodiesNameTheirRoutes holds the words of the OpenAPI
// document to its operations: a request body several operations take
// names each of them, and a description that sends the reader to the
// routes that settle a delivery (/v1/ack) names every one of them.
func TestOpenAPISharedBodiesNameTheirRoutes(t *testing.T) {
	type body struct {
		Content map[string]struct {
			Schema struct {
				Ref string `json:"$ref"`
			} `json:"schema"`
		} `json:"content"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Description string `json:"description"`
			RequestBody *body  `json:"requestBody"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Description string `json:"description"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not JSON: %v", err)
	}
	takers := map[string][]string{} // schema name: the operations whose body it is
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if strings.Contains(op.Description, "/v1/ack") {
				for _, settle := range []string{"/v1/ack", "/v1/nack", "/v1/touch", "/v1/bury"} {
					if !strings.Contains(op.Description, settle) {
						t.Errorf("%s %s names /v1/ack and not %s: %q", method, path, settle, op.Description)
					}
				}
			}
			if op.RequestBody == nil {
				continue
			}
			for _, c := range op.RequestBody.Content {
				if name, ok := strings.CutPrefix(c.Schema.Ref, "#/components/schemas/"); ok && !slices.Contains(takers[name], op.OperationID) {
					takers[name] = append(takers[name], op.OperationID)
				}
			}
		}
	}
	for name, ops := range takers {
		if len(ops) < 2 {
			continue
		}
		for _, op := range ops {
			if d := doc.Components.Schemas[name].Description; !strings.Contains(d, op) {
				t.Errorf("schema %s, the body of %v, does not name %s: %q", name, ops, op, d)
			}
		}
	}
}
