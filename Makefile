# slopbox: the two commands a fresh Debian 12 machine needs are
#   make demo   # install what is missing, build, run the offline demo
#   make test   # install what is missing, build, run every test (root and rootless)
# and `make bench` writes BENCHMARKS.md.

GO        ?= go
TAGS      := seccomp netgo osusergo
LDFLAGS   := -s -w -extldflags -static -X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN       := bin/slopbox
export CGO_ENABLED := 1

.PHONY: all deps build test test-root test-rootless demo bench vet fmt clean

all: build

deps:
	@scripts/deps.sh

build: deps
	$(GO) build -tags "$(TAGS)" -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/slopbox

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet -tags "$(TAGS)" ./...

test: build vet
	@scripts/test.sh

demo: build
	@scripts/demo.sh

bench: build
	@scripts/bench.sh

clean:
	rm -rf bin .work
