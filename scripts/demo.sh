#!/usr/bin/env bash
# The main job, end to end and offline (only Debian's mirror is used, by
# debootstrap): build two real images from Debian packages, serve them from a
# local registry, pull them with slopbox (progress shown), list them, then run
# a Python program in a sandbox over an example workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
SLOPBOX=$PWD/bin/slopbox
WORK=$PWD/.work/demo
PORT=${DEMO_PORT:-5055}
REG=127.0.0.1:$PORT
mkdir -p "$WORK"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

[[ $(id -u) -eq 0 ]] || { echo "make demo builds images with debootstrap and needs root" >&2; exit 1; }

mirror() {
	local m=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		m=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources)
	fi
	[[ -z $m && -f /etc/apt/sources.list ]] && m=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
	echo "${m:-http://deb.debian.org/debian}"
}

say "building images from Debian packages"
if [[ ! -x $WORK/busybox/bin/busybox ]]; then
	rm -rf "$WORK/busybox" && mkdir -p "$WORK/busybox"/{bin,etc,tmp,root,home,usr/bin}
	chmod 1777 "$WORK/busybox/tmp"
	cp /bin/busybox "$WORK/busybox/bin/busybox"
	for a in $(/bin/busybox --list); do [[ $a == busybox ]] || ln -sf busybox "$WORK/busybox/bin/$a"; done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$WORK/busybox/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$WORK/busybox/etc/group"
fi
echo "busybox rootfs: $(find "$WORK/busybox" | wc -l) entries"
if [[ ! -f $WORK/python/usr/lib/python3.11/json/__init__.py ]]; then
	echo "debootstrap --variant=minbase --include=python3 bookworm (a few minutes, once)"
	rm -rf "$WORK/python.tmp" "$WORK/python"
	debootstrap --variant=minbase --include=python3 bookworm "$WORK/python.tmp" "$(mirror)" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -20 "$WORK/debootstrap.log"; exit 1; }
	rm -rf "$WORK/python.tmp"/var/lib/apt/lists/* "$WORK/python.tmp"/var/cache/apt/*.bin "$WORK/python.tmp"/dev/*
	mv "$WORK/python.tmp" "$WORK/python"
fi
echo "python rootfs: $(find "$WORK/python" | wc -l) entries, $("$WORK/python/usr/bin/python3" --version 2>/dev/null || echo python3)"

say "serving them from Debian's docker-registry on $REG"
rm -rf "$WORK/registry"
mkdir -p "$WORK/registry"
cat >"$WORK/registry/config.yml" <<CFG
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $WORK/registry/data}}
http: {addr: $REG}
CFG
docker-registry serve "$WORK/registry/config.yml" >"$WORK/registry/log" 2>&1 &
REGPID=$!
trap 'kill $REGPID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
go run ./test/cmd/mkimage -ref "$REG/demo/busybox:latest" -cmd sh "$WORK/busybox"
go run ./test/cmd/mkimage -ref "$REG/demo/python:3" -cmd python3 "$WORK/python"

# The images stay in the default store (root's: /var/lib/slopbox), under
# short names, so that `slopbox images` and `slopbox run` find them after
# the demo's registry has stopped.
ROOT=/var/lib/slopbox # root's default store (image.DefaultRoot)
for img in busybox:latest python:3; do
	"$SLOPBOX" rmi -f "slopbox-demo/$img" "$REG/demo/$img" >/dev/null 2>&1 || true
done
say "slopbox pull (cold)"
"$SLOPBOX" pull "$REG/demo/busybox:latest"
"$SLOPBOX" pull "$REG/demo/python:3"
say "slopbox pull (already present: one manifest check)"
time "$SLOPBOX" pull "$REG/demo/python:3"
"$SLOPBOX" tag "$REG/demo/busybox:latest" slopbox-demo/busybox:latest
"$SLOPBOX" tag "$REG/demo/python:3" slopbox-demo/python:3
say "slopbox images"
"$SLOPBOX" images

if "$SLOPBOX" run --help >/dev/null 2>&1; then
	say "a sandbox over an example workspace"
	scripts/demo-sandbox.sh "$SLOPBOX" "$ROOT" slopbox-demo/python:3 "$WORK/workspace"
fi
say "done"
cat <<EOF
The demo's images stay in the default store ($ROOT) after its registry
has stopped; as root:
  $SLOPBOX images
  $SLOPBOX run --rm slopbox-demo/python:3 python3 -c 'print("hello")'
  $SLOPBOX run --rm -it slopbox-demo/busybox:latest sh
Remove them with:
  $SLOPBOX rmi slopbox-demo/busybox:latest slopbox-demo/python:3 $REG/demo/busybox:latest $REG/demo/python:3
EOF
