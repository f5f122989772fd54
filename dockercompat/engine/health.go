package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/sandbox"
)

// Healthchecks run while serve runs: each container this server starts
// with a Config.Healthcheck (its own, or its image's) gets its test run
// in it, as an exec, every Interval; the result goes to State.Health in
// inspect and a health_status event on each change, as dockerd's.

// Docker's defaults.
const (
	healthInterval = 30 * time.Second
	healthTimeout  = 30 * time.Second
	healthRetries  = 3
	healthLogMax   = 5    // results kept
	healthOutMax   = 4096 // bytes of output kept per result
)

// healthFloor is the least time between the end of a check and the start
// of the next, whatever the interval says. A create request's interval
// is refused below Docker's 1 ms (dockercompat's checkHealthcheck), but
// an image's is not checked (nor is it by Docker), and 1 ns there, or
// 1 ms in a request, would have serve run an exec in the container as
// fast as it can, hundreds a second. One a second is the interval
// docker-py's healthcheck tests use (Docker's default is 30 s), and holds
// each container to one exec a second for its check. Inspect still shows
// the interval as configured.
const healthFloor = time.Second

// healthTimings are the interval, timeout and retries check h runs with:
// Docker's defaults for those unset (retries, too, when not positive, as
// Docker's), the interval at least healthFloor, and the timeout at least
// Docker's 1 ms (an image's may be anything, negative too).
func healthTimings(h *v1.HealthConfig) (interval, timeout time.Duration, retries int) {
	interval = max(cmp.Or(h.Interval, healthInterval), healthFloor)
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

type healthState struct {
	Status        string
	FailingStreak int
	Log           []healthResult
}

// startHealth records the health of container i, started just now, as
// starting, before the start returns: an inspect right after it has
// State.Health. The healthcheck runs in the function it returns (nil
// without one) until done is closed (its main command ended).
func (s *Server) startHealth(i sandbox.Info) func(done <-chan struct{}) {
	h := dockercompat.LoadCreated(i.StateDir).Healthcheck
	if h == nil || len(h.Test) == 0 || h.Test[0] == "NONE" {
		return nil
	}
	var argv []string
	switch h.Test[0] {
	case "CMD":
		argv = h.Test[1:]
	case "CMD-SHELL":
		argv = []string{"/bin/sh", "-c", strings.Join(h.Test[1:], " ")}
	}
	if len(argv) == 0 {
		return nil
	}
	st := healthState{Status: "starting", Log: []healthResult{}}
	save := func() {
		b, _ := json.Marshal(st)
		dockercompat.SaveHealth(i.StateDir, b)
	}
	save()
	return func(done <-chan struct{}) { s.runHealth(i, h, argv, &st, save, done) }
}

// runHealth runs healthcheck h (argv) of container i until done is
// closed, as Docker's: interval after the start, then interval after the
// end of each check. It keeps its state in st (save writes it).
func (s *Server) runHealth(i sandbox.Info, h *v1.HealthConfig, argv []string, st *healthState, save func(), done <-chan struct{}) {
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
		sb, err := s.b.Open(i.ID)
		if err != nil || !sb.Running() {
			return
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
		prev := st.Status
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
		save()
		if st.Status != prev {
			s.emitContainer("health_status: "+st.Status, i, nil)
		}
		wait.Reset(interval)
	}
}
