#!/usr/bin/env bash
# make bench: times slopbox beside docker, podman, runc, crun, skopeo+umoci
# and the host floors in one run, with ../shared/bench (BENCH_HARNESS to
# override), and writes BENCHMARKS.md (ratios against the peers measured in
# the same run) with bench.svg, their bar chart, beside it. As root.
# Benchmarks change host settings the peers need (see the harness's
# README); run them after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
HARNESS=${BENCH_HARNESS:-}
if [[ -z $HARNESS && -d $REPO/../shared/bench ]]; then HARNESS=$(cd "$REPO/../shared/bench" && pwd); fi
[[ -x $HARNESS/40-bench.sh ]] || { echo "bench harness not found (set BENCH_HARNESS=…/shared/bench)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "make bench must run as root (it drives docker, podman and a bench user)" >&2; exit 1; }
export BENCH_WORK=${BENCH_WORK:-$REPO/.work/bench}
export BENCH_RESULTS=${BENCH_RESULTS:-$REPO/.work/bench-results}
export BENCH_ADAPTERS_DIR=$REPO/bench
export SLOPBOX_BIN=$REPO/bin/slopbox
# shellcheck source=/dev/null # the harness's, outside this repository
source "$HARNESS/lib/common.sh"

"$HARNESS/00-install.sh"
"$HARNESS/10-build-images.sh"
"$HARNESS/20-services.sh" start
"$HARNESS/30-push-images.sh"

OUT=$BENCH_RESULTS/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
read -ra PEERS <<<"${BENCH_PEERS:-slopbox slopbox-root slopbox-pool slopbox-pool-root tar-floor crun crun-rootless runc runc-rootless docker docker-nonet podman podman-rootless skopeo-umoci skopeo-umoci-rootless host host-unshare-Urnm-user}"
"$HARNESS/40-bench.sh" -o "$OUT" "${PEERS[@]}"

# The Go API, rootless and as root, on the same machine right after
# (rootless, every figure: also a Dockerfile RUN step's overhead over an
# exec of the same command, issue 25).
CGO_ENABLED=1 go build -tags "seccomp netgo osusergo slopbox_helper" -ldflags "-extldflags -static" -o "$OUT/apibench" ./bench/cmd/apibench
chmod 755 "$OUT" "$OUT/apibench"
as_user "$OUT/apibench" -image "$BUSYBOX_REF" -scale "${SCALE_API:-100}" >"$OUT/api-rootless.jsonl"
"$OUT/apibench" -image "$BUSYBOX_REF" -scale "${SCALE_API:-100}" -only spawn,exec,exec10mb,scale >"$OUT/api-root.jsonl"
# 1,000 idle sandboxes at once, rootless, spawned from two goroutines
# (campaigns run many agents side by side on one node).
as_user "$OUT/apibench" -image "$BUSYBOX_REF" -only scale -scale "${SCALE_API_MANY:-1000}" -par 2 >"$OUT/api-scale-many-rootless.jsonl"

# A pull of an image that is already present (one manifest check).
as_user slopbox-bench pull -q "$PYSLIM_REF" >/dev/null
tmp=$(as_user mktemp)
as_user hyperfine -N --warmup 3 --runs 30 --export-json "$tmp" "slopbox-bench pull -q $PYSLIM_REF" >/dev/null
cp "$tmp" "$OUT/repull.json" && rm -f "$tmp"

# What the two setuid helpers a full subordinate range needs cost, rootless
# (issue 45): the same process in a user namespace mapped by newuidmap and
# newgidmap, and mapped to the caller's own ids alone (runc's rootless map).
go build -o "$OUT/idmapcost" ./bench/cmd/idmapcost
chmod 755 "$OUT/idmapcost"
tmp=$(as_user mktemp)
as_user hyperfine -N --warmup 3 --runs 50 --export-json "$tmp" -n helpers "$OUT/idmapcost helpers" -n single "$OUT/idmapcost single" >/dev/null
cp "$tmp" "$OUT/idmap.json" && rm -f "$tmp"

# 10 MB of stdout through the CLI, straight to the pipe: with busybox head
# (the harness's workload, bound by its byte-at-a-time loop) and busybox dd
# with 1 MB blocks, each beside the same busybox command on the host.
as_user slopbox-bench run -d --name bench-10mb "$BUSYBOX_REF" sleep infinity >/dev/null
tmp=$(as_user mktemp)
as_user hyperfine --warmup 3 --runs 30 --export-json "$tmp" \
	-n slopbox-dd "slopbox-bench exec bench-10mb sh -c 'busybox dd if=/dev/zero bs=1000000 count=10 2>/dev/null' | wc -c" \
	-n host-dd "busybox dd if=/dev/zero bs=1000000 count=10 2>/dev/null | wc -c" \
	-n slopbox-head "slopbox-bench exec bench-10mb sh -c 'busybox head -c 10000000 /dev/zero' | wc -c" \
	-n host-head "busybox head -c 10000000 /dev/zero | wc -c" >/dev/null
cp "$tmp" "$OUT/cli10mb.json" && rm -f "$tmp"
as_user slopbox-bench rm -f bench-10mb >/dev/null

# The Engine API: docker-py (Debian's python3-docker) making SlopCodeBench's
# calls against dockerd, rootless podman's service and rootless slopbox
# serve, one after the other (bench/engine/apibench.py).
ENGINE_RUNS=${ENGINE_RUNS:-30} ENGINE_SCALE=${ENGINE_SCALE:-100}
# Each also times bridge spawns and a published port on 127.0.0.1 (issue
# 10): docker's through its userland proxy, podman's through rootlessport.
engine_port=18400
engine() { # peer socket service-pids
	engine_port=$((engine_port + 10))
	/usr/bin/python3 bench/engine/apibench.py --name "$1" --socket "$2" --image "$BUSYBOX_REF" \
		--runs "$ENGINE_RUNS" --scale "$ENGINE_SCALE" --service-pids "$3" \
		--ports-image "$PYSLIM_REF" --port "$engine_port" >>"$OUT/engine.jsonl" ||
		echo "engine bench of $1 failed" >&2
}
engine dockerd /var/run/docker.sock "$(pgrep -xd, dockerd),$(pgrep -xd, containerd)"
rt=/run/user/$(bench_uid)
as_user podman system service --time=0 "unix://$rt/podman-bench.sock" &
for _ in $(seq 50); do [[ -S $rt/podman-bench.sock ]] && break; sleep 0.2; done
engine podman-rootless "$rt/podman-bench.sock" "$(pgrep -u "$(bench_uid)" -xd, podman)"
# The job is the subshell around as_user: stop the service itself.
pkill -u "$(bench_uid)" -f "podman system service --time=0 unix://$rt/podman-bench.sock" || true
wait 2>/dev/null || true
as_user slopbox-bench serve --socket "$rt/slopbox-bench.sock" 2>/dev/null &
for _ in $(seq 50); do [[ -S $rt/slopbox-bench.sock ]] && break; sleep 0.2; done
engine slopbox-rootless "$rt/slopbox-bench.sock" "$(pgrep -u "$(bench_uid)" -f -d, 'slopbox-bench serve')"
# 1,000 idle containers through serve (docker-py create + start), alone.
/usr/bin/python3 bench/engine/apibench.py --name slopbox-rootless --socket "$rt/slopbox-bench.sock" --image "$BUSYBOX_REF" \
	--runs 1 --exec-runs 1 --scale "${ENGINE_SCALE_MANY:-1000}" --service-pids "$(pgrep -u "$(bench_uid)" -f -d, 'slopbox-bench serve')" \
	>"$OUT/engine-scale-many.jsonl" || echo "engine bench of slopbox at ${ENGINE_SCALE_MANY:-1000} failed" >&2
pkill -u "$(bench_uid)" -f "slopbox-bench serve --socket $rt/slopbox-bench.sock" || true
wait 2>/dev/null || true

# Image builds (issue 25): SlopCodeBench's submission Dockerfile, fresh
# and all cached, beside rootless podman and dockerd's classic builder;
# a RUN step's cost (bench/build.sh, build.json).
bench/build.sh "$HARNESS/lib/common.sh" "$OUT" || echo "build bench failed" >&2

# User-defined networks and compose (issue 42): compose up --wait and
# down of a two-service project on its own network, name lookups inside
# it and network create, for dockerd, rootless podman and rootless
# slopbox serve through the same docker compose v2 (bench/network.sh,
# network.json and network.jsonl).
scripts/clients.sh "$OUT" >/dev/null
bench/network.sh "$HARNESS/lib/common.sh" "$OUT" "$REPO/.work/bin/docker-compose" || echo "network bench failed" >&2

# CPU time per container, the whole machine's (/proc/stat: every process,
# the kernel's work included), measured the same way for crun, runc and
# slopbox: CPU_RUNS runs of `true` in a row as the bench user, each in a
# new container (crun and runc on the harness's rootless bundle).
# hyperfine's user and system times count only the processes the command
# waited for.
# shellcheck source=/dev/null # the harness's, outside this repository
source "$HARNESS/lib/bundle.sh"
bundles=$(prepare_rootless_bundles)
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; } # user nice system irq softirq
cpu_per_run() { # name command (run CPU_RUNS times in a row as the bench user)
	local n=${CPU_RUNS:-50} b0 b1 t0 t1
	b0=$(busy_ticks) t0=$(date +%s%N)
	if ! as_user bash -c "for ((i = 0; i < $n; i++)); do $2 >/dev/null || exit 1; done"; then
		echo "cpu bench of $1 failed" >&2
		return 0
	fi
	t1=$(date +%s%N) b1=$(busy_ticks)
	jq -nc --arg name "$1" --arg command "$2" --argjson n "$n" --argjson ticks $((b1 - b0)) --argjson ns $((t1 - t0)) --argjson hz "$(getconf CLK_TCK)" \
		'{name: $name, command: $command, runs: $n, cpu_ms_per_run: ($ticks * 1000 / $hz / $n), wall_ms_per_run: ($ns / 1e6 / $n)}' >>"$OUT/cpu.jsonl"
}
cpu_per_run crun-rootless "crun run --bundle $bundles/true bench-cpu"
# runc is libcontainer and nothing else: the floor a runtime built on it
# starts from (issue 27), measured beside crun.
cpu_per_run runc-rootless "runc run --bundle $bundles/true bench-cpu"
cpu_per_run slopbox "slopbox-bench run --rm $BUSYBOX_REF true"

# Where the CPU of a sandbox spawned, run and removed goes (issue 27), by
# phase: a whole-machine perf profile (every process, the kernel's work
# included) of the Go API's pool-off loop, rootless, split by
# bench/cmd/spawnprofile. The loop makes PROFILE_RUNS sandboxes and 3
# before them.
if command -v perf >/dev/null; then
	pruns=${PROFILE_RUNS:-100}
	go build -o "$OUT/spawnprofile" ./bench/cmd/spawnprofile
	perf record -a -g -o "$OUT/perf.data" 2>"$OUT/perf.log" &
	perfpid=$!
	sleep 1 # perf is recording
	as_user "$OUT/apibench" -image "$BUSYBOX_REF" -only cold -n "$pruns" >"$OUT/profile-run.jsonl" || echo "apibench -only cold failed" >&2
	kill -INT "$perfpid"
	wait "$perfpid" || true # perf exits non-zero when interrupted, its data written
	if [[ -s $OUT/perf.data ]]; then
		perf script -i "$OUT/perf.data" -F comm,period,ip,sym 2>>"$OUT/perf.log" | "$OUT/spawnprofile" -n $((pruns + 3)) >"$OUT/profile.md" ||
			echo "spawn profile failed (log: $OUT/perf.log)" >&2
	else
		echo "perf record failed (log: $OUT/perf.log)" >&2
	fi
	rm -f "$OUT/perf.data"
else
	echo "perf is missing: no spawn profile (apt-get install linux-perf)" >&2
fi

# containerd with slopbox-runc, runc and crun as the runc shim's binary
# (issue 13): `ctr run --rm` of true, from an image containerd pulled
# from the bench registry, on a containerd of its own.
cdir=$(mktemp -d /tmp/slopbox-ctr.XXXXXX)
cat >"$cdir/config.toml" <<EOF
disabled_plugins = ["io.containerd.grpc.v1.cri"]
version = 2
root = "$cdir/root"
state = "$cdir/state"
[grpc]
  address = "$cdir/c.sock"
[ttrpc]
  address = "$cdir/c.sock.ttrpc"
EOF
containerd --config "$cdir/config.toml" >"$cdir/containerd.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do ctr -a "$cdir/c.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
ctr -a "$cdir/c.sock" images pull --plain-http "$BUSYBOX_REF" >/dev/null
ln -s "$REPO/bin/slopbox" "$cdir/slopbox-runc"
names=() cmds=()
# Plain, as the issue asks (slopbox adds its seccomp profile, the others
# run none), and with --seccomp, where all three load containerd's
# default profile: the same work.
for rt in "slopbox-runc:$cdir/slopbox-runc" "runc:$(command -v runc)" "crun:$(command -v crun)"; do
	name=${rt%%:*}
	names+=("$name" "$name --seccomp")
	cmds+=("ctr -a $cdir/c.sock run --rm --runtime io.containerd.runc.v2 --runc-binary ${rt#*:} --runc-root $cdir/$name-root $BUSYBOX_REF bench-$name true")
	cmds+=("ctr -a $cdir/c.sock run --rm --seccomp --runtime io.containerd.runc.v2 --runc-binary ${rt#*:} --runc-root $cdir/$name-root $BUSYBOX_REF bench-$name true")
done
# hyperfine runs its commands one after the other, each its runs in a
# row: whichever goes first meets containerd (and the page cache) in
# another state than the others. So ROUNDS_CTR rounds, each with the list
# rotated by one runtime (round 0 starts with slopbox-runc, round 1 with
# runc, round 2 with crun), RUNS_CTR runs per command in all; ctr.json
# keeps hyperfine's shape, each command's figures over the runs of every
# round (bench/cmd/report reads its command and median).
rounds=${ROUNDS_CTR:-3}
runs=$(((${RUNS_CTR:-30} + rounds - 1) / rounds))
ctrok=1
for ((k = 0; k < rounds; k++)); do
	ctrargs=()
	for ((j = 0; j < ${#names[@]}; j++)); do
		i=$(((j + 2 * k) % ${#names[@]}))
		ctrargs+=(-n "${names[i]}" "${cmds[i]}")
	done
	hyperfine -N --warmup 1 --runs "$runs" --export-json "$cdir/ctr-round$k.json" "${ctrargs[@]}" >/dev/null || ctrok=
done
if [[ -n $ctrok ]]; then
	jq -s '{rounds: length, results: ([.[].results[]] | group_by(.command) | map(
		(.[0].command) as $c | ([.[].times[]] | sort) as $t | ($t | length) as $n |
		{command: $c, mean: (($t | add) / $n),
		 median: (if $n % 2 == 1 then $t[($n - 1) / 2] else ($t[$n / 2 - 1] + $t[$n / 2]) / 2 end),
		 min: $t[0], max: $t[-1], times: $t}))}' "$cdir"/ctr-round*.json >"$OUT/ctr.json"
else
	echo "ctr bench failed (log: $cdir/containerd.log)" >&2
fi
kill "$cpid" || true
wait "$cpid" || true
# Snapshot mounts under its root go with it.
{ findmnt -rn -o TARGET | grep "^$cdir/" || true; } | sort -r | xargs -r umount -l
rm -rf "$cdir"

# The runtime-spec's validation suite against slopbox-runc, runc and crun
# in turn, on this machine in this run (make test runs slopbox's alone).
rtok=1
SLOPBOX_RUNTIMETOOLS_PEERS=runc,crun SLOPBOX_BIN=$SLOPBOX_BIN go test -tags "seccomp netgo osusergo slopbox_helper" \
	-ldflags "-extldflags -static" -count=1 -timeout 20m -run '^TestRuntimeTools$' ./test/integration/ >"$OUT/runtime-tools.log" 2>&1 || rtok=
cp .work/runtime-tools/summary.md "$OUT/runtime-tools.md" 2>/dev/null || rtok=

# BENCHMARKS.md, and beside it bench.svg: the Targets table's ratios as
# a bar chart, which BENCHMARKS.md shows.
go run ./bench/cmd/report -svg bench.svg "$OUT" >BENCHMARKS.md
if [[ -n $rtok ]]; then
	printf '\n## The runtime-spec validation suite (runtime-tools v0.9.0), same run\n\n' >>BENCHMARKS.md
	cat "$OUT/runtime-tools.md" >>BENCHMARKS.md
else
	echo "runtime-tools comparison failed (log: $OUT/runtime-tools.log)" >&2
fi
echo "wrote BENCHMARKS.md and bench.svg from $OUT" >&2
