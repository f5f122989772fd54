//go:build tools

// Package compose pins docker compose v2, which scripts/clients.sh builds
// from the Go module proxy for the client tests (test/clients): the
// module's go.mod is the pin, and go.sum checks what is fetched.
package compose

import _ "github.com/docker/compose/v2/cmd"
