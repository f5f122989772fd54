package ociruntime

import (
	"io"
	"os"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/sirupsen/logrus"
)

// Features is what `features` prints: the runtime-spec features document
// (containerd 2 reads it; 1.6 does not ask).
func Features() *features.Features {
	t, f := true, false
	caps := []string{}
	for _, c := range capability.ListKnown() {
		caps = append(caps, "CAP_"+upper(c.String()))
	}
	return &features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"},
		MountOptions: []string{"async", "atime", "bind", "defaults", "dev", "diratime", "dirsync", "exec", "iversion", "lazytime", "loud",
			"mand", "noatime", "nodev", "nodiratime", "noexec", "noiversion", "nolazytime", "nomand", "norelatime", "nostrictatime",
			"nosuid", "nosymfollow", "private", "ratime", "rbind", "rdev", "relatime", "remount", "ro", "rprivate", "rshared",
			"rslave", "runbindable", "rw", "shared", "silent", "slave", "strictatime", "suid", "symfollow", "sync", "unbindable"},
		Linux: &features.Linux{
			Namespaces:   []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts", "time"},
			Capabilities: caps,
			Cgroup:       &features.Cgroup{V1: &t, V2: &t, Systemd: &t, SystemdUser: &t, Rdma: &f},
			Seccomp:      &features.Seccomp{Enabled: &t},
			Apparmor:     &features.Apparmor{Enabled: &f},
			Selinux:      &features.Selinux{Enabled: &f},
		},
		Annotations: map[string]string{"io.github.slopbox.seccomp.default": "docker"},
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// SetupLog sends libcontainer's and this command's messages to path (the
// shim's log.json), as JSON lines {"level","msg","time"} with format
// "json", else as text; without a path, to stderr.
func SetupLog(path, format string, debug bool) error {
	var out io.Writer = os.Stderr
	if path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o644)
		if err != nil {
			return err
		}
		out = f
	}
	logrus.SetOutput(out)
	if format == "json" {
		logrus.SetFormatter(&logrus.JSONFormatter{})
	}
	if debug {
		logrus.SetLevel(logrus.DebugLevel)
	}
	return nil
}

// LogError records err at level error, where containerd's shim reads the
// last one.
func LogError(err error) { logrus.Error(err) }
