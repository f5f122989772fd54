#!/usr/bin/env bash
# Runs every test: first as root, then the rootless suites as an
# unprivileged user with /etc/subuid ranges (created by deps.sh). Test
# binaries are linked statically so that a sandbox can run its own binary as
# the container's PID 1.
set -euo pipefail
cd "$(dirname "$0")/.."

TAGS="seccomp netgo osusergo slopbox_helper"
LDFLAGS="-extldflags -static"
# Test binaries embed the spawn server as bin/slopbox does (make helper).
make -s helper
TEST_USER=${SLOPBOX_TEST_USER:-slopbox-test}
# Packages whose behaviour depends on the caller's privileges run twice.
ROOTLESS_PKGS=(./image/ ./image/archive/ ./local/ ./backend/ ./test/conformance/ ./sandbox/ ./test/integration/)
# Tests that need root by nature; they ran in the root pass above.
ROOT_ONLY='^(TestDiskFullLeavesStoreConsistent|TestRootOwnedWorkspaceMapsToUnprivilegedID)$'

# A fresh machine has no Go, or Debian's 1.19: the toolchain go.mod names
# is fetched and its hash checked against the checksum database.
echo "== Go toolchain fetch on a machine without Go" >&2
tc=$(mktemp -d)
cp go.mod "$tc/" && mkdir "$tc/scripts" && cp scripts/go-toolchain.sh "$tc/scripts/"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin bash "$tc/scripts/go-toolchain.sh"
"$tc/.work/go/bin/go" version | grep -q "go$(awk '$1 == "go" {print $2; exit}' go.mod) " || { echo "the fetched toolchain is not the one go.mod names" >&2; exit 1; }
rm -rf "$tc"

echo "== tests as root" >&2
go test -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 30m ./...

# The race detector over the packages with concurrency.
echo "== race detector" >&2
go test -race -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 30m ./backend/ ./image/ ./sandbox/ ./test/conformance/

# Each fuzz target for a bounded time (its seeds and testdata/fuzz corpus
# also ran above, as tests).
echo "== fuzzing, ${FUZZTIME:=10s} a target" >&2
for target in "FuzzApplyLayer ./image/archive/" "FuzzParseReference ./image/" "FuzzAgentRequest ./sandbox/" "FuzzParseSpec ./dockercompat/" "FuzzGlob ./dockercompat/" "FuzzReadArchive ./dockercompat/"; do
	read -r name pkg <<<"$target"
	go test -tags "$TAGS" -ldflags "$LDFLAGS" -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg"
done

[[ $(id -u) -eq 0 ]] || { echo "not root: the rootless run needs root to switch to $TEST_USER" >&2; exit 1; }
echo "== tests as $TEST_USER (rootless)" >&2
work=$(mktemp -d /tmp/slopbox-rootless.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The user must be able to read the sources (testdata) wherever CI cloned them.
git ls-files -z | xargs -0 -I{} cp --parents {} "$work/"
mkdir -p "$work/bin" && cp bin/slopbox "$work/bin/slopbox" # for test/integration
chmod -R a+rX "$work"
chmod 755 "$work"
status=0
for pkg in "${ROOTLESS_PKGS[@]}"; do
	[[ -d $pkg ]] || continue
	ls "$pkg"/*_test.go >/dev/null 2>&1 || continue
	bin="$work/$(echo "$pkg" | tr -c 'a-z0-9\n' '_').test"
	go test -c -tags "$TAGS" -ldflags "$LDFLAGS" -o "$bin" "$pkg"
	chmod 755 "$bin"
	echo "-- $pkg as $TEST_USER (left out, root only: $ROOT_ONLY)" >&2
	if ! su "$TEST_USER" -s /bin/sh -c "cd '$work/$pkg' && HOME=\$(getent passwd $TEST_USER | cut -d: -f6) '$bin' -test.count=1 -test.timeout=20m -test.skip '$ROOT_ONLY'"; then
		status=1
	fi
done
exit $status
