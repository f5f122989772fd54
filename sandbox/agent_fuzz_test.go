package sandbox

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
)

// FuzzAgentRequest sends arbitrary frames, with and without stdio fds, to a
// live sandbox's PID 1 (agent.c parses them in C) and checks after each
// that PID 1 still runs and still serves a well-formed exec. A malformed
// request may be refused; it may never crash, hang or wedge PID 1.
func FuzzAgentRequest(f *testing.F) {
	valid := (&execRequest{argv: []string{"true"}, env: []string{"PATH=/bin"}, cwd: "/"}).encode()
	f.Add(valid, true)
	f.Add(valid[:20], true)
	f.Add(valid, false)
	kill := make([]byte, 16)
	binary.NativeEndian.PutUint32(kill, 12)
	binary.NativeEndian.PutUint32(kill[4:], agentMagic)
	binary.NativeEndian.PutUint32(kill[8:], opKill)
	binary.NativeEndian.PutUint32(kill[12:], 9)
	f.Add(kill, false)
	huge := append([]byte(nil), valid...)
	binary.NativeEndian.PutUint32(huge[4+4*6:], 1<<30) // argc
	f.Add(huge, true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, true)

	b, ref := testBackend(f)
	s, err := b.Spawn(f.Context(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true})
	if err != nil {
		f.Fatal(err)
	}
	sb := s.(*Sandbox)
	f.Cleanup(func() { sb.Cleanup() })
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { devnull.Close() })
	f.Fuzz(func(t *testing.T, frame []byte, withFDs bool) {
		conn, err := dialAgent(sb.dir + "/" + socketFile)
		if err != nil {
			t.Fatalf("PID 1 no longer accepts connections: %v", err)
		}
		var oob []byte
		if withFDs {
			fd := int(devnull.Fd())
			oob = unix.UnixRights(fd, fd, fd)
		}
		conn.c.SetDeadline(time.Now().Add(2 * time.Second))
		conn.c.WriteMsgUnix(frame, oob, nil)
		conn.c.CloseWrite()
		buf := make([]byte, 64)
		conn.c.Read(buf) // whatever it answers, or nothing
		conn.close()
		if !sb.rec.alive() {
			t.Fatalf("PID 1 died on frame %x", frame)
		}
		res, err := sb.Exec(t.Context(), backend.ExecRequest{Argv: []string{"echo", "ok"}, Timeout: 10 * time.Second})
		if err != nil || strings.TrimSpace(res.Stdout) != "ok" {
			t.Fatalf("PID 1 no longer serves after frame %x: %+v %v", frame, res, err)
		}
	})
}
