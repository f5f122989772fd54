#!/usr/bin/env bash
# Image builds (issue 25), side by side in one run; called by
# scripts/bench.sh once the harness's services are up (registry, dockerd),
# as root, with the harness's lib/common.sh at $1:
#
#   bench/build.sh HARNESS_LIB_COMMON OUT
#
# - SlopCodeBench's submission Dockerfile (build_submission_image's
#   shape: FROM the base, RUN mkdir -p, COPY --chown=1000:1000 submission
#   submission, ENV, WORKDIR, RUN setup commands joined by &&, RUN chown
#   -R 1000:1000, USER 1000:1000) on $PYSLIM_REF, already present: built
#   with --no-cache, then the same build all cached, by slopbox rootless
#   (as the bench user), podman rootless and dockerd's classic builder
#   (DOCKER_BUILDKIT=0), each with its default network;
# - a RUN step's cost: a Dockerfile of 10 `RUN true N` steps against one
#   with none, both --no-cache and --network none, beside `exec true` in a
#   running sandbox (none too), through the CLI; the overhead figure the
#   report checks (at most 30 ms) is bench/cmd/apibench's, which does the
#   same through the Go API, build and exec in the same rounds.
#
# Writes OUT/build.json: hyperfine's export, one result per command, each
# named (command field) as the report reads it. A peer that is missing is
# left out, with a line on stderr.
set -euo pipefail
# shellcheck source=/dev/null # the harness's, outside this repository
source "$1"
out=$2
runs=${RUNS_BUILD:-10}
slopbox=${SLOPBOX_BENCH_CMD:-slopbox-bench} # the adapter's install
# The submission's setup commands (SlopCodeBench joins them with &&).
setup=${BUILD_BENCH_SETUP:-"python3 -c 'import main' && mkdir -p /workspace/out"}

ctx=$(mktemp -d /tmp/slopbox-build-bench.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/scb/submission/pkg" "$ctx/run0" "$ctx/run10" "$ctx/hf"
cat >"$ctx/scb/Dockerfile" <<EOF
FROM $PYSLIM_REF
RUN mkdir -p /workspace
COPY --chown=1000:1000 submission submission
ENV PYTHONDONTWRITEBYTECODE=1 \\
    PIP_CACHE_DIR=/tmp/pip-cache-dir
WORKDIR /workspace
RUN cp -r /submission/. /workspace/ && $setup
RUN chown -R 1000:1000 /workspace
USER 1000:1000
EOF
printf 'def main():\n    print("hello")\n' >"$ctx/scb/submission/main.py"
for i in $(seq 20); do printf 'X = %d\n' "$i" >"$ctx/scb/submission/pkg/m$i.py"; done
printf 'FROM %s\nLABEL bench=run0\n' "$BUSYBOX_REF" >"$ctx/run0/Dockerfile"
{
	printf 'FROM %s\nLABEL bench=run10\n' "$BUSYBOX_REF"
	for i in $(seq 10); do printf 'RUN true %d\n' "$i"; done
} >"$ctx/run10/Dockerfile"
chmod -R a+rX "$ctx"
chmod 777 "$ctx/hf"

json=()
bench() { # user|root  name command [name command]…
	local who=$1 f args=()
	shift
	f=$ctx/hf/$((${#json[@]})).json
	while (($#)); do
		args+=(-n "$1" "$2")
		shift 2
	done
	if [[ $who == user ]]; then
		as_user hyperfine -N --warmup 1 --runs "$runs" --export-json "$f" "${args[@]}" >/dev/null || { echo "build bench: ${args[*]} failed" >&2; return 0; }
	else
		hyperfine -N --warmup 1 --runs "$runs" --export-json "$f" "${args[@]}" >/dev/null || { echo "build bench: ${args[*]} failed" >&2; return 0; }
	fi
	json+=("$f")
}

# slopbox, rootless. The cached build is built once first (hyperfine's
# warm-up builds it too).
for ref in "$PYSLIM_REF" "$BUSYBOX_REF"; do
	as_user "$slopbox" pull -q "$ref" >/dev/null || echo "build bench: slopbox pull $ref failed" >&2
done
bench user slopbox-build "$slopbox build -q --no-cache -t bench-build $ctx/scb" \
	slopbox-build-cached "$slopbox build -q -t bench-build $ctx/scb"
as_user "$slopbox" run -d --name bench-build-exec "$BUSYBOX_REF" sleep infinity >/dev/null
bench user slopbox-run0 "$slopbox build -q --no-cache --network none -t bench-run0 $ctx/run0" \
	slopbox-run10 "$slopbox build -q --no-cache --network none -t bench-run10 $ctx/run10" \
	slopbox-exec-true "$slopbox exec bench-build-exec true"
as_user "$slopbox" rm -f bench-build-exec >/dev/null
as_user "$slopbox" rmi -f bench-build bench-run0 bench-run10 >/dev/null 2>&1 || true
as_user "$slopbox" image prune -f >/dev/null 2>&1 || true

# podman, rootless.
if command -v podman >/dev/null && as_user podman pull -q --tls-verify=false "$PYSLIM_REF" >/dev/null; then
	bench user podman-build "podman build -q --no-cache -t bench-build $ctx/scb" \
		podman-build-cached "podman build -q -t bench-build $ctx/scb"
	as_user podman rmi -f bench-build >/dev/null 2>&1 || true
	as_user podman image prune -f >/dev/null 2>&1 || true
else
	echo "build bench: no rootless podman" >&2
fi

# dockerd's classic builder.
if docker info >/dev/null 2>&1 && docker pull -q "$PYSLIM_REF" >/dev/null; then
	bench root docker-build "env DOCKER_BUILDKIT=0 docker build -q --no-cache -t bench-build $ctx/scb" \
		docker-build-cached "env DOCKER_BUILDKIT=0 docker build -q -t bench-build $ctx/scb"
	docker rmi -f bench-build >/dev/null 2>&1 || true
	docker image prune -f >/dev/null 2>&1 || true
else
	echo "build bench: no dockerd" >&2
fi

if ((${#json[@]})); then
	jq -s '{results: [.[].results[]]}' "${json[@]}" >"$out/build.json"
fi
