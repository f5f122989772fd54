package conformance

import (
	"os"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/local"
)

func TestLocal(t *testing.T) {
	f := Factory{
		Name: local.Name,
		New: func(t *testing.T) (backend.Backend, backend.SpawnSpec) {
			return local.New(), backend.SpawnSpec{Workspace: t.TempDir()}
		},
		// Commands see the host directory itself.
		WorkspacePath: func(spec backend.SpawnSpec) string { return spec.Workspace },
	}
	if os.Geteuid() == 0 {
		// Only root can switch users on the host.
		f.UsersAvailable = "65534:65534"
	}
	Run(t, f)
}
