package spawnd

import (
	"os"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // nsexec, before the Go runtime

	_ "github.com/opencontainers/cgroups/devices" // device rules in cgroup managers
)

// init completes libcontainer's "init" re-exec: libcontainer starts a copy of
// this binary as `BINARY init` to set a container up. It never returns there.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" && os.Getenv("_LIBCONTAINER_SYNCPIPE") != "" {
		libcontainer.Init()
	}
}
