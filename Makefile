# slopbox: the two commands a fresh Debian 12 machine needs are
#   make demo   # install what is missing, build, run the offline demo
#   make test   # install what is missing, build, run every test (root and rootless)
# and `make bench` writes BENCHMARKS.md.

GO        ?= go
BASETAGS  := seccomp netgo osusergo
# slopbox_helper: embed the spawn server (sandbox/internal/spawnd/slopbox-spawn)
TAGS      := $(BASETAGS) slopbox_helper
LDFLAGS   := -s -w -extldflags -static -X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN       := bin/slopbox
HELPER    := sandbox/slopbox-spawn.bin
export CGO_ENABLED := 1

.PHONY: all deps helper build test test-root test-rootless demo bench vet fmt clean

all: build

deps:
	@scripts/deps.sh

# The small static spawn server and sandbox init that bin/slopbox embeds.
helper:
	$(GO) build -tags "$(BASETAGS)" -ldflags "-s -w -extldflags -static" -o $(HELPER) ./sandbox/internal/spawnd/slopbox-spawn
	sha256sum $(HELPER) | cut -c1-16 | tr -d '\n' > $(HELPER).id

build: deps helper
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/slopbox

vet: helper
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet -tags "$(TAGS)" ./...

test: build vet
	@scripts/test.sh

demo: build
	@scripts/demo.sh

bench: build
	@scripts/bench.sh

clean:
	rm -rf bin .work $(HELPER) $(HELPER).id
