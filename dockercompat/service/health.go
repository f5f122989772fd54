package service

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/internal/pidwatch"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/sandbox"
)

// A container with a healthcheck (its own Config.Healthcheck, or its
// image's) has its test run in it, as an exec, every Interval while its
// main command runs, whichever process started it: a helper process of
// this program, started with the run (Started) and ended with it (its
// PID 1's end, or the sandbox's stop). The result goes to State.Health in
// inspect; serve reports each change as a health_status event.

// healthHelper is the helper's reexec name.
const healthHelper = "service-health"

func init() { reexec.Register(healthHelper, healthMain) }

// Docker's defaults.
const (
	healthInterval = 30 * time.Second
	healthTimeout  = 30 * time.Second
	healthRetries  = 3
	healthLogMax   = 5    // results kept
	healthOutMax   = 4096 // bytes of output kept per result
)

// HealthFloor is the least time between the end of a check and the start
// of the next, whatever the interval says. A create request's interval
// is refused below Docker's 1 ms (dockercompat's checkHealthcheck), but
// an image's is not checked (nor is it by Docker), and 1 ns there, or
// 1 ms in a request, would run an exec in the container as fast as it
// can, hundreds a second. One a second is the interval docker-py's
// healthcheck tests use (Docker's default is 30 s), and holds each
// container to one exec a second for its check. Inspect still shows the
// interval as configured.
const HealthFloor = time.Second

// healthTimings are the interval, timeout and retries check h runs with:
// Docker's defaults for those unset (retries, too, when not positive, as
// Docker's), the interval at least HealthFloor, and the timeout at least
// Docker's 1 ms (an image's may be anything, negative too).
func healthTimings(h *v1.HealthConfig) (interval, timeout time.Duration, retries int) {
	interval = max(cmp.Or(h.Interval, healthInterval), HealthFloor)
	timeout = max(cmp.Or(h.Timeout, healthTimeout), time.Millisecond)
	retries = h.Retries
	if retries <= 0 {
		retries = healthRetries
	}
	return interval, timeout, retries
}

type healthResult struct {
	Start, End time.Time
	ExitCode   int
	Output     string
}

// HealthState is inspect's State.Health.
type HealthState struct {
	Status        string
	FailingStreak int
	Log           []healthResult
}

// healthArgv is the command of healthcheck h, or nil for none.
func healthArgv(h *v1.HealthConfig) []string {
	if h == nil || len(h.Test) == 0 {
		return nil
	}
	switch h.Test[0] {
	case "CMD":
		return h.Test[1:]
	case "CMD-SHELL":
		if len(h.Test) > 1 {
			return []string{"/bin/sh", "-c", strings.Join(h.Test[1:], " ")}
		}
	}
	return nil
}

// HasHealthcheck reports whether the container in dir has a healthcheck.
func HasHealthcheck(dir string) bool {
	return len(healthArgv(dockercompat.LoadCreated(dir).Healthcheck)) > 0
}

// startHealth records the health of sb, started just now, as starting,
// before its start returns (an inspect right after it has State.Health),
// and starts the helper that runs its checks.
func startHealth(sb *sandbox.Sandbox) {
	i := sb.Info()
	if !HasHealthcheck(i.StateDir) {
		return
	}
	saveHealth(i.StateDir, &HealthState{Status: "starting", Log: []healthResult{}})
	if err := sb.SpawnHelper(healthHelper, sb.Backend().Root(), i.ID, fmt.Sprint(i.Pid)); err != nil {
		fmt.Fprintf(os.Stderr, "slopbox: healthcheck of %s: %v\n", i.Name, err)
	}
}

func saveHealth(dir string, st *HealthState) {
	b, _ := json.Marshal(st)
	dockercompat.SaveHealth(dir, b)
}

// HealthStatus is the status of the container in dir's healthcheck
// ("starting", "healthy", "unhealthy"), or "" for none.
func HealthStatus(dir string) string {
	var st HealthState
	if b, err := os.ReadFile(filepath.Join(dir, dockercompat.HealthFile)); err == nil {
		json.Unmarshal(b, &st)
	}
	return st.Status
}

// healthMain is the helper: args are the state root, the container's id
// and its PID 1 as it was started. It runs the checks, as Docker's:
// interval after the start, then interval after the end of each check,
// until that PID 1 is gone.
func healthMain() int {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "slopbox-service-health: internal use only")
		return 2
	}
	root, id := os.Args[1], os.Args[2]
	var pid int
	if _, err := fmt.Sscan(os.Args[3], &pid); err != nil || pid <= 1 {
		return 2
	}
	b, err := sandbox.New(root)
	if err != nil {
		return 1
	}
	defer b.Close()
	sb, err := b.Open(id)
	if err != nil {
		return 0
	}
	done := make(chan struct{})
	cancel, ok := pidwatch.Watch(pid, func(int) { close(done) })
	defer cancel()
	if !ok {
		return 1
	}
	// The pidfd is PID 1's only if the sandbox runs it now: else the pid
	// may have been reused.
	if sb, err = sb.Reopen(); err != nil || !sb.Running() || sb.Info().Pid != pid {
		return 0
	}
	dir := sb.Info().StateDir
	h := dockercompat.LoadCreated(dir).Healthcheck
	runHealth(sb, h, healthArgv(h), done)
	return 0
}

// runHealth runs healthcheck h (argv) of sb until done is closed.
func runHealth(sb *sandbox.Sandbox, h *v1.HealthConfig, argv []string, done <-chan struct{}) {
	dir := sb.Info().StateDir
	st := &HealthState{Status: "starting", Log: []healthResult{}}
	interval, timeout, retries := healthTimings(h)
	started := time.Now()
	wait := time.NewTimer(interval)
	defer wait.Stop()
	for {
		select {
		case <-done:
			return
		case <-wait.C:
		}
		if _, err := sb.Reopen(); err != nil {
			return // removed without its PID 1 being seen to end
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		r := healthResult{Start: time.Now().UTC()}
		res, err := sb.Exec(ctx, backend.ExecRequest{Argv: argv, Timeout: timeout, OutputLimit: healthOutMax})
		cancel()
		r.End = time.Now().UTC()
		switch {
		case err != nil:
			r.ExitCode, r.Output = -1, err.Error()
		case res.TimedOut:
			r.ExitCode, r.Output = -1, "Health check exceeded timeout ("+timeout.String()+")"
		default:
			r.ExitCode, r.Output = res.ExitCode, res.Stdout+res.Stderr
		}
		select {
		case <-done:
			return // its end, not the check's failure
		default:
		}
		if r.ExitCode == 0 {
			st.Status, st.FailingStreak = "healthy", 0
		} else if time.Since(started) >= h.StartPeriod || st.Status != "starting" {
			// A failure in the start period does not count, unless the
			// container was healthy once.
			if st.FailingStreak++; st.FailingStreak >= retries {
				st.Status = "unhealthy"
			}
		}
		st.Log = append(st.Log, r)
		if len(st.Log) > healthLogMax {
			st.Log = st.Log[len(st.Log)-healthLogMax:]
		}
		saveHealth(dir, st)
		wait.Reset(interval)
	}
}
