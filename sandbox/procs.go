package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Rename gives the sandbox ref a new name (docker rename).
func (b *Backend) Rename(ref, name string) error {
	l, err := b.state.lockNew()
	if err != nil {
		return err
	}
	defer l.Unlock()
	rec, err := b.state.find(ref)
	if err != nil {
		return err
	}
	if rec.Broken != "" {
		return fmt.Errorf("sandbox %s is broken (%s): remove it with `slopbox rm -f %s`", ref, rec.Broken, ref)
	}
	if rec.Name == name {
		return nil
	}
	if err := b.state.claimNameLocked(name, rec.ID); err != nil {
		return err
	}
	old := rec.Name
	rec.Name = name
	if err := b.state.write(rec); err != nil {
		b.state.releaseName(name, rec.ID)
		return err
	}
	b.state.releaseName(old, rec.ID)
	return nil
}

// Process is one process of a sandbox, as the host sees it.
type Process struct {
	PID, PPID int
	UID       int
	Start     time.Time
	CPU       time.Duration
	Command   string
}

// sessionComm is the name PID 1 gives each exec's session (agent.c).
const sessionComm = "slopbox-exec"

// Processes lists the sandbox's processes (docker top): the descendants
// of its PID 1 that are not slopbox's own init or sessions, host pids,
// oldest first.
func (s *Sandbox) Processes() ([]Process, error) {
	if !s.rec.running() {
		return nil, fmt.Errorf("sandbox %s is not running", cmpName(s.rec))
	}
	all := map[int]Process{}
	children := map[int][]int{}
	noArgs := map[int]bool{}  // not a zombie, no command line (yet)
	session := map[int]bool{} // named as PID 1's exec sessions, its children
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	boot := bootTime()
	tick := time.Second / 100 // USER_HZ
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		start, _ := strconv.ParseInt(f[19], 10, 64)
		p := Process{PID: pid, PPID: ppid, CPU: time.Duration(utime+stime) * tick, Start: boot.Add(time.Duration(start) * tick), UID: -1}
		if st, err := os.Stat("/proc/" + e.Name()); err == nil {
			p.UID = int(st.Sys().(*syscall.Stat_t).Uid)
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p.Command = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		comm := string(b[bytes.IndexByte(b, '(')+1 : i])
		session[pid] = comm == sessionComm && ppid == s.rec.Pid
		if p.Command == "" {
			p.Command = "[" + comm + "]"
			if f[0] != "Z" && !session[pid] {
				noArgs[pid] = true
			}
		}
		all[pid] = p
		children[ppid] = append(children[ppid], pid)
	}
	// The sandbox's init and the sessions it runs commands under are
	// slopbox's (the agent's binary, compared by the file /proc/PID/exe
	// is, not by name): not the container's processes.
	agent, agentErr := os.Stat(fmt.Sprintf("/proc/%d/exe", s.rec.Pid))
	var out []Process
	var walk func(int)
	walk = func(pid int) {
		p, ok := all[pid]
		if !ok {
			return
		}
		// An exec's session that is ending, or has ended and PID 1 has
		// not reaped yet (the exec's result comes first), has no exe left
		// to compare: it is known by its name (agent.c's supervise) and
		// parent, whenever its exe went (before or after the scan).
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		ours := agentErr == nil && (err == nil && os.SameFile(agent, exe) || err != nil && session[pid])
		if !ours {
			out = append(out, p)
		}
		for _, c := range children[pid] {
			walk(c)
		}
	}
	walk(s.rec.Pid)
	// A process in the middle of execve has its new name but not yet its
	// arguments (the kernel sets them up last): a command just started
	// (docker top right after run -d) would read as "[sleep]". Only a
	// zombie keeps an empty command line for good.
	for i := range out {
		for tries := 0; noArgs[out[i].PID] && tries < 25; tries++ {
			time.Sleep(2 * time.Millisecond)
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", out[i].PID)); len(cmdline) > 0 {
				out[i].Command = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func bootTime() time.Time {
	b, _ := os.ReadFile("/proc/stat")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(n, 0)
		}
	}
	return time.Time{}
}

func cmpName(rec *record) string {
	if rec.Name != "" {
		return rec.Name
	}
	return rec.ID
}

// Stats is a sandbox's resource use (docker stats --no-stream).
type Stats struct {
	// CPU is the CPU time used so far; MemoryBytes the memory in use and
	// MemoryLimit its limit (0: none). Pids counts processes. Measured
	// says whether the figures come from the sandbox's cgroup; without
	// one (no limits set, or a host that does not delegate cgroups) CPU
	// and memory are summed over its processes.
	CPU         time.Duration
	MemoryBytes uint64
	MemoryLimit uint64
	Pids        int
	Measured    bool
}

// Stats reads the sandbox's current resource use.
func (s *Sandbox) Stats() (Stats, error) {
	var st Stats
	procs, err := s.Processes()
	if err != nil {
		return st, err
	}
	st.Pids = len(procs)
	st.MemoryLimit = uint64(max(s.rec.Limits.MemoryBytes, 0))
	if m := s.cgroup(); m != nil {
		if cs, err := m.GetStats(); err == nil {
			st.Measured = true
			st.CPU = time.Duration(cs.CpuStats.CpuUsage.TotalUsage)
			st.MemoryBytes = cs.MemoryStats.Usage.Usage
			if c, ok := cs.MemoryStats.Stats["total_inactive_file"]; ok && c < st.MemoryBytes {
				st.MemoryBytes -= c // as docker counts it (cgroup v1)
			} else if c, ok := cs.MemoryStats.Stats["inactive_file"]; ok && c < st.MemoryBytes {
				st.MemoryBytes -= c
			}
			return st, nil
		}
	}
	page := uint64(os.Getpagesize())
	for _, p := range procs {
		st.CPU += p.CPU
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "statm"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 {
			rss, _ := strconv.ParseUint(f[1], 10, 64)
			st.MemoryBytes += rss * page
		}
	}
	return st, nil
}
