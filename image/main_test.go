package image

import (
	"os"
	"testing"

	"github.com/slopbox/slopbox/internal/reexec"
)

// TestMain lets the test binary act as the store helper it re-executes.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}
