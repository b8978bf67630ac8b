// Package tools pins the linters that `make lint` runs, as `go tool`
// entries of this module of their own, so that they stay out of the
// product's go.mod: golangci-lint (with the linters .golangci.yaml lists)
// and staticcheck.
package tools
