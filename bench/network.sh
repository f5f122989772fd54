#!/usr/bin/env bash
# User-defined networks and compose (issue 42), side by side in one run;
# called by scripts/bench.sh once the harness's services are up (registry,
# dockerd), as root, with the harness's lib/common.sh at $1:
#
#   bench/network.sh HARNESS_LIB_COMMON OUT COMPOSE_BIN
#
# For dockerd (as root), rootless podman's service and rootless slopbox
# serve (both as the bench user), each through the same docker compose v2
# binary (COMPOSE_BIN, built from the Go module proxy by scripts/clients.sh):
# - `compose up -d --wait` of a two-service project on its own network
#   (compose's default: a network per project), timed with the project
#   down before each run, and `up -d` alike (compose's --wait checks the
#   containers on a 500 ms ticker, the first check after 500 ms: a floor
#   no engine goes under); then `compose down -t 0` with it up before each;
# - inside service a, bench/cmd/lookupbench: service b's name through the
#   network's DNS server beside localhost from /etc/hosts, each as a new
#   process resolving it (and the DNS round trip in-process, reported);
# - `network create` through the Engine API (docker-py, the round trip of
#   POST /networks/create), its removal after each.
#
# Writes OUT/network.json: hyperfine's export, one result per command, each
# named (command field) PEER-up, PEER-up-nowait and PEER-down as the
# report reads them; and
# OUT/network.jsonl: one object per peer with its lookup and create figures.
# A peer that fails is left out, with a line on stderr.
set -euo pipefail
# shellcheck source=/dev/null # the harness's, outside this repository
source "$1"
out=$2
compose_src=$3
runs=${RUNS_COMPOSE:-10}
slopbox=${SLOPBOX_BENCH_CMD:-slopbox-bench} # the adapter's install
repo=$(cd "$(dirname "$0")/.." && pwd)

ctx=$(mktemp -d /tmp/slopbox-net-bench.XXXXXX)
rt=/run/user/$(bench_uid)
services=()
cleanup() {
	local p
	for p in "${services[@]}"; do pkill -u "$(bench_uid)" -f "$p" || true; done
	wait 2>/dev/null || true
	rm -rf "$ctx"
}
trap cleanup EXIT
mkdir -p "$ctx/bin" "$ctx/hf"
install -m 755 "$compose_src" "$ctx/bin/docker-compose"
(cd "$repo" && CGO_ENABLED=0 go build -tags netgo -o "$ctx/bin/lookupbench" ./bench/cmd/lookupbench)
for peer in dockerd podman-rootless slopbox-rootless; do
	mkdir -p "$ctx/$peer"
	cat >"$ctx/$peer/compose.yaml" <<EOF
name: netbench
services:
  a:
    image: $BUSYBOX_REF
    command: ["sleep", "3600"]
    volumes: ["$ctx/bin:/bench:ro"]
  b:
    image: $BUSYBOX_REF
    command: ["sleep", "3600"]
EOF
	# compose up of 100 services (issue 45): each its own container on
	# the project's network, as a test fleet's file is.
	{
		echo "name: netbench100"
		echo "services:"
		for i in $(seq 100); do
			printf '  s%d:\n    image: %s\n    command: ["sleep", "3600"]\n' "$i" "$BUSYBOX_REF"
		done
	} >"$ctx/$peer/compose100.yaml"
done
chmod -R a+rX "$ctx"
chmod 777 "$ctx/hf"

json=()
# one peer: name user|root socket
one() {
	local peer=$1 who=$2 sock=$3 f c pre dc
	f=$ctx/hf/$peer.json
	c="$ctx/bin/docker-compose -f $ctx/$peer/compose.yaml" # as hyperfine splits it
	if [[ $who == user ]]; then pre=(as_user env "DOCKER_HOST=unix://$sock"); else pre=(env "DOCKER_HOST=unix://$sock"); fi
	dc=("${pre[@]}" "$ctx/bin/docker-compose" -f "$ctx/$peer/compose.yaml")
	"${dc[@]}" pull -q >/dev/null 2>&1 || true
	if ! "${pre[@]}" hyperfine -N ${NET_SHOW:+--show-output} --warmup 1 --runs "$runs" --export-json "$f" \
		--prepare "$c down -t 0" -n "$peer-up" "$c up -d --wait" -n "$peer-up-nowait" "$c up -d" >"$ctx/$peer/up.log" 2>&1; then
		cat "$ctx/$peer/up.log" >&2
		echo "network bench: compose up on $peer failed; once more, shown:" >&2
		"${dc[@]}" down -t 0 >&2 || true
		"${dc[@]}" up -d --wait >&2 || true
		"${dc[@]}" down -t 0 >/dev/null 2>&1 || true
		return 0
	fi
	json+=("$f")
	f=$ctx/hf/$peer-down.json
	if "${pre[@]}" hyperfine -N --warmup 1 --runs "$runs" --export-json "$f" \
		--prepare "$c up -d --wait" -n "$peer-down" "$c down -t 0" >"$ctx/$peer/down.log" 2>&1; then
		json+=("$f")
	else
		cat "$ctx/$peer/down.log" >&2
		echo "network bench: compose down on $peer failed" >&2
	fi
	# 100 services up (-d), the project down before each run.
	local c100="$ctx/bin/docker-compose -f $ctx/$peer/compose100.yaml"
	f=$ctx/hf/$peer-up100.json
	if "${pre[@]}" hyperfine -N --warmup 0 --runs "${RUNS_COMPOSE100:-3}" --export-json "$f" \
		--prepare "$c100 down -t 0" --cleanup "$c100 down -t 0" -n "$peer-up100" "$c100 up -d" >"$ctx/$peer/up100.log" 2>&1; then
		json+=("$f")
	else
		cat "$ctx/$peer/up100.log" >&2
		echo "network bench: compose up of 100 services on $peer failed" >&2
		"${pre[@]}" "$ctx/bin/docker-compose" -f "$ctx/$peer/compose100.yaml" down -t 0 >/dev/null 2>&1 || true
	fi
	# Name lookups, inside service a, with the project up.
	local lookups='{}' create='{}'
	if "${dc[@]}" up -d --wait >/dev/null 2>&1 &&
		lookups=$("${dc[@]}" exec -T a /bench/lookupbench -n "${RUNS_LOOKUP:-300}" b localhost); then
		:
	else
		echo "network bench: lookups on $peer failed" >&2
		lookups='{}'
	fi
	"${dc[@]}" down -t 0 >/dev/null 2>&1 || true
	# network create through the Engine API (docker-py), removed after each.
	if ! create=$(/usr/bin/python3 - "$sock" "${RUNS_NETCREATE:-30}" <<'EOF'
import json, statistics, sys, time
import docker
c = docker.DockerClient(base_url="unix://" + sys.argv[1], timeout=120)
t = []
for i in range(int(sys.argv[2]) + 3):
    t0 = time.perf_counter()
    n = c.networks.create("netbench-create")
    d = time.perf_counter() - t0
    n.remove()
    if i >= 3:
        t.append(d * 1000)
print(json.dumps({"network_create_ms": statistics.median(t)}))
EOF
	); then
		echo "network bench: network create on $peer failed" >&2
		create='{}'
	fi
	jq -nc --arg peer "$peer" --argjson l "$lookups" --argjson c "$create" '{peer: $peer} + $l + $c' >>"$out/network.jsonl"
}

podman_peer() {
	# Names between a project's containers come, for podman, from
	# netavark and aardvark-dns (reference/networks.md's design); Debian
	# 12's podman defaults to CNI without a DNS plugin, where no service
	# name resolves. The bench user's podman is set to netavark.
	local p missing=()
	for p in netavark aardvark-dns; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
	if ((${#missing[@]})); then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || echo "network bench: could not install ${missing[*]}" >&2
	fi
	local conf
	conf=$(getent passwd "$BENCH_USER" | cut -d: -f6)/.config/containers
	as_user mkdir -p "$conf"
	if ! grep -qs network_backend "$conf/containers.conf"; then
		printf '[network]\nnetwork_backend = "netavark"\n' | as_user tee -a "$conf/containers.conf" >/dev/null
	fi
	as_user podman system service --time=0 "unix://$rt/podman-net-bench.sock" &
	services+=("podman system service --time=0 unix://$rt/podman-net-bench.sock")
	for _ in $(seq 50); do [[ -S $rt/podman-net-bench.sock ]] && break; sleep 0.2; done
	as_user podman pull -q --tls-verify=false "$BUSYBOX_REF" >/dev/null 2>&1 || true
	one podman-rootless user "$rt/podman-net-bench.sock"
}

slopbox_peer() {
	as_user "$slopbox" serve --socket "$rt/slopbox-net-bench.sock" 2>"$ctx/serve.log" &
	services+=("$slopbox serve --socket $rt/slopbox-net-bench.sock")
	for _ in $(seq 50); do [[ -S $rt/slopbox-net-bench.sock ]] && break; sleep 0.2; done
	one slopbox-rootless user "$rt/slopbox-net-bench.sock"
	# The CLI's own network create (a new process each time), reported.
	local f=$ctx/hf/slopbox-cli-create.json
	if as_user hyperfine -N --warmup 1 --runs "${RUNS_NETCREATE:-30}" --export-json "$f" \
		--prepare "$slopbox network rm -f netbench-cli" -n slopbox-cli-network-create "$slopbox network create netbench-cli" >/dev/null; then
		json+=("$f")
	fi
	as_user "$slopbox" network rm -f netbench-cli >/dev/null 2>&1 || true
}

# NET_PEERS picks some (by hand).
for peer in ${NET_PEERS:-dockerd podman-rootless slopbox-rootless}; do
	case $peer in
	dockerd) one dockerd root /var/run/docker.sock ;;
	podman-rootless) podman_peer ;;
	slopbox-rootless) slopbox_peer ;;
	*) echo "network bench: no peer $peer" >&2 ;;
	esac
done

if ((${#json[@]})); then
	jq -s '{results: [.[].results[]]}' "${json[@]}" >"$out/network.json"
fi
