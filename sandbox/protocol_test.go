package sandbox

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
		"AGENT_MAGIC": agentMagic, "OP_EXEC": opExec, "OP_KILL": opKill, "FLAG_DETACH": flagDetach,
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
	want := []string{"magic", "op", "flags", "uid", "gid", "ngroups", "argc", "envc", "len_cwd"}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Errorf("struct agent_req is %v in agent.c; protocol.go encodes %v", fields, want)
	}
	req := (&execRequest{argv: []string{"a"}}).encode()
	if len(req) != 4+4*len(want)+2 {
		t.Errorf("encode writes a %d-byte frame for one one-letter argument, want %d", len(req), 4+4*len(want)+2)
	}
}
