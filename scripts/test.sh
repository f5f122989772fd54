#!/usr/bin/env bash
# Runs every test: as root, then the rootless suites as an unprivileged user
# with /etc/subuid ranges (created by deps.sh), docker-py's own suite
# against `slopbox serve` (root and rootless), and the cgroup v2 VM suite.
# Test binaries are linked statically so that a sandbox can run its own
# binary as the container's PID 1.
#
# Each phase has its own time limit, cut to what is left of the run's
# 80-minute budget (so together they stay under CI's 90 minutes), and
# prints its result as it ends; the failures and the tests skipped are
# listed again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

export TAGS="seccomp netgo osusergo slopbox_helper"
export LDFLAGS="-extldflags -static"

# SLOPBOX_TEST_PHASES=NAME,... runs only those phases (and only the set-up
# they need), in their usual order: toolchain, root (the root pass and the
# race-detector packages), stress, race-cli, fuzz, rootless (the rootless
# packages and their stress steps), clients, vm, docker-py. Unset, every
# phase runs; the phases left out are said in the summary.
ALL_PHASES=(toolchain root stress race-cli fuzz rootless clients vm docker-py)
if [[ -n ${SLOPBOX_TEST_PHASES:-} ]]; then
	IFS=', ' read -r -a phases <<<"$SLOPBOX_TEST_PHASES"
	((${#phases[@]})) || { echo "SLOPBOX_TEST_PHASES names no phase (${ALL_PHASES[*]})" >&2; exit 2; }
	for p in "${phases[@]}"; do
		[[ " ${ALL_PHASES[*]} " == *" $p "* ]] || { echo "SLOPBOX_TEST_PHASES: no phase $p (${ALL_PHASES[*]})" >&2; exit 2; }
	done
else
	phases=("${ALL_PHASES[@]}")
fi
# phase NAME: whether NAME is to run.
phase() { [[ " ${phases[*]} " == *" $1 "* ]]; }
# Any phase that runs Go tests needs the helper.
go_phases=""
for p in root stress race-cli fuzz rootless clients; do
	phase "$p" && go_phases=1
done

# Test binaries embed the spawn server as bin/slopbox does (make helper).
[[ -z $go_phases ]] || make -s helper
GOTESTSUM=${GOTESTSUM:-.work/bin/gotestsum}
TEST_USER=${SLOPBOX_TEST_USER:-slopbox-test}
# Packages whose behaviour depends on the caller's privileges run twice.
ROOTLESS_PKGS=(./image/ ./image/archive/ ./local/ ./backend/ ./test/conformance/ ./sandbox/ ./dockercompat/engine/ ./imagebuild/ ./test/integration/)
# Tests that need root by nature; they ran in the root pass above
# (containerd runs as root; a pids limit needs a cgroup, which rootless
# has none of on a cgroup v1 host).
ROOT_ONLY='^(TestDiskFullLeavesStoreConsistent|TestApparentSizesBoundedByStoreSpace|TestRootOwnedWorkspaceMapsToUnprivilegedID|TestContainerdRunc|TestCRI|TestRuntimeTools|TestDoctorTunMode|TestCommandThatCannotBeForkedFailsToStart|TestRelativeMountSwapRace|TestRootSourcesBelowPrivateDirectory|TestKeptOwnersHideRootFilesAndSockets|TestRLMConfigBindKeepsOwners)$'
# Stress tests (many processes on one state root) run in a step of their
# own, not beside other packages.
STRESS='^(TestConcurrentProcessesOnOneRoot|TestManySandboxesOnOneID|TestManySandboxesPSS)$'
STRESS_PKGS=(./test/integration/ ./sandbox/)
# Packages with concurrency of their own: their root pass runs under the
# race detector.
RACE_PKGS=(./backend/ ./image/... ./sandbox/... ./test/conformance/ ./dockercompat/... ./imagebuild/ ./internal/...)
# The CLI and serve under the race detector (a -race slopbox through
# SLOPBOX_BIN): serve's tests (its goroutines serve many clients at once)
# and the CLI's with concurrent streams (stdio copied both ways, a
# terminal, sandboxes shared across processes).
RACE_CLI='^(TestServe.*|TestSandboxAcrossProcesses|TestTerminal|TestRunExitCodes)$'

TEST_BUDGET_MIN=${TEST_BUDGET_MIN:-80}
DEADLINE=$((SECONDS + TEST_BUDGET_MIN * 60))
# SLOPBOX_TEST_LOGS=DIR keeps each phase's log and gotestsum JSON (with
# every test's time) in DIR; otherwise they go when the run ends.
if [[ -n ${SLOPBOX_TEST_LOGS:-} ]]; then
	logs=$SLOPBOX_TEST_LOGS
	mkdir -p "$logs"
	keep_logs=1
else
	logs=$(mktemp -d /tmp/slopbox-test-logs.XXXXXX)
	keep_logs=""
fi
chmod 755 "$logs"
summary=$logs/summary
: >"$summary"
work=""
phase_tmps=()
declare -A phase_user=()
fuzz_tmp="" race_tmp="" root_tmp="" stress_tmp="" cli_tmp="" clients_tmp="" clients_out=""
trap 'sweep_all; [[ -n $keep_logs ]] || rm -rf "$logs"; rm -rf ${work:+"$work"} ${clients_out:+"$clients_out"}' EXIT
left_out=()
if [[ -n ${SLOPBOX_TEST_PHASES:-} ]]; then
	for p in "${ALL_PHASES[@]}"; do
		phase "$p" || left_out+=("$p")
	done
	echo "== only these phases (SLOPBOX_TEST_PHASES): ${phases[*]}" >&2
	((${#left_out[@]} == 0)) || echo "== LEFT OUT: the phases ${left_out[*]} (SLOPBOX_TEST_PHASES=$SLOPBOX_TEST_PHASES)" >>"$summary"
fi

# sweep_all: sweeps every phase's TMPDIR that is left (the EXIT trap's).
# shellcheck disable=SC2317 # run by the EXIT trap
sweep_all() {
	local d
	for d in "${phase_tmps[@]}"; do
		sweep "$d" "${phase_user[$d]}" || true
	done
}

# phase_tmp VAR [USER]: makes a TMPDIR for a phase (t.TempDir's home, and
# GOTMPDIR's), sets VAR to it and has it swept when the run ends, at the
# latest. Only root (or USER, for a phase run as USER) may write in it, so
# no one else can plant a state root for the sweep to act on; its path is
# short: a socket's path under it must fit sun_path (108 bytes).
phase_tmp() {
	local -n phase_tmp_var=$1
	phase_tmp_var=$(mktemp -d /tmp/sbt.XXXXXX)
	[[ -z ${2:-} ]] || chown "$2" "$phase_tmp_var"
	chmod 711 "$phase_tmp_var"
	phase_tmps+=("$phase_tmp_var")
	phase_user[$phase_tmp_var]=${2:-}
}

# sweep DIR [USER]: removes what a phase's tests left in DIR (the phase's
# TMPDIR) when its time limit killed them before their cleanups ran. A
# sandbox needs no daemon: its PID 1 outlives the test binary that started
# it, and so does a serve or monitor the tests started. First every
# process that names a path in DIR in its arguments (serve --root, a
# monitor, a spawn server and its inits: ROOT/bin/spawn-*) is killed; then
# each state root there (ROOT in ROOT/c/ID/state.json, owned by root, or
# by USER for a phase run as USER) is emptied by slopbox itself (rm -f
# unmounts and frees what a sandbox holds), and each one found is said in
# the summary. DIR goes only when every root in it is empty: a sandbox
# that would not go keeps its state (and its id slice) and fails the run.
sweep() {
	local dir=$1 user=${2:-} root ids rc=0 p killed=0
	[[ -d $dir ]] || return 0
	local -a as=() slopbox=(bin/slopbox)
	if [[ -n $user ]]; then
		as=(setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups --reset-env -- env -C /)
		slopbox=("$work/bin/slopbox")
	fi
	for p in /proc/[0-9]*; do
		[[ ${p#/proc/} != "$$" ]] || continue
		if grep -qz -e "^$dir/" -e "=$dir/" "$p/cmdline" 2>/dev/null; then
			# What it was, for the summary: a leak is a test's defect.
			echo "== left running: pid ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-300)" | tee -a "$summary" >&2
			kill -9 "${p#/proc/}" 2>/dev/null && killed=$((killed + 1))
		fi
	done
	((killed == 0)) || echo "== swept $killed processes naming $dir" | tee -a "$summary" >&2
	while IFS= read -r -d '' root; do
		ids=$(timeout 60 "${as[@]}" "${slopbox[@]}" --root "$root" ps -aq) || { rc=1; continue; }
		[[ -n $ids ]] || continue
		echo "== swept $(wc -w <<<"$ids") sandboxes left in $root" | tee -a "$summary" >&2
		# shellcheck disable=SC2086 # one id per word
		timeout 60 "${as[@]}" "${slopbox[@]}" --root "$root" rm -f $ids >&2 || true
		ids=$(timeout 60 "${as[@]}" "${slopbox[@]}" --root "$root" ps -aq) && [[ -z $ids ]] || rc=1
	done < <(find "$dir" -xdev -user "${user:-0}" -regex '.*/c/[^/]*/state\.json' -printf '%h\0' | xargs -0r -n1 dirname -z | xargs -0r -n1 dirname -z | sort -zu)
	if ((rc != 0)); then
		echo "== FAILED: sweep: sandboxes left in $dir could not be removed; it is kept" | tee -a "$summary" >&2
		return 1
	fi
	rm -rf --one-file-system "$dir" || true
}

# checked NAME LIMIT CMD...: runs a phase under a time limit; its result
# is printed as it ends and, when it failed, kept for the summary printed
# last, where a CI log's tail shows it.
checked() {
	local name=$1 limit=$2 start=$SECONDS rc=0
	shift 2
	# Each phase's own limit, cut to what is left of the whole run's
	# budget (TEST_BUDGET_MIN, 80: with the build before it, below CI's
	# 90 minutes): the limits can never add up to more than the budget.
	local secs=$((${limit%m} * 60)) left=$((DEADLINE - SECONDS))
	if ((left < 60)); then
		echo "== FAILED: $name: not run, the run's budget of ${TEST_BUDGET_MIN} min is spent" | tee -a "$summary" >&2
		return 1
	fi
	((secs > left)) && secs=$left
	limit=${secs}s
	echo "== $name (limit ${limit})" >&2
	# set -e does not apply inside a list with ||: rc is the command's.
	{
		timeout -k 30 "$limit" "$@" 2>&1 | tee "$logs/$name.log"
		rc=${PIPESTATUS[0]}
	} || true
	if ((rc == 0)); then
		echo "== $name: passed in $((SECONDS - start)) s" >&2
		return 0
	fi
	local why="failed (exit $rc)"
	((rc == 124)) && why="TIMED OUT after $limit"
	echo "== $name: $why in $((SECONDS - start)) s" >&2
	{
		echo "== FAILED: $name: $why"
		grep -E -A15 '^panic: test timed out' "$logs/$name.log" | grep -v '^goroutine ' | head -25 || true
		grep -E '^(--- FAIL|FAIL|panic:|=== FAIL|  UNEXPECTED|  LISTED)' "$logs/$name.log" | head -60 || true
	} >>"$summary"
	return 1
}
status=0
if [[ -n ${CI:-} ]] && ((${#left_out[@]})); then
	# CI skips nothing: a run restricted to some phases is not a pass.
	echo "== FAILED: under CI every phase runs, and SLOPBOX_TEST_PHASES left out ${left_out[*]}" >>"$summary"
	status=1
fi

# checked_bg NAME OUT CMD...: a phase (a checked or gotest call) run in the
# background, its output kept in OUT and shown by wait_bg NAME when it ends.
declare -A bg_pids=() bg_outs=()
# The job's status goes to OUT.rc, not through bash's memory of its pid:
# pid_max is 32768 here without systemd, and bash forgets a finished
# child's status when a later child of its own takes the same pid.
checked_bg() {
	local name=$1 out=$2
	shift 2
	rm -f "$out.rc"
	{
		local rc=0
		"$@" >"$out" 2>&1 || rc=$?
		echo "$rc" >"$out.rc"
	} &
	bg_pids[$name]=$!
	bg_outs[$name]=$out
}
wait_bg() {
	local out=${bg_outs[$1]} rc
	wait "${bg_pids[$1]}" || true
	cat "$out"
	rc=$(cat "$out.rc" 2>/dev/null) || rc=""
	if [[ -z $rc ]]; then
		echo "== FAILED: $1: ended without a status (killed?)" | tee -a "$summary" >&2
		return 1
	fi
	return "$rc"
}

# gotest NAME LIMIT GOTESTARGS...: go test through gotestsum, which prints
# each package as it ends and, at its end, the failures and skips with
# their output; its JSON is kept for the list of skips printed last.
gotest() {
	local name=$1 limit=$2
	shift 2
	checked "$name" "$limit" "$GOTESTSUM" --format pkgname-and-test-fails --jsonfile "$logs/$name.json" -- "$@"
}

# asuser NAME LIMIT PKG BIN ARGS...: a prebuilt test binary run as
# $TEST_USER in its package's copy, its output turned into go test's JSON
# for gotestsum.
asuser() {
	local name=$1 limit=$2 pkg=$3 bin=$4 script tmp rc=0
	shift 4
	phase_tmp tmp "$TEST_USER"
	script=$work/$name.sh
	printf '#!/bin/sh\ncd %q && HOME=%q TMPDIR=%q GOTMPDIR=%q exec %q -test.v=test2json -test.count=1' "$work/$pkg" "$(getent passwd "$TEST_USER" | cut -d: -f6)" "$tmp" "$tmp" "$bin" >"$script"
	printf ' %q' "$@" >>"$script"
	printf ' 2>&1\n' >>"$script"
	chmod 755 "$script"
	checked "$name" "$limit" "$GOTESTSUM" --format pkgname-and-test-fails --jsonfile "$logs/$name.json" --raw-command -- \
		bash -o pipefail -c "su '$TEST_USER' -s /bin/sh '$script' | go tool test2json -t -p '$pkg'" || rc=1
	sweep "$tmp" "$TEST_USER" || rc=1
	return "$rc"
}

# A fresh machine has no Go, or Debian's 1.19: the toolchain go.mod names
# is fetched (or taken from the cache of an earlier fetch) and its hash
# checked against the checksum database.
# shellcheck disable=SC2317 # run through checked (bash -c)
toolchain_check() {
	local tc
	tc=$(mktemp -d)
	cp go.mod "$tc/" && mkdir "$tc/scripts" && cp scripts/go-toolchain.sh "$tc/scripts/"
	env PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" bash "$tc/scripts/go-toolchain.sh"
	local want
	want=$(awk '$1 == "toolchain" {print $2; exit}' go.mod)
	"$tc/.work/go/bin/go" version | grep -q "$want " || { echo "the fetched toolchain is not the one go.mod names ($want)" >&2; rm -rf "$tc"; return 1; }
	rm -rf "$tc"
}
export -f toolchain_check
if phase toolchain; then
	checked toolchain 5m bash -c toolchain_check || status=1
fi

# make_work: the copy of the checkout's tracked files (and bin/slopbox)
# that $TEST_USER can read, for the rootless phases and docker-py's; made
# once, by the first phase that needs it, and removed when the run ends.
make_work() {
	[[ -z $work ]] || return 0
	[[ $(id -u) -eq 0 ]] || { echo "not root: the rootless run needs root to switch to $TEST_USER" >&2; exit 1; }
	work=$(mktemp -d /tmp/slopbox-rootless.XXXXXX)
	# The user must be able to read the sources (testdata) wherever CI cloned them.
	git ls-files -z | xargs -0 -I{} cp --parents {} "$work/"
	mkdir -p "$work/bin" && cp bin/slopbox "$work/bin/slopbox" # for test/integration
	chmod -R a+rX "$work"
	chmod 755 "$work"
}

# Bridge networking runs slirp4netns as the user, which opens
# The real clients (docker compose v2, the client tests) build in the
# background while the root pass runs; the clients phase waits for them.
if phase clients; then
	clients_out=$(mktemp -d /tmp/slopbox-clients.XXXXXX)
	clients_bin=$clients_out/clients.test
	chmod 755 "$clients_out"
	checked_bg clients-build "$logs/clients-build.out" checked clients-build 20m scripts/clients.sh "$clients_out"
fi

# /dev/net/tun: most distributions ship it 0666, these machines 0600
# (`slopbox doctor` explains it). Set it as distributions do.
if [[ $(id -u) -eq 0 && -c /dev/net/tun ]]; then
	chmod 0666 /dev/net/tun
fi

# The root pass. The packages with concurrency of their own run once,
# under the race detector, beside the others (the integration tests, one
# after the other, mostly wait on processes); the integration tests that
# drive the CLI and serve hardest run once too, below, against a -race
# slopbox. Every test runs as root exactly once in these three phases.
# The limits allow for a cold build cache (a fresh machine, as CI's): in
# run 42 (cold, two CPU burners beside it) the race phase took 1039 s,
# its sandbox package 676 s, and fuzzing spent over 3 min compiling its
# instrumented binaries before the first input.
if phase root; then
	# A package list that names a package no longer there fails the run
	# here, not as an empty list.
	go list "${RACE_PKGS[@]}" "${ROOTLESS_PKGS[@]}" >/dev/null || { echo "RACE_PKGS or ROOTLESS_PKGS names a package that is not there" >&2; exit 1; }
	mapfile -t race_pkgs < <(go list "${RACE_PKGS[@]}")
	mapfile -t plain_pkgs < <(go list ./... | grep -vxF -f <(printf '%s\n' "${race_pkgs[@]}"))
	# Each phase in a TMPDIR of its own (phase_tmp), swept when it ends: what
	# a phase its time limit killed left running goes, and only that.
	phase_tmp race_tmp
	phase_tmp root_tmp
	TMPDIR=$race_tmp GOTMPDIR=$race_tmp checked_bg root-race "$logs/root-race.out" gotest root-race 25m -race -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 22m -skip "$STRESS" "${race_pkgs[@]}"
	TMPDIR=$root_tmp GOTMPDIR=$root_tmp gotest root 22m -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 20m -skip "$STRESS|$RACE_CLI" "${plain_pkgs[@]}" || status=1
	sweep "$root_tmp" || status=1
	wait_bg root-race || status=1
	sweep "$race_tmp" || status=1
fi

if phase stress; then
	phase_tmp stress_tmp
	TMPDIR=$stress_tmp GOTMPDIR=$stress_tmp gotest root-stress 6m -p 1 -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 5m -run "$STRESS" "${STRESS_PKGS[@]}" || status=1
	sweep "$stress_tmp" || status=1
fi

# The CLI and serve under the race detector: a -race slopbox drives the
# integration tests named in RACE_CLI, in the background while fuzzing and
# the rootless packages run (each mostly waits on processes); the stress
# steps come after it, alone.
if phase race-cli; then
	go build -race -tags "$TAGS" -o "$logs/slopbox-race" ./cmd/slopbox
	# Its limit leaves room: it took 802-827 s in runs 44 and 45 and passed
	# its old 14 min test timeout in run 46 (burners, and an engineer's builds
	# beside it). It runs beside fuzzing and the rootless packages, which take
	# longer (about 1200 s), so the room costs a passing run nothing.
	phase_tmp cli_tmp
	TMPDIR=$cli_tmp GOTMPDIR=$cli_tmp SLOPBOX_BIN=$logs/slopbox-race checked_bg race-cli "$logs/race-cli.out" gotest race-cli 24m -tags "$TAGS" -ldflags "$LDFLAGS" -count=1 -timeout 22m -run "$RACE_CLI" ./test/integration/
fi

# Each fuzz target for a count of inputs, about 10 s each here (their
# seeds and testdata/fuzz corpora also ran above, as tests); FUZZTIME
# (a count, 1000x, or a time, 30s) sets another bound for all of them.
# A time bound is not used: with one, go test can end a target that found
# nothing with "context deadline exceeded" and FAIL (a race in Go's
# fuzzing coordinator, golang/go#75804; run 50 in FuzzGlob). Under load a
# count only takes longer. FuzzApplyLayer's body crashes on an input
# ApplyLayer spends over 5 s on, so a real hang is still caught.
if phase fuzz; then
	# shellcheck disable=SC2317 # run through checked (bash -c)
	fuzz() {
		local target name pkg bound rc=0
		for target in "FuzzApplyLayer ./image/archive/ 20000x" "FuzzParseReference ./image/ 40000x" "FuzzAgentRequest ./sandbox/ 8000x" "FuzzMonitorLog ./sandbox/ 400x" "FuzzParseSpec ./dockercompat/ 40000x" "FuzzGlob ./dockercompat/ 200000x" "FuzzReadArchive ./dockercompat/ 5000x" "FuzzAnswer ./internal/netd/ 40000x"; do
			read -r name pkg bound <<<"$target"
			go test -tags "$TAGS" -ldflags "$LDFLAGS" -run '^$' -fuzz "^$name\$" -fuzztime "${FUZZTIME:-$bound}" "$pkg" || rc=1
		done
		return "$rc"
	}
	export -f fuzz
	# In a TMPDIR of its own, swept when the phase ends: in run 42 the time
	# limit killed FuzzAgentRequest, and its sandboxes' PID 1s stayed.
	phase_tmp fuzz_tmp
	GOTMPDIR=$fuzz_tmp TMPDIR=$fuzz_tmp checked fuzz 12m bash -c fuzz || status=1
	sweep "$fuzz_tmp" || status=1
fi

if phase rootless; then
	make_work
	stress_bins=()
	for pkg in "${ROOTLESS_PKGS[@]}"; do
		[[ -d $pkg ]] || { echo "== FAILED: ROOTLESS_PKGS names $pkg, which is not there" >>"$summary"; status=1; continue; }
		ls "$pkg"/*_test.go >/dev/null 2>&1 || continue
		bin="$work/$(echo "$pkg" | tr -c 'a-z0-9\n' '_').test"
		go test -c -tags "$TAGS" -ldflags "$LDFLAGS" -o "$bin" "$pkg"
		chmod 755 "$bin"
		name=rootless-$(basename "$pkg")
		asuser "$name" 12m "$pkg" "$bin" -test.timeout=11m -test.skip "$ROOT_ONLY|$STRESS" || status=1
		if [[ " ${STRESS_PKGS[*]} " == *" $pkg "* ]]; then
			stress_bins+=("$name-stress $pkg $bin")
		fi
	done
fi
if phase race-cli; then
	wait_bg race-cli || status=1
	sweep "$cli_tmp" || status=1
fi
if phase rootless; then
	for step in "${stress_bins[@]}"; do
		read -r name pkg bin <<<"$step"
		asuser "$name" 6m "$pkg" "$bin" -test.timeout=5m -test.run "$STRESS" || status=1
	done
fi

# Real clients nobody here wrote, pinned in modules of their own and built
# from the Go module proxy by scripts/clients.sh (started at the top, in
# the background): docker compose v2 through both docker clients, and
# testcontainers-go (test/clients). As root against a root serve, and as
# $TEST_USER against a rootless one; each test binary starts its own serve
# on a state root of its own.
if phase clients; then
	if wait_bg clients-build; then
		make_work
		cp .work/bin/docker-compose "$work/bin/docker-compose" && chmod 755 "$work/bin/docker-compose"
		phase_tmp clients_tmp
		checked clients-root 10m "$GOTESTSUM" --format pkgname-and-test-fails --jsonfile "$logs/clients-root.json" --raw-command -- \
			bash -o pipefail -c "cd test/clients && TMPDIR='$clients_tmp' '$clients_bin' -test.v=test2json -test.count=1 -test.timeout=9m 2>&1 | go tool test2json -t -p ./test/clients/" || status=1
		sweep "$clients_tmp" || status=1
		asuser rootless-clients 10m ./test/clients/ "$clients_bin" -test.timeout=9m || status=1
	else
		{
			echo "== FAILED: clients: scripts/clients.sh could not build them; the end of its output:"
			tail -n 15 "$logs/clients-build.out" | sed 's/^/   /'
		} | tee -a "$summary" >&2
		status=1
	fi
fi

# The cgroup v2 suite in a VM (Vagrantfile, test/vm): what a cgroup v1
# host cannot show. It boots and runs (QEMU) while docker-py runs here.
# SLOPBOX_SKIP_VM=1 leaves it out of a local run, and says so; CI runs it.
vm_started=""
if phase vm; then
	if [[ -n ${SLOPBOX_SKIP_VM:-} ]]; then
		echo "== VM suite LEFT OUT (SLOPBOX_SKIP_VM is set)" >&2
		echo "== LEFT OUT: the VM suite (SLOPBOX_SKIP_VM is set)" >>"$summary"
	else
		vm_started=1
		checked_bg vm "$logs/vm.out" checked vm 30m scripts/vm-test.sh
	fi
fi

# docker-py's own integration suite against serve, client and server as
# the same user: as root and as $TEST_USER, side by side (each mostly waits
# on its sandboxes); the rootless run's output is shown when both are done.
if phase docker-py; then
	shared=${SLOPBOX_SHARED:-../shared}
	if [[ -d $shared/peers/docker-py-5.0.3 && -x $shared/compat/run-dockerpy.sh ]]; then
		make_work
		mkdir -p "$work/shared" && cp -r "$shared/compat" "$shared/peers" "$work/shared/" && chmod -R a+rX "$work/shared"
		install -d -o "$TEST_USER" "$work/dockerpy-rootless"
		checked_bg docker-py-rootless "$logs/docker-py-rootless.out" checked docker-py-rootless 14m su "$TEST_USER" -s /bin/sh -c \
			"cd '$work' && SLOPBOX_SHARED='$work/shared' HOME=\$(getent passwd $TEST_USER | cut -d: -f6) scripts/dockerpy.sh rootless bin/slopbox '$work/dockerpy-rootless'"
		SLOPBOX_SHARED=$shared checked docker-py-root 14m scripts/dockerpy.sh root bin/slopbox "$logs/dockerpy-root" || status=1
		wait_bg docker-py-rootless || status=1
	elif [[ -n ${CI:-} ]]; then
		echo "== FAILED: docker-py: no docker-py suite at $shared (peers/docker-py-5.0.3, compat/run-dockerpy.sh): shared/ belongs beside the checkout, or set SLOPBOX_SHARED" | tee -a "$summary" >&2
		status=1
	else
		# A user's clone has no shared/ beside it: the phase is not run, and
		# says how to run it; under CI it is a failure (above).
		echo "== NOT RUN: docker-py's suite: there is no $shared/peers/docker-py-5.0.3 with $shared/compat/run-dockerpy.sh beside this checkout; to run it, set SLOPBOX_SHARED to a directory holding peers/docker-py-5.0.3 (a docker-py 5.0.3 checkout) and compat/run-dockerpy.sh" | tee -a "$summary" >&2
	fi
fi

if [[ -n $vm_started ]]; then
	wait_bg vm || status=1
fi

echo "== all tests took $SECONDS s" >&2
# Every test skipped, with its reason: CI skips nothing silently.
python3 - "$logs" <<'EOF' >&2 || true
import glob, json, os, sys
skips = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    phase = os.path.basename(path)[:-5]
    out = {}
    for line in open(path, errors="replace"):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        key = (ev.get("Package", ""), ev.get("Test", ""))
        if ev.get("Action") == "output" and key[1]:
            out.setdefault(key, []).append(ev.get("Output", ""))
        if ev.get("Action") == "skip" and key[1]:
            why = [l.strip() for l in out.get(key, []) if l.strip() and not l.lstrip().startswith(("=== ", "--- "))]
            skips[(phase,) + key] = why[-1] if why else ""
print(f"== tests skipped: {len(skips)}")
for (phase, pkg, test), why in sorted(skips.items()):
    print(f"   {phase}: {pkg.removeprefix('github.com/slopbox/slopbox/')} {test}: {why}")
EOF
if [[ -s $summary ]]; then
	echo "== summary: failures, and what was not run" >&2
	cat "$summary" >&2
fi
exit $status
