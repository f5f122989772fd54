package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/engine"
)

// TestOneTranslator feeds the same create options through docker's
// command line (run's flags) and through the Engine API's create body:
// both give the same SpawnSpec and command, or both refuse with the same
// kind of error.
func TestOneTranslator(t *testing.T) {
	imgEntrypoint, imgCmd := []string{"/entry"}, []string{"default"}
	for _, tc := range []struct {
		name string
		argv []string // run's flags, then IMAGE [ARGS]
		body string   // the create body
		want func(*testing.T, backend.SpawnSpec, []string)
		err  error
		// warnings: how many create warnings both give.
		warnings int
	}{
		{name: "tmpfs size=64 is 64 bytes", argv: []string{"--tmpfs", "/tmp:size=64", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp":"size=64"}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, s.Limits.TmpBytes, int64(64)) }},
		{name: "tmpfs size=1g", argv: []string{"--tmpfs", "/tmp:size=1g", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp":"size=1g"}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, s.Limits.TmpBytes, int64(1<<30)) }},
		{name: "tmpfs without size", argv: []string{"--tmpfs", "/tmp", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp":""}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, s.Limits.TmpBytes, int64(64<<20)) }},
		{name: "tmpfs mount", argv: []string{"--mount", "type=tmpfs,target=/tmp,tmpfs-size=1048576", "img"},
			body: `{"Image":"img","HostConfig":{"Mounts":[{"Type":"tmpfs","Target":"/tmp","TmpfsOptions":{"SizeBytes":1048576}}]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, s.Limits.TmpBytes, int64(1<<20)) }},
		{name: "tmpfs size overflows", argv: []string{"--tmpfs", "/tmp:size=17592186044416m", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp":"size=17592186044416m"}}}`, err: backend.ErrInvalidValue},
		{name: "tmpfs size wraps to negative", argv: []string{"--tmpfs", "/tmp:size=9000000000000000000k", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp":"size=9000000000000000000k"}}}`, err: backend.ErrInvalidValue},
		{name: "entrypoint not split", argv: []string{"--entrypoint", "sh -c", "img", "a b"},
			body: `{"Image":"img","Entrypoint":["sh -c"],"Cmd":["a b"]}`,
			want: func(t *testing.T, _ backend.SpawnSpec, cmd []string) { eq(t, cmd, []string{"sh -c", "a b"}) }},
		{name: "empty entrypoint clears the image's and its CMD", argv: []string{"--entrypoint", "", "img"},
			body: `{"Image":"img","Entrypoint":[""]}`,
			want: func(t *testing.T, _ backend.SpawnSpec, cmd []string) { eq(t, len(cmd), 0) }},
		{name: "image defaults", argv: []string{"img"}, body: `{"Image":"img"}`,
			want: func(t *testing.T, s backend.SpawnSpec, cmd []string) {
				eq(t, cmd, []string{"/entry", "default"})
				eq(t, s.Network, backend.NetworkNone)
			}},
		{name: "published port without a network is bridge", argv: []string{"-p", "8080:80", "img"},
			body: `{"Image":"img","HostConfig":{"PortBindings":{"80/tcp":[{"HostPort":"8080"}]}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Network, backend.NetworkBridge)
				eq(t, s.Ports, []backend.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}})
			}},
		{name: "published port on an IPv6 address", argv: []string{"--network", "bridge", "-p", "[::1]::53/udp", "img"},
			body: `{"Image":"img","HostConfig":{"NetworkMode":"bridge","PortBindings":{"53/udp":[{"HostIp":"::1"}]}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Ports, []backend.PortMapping{{HostIP: "::1", ContainerPort: 53, Protocol: "udp"}})
			}},
		{name: "host network drops ports", argv: []string{"--network", "host", "-p", "80", "img"},
			body: `{"Image":"img","HostConfig":{"NetworkMode":"host","PortBindings":{"80/tcp":[{}]}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, len(s.Ports), 0) }, warnings: 1},
		{name: "limits, env, labels, binds", argv: []string{"-m", "512m", "--cpus", "1.5", "--pids-limit", "100", "-e", "A=1", "-e", "B=",
			"-l", "k=v", "-v", "/srv:/data:ro", "--read-only", "--cap-drop", "ALL", "-u", "1000", "-w", "/w", "-h", "box", "--name", "n", "img", "x"},
			body: `{"Image":"img","Cmd":["x"],"Env":["A=1","B="],"Labels":{"k":"v"},"User":"1000","WorkingDir":"/w","Hostname":"box",
				"HostConfig":{"Memory":536870912,"NanoCpus":1500000000,"PidsLimit":100,"Binds":["/srv:/data:ro"],"ReadonlyRootfs":true,"CapDrop":["ALL"]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, cmd []string) {
				eq(t, s.Limits, backend.Limits{MemoryBytes: 512 << 20, CPUs: 1.5, Pids: 100})
				eq(t, s.Env, map[string]string{"A": "1", "B": ""})
				eq(t, s.Labels, map[string]string{"k": "v"})
				eq(t, s.Mounts, []backend.Mount{{Source: "/srv", Target: "/data", ReadOnly: true, CreateMissing: true}})
				eq(t, cmd, []string{"/entry", "x"})
			}},
		{name: "volumes and groups", argv: []string{"-v", "data:/data:ro", "-v", "/anon", "--mount", "type=volume,source=v2,target=/v2",
			"--mount", "type=volume,target=/anon2", "--group-add", "10", "--group-add", "wheel", "img"},
			body: `{"Image":"img","HostConfig":{"Binds":["data:/data:ro","/anon"],"GroupAdd":["10","wheel"],
				"Mounts":[{"Type":"volume","Source":"v2","Target":"/v2"},{"Type":"volume","Target":"/anon2"}]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Mounts, []backend.Mount{{Volume: "v2", Target: "/v2"}, {Target: "/anon2", AnonymousVolume: true},
					{Volume: "data", Target: "/data", ReadOnly: true}, {Target: "/anon", AnonymousVolume: true}})
				eq(t, s.GroupAdd, []string{"10", "wheel"})
			}},
		{name: "memory overflows", argv: []string{"-m", "9000000000000000000k", "img"},
			body: `{"Image":"img","HostConfig":{"Memory":-1}}`, err: backend.ErrInvalidValue},
		{name: "privileged refused", argv: []string{"--privileged", "img"},
			body: `{"Image":"img","HostConfig":{"Privileged":true}}`, err: backend.ErrUnsafe},
		{name: "host pid refused", argv: []string{"--pid", "host", "img"},
			body: `{"Image":"img","HostConfig":{"PidMode":"host"}}`, err: backend.ErrUnsafe},
		{name: "tmpfs at any path", argv: []string{"--tmpfs", "/tmp1:size=3M", "--tmpfs", "/run/x", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/tmp1":"size=3M","/run/x":""}}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Limits.Tmpfs, map[string]int64{"/tmp1": 3 << 20, "/run/x": 64 << 20})
				eq(t, s.Limits.TmpBytes, int64(0))
			}},
		{name: "tmpfs mount at any path", argv: []string{"--mount", "type=tmpfs,target=/cache,tmpfs-size=1048576", "img"},
			body: `{"Image":"img","HostConfig":{"Mounts":[{"Type":"tmpfs","Target":"/cache","TmpfsOptions":{"SizeBytes":1048576}}]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Limits.Tmpfs, map[string]int64{"/cache": 1 << 20})
			}},
		{name: "tmpfs at a relative path refused", argv: []string{"--tmpfs", "data", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"data":""}}}`, err: backend.ErrInvalidValue},
		{name: "tmpfs and a bind at one path refused", argv: []string{"--tmpfs", "/data", "-v", "/srv:/data", "img"},
			body: `{"Image":"img","HostConfig":{"Tmpfs":{"/data":""},"Binds":["/srv:/data"]}}`, err: backend.ErrInvalidValue},
		{name: "echoed fields honoured", argv: []string{"--runtime", "runc", "--isolation", "default", "--init", "--stop-timeout", "25",
			"--volume-driver", "foo", "-m", "64m", "--memory-swap", "64m", "img"},
			body: `{"Image":"img","StopTimeout":25,"HostConfig":{"Runtime":"runc","Isolation":"default","Init":true,"VolumeDriver":"foo",
				"Memory":67108864,"MemorySwap":67108864}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) { eq(t, s.Limits.MemoryBytes, int64(64<<20)) }},
		{name: "echoed fields warned of", argv: []string{"--cpuset-cpus", "0,1", "--memory-swappiness", "40", "--mac-address", "02:42:ac:11:00:0a",
			"-m", "700m", "--memory-swap", "1g", "img"},
			body: `{"Image":"img","MacAddress":"02:42:ac:11:00:0a","HostConfig":{"CpusetCpus":"0,1","MemorySwappiness":40,
				"Memory":734003200,"MemorySwap":1073741824}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {}, warnings: 4},
		{name: "unknown runtime refused", argv: []string{"--runtime", "kata", "img"},
			body: `{"Image":"img","HostConfig":{"Runtime":"kata"}}`, err: backend.ErrInvalidValue},
		{name: "cpu real-time period and runtime refused", argv: []string{"--cpu-rt-period", "1000", "--cpu-rt-runtime", "500", "img"},
			body: `{"Image":"img","HostConfig":{"CpuRealtimePeriod":1000,"CpuRealtimeRuntime":500}}`, err: backend.ErrInvalidValue},
		{name: "cpu real-time runtime alone refused", argv: []string{"--cpu-rt-runtime", "500", "img"},
			body: `{"Image":"img","HostConfig":{"CpuRealtimeRuntime":500}}`, err: backend.ErrInvalidValue},
		{name: "hyperv isolation refused", argv: []string{"--isolation", "hyperv", "img"},
			body: `{"Image":"img","HostConfig":{"Isolation":"hyperv"}}`, err: backend.ErrInvalidValue},
		{name: "memory swap below memory refused", argv: []string{"-m", "64m", "--memory-swap", "32m", "img"},
			body: `{"Image":"img","HostConfig":{"Memory":67108864,"MemorySwap":33554432}}`, err: backend.ErrInvalidValue},
		{name: "a volume driver but local refused for a volume", argv: []string{"--volume-driver", "foo", "-v", "data:/data", "img"},
			body: `{"Image":"img","HostConfig":{"VolumeDriver":"foo","Binds":["data:/data"]}}`, err: backend.ErrInvalidValue},
		{name: "device cgroup rules refused", argv: []string{"--device-cgroup-rule", "c 7:128 rwm", "img"},
			body: `{"Image":"img","HostConfig":{"DeviceCgroupRules":["c 7:128 rwm"]}}`, err: backend.ErrUnsafe},
		{name: "volumes-from mounts the other's", argv: []string{"--volumes-from", "other:ro", "-v", "/srv:/data", "img"},
			body: `{"Image":"img","HostConfig":{"VolumesFrom":["other:ro"],"Binds":["/srv:/data"]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				eq(t, s.Mounts, []backend.Mount{{Source: "/srv", Target: "/data", CreateMissing: true}, {Volume: "vol", Target: "/vol", ReadOnly: true},
					{Source: "/home/u/src", Target: "/src", ReadOnly: true}})
			}},
		{name: "links put the other's name and environment", argv: []string{"--link", "other:db", "-e", "DB_ENV_FOO=mine", "--name", "self", "img"},
			body: `{"Image":"img","Env":["DB_ENV_FOO=mine"],"HostConfig":{"Links":["other:db"]}}`,
			want: func(t *testing.T, s backend.SpawnSpec, _ []string) {
				// The other's FOO=1 is DB_ENV_FOO, which the container's own -e replaces.
				eq(t, s.Env, map[string]string{"DB_NAME": "/self/db", "DB_ENV_FOO": "mine", "DB_ENV_BAR": "2", "DB_ENV_DB_ENV_FOO": "1"})
			}},
		{name: "link to a missing container refused", argv: []string{"--link", "nosuch:db", "img"},
			body: `{"Image":"img","HostConfig":{"Links":["nosuch:db"]}}`, err: backend.ErrInvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sf spawnFlags
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			fs.SetInterspersed(false)
			sf.register(fs)
			if err := fs.Parse(tc.argv); err != nil {
				t.Fatal(err)
			}
			cliOpts, err := sf.options(fs, fs.Arg(0), fs.Args()[1:])
			if err != nil {
				t.Fatal(err)
			}
			apiOpts, err := (&engine.Server{}).CreateOptions(strings.NewReader(tc.body), "")
			if err != nil {
				t.Fatal(err)
			}
			apiOpts.Name = cliOpts.Name
			// Another container, for VolumesFrom and Links.
			other := func(ref string) (dockercompat.Container, error) {
				if ref != "other" {
					return dockercompat.Container{}, errors.New("no such container")
				}
				return dockercompat.Container{Name: "other", Env: []string{"PATH=/bin", "DB_ENV_FOO=1", "FOO=1", "BAR=2", "HOME=/root"},
					Mounts: []backend.Mount{{Source: "/vols/vol/_data", Volume: "vol", Target: "/vol"},
						{Source: "/home/u/src", Target: "/src"}, {Source: "/x", Target: "/data"}}}, nil
			}
			cliOpts.Lookup, apiOpts.Lookup = other, other
			if !reflect.DeepEqual(cliOpts.Echoed, apiOpts.Echoed) {
				t.Errorf("the CLI's and the API's echoed fields differ:\n%+v\n%+v", cliOpts.Echoed, apiOpts.Echoed)
			}
			cli, cliCmd, cliWarn, cliErr := translate(cliOpts, imgEntrypoint, imgCmd)
			api, apiCmd, apiWarn, apiErr := translate(apiOpts, imgEntrypoint, imgCmd)
			if tc.err != nil {
				if !errors.Is(cliErr, tc.err) || !errors.Is(apiErr, tc.err) {
					t.Fatalf("want %v from both: the CLI's %v, the API's %v", tc.err, cliErr, apiErr)
				}
				return
			}
			if cliErr != nil || apiErr != nil {
				t.Fatalf("the CLI's %v, the API's %v", cliErr, apiErr)
			}
			if len(cliWarn) != tc.warnings || !reflect.DeepEqual(cliWarn, apiWarn) {
				t.Errorf("want %d warnings from both: the CLI's %q, the API's %q", tc.warnings, cliWarn, apiWarn)
			}
			if !reflect.DeepEqual(cli, api) || !reflect.DeepEqual(cliCmd, apiCmd) {
				t.Errorf("the CLI's and the API's differ:\n%+v %q\n%+v %q", cli, cliCmd, api, apiCmd)
			}
			tc.want(t, cli, cliCmd)
		})
	}
}

func translate(o dockercompat.CreateOptions, ep, cmd []string) (backend.SpawnSpec, []string, []string, error) {
	s, warnings, _, err := o.ToSpawnSpec()
	return s, o.Command(ep, cmd), warnings, err
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestMountRefusalNamesTheFlag: a refused bind mount is named by the
// option that asked for it, from the CLI and the Engine API alike (docker's
// --mount sends HostConfig.Mounts, its -v Binds): --mount as --mount, not
// as the -v it is not.
func TestMountRefusalNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		argv []string
		body string
		want string
	}{
		{[]string{"--mount=type=bind,src=/,dst=/h", "img"}, `{"Image":"img","HostConfig":{"Mounts":[{"Type":"bind","Source":"/","Target":"/h"}]}}`,
			"mounting the host's / (--mount type=bind,source=/,target=/h) exposes"},
		{[]string{"--mount", "type=bind,source=/etc,target=/e,readonly", "img"}, `{"Image":"img","HostConfig":{"Mounts":[{"Type":"bind","Source":"/etc","Target":"/e","ReadOnly":true}]}}`,
			"mounting the host's /etc (--mount type=bind,source=/etc,target=/e,readonly) exposes"},
		{[]string{"-v", "/:/h", "img"}, `{"Image":"img","HostConfig":{"Binds":["/:/h"]}}`,
			"mounting the host's / (-v /:/h) exposes"},
	} {
		var sf spawnFlags
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.SetInterspersed(false)
		sf.register(fs)
		if err := fs.Parse(c.argv); err != nil {
			t.Fatal(err)
		}
		cliOpts, err := sf.options(fs, fs.Arg(0), fs.Args()[1:])
		if err != nil {
			t.Fatal(err)
		}
		apiOpts, err := (&engine.Server{}).CreateOptions(strings.NewReader(c.body), "")
		if err != nil {
			t.Fatal(err)
		}
		for who, o := range map[string]dockercompat.CreateOptions{"the CLI": cliOpts, "the API": apiOpts} {
			s, _, _, err := o.ToSpawnSpec()
			if err == nil {
				err = s.Validate() // what the backend checks first
			}
			if !errors.Is(err, backend.ErrUnsafe) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %v: %v, want a refusal with %q", who, c.argv, err, c.want)
			}
		}
	}
}
