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
# Tests that need root by nature; they ran in the root pass above
# (containerd runs as root; a pids limit needs a cgroup, which rootless
# has none of on a cgroup v1 host).
ROOT_ONLY='^(TestDiskFullLeavesStoreConsistent|TestRootOwnedWorkspaceMapsToUnprivilegedID|TestContainerdRunc|TestCRI|TestRuntimeTools|TestDoctorTunMode|TestCommandThatCannotBeForkedFailsToStart|TestRelativeMountSwapRace|TestRootSourcesBelowPrivateDirectory)$'

# A fresh machine has no Go, or Debian's 1.19: the toolchain go.mod names
# is fetched and its hash checked against the checksum database.
echo "== Go toolchain fetch on a machine without Go" >&2
tc=$(mktemp -d)
cp go.mod "$tc/" && mkdir "$tc/scripts" && cp scripts/go-toolchain.sh "$tc/scripts/"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin bash "$tc/scripts/go-toolchain.sh"
"$tc/.work/go/bin/go" version | grep -q "go$(awk '$1 == "go" {print $2; exit}' go.mod) " || { echo "the fetched toolchain is not the one go.mod names" >&2; exit 1; }
rm -rf "$tc"

# Bridge networking runs slirp4netns as the user, which opens
# /dev/net/tun: most distributions ship it 0666, these machines 0600
# (`slopbox doctor` explains it). Set it as distributions do.
if [[ $(id -u) -eq 0 && -c /dev/net/tun ]]; then
	chmod 0666 /dev/net/tun
fi

# checked runs a test command; when it fails, what failed (and, for a
# timeout, which tests were running) is kept for the summary printed last,
# where a CI log's tail shows it.
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
checked() {
	local log start=$SECONDS
	log=$(mktemp)
	if "$@" 2>&1 | tee "$log"; then
		rm -f "$log"
		echo "== took $((SECONDS - start)) s: $*" >&2
		return 0
	fi
	echo "== took $((SECONDS - start)) s (failed): $*" >&2
	{
		echo "== FAILED: $*"
		grep -E -A15 '^panic: test timed out' "$log" | grep -v '^goroutine ' | head -25 || true
		grep -E '^(--- FAIL|FAIL|panic:|ok )' "$log" | head -60 || true
	} >>"$summary"
	rm -f "$log"
	return 1
}
status=0

echo "== tests as root" >&2
checked go test -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 25m ./... || status=1

# The race detector over the packages with concurrency.
echo "== race detector" >&2
checked go test -race -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 15m ./backend/ ./image/ ./sandbox/ ./test/conformance/ || status=1

# Each fuzz target for a bounded time (its seeds and testdata/fuzz corpus
# also ran above, as tests).
echo "== fuzzing, ${FUZZTIME:=10s} a target" >&2
# FuzzAgentRequest's inputs go to a live PID 1 and some take long, and
# FuzzApplyLayer's new inputs are minimized slowly here (each run makes
# and removes a directory tree on a disk mounted with discard): a time
# bound can end the run in the middle of one, which go test reports as
# "context deadline exceeded" with no failing input. They run a count of
# inputs instead (about 10 s each here). FuzzApplyLayer's body crashes on
# an input ApplyLayer spends over 5 s on, so a real hang is kept.
for target in "FuzzApplyLayer ./image/archive/ 20000x" "FuzzParseReference ./image/" "FuzzAgentRequest ./sandbox/ 8000x" "FuzzParseSpec ./dockercompat/" "FuzzGlob ./dockercompat/" "FuzzReadArchive ./dockercompat/"; do
	read -r name pkg bound <<<"$target"
	checked go test -tags "$TAGS" -ldflags "$LDFLAGS" -run '^$' -fuzz "^$name\$" -fuzztime "${bound:-$FUZZTIME}" "$pkg" || status=1
done

[[ $(id -u) -eq 0 ]] || { echo "not root: the rootless run needs root to switch to $TEST_USER" >&2; exit 1; }
echo "== tests as $TEST_USER (rootless)" >&2
work=$(mktemp -d /tmp/slopbox-rootless.XXXXXX)
trap 'rm -rf "$work" "$summary"' EXIT
# The user must be able to read the sources (testdata) wherever CI cloned them.
git ls-files -z | xargs -0 -I{} cp --parents {} "$work/"
mkdir -p "$work/bin" && cp bin/slopbox "$work/bin/slopbox" # for test/integration
chmod -R a+rX "$work"
chmod 755 "$work"
for pkg in "${ROOTLESS_PKGS[@]}"; do
	[[ -d $pkg ]] || continue
	ls "$pkg"/*_test.go >/dev/null 2>&1 || continue
	bin="$work/$(echo "$pkg" | tr -c 'a-z0-9\n' '_').test"
	go test -c -tags "$TAGS" -ldflags "$LDFLAGS" -o "$bin" "$pkg"
	chmod 755 "$bin"
	echo "-- $pkg as $TEST_USER (left out, root only: $ROOT_ONLY)" >&2
	checked su "$TEST_USER" -s /bin/sh -c "cd '$work/$pkg' && HOME=\$(getent passwd $TEST_USER | cut -d: -f6) '$bin' -test.count=1 -test.timeout=15m -test.skip '$ROOT_ONLY'" || status=1
done

# The cgroup v2 suite in a VM (Vagrantfile, test/vm): what a cgroup v1
# host cannot show. SLOPBOX_SKIP_VM=1 leaves it out of a local run, and
# says so; CI runs it.
if [[ -n ${SLOPBOX_SKIP_VM:-} ]]; then
	echo "== VM suite LEFT OUT (SLOPBOX_SKIP_VM is set)" >&2
else
	echo "== VM suite (make vm-test)" >&2
	checked scripts/vm-test.sh || status=1
fi
echo "== all tests took $SECONDS s" >&2
if [[ -s $summary ]]; then
	echo "== summary of failures" >&2
	cat "$summary" >&2
fi
exit $status
