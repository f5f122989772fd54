package service

import (
	"fmt"
	"os/user"
	"strconv"
	"time"
)

// TopResult is docker top's table (the Engine API's GET
// /containers/{id}/top): the columns of the host's `ps -ef`, which
// dockerd runs, one row per process.
type TopResult struct {
	Titles    []string
	Processes [][]string
}

// Top is the table of a sandbox's processes, as the slopbox CLI prints it
// and the Engine API answers it: host pids, the host's name for each uid
// (its number where the host has none, as ps shows it), ps's C (CPU time
// over the time since the start, in percent), STIME and TIME.
func Top(procs []Process, now time.Time) TopResult {
	t := TopResult{Titles: []string{"UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"}, Processes: [][]string{}}
	names := map[int]string{}
	for _, p := range procs {
		name, ok := names[p.UID]
		if !ok {
			name = strconv.Itoa(p.UID)
			if u, err := user.LookupId(name); err == nil {
				name = u.Username
			}
			names[p.UID] = name
		}
		c := 0
		if up := now.Sub(p.Start); up > 0 {
			c = int(p.CPU * 100 / up)
		}
		t.Processes = append(t.Processes, []string{name, strconv.Itoa(p.PID), strconv.Itoa(p.PPID), strconv.Itoa(c),
			psStart(p.Start, now), "?", psTime(p.CPU), p.Command})
	}
	return t
}

// psStart is ps's STIME: the time of day for a process started today,
// else the month and day.
func psStart(t, now time.Time) string {
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04")
	}
	return t.Format("Jan02")
}

// psTime is ps's TIME: [DD-]HH:MM:SS of CPU.
func psTime(d time.Duration) string {
	s := int(d.Seconds())
	if days := s / 86400; days > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", days, s/3600%24, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}
