// Command idmapcost starts one process in a new user namespace and maps
// it, for the bench row that shows what slopbox's rootless start pays and
// runc's does not (issue 45): with "helpers" the caller's whole
// subordinate range is mapped by the setuid newuidmap and newgidmap (two
// more execs, as slopbox's spawn server does); with "single" the caller
// maps its own uid and gid alone by writing the maps (runc's rootless
// default). The process is the same in both: a shell that waits to be
// told the maps are written, then exits.
//
// Usage: idmapcost helpers|single
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != "helpers" && os.Args[1] != "single" {
		log.Fatal("usage: idmapcost helpers|single")
	}
	cmd := exec.Command("/bin/sh", "-c", "read _")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	uid, gid := os.Getuid(), os.Getgid()
	if os.Args[1] == "single" {
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	if os.Args[1] == "helpers" {
		u, err := user.Current()
		if err != nil {
			log.Fatal(err)
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		for _, m := range []struct {
			tool, file string
			id         int
		}{{"newuidmap", "/etc/subuid", uid}, {"newgidmap", "/etc/subgid", gid}} {
			start, count := subRange(m.file, u.Username, m.id)
			if out, err := exec.Command(m.tool, pid, "0", strconv.Itoa(m.id), "1", "1", start, count).CombinedOutput(); err != nil {
				log.Fatalf("%s: %v: %s", m.tool, err, out)
			}
		}
	}
	fmt.Fprintln(in)
	in.Close()
	if err := cmd.Wait(); err != nil {
		log.Fatal(err)
	}
}

// subRange is the first range of name (or id) in file.
func subRange(file, name string, id int) (start, count string) {
	f, err := os.Open(file)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		p := strings.Split(s.Text(), ":")
		if len(p) == 3 && (p[0] == name || p[0] == strconv.Itoa(id)) {
			return p[1], p[2]
		}
	}
	log.Fatalf("%s has no range for %s", file, name)
	return "", ""
}
