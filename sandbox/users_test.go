package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/userns"
)

// Defect H: a user outside the ids the sandbox maps fails with a clear
// error (backend.ErrUnmappedUser) before anything is created or started,
// not with "invalid argument" from the kernel when the command starts.
func TestUnmappedUserRefused(t *testing.T) {
	b, ref := testBackend(t)
	b.KeepReady(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, user := range []string{"70000", "65536", "0:70000"} {
		_, err := b.Spawn(ctx, backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), User: user, DisableSetup: true})
		if !errors.Is(err, backend.ErrUnmappedUser) || !strings.Contains(err.Error(), "is outside the sandbox's id range 0-") {
			t.Errorf("spawn as %s: %v, want ErrUnmappedUser", user, err)
		}
	}
	_, err := b.Spawn(ctx, backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true, Limits: backend.Limits{MemoryBytes: 1}})
	if !errors.Is(err, backend.ErrInvalidLimit) {
		t.Errorf("spawn with a 1-byte memory limit: %v, want ErrInvalidLimit", err)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Errorf("refused spawns left sandboxes: %+v", list)
	}
	if left := processesUnder(b.state.dir); len(left) > 0 {
		t.Errorf("refused spawns left processes: %v", left)
	}

	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	_, err = sb.Exec(ctx, backend.ExecRequest{Argv: []string{"touch", "/tmp/ran"}, User: "70000:0"})
	if !errors.Is(err, backend.ErrUnmappedUser) || !strings.Contains(err.Error(), "user 70000 is outside the sandbox's id range 0-") {
		t.Errorf("exec as 70000:0: %v, want ErrUnmappedUser", err)
	}
	_, err = sb.Stream(ctx, backend.ExecRequest{Argv: []string{"touch", "/tmp/ran"}, User: "0:65536"})
	if !errors.Is(err, backend.ErrUnmappedUser) || !strings.Contains(err.Error(), "group 65536 is outside") {
		t.Errorf("stream as 0:65536: %v, want ErrUnmappedUser", err)
	}
	_, err = sb.Exec(ctx, backend.ExecRequest{Argv: []string{"touch", "/tmp/ran"}, Timeout: -time.Second})
	if !errors.Is(err, backend.ErrInvalidTimeout) {
		t.Errorf("exec with a negative timeout: %v, want ErrInvalidTimeout", err)
	}
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "test -e /tmp/ran && echo ran; id -u", User: "65535"})
	if err != nil || res.Stdout != "65535\n" {
		t.Errorf("after refused execs (as the highest mapped uid): %+v %v, want nothing run", res, err)
	}
	if list, _ := b.List(); len(list) != 1 {
		t.Errorf("sandboxes: %+v, want the one", list)
	}
}

func TestCheckMappedRange(t *testing.T) {
	ids := []userns.IDMap{{ContainerID: 0, HostID: 1000, Size: 1}, {ContainerID: 1, HostID: 100000, Size: 65535}}
	own := []userns.IDMap{{ContainerID: 0, HostID: 1000, Size: 1}}
	full := userns.Mapping{UIDs: ids, GIDs: ids}
	if err := checkMapped(identity{UID: 65535, GID: 65535, Groups: []uint32{1, 2}}, full); err != nil {
		t.Errorf("65535:65535: %v", err)
	}
	for _, c := range []struct {
		who identity
		m   userns.Mapping
		msg string
	}{
		{identity{UID: 65536}, full, "user 65536 is outside the sandbox's id range 0-65535"},
		{identity{GID: 70000}, full, "group 70000 is outside the sandbox's id range 0-65535"},
		{identity{Groups: []uint32{5, 1 << 20}}, full, "supplementary group 1048576 is outside the sandbox's id range 0-65535"},
		{identity{UID: 1000}, userns.Mapping{UIDs: own, GIDs: own, Degraded: true, Warning: "no subordinate id range"},
			"user 1000 is outside the sandbox's id range 0-0 (no subordinate id range)"},
	} {
		err := checkMapped(c.who, c.m)
		if !errors.Is(err, backend.ErrUnmappedUser) || err.Error() != c.msg {
			t.Errorf("%+v: %v, want %q", c.who, err, c.msg)
		}
	}
}
