// Package clients drives slopbox serve with real Docker clients that
// nobody here wrote, built from the Go module proxy at pinned versions:
// testcontainers-go. It is a module of its own, so that the clients'
// dependencies stay out of slopbox's go.mod; scripts/test.sh builds its
// test binary and runs it as root and as the rootless test user.
package clients
