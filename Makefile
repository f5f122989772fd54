# slopbox: the two commands a fresh Debian 12 machine needs are
#   make demo   # install what is missing, build, run the offline demo
#   make test   # install what is missing, build, run every test (root and rootless)
# and `make bench` writes BENCHMARKS.md.

# scripts/go-toolchain.sh (run by deps) installs the Go that go.mod names
# into .work/go when the one on PATH is missing or too old; it comes first.
export PATH := $(CURDIR)/.work/go/bin:$(PATH)
GO        ?= go
BASETAGS  := seccomp netgo osusergo
# slopbox_helper: embed the spawn server (sandbox/internal/spawnd/slopbox-spawn)
TAGS      := $(BASETAGS) slopbox_helper
LDFLAGS   := -s -w -extldflags -static -X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN       := bin/slopbox
HELPER    := sandbox/slopbox-spawn.bin
# The per-container monitor (sandbox/internal/spawnd/monitor.c), static:
# against musl when musl-gcc is there (a few KiB of PSS per container),
# else against glibc.
MONITOR    := sandbox/slopbox-monitor.bin
MONITOR_CC ?= $(shell command -v musl-gcc 2>/dev/null || echo cc)
export CGO_ENABLED := 1

STATICCHECK_VERSION := v0.8.2
STATICCHECK := .work/bin/staticcheck-$(STATICCHECK_VERSION)
# make test runs go test through gotestsum (a summary of failures and
# skips at the end of each phase).
GOTESTSUM_VERSION := v1.13.0
GOTESTSUM := .work/bin/gotestsum-$(GOTESTSUM_VERSION)

.PHONY: all deps helper build install deb test test-one demo bench vet lint fmt clean vm-box vm-test

all: build

deps:
	@scripts/deps.sh

# The small static spawn server and sandbox init that bin/slopbox embeds.
helper:
	$(GO) build -tags "$(BASETAGS)" -ldflags "-s -w -extldflags -static" -o $(HELPER) ./sandbox/internal/spawnd/slopbox-spawn
	sha256sum $(HELPER) | cut -c1-16 | tr -d '\n' > $(HELPER).id
	$(MONITOR_CC) -static -Os -s -Wall -DSLOPBOX_MONITOR_MAIN -o $(MONITOR) sandbox/internal/spawnd/monitor.c
	sha256sum $(MONITOR) | cut -c1-16 | tr -d '\n' > $(MONITOR).id

build: deps helper
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/slopbox

# The binary, completions (bash, zsh, fish), one man page per verb and
# the systemd units (slopbox.socket starts `serve` on the first
# connection: user units for rootless use, system units for root):
#   make install [PREFIX=/usr/local] [DESTDIR=]
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	@PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) SLOPBOX=$(BIN) scripts/install.sh

# The same files as a Debian package, bin/slopbox_VERSION_ARCH.deb
# (apt-get install ./bin/slopbox_*.deb).
deb: build
	@SLOPBOX=$(BIN) scripts/deb.sh bin

vet: helper
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet -tags "$(TAGS)" ./...
	$(GO) vet -tags "$(TAGS) vmsuite" ./test/vm/
	$(GO) vet -tags "$(BASETAGS) slopbox_manpages" ./cmd/slopbox/

# go mod tidy must change nothing; staticcheck (pinned) and shellcheck
# must find nothing.
lint: vet $(STATICCHECK)
	$(GO) mod tidy -diff
	$(STATICCHECK) -tags "$(TAGS)" ./...
	$(STATICCHECK) -tags "$(TAGS) vmsuite" ./test/vm/
	$(STATICCHECK) -tags "$(BASETAGS) slopbox_manpages" ./cmd/slopbox/
	shellcheck scripts/*.sh .ci/run bench/*.sh examples/open_atp/*.sh

$(STATICCHECK):
	mkdir -p .work/bin
	GOBIN=$(CURDIR)/.work/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv .work/bin/staticcheck $@

$(GOTESTSUM):
	mkdir -p .work/bin
	GOBIN=$(CURDIR)/.work/bin $(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	mv .work/bin/gotestsum $@

test: build lint $(GOTESTSUM)
	@GOTESTSUM=$(GOTESTSUM) scripts/test.sh

# One package or test, with the tags and static linking the tests need:
#   make test-one PKG=./sandbox RUN=TestNoSetidFilesOnTheHost
test-one: helper
	$(GO) test -tags "$(TAGS)" -ldflags "-extldflags -static" -count=1 -v -run '$(RUN)' $(PKG)

# The cgroup v2 VM (Vagrantfile): a Debian 12 box built offline, and the
# suite in test/vm run in it as root and rootless (make test runs it too).
vm-box:
	@scripts/vm-box.sh

vm-test: build
	@scripts/vm-test.sh

demo: build
	@scripts/demo.sh

bench: build
	@scripts/bench.sh

clean:
	rm -rf bin .work $(HELPER) $(HELPER).id $(MONITOR) $(MONITOR).id
