package oci

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// short renders mounts as "target<-source:mode" for compact expectations.
func short(t *testing.T, ms []specs.Mount) []string {
	t.Helper()
	var out []string
	for _, m := range ms {
		if m.Type != "bind" {
			t.Errorf("%s: type %q", m.Destination, m.Type)
		}
		if len(m.Options) != 4 || m.Options[0] != "rbind" || m.Options[2] != "nosuid" || m.Options[3] != "nodev" {
			t.Errorf("%s: options %v", m.Destination, m.Options)
		}
		out = append(out, fmt.Sprintf("%s<-%s:%s", m.Destination, m.Source, m.Options[1]))
	}
	return out
}

func TestResolve(t *testing.T) {
	ws := "/home/u/ws"
	cases := []struct {
		name    string
		plan    MountPlan
		want    []string
		wantErr error
		errHas  []string
	}{
		{
			name: "workspace only, default workdir",
			plan: MountPlan{Workspace: ws, MountWorkspace: true},
			want: []string{"/workspace<-/home/u/ws:rw"},
		},
		{
			name: "workspace not mounted",
			plan: MountPlan{Workspace: ws, Extra: []BindSource{{Source: "/a", Target: "/a"}}},
			want: []string{"/a<-/a:rw"},
		},
		{
			name: "precedence workspace < extra < spawn < static at the same path",
			plan: MountPlan{
				Workspace: ws, MountWorkspace: true,
				Extra: []BindSource{
					{Source: "/e1", Target: "/workspace"},
					{Source: "/e2", Target: "/data", ReadOnly: true},
					{Source: "/e3", Target: "/static/x"},
				},
				Spawn: []BindSource{
					{Source: "/s1", Target: "/data/"}, // trailing slash: same path as /data
					{Source: "/s2", Target: "/static/x"},
				},
				Static: []BindSource{{Source: "/a1", Target: "x"}},
			},
			want: []string{
				"/data<-/s1:rw",
				"/workspace<-/e1:rw",
				"/static/x<-/a1:ro",
			},
		},
		{
			name: "later entry within the same group wins",
			plan: MountPlan{Spawn: []BindSource{
				{Source: "/one", Target: "/m", ReadOnly: true},
				{Source: "/two", Target: "/m/./"},
			}},
			want: []string{"/m<-/two:rw"},
		},
		{
			name: "relative sources resolve against the workspace",
			plan: MountPlan{
				Workspace: ws + "/", MountWorkspace: true,
				Extra:  []BindSource{{Source: "data", Target: "/data", ReadOnly: true}, {Source: "./a/../b/", Target: "/b"}},
				Static: []BindSource{{Source: "assets/t", Target: "tests"}},
			},
			want: []string{
				"/b<-/home/u/ws/b:rw",
				"/data<-/home/u/ws/data:ro",
				"/workspace<-/home/u/ws:rw",
				"/static/tests<-/home/u/ws/assets/t:ro",
			},
		},
		{
			name: "sorted parents first",
			plan: MountPlan{Spawn: []BindSource{
				{Source: "/c", Target: "/opt/a/b/c"},
				{Source: "/a", Target: "/opt/a"},
				{Source: "/o", Target: "/opt"},
				{Source: "/z", Target: "/z/y"},
			}},
			want: []string{"/opt<-/o:rw", "/opt/a<-/a:rw", "/z/y<-/z:rw", "/opt/a/b/c<-/c:rw"},
		},
		{
			name: "/workspace2 is not inside /workspace",
			plan: MountPlan{Workspace: ws, MountWorkspace: true, Extra: []BindSource{{Source: "/x", Target: "/workspace2"}}},
			want: []string{"/workspace<-/home/u/ws:rw", "/workspace2<-/x:rw"},
		},
		{
			name:    "/workspace/sub is inside /workspace",
			plan:    MountPlan{Workspace: ws, MountWorkspace: true, Spawn: []BindSource{{Source: "/x", Target: "/workspace/sub"}}},
			wantErr: ErrMountInWorkdir,
			errHas:  []string{"/workspace/sub", `"/workspace"`},
		},
		{
			name:    "inside a custom workdir, even unmounted, via dot-dot",
			plan:    MountPlan{Workspace: ws, Workdir: "/app/", Extra: []BindSource{{Source: "/x", Target: "/srv/../app/lib"}}},
			wantErr: ErrMountInWorkdir,
			errHas:  []string{"/app/lib"},
		},
		{
			name: "parent of the workdir is fine",
			plan: MountPlan{Workspace: ws, Workdir: "/app/src", MountWorkspace: true, Extra: []BindSource{{Source: "/x", Target: "/app"}}},
			want: []string{"/app<-/x:rw", "/app/src<-/home/u/ws:rw"},
		},
		{
			name:    "static asset inside a workdir at /static",
			plan:    MountPlan{Workspace: ws, Workdir: "/static", Static: []BindSource{{Source: "/a", Target: "t"}}},
			wantErr: ErrMountInWorkdir,
		},
		{
			name: "allowed roots compare components: /data2 is not under /data",
			plan: MountPlan{
				Workspace: "/data/ws", MountWorkspace: true, AllowedRoots: []string{"/data", "/tmp/"},
				Extra: []BindSource{{Source: "/data2/x", Target: "/x"}},
			},
			wantErr: ErrMountNotAllowed,
			errHas:  []string{`"/data2/x"`, "/data, /tmp"},
		},
		{
			name: "allowed roots accept nested paths and the root itself",
			plan: MountPlan{
				Workspace: "/data/ws", MountWorkspace: true, AllowedRoots: []string{"/data/", "/tmp"},
				Extra: []BindSource{{Source: "/data", Target: "/d", ReadOnly: true}, {Source: "/tmp/a/b", Target: "/t"}},
			},
			want: []string{"/d<-/data:ro", "/t<-/tmp/a/b:rw", "/workspace<-/data/ws:rw"},
		},
		{
			name:    "allowed roots police the workspace too",
			plan:    MountPlan{Workspace: "/home/u/ws", MountWorkspace: true, AllowedRoots: []string{"/data"}},
			wantErr: ErrMountNotAllowed,
			errHas:  []string{"/home/u/ws"},
		},
		{
			name:    "relative escape refused before the allowed roots are asked",
			plan:    MountPlan{Workspace: "/data/ws", AllowedRoots: []string{"/data"}, Extra: []BindSource{{Source: "../../etc", Target: "/etc2"}}},
			wantErr: ErrBadMount,
			errHas:  []string{`"../../etc"`, "leads out of the workspace"},
		},
		{
			name: "overridden source is not policed",
			plan: MountPlan{
				AllowedRoots: []string{"/data"},
				Extra:        []BindSource{{Source: "/etc", Target: "/m"}},
				Spawn:        []BindSource{{Source: "/data/m", Target: "/m"}},
			},
			want: []string{"/m<-/data/m:rw"},
		},
		{
			name:    "relative allowed root",
			plan:    MountPlan{AllowedRoots: []string{"."}, Extra: []BindSource{{Source: "/a", Target: "/a"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "target / rejected",
			plan:    MountPlan{Extra: []BindSource{{Source: "/a", Target: "/"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "target /.. cleans to / and is rejected",
			plan:    MountPlan{Extra: []BindSource{{Source: "/a", Target: "/.."}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "relative target rejected",
			plan:    MountPlan{Spawn: []BindSource{{Source: "/a", Target: "data"}}},
			wantErr: ErrBadMount,
			errHas:  []string{"absolute"},
		},
		{
			name:    "empty target rejected",
			plan:    MountPlan{Spawn: []BindSource{{Source: "/a"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "empty source rejected",
			plan:    MountPlan{Spawn: []BindSource{{Target: "/a"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "relative source without workspace",
			plan:    MountPlan{Spawn: []BindSource{{Source: "data", Target: "/a"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "relative workspace",
			plan:    MountPlan{Workspace: "ws", MountWorkspace: true},
			wantErr: ErrBadMount,
		},
		{
			name:    "workspace mounted but unset",
			plan:    MountPlan{MountWorkspace: true},
			wantErr: ErrBadMount,
		},
		{
			name:    "relative workdir",
			plan:    MountPlan{Workspace: ws, Workdir: "workspace"},
			wantErr: ErrBadMount,
		},
		{
			name:    "static save_path escaping /static",
			plan:    MountPlan{Static: []BindSource{{Source: "/a", Target: "../etc"}}},
			wantErr: ErrBadMount,
		},
		{
			name:    "empty static save_path",
			plan:    MountPlan{Static: []BindSource{{Source: "/a", Target: ""}}},
			wantErr: ErrBadMount,
		},
		{
			name: "static is ro even when asked rw; absolute save_path stays under /static",
			plan: MountPlan{Static: []BindSource{{Source: "/a", Target: "/nested/dir/", ReadOnly: false}}},
			want: []string{"/static/nested/dir<-/a:ro"},
		},
		{
			name: "nothing to mount",
			plan: MountPlan{Workspace: ws},
			want: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := tc.plan.Resolve()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %s", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := short(t, ms); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestResolveEvalSource(t *testing.T) {
	links := map[string]string{"/data/link": "/etc", "/data/ok": "/data/real"}
	eval := func(p string) (string, error) {
		if r, ok := links[p]; ok {
			return r, nil
		}
		if p == "/data/missing" {
			return "", errors.New("no such file or directory")
		}
		return p, nil
	}
	plan := MountPlan{AllowedRoots: []string{"/data"}, EvalSource: eval,
		Extra: []BindSource{{Source: "/data/ok", Target: "/ok"}}}
	ms, err := plan.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := short(t, ms); !slices.Equal(got, []string{"/ok<-/data/real:rw"}) {
		t.Errorf("got %q", got)
	}

	plan.Extra = []BindSource{{Source: "/data/link", Target: "/l"}}
	if _, err := plan.Resolve(); !errors.Is(err, ErrMountNotAllowed) || !strings.Contains(err.Error(), `"/etc"`) {
		t.Errorf("symlink escape: err = %v", err)
	}
	plan.Extra = []BindSource{{Source: "/data/missing", Target: "/l"}}
	if _, err := plan.Resolve(); !errors.Is(err, ErrBadMount) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing source: err = %v", err)
	}
}

// Defect B: relative sources resolve beneath the workspace, never through
// ".." or (with EvalBeneath) a symlink that leads out.
func TestResolveRelativeBeneathWorkspace(t *testing.T) {
	ws := "/home/u/ws"
	for _, src := range []string{"..", "../x", "a/../../x", "./../ws2"} {
		plan := MountPlan{Workspace: ws, Spawn: []BindSource{{Source: src, Target: "/d"}}}
		if _, err := plan.Resolve(); !errors.Is(err, ErrBadMount) || !strings.Contains(err.Error(), "leads out of the workspace") {
			t.Errorf("%q: err = %v, want it refused", src, err)
		}
	}
	var calls []string
	plan := MountPlan{Workspace: ws,
		EvalSource: func(p string) (string, error) { calls = append(calls, "abs "+p); return p, nil },
		EvalBeneath: func(root, rel string) (string, error) {
			calls = append(calls, "beneath "+root+" "+rel)
			if rel == "planted" {
				return "", errors.New("leads out of the workspace through a symlink")
			}
			return filepath.Join(root, rel), nil
		},
		Spawn: []BindSource{{Source: "a/../b", Target: "/b"}, {Source: "/abs", Target: "/abs"}}}
	ms, err := plan.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := short(t, ms); !slices.Equal(got, []string{"/abs<-/abs:rw", "/b<-/home/u/ws/b:rw"}) {
		t.Errorf("got %q", got)
	}
	if want := []string{"beneath /home/u/ws b", "abs /abs"}; !slices.Equal(calls, want) {
		t.Errorf("evaluated %q, want %q", calls, want)
	}
	plan.Spawn = []BindSource{{Source: "planted", Target: "/p"}}
	if _, err := plan.Resolve(); !errors.Is(err, ErrBadMount) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("planted symlink: err = %v", err)
	}
}
