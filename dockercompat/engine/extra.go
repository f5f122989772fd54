package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// inspect is service.Inspect. A health status it shows has had its
// health_status event (healthSeen), as dockerd's, which sends the event
// as it records the status.
func (s *Server) inspect(i service.Info) *service.ContainerInspect {
	out := service.Inspect(i)
	if out.State != nil && out.State.Health != nil {
		var h struct{ Status string }
		if json.Unmarshal(out.State.Health, &h) == nil {
			s.healthSeen(i, h.Status)
		}
	}
	return out
}

// containerUpdate is POST /containers/{id}/update: resources (Memory,
// NanoCpus or CpuQuota/CpuPeriod, PidsLimit; CpuShares recorded) and the
// restart policy; CpuRealtimePeriod and CpuRealtimeRuntime are refused as
// at create (dockercompat.CheckRealtime).
func (s *Server) containerUpdate(w http.ResponseWriter, r *request, sb *service.Container) {
	var body struct {
		Memory, MemorySwap, NanoCpus, CpuQuota, CpuPeriod int64
		CpuRealtimePeriod, CpuRealtimeRuntime             int64
		CpuShares                                         *int64
		PidsLimit                                         *int64
		RestartPolicy                                     *dockercompat.RestartPolicy
	}
	if !decodeBody(w, r, &body) {
		return
	}
	info := sb.Info()
	if p := body.RestartPolicy; p != nil {
		if err := dockercompat.CheckRestartPolicy(*p, info.AutoRemove); err != nil {
			fail(w, err)
			return
		}
		if p.Name == "" {
			p.Name = "no"
		}
	}
	if err := dockercompat.CheckRealtime(body.CpuRealtimePeriod, body.CpuRealtimeRuntime); err != nil {
		fail(w, err)
		return
	}
	if body.CpuShares != nil && *body.CpuShares < 0 {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("invalid CPU shares (%d): the minimum is 0", *body.CpuShares)))
		return
	}
	l := info.Limits
	changed := false
	if body.Memory != 0 {
		l.MemoryBytes, changed = body.Memory, true
	}
	if body.NanoCpus != 0 {
		l.CPUs, changed = float64(body.NanoCpus)/1e9, true
	} else if body.CpuQuota != 0 || body.CpuPeriod != 0 {
		period := cmp.Or(body.CpuPeriod, 100000)
		if body.CpuQuota > 0 {
			l.CPUs = float64(body.CpuQuota) / float64(period)
		} else {
			l.CPUs = 0
		}
		changed = true
	}
	if body.PidsLimit != nil {
		l.Pids, changed = max(*body.PidsLimit, 0), true
	}
	warnings := []string{}
	if changed {
		ws, err := sb.Update(l)
		if err != nil {
			fail(w, err)
			return
		}
		warnings = append(warnings, ws...)
		if len(info.Unenforced) > 0 {
			warnings = append(warnings, "limits not enforced on this host: "+fmt.Sprint(info.Unenforced))
		}
	}
	err := dockercompat.UpdateCreated(info.StateDir, func(c *dockercompat.CreateRecord) error {
		if body.RestartPolicy != nil {
			c.RestartPolicy = *body.RestartPolicy
		}
		if body.CpuShares != nil {
			c.CpuShares = *body.CpuShares
		}
		return nil
	})
	if err != nil {
		fail(w, err)
		return
	}
	s.emitContainer("update", info, nil)
	writeJSON(w, http.StatusOK, container.UpdateResponse{Warnings: warnings})
}
