package main

import (
	"strings"
	"testing"
)

// TestClassify: samples go to their phase by stack first (removal, seccomp,
// mounts in any process), then by process name; unknown processes are
// "other"; the samples' periods add up per phase.
func TestClassify(t *testing.T) {
	const script = `apibench 250000 
	ffffffff8161edfb do_unlinkat
	          7c065a github.com/slopbox/slopbox/sandbox.(*Sandbox).Remove

exe 250000 
	ffffffff8161edfb __x64_sys_mount
	           110ce internal/runtime/syscall/linux.Syscall6

exe 250000 
	ffffffff8161edfb seccomp_attach_filter

runc:[2:INIT] 500000 
	           69be4 runtime.testAtomic64

spawn-e8624a60e 250000 
	           69be4 runtime.mallocgc

slopbox-init 250000 
	           12 main

swapper 1000000 
	ffffffff8161edfb default_idle

some daemon 250000 
	ffffffff8161edfb do_syscall_64
`
	got := map[string]int64{}
	err := readSamples(strings.NewReader(script), func(s sample) {
		i := classify(s)
		name := "other"
		if i < len(phases) {
			name = phases[i].name
		}
		got[name] += s.period
	})
	if err != nil {
		t.Fatal(err)
	}
	name := func(prefix string) string {
		for _, p := range phases {
			if strings.HasPrefix(p.name, prefix) {
				return p.name
			}
		}
		t.Fatalf("no phase %q", prefix)
		return ""
	}
	want := map[string]int64{
		name("removal"):           250000,
		name("seccomp"):           250000,
		name("mounts"):            250000,
		name("libcontainer init"): 500000,
		name("spawn server"):      250000,
		name("PID 1"):             250000,
		name("idle"):              1000000,
		"other":                   250000,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("phases %v, want %v", got, want)
	}
}
