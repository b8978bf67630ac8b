// Package openapi holds the OpenAPI 3.1 description of the checkout HTTP
// API, embedded so that tests and servers can load it without knowing where
// the repository is.
package openapi

import _ "embed"

// YAML is httpapi/openapi/openapi.yaml, the description of every route.
//
//go:embed openapi.yaml
var YAML []byte
