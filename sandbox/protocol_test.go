package sandbox

import (
	"encoding/binary"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The PID 1 wire protocol is written twice: here (protocol.go) and in C
// (internal/spawnd/agent.c). This test reads agent.c and fails on any
// constant or header field that differs.
func TestProtocolMatchesAgent(t *testing.T) {
	src, err := os.ReadFile("internal/spawnd/agent.c")
	if err != nil {
		t.Fatal(err)
	}
	c := string(src)
	defines := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (0x[0-9a-fA-F]+|\d+)u?\b`).FindAllStringSubmatch(c, -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		defines[m[1]] = v
	}
	for name, want := range map[string]uint64{
		"AGENT_MAGIC": agentMagic, "OP_EXEC": opExec, "OP_KILL": opKill, "OP_DIAL": opDial, "PROTO_TCP": protoTCP, "PROTO_UDP": protoUDP, "FLAG_DETACH": flagDetach, "FLAG_TTY": flagTTY, "FLAG_MKCWD": flagMakeCwd,
		"REPLY_STARTED": replyStarted, "REPLY_FAILED": replyFailed, "REPLY_EXITED": replyExited,
	} {
		got, ok := defines[name]
		if !ok {
			t.Errorf("agent.c does not define %s", name)
		} else if got != want {
			t.Errorf("%s is %#x in agent.c, %#x in protocol.go", name, got, want)
		}
	}
	if !strings.Contains(c, "errno | (1 << 16)") || cwdFailedFlag != 1<<16 {
		t.Error("the working-directory failure mark differs between agent.c and protocol.go")
	}
	// struct agent_req's fields, in order, as encode() writes them.
	m := regexp.MustCompile(`struct agent_req \{\s*uint32_t ([^;]+);`).FindStringSubmatch(c)
	if m == nil {
		t.Fatal("struct agent_req not found in agent.c")
	}
	fields := strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
	want := []string{"magic", "op", "flags", "uid", "gid", "ngroups", "argc", "envc", "len_cwd", "winsize"}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Errorf("struct agent_req is %v in agent.c; protocol.go encodes %v", fields, want)
	}
	req := (&execRequest{argv: []string{"a"}}).encode()
	if len(req) != 4+4*len(want)+2 {
		t.Errorf("encode writes a %d-byte frame for one one-letter argument, want %d", len(req), 4+4*len(want)+2)
	}
	// struct agent_reply: what reply() reads.
	if !regexp.MustCompile(`struct agent_reply \{\s*uint32_t type;\s*int32_t value;\s*\};`).MatchString(c) {
		t.Error("struct agent_reply in agent.c is not {uint32_t type; int32_t value;}, which reply() reads")
	}
	// The kill frame: agent.c reads the signal as the third u32 of a
	// frame at least as long as kill() sends.
	kill := killFrame(t, syscall.SIGTERM)
	m = regexp.MustCompile(`op == OP_KILL && len >= (\d+)\) \{\s*int sig = \(\(int32_t \*\)buf\)\[(\d+)\];`).FindStringSubmatch(c)
	if m == nil {
		t.Fatal("the OP_KILL frame check was not found in agent.c")
	}
	minLen, _ := strconv.Atoi(m[1])
	sigIdx, _ := strconv.Atoi(m[2])
	n := int(binary.NativeEndian.Uint32(kill))
	if n != len(kill)-4 || n < minLen || 4+4*sigIdx+4 > len(kill) ||
		binary.NativeEndian.Uint32(kill[4+4*sigIdx:]) != uint32(syscall.SIGTERM) ||
		binary.NativeEndian.Uint32(kill[4:]) != agentMagic || binary.NativeEndian.Uint32(kill[8:]) != opKill {
		t.Errorf("kill() sends % x; agent.c wants at least %d bytes with the signal at u32 %d", kill, minLen, sigIdx)
	}
}

// killFrame returns the bytes agentConn.kill writes.
func killFrame(t *testing.T, sig syscall.Signal) []byte {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "agent-test")
	defer f.Close()
	peer := os.NewFile(uintptr(fds[1]), "agent-test-peer")
	defer peer.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	a := &agentConn{c: c.(*net.UnixConn)}
	defer a.close()
	if err := a.kill(sig); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := peer.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// The monitor (internal/spawnd/monitor.c) speaks the same protocol to PID
// 1 (OP_KILL frames, the REPLY_EXITED reply) and writes the log the Go
// readers read: its constants must be these.
func TestMonitorMatchesGo(t *testing.T) {
	src, err := os.ReadFile("internal/spawnd/monitor.c")
	if err != nil {
		t.Fatal(err)
	}
	c := string(src)
	defines := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) \(?(0x[0-9a-fA-F]+|\d+)u?(?: << (\d+)\))?`).FindAllStringSubmatch(c, -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		if m[3] != "" {
			shift, _ := strconv.Atoi(m[3])
			v <<= shift
		}
		defines[m[1]] = v
	}
	for name, want := range map[string]uint64{
		"AGENT_MAGIC": agentMagic, "OP_KILL": opKill, "REPLY_EXITED": replyExited,
		"MAX_LOG": maxLog, "READER_GRACE_MS": uint64(readerGrace.Milliseconds()),
	} {
		if got, ok := defines[name]; !ok {
			t.Errorf("monitor.c does not define %s", name)
		} else if got != want {
			t.Errorf("%s is %#x in monitor.c, %#x in Go", name, got, want)
		}
	}
	// The kill frame it sends is the one kill() sends.
	kill := killFrame(t, syscall.SIGTERM)
	if !strings.Contains(c, "uint32_t msg[4] = {12, AGENT_MAGIC, OP_KILL, (uint32_t)sig};") || len(kill) != 16 {
		t.Errorf("monitor.c's kill frame differs from kill()'s % x", kill)
	}
	// The signals it forwards are the ones Signal accepts.
	m := regexp.MustCompile(`static const int fwd\[\] = \{([^}]*)\}`).FindStringSubmatch(c)
	if m == nil {
		t.Fatal("the forwarded signals were not found in monitor.c")
	}
	var names []string
	for _, s := range forwardedSignals {
		names = append(names, unix.SignalName(s.(syscall.Signal)))
	}
	if got := strings.ReplaceAll(m[1], " ", ""); got != strings.Join(names, ",") {
		t.Errorf("monitor.c forwards %s; Signal delivers %s", got, strings.Join(names, ","))
	}
}
