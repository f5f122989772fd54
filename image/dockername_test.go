package image

import "testing"

func TestDockerName(t *testing.T) {
	for in, want := range map[string]string{
		"index.docker.io/library/alpine:latest":  "alpine:latest",
		"index.docker.io/someone/tool:v1":        "someone/tool:v1",
		"index.docker.io/library/a/b:1":          "library/a/b:1",
		"docker.io/library/busybox@sha256:abcd":  "busybox@sha256:abcd",
		"127.0.0.1:5000/it/busybox:latest":       "127.0.0.1:5000/it/busybox:latest",
		"ghcr.io/library/x:1":                    "ghcr.io/library/x:1",
		"localhost/unnamed@sha256:0123456789abc": "localhost/unnamed@sha256:0123456789abc",
	} {
		if got := DockerName(in); got != want {
			t.Errorf("DockerName(%q) = %q, want %q", in, got, want)
		}
	}
}
