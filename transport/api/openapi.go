package api

import (
	_ "embed" // the OpenAPI document
	"slices"
)

// openAPI is openapi.json: the OpenAPI 3.1 document of the HTTP API.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API (openapi.json
// beside this file), which GET /v1/openapi.json serves. Tests in package
// transport keep it true: every route the server registers is in it, and
// the requests and answers of the test suite are validated against it.
func OpenAPI() []byte { return slices.Clone(openAPI) }
