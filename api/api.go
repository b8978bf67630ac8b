// Package api holds the OpenAPI document of the checkout HTTP API, so that
// tests and servers can load it without knowing where the repository is.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml, the OpenAPI 3.1 description of every route.
//
//go:embed openapi.yaml
var OpenAPI []byte
