#!/usr/bin/env bash
# Makes sure the Go toolchain go.mod names (its toolchain line, else its go
# line) is there, the way the go command's own toolchain switching does:
# when `go` is missing or older (Debian 12's is 1.19), the toolchain module
# golang.org/toolchain@v0.0.1-goVERSION.OS-ARCH is fetched from the Go module
# proxy, its h1: hash checked against the checksum database
# (sum.golang.org), and unpacked into .work/go, which the Makefile puts first
# on PATH. No root needed. GOPROXY and GOSUMDB_URL may point elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

want=$(awk '$1 == "toolchain" {print $2; exit}' go.mod)
[[ -n $want ]] || want=go$(awk '$1 == "go" {print $2; exit}' go.mod)
dest=$PWD/.work/go

# newer A B: A >= B, both "goX.Y[.Z]".
atleast() { [[ $(printf '%s\n%s\n' "${1#go}" "${2#go}" | sort -V | head -1) == "${2#go}" ]]; }

have=""
if [[ -x $dest/bin/go ]]; then
	have=$("$dest/bin/go" env GOVERSION 2>/dev/null || true)
elif command -v go >/dev/null; then
	have=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || go version | awk '{print $3}')
fi
if [[ -n $have ]] && atleast "$have" "$want"; then
	exit 0
fi

case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) echo "no Go toolchain for $(uname -m) is fetched automatically: install $want from https://go.dev/dl" >&2; exit 1 ;;
esac
mod=golang.org/toolchain
ver=v0.0.1-$want.linux-$arch
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}
[[ $proxy == direct || $proxy == off ]] && proxy=https://proxy.golang.org
# The checksum database through the proxy (the go command's way when
# sum.golang.org itself is not reachable), else directly.
sumdbs=("$proxy/sumdb/sum.golang.org" "${GOSUMDB_URL:-https://sum.golang.org}")
echo "Go ${have:-(none)} is older than $want, which go.mod needs: fetching $mod@$ver into .work/go" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "$1" >&2
	echo "install $want yourself (https://go.dev/dl) and put it first on PATH, or set GOPROXY to a reachable module proxy" >&2
	exit 1
}
# A zip verified by an earlier run is kept (outside the work tree) and
# checked again below against the checksum database, not downloaded again.
cache=${SLOPBOX_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slopbox/toolchain}
if [[ -s $cache/$ver.zip ]]; then
	cp "$cache/$ver.zip" "$tmp/tc.zip"
	echo "using the toolchain zip kept in $cache (its hash is checked again)" >&2
else
	curl -fsSL --retry 3 -o "$tmp/tc.zip" "${SLOPBOX_TOOLCHAIN_ZIP_URL:-$proxy/$mod/@v/$ver.zip}" || fail "cannot download $mod@$ver from $proxy"
fi
expected=""
for sumdb in "${sumdbs[@]}"; do
	expected=$(curl -fsSL --retry 2 "$sumdb/lookup/$mod@$ver" 2>/dev/null | awk -v m="$mod" -v v="$ver" '$1 == m && $2 == v {print $3; exit}') || true
	[[ $expected == h1:* ]] && break
done
[[ $expected == h1:* ]] || fail "cannot look up $mod@$ver in the checksum database (${sumdbs[*]})"

# The h1: hash (golang.org/x/mod/sumdb/dirhash.Hash1): the SHA-256 of the
# lines "SHA256HEX  NAME\n" of every file in the zip, sorted by name.
mkdir "$tmp/x"
unzip -q "$tmp/tc.zip" -d "$tmp/x"
got=h1:$(cd "$tmp/x" && find . -type f -printf '%P\n' | LC_ALL=C sort | tr '\n' '\0' | xargs -0 sha256sum |
	sha256sum | cut -c1-64 | sed 's/../\\x&/g' | { read -r hex; printf '%b' "$hex"; } | base64)
if [[ $got != "$expected" ]]; then
	rm -f "$cache/$ver.zip"
	fail "$mod@$ver: hash mismatch (got $got, the checksum database says $expected): not installed"
fi
if [[ ! -s $cache/$ver.zip ]] && mkdir -p "$cache" 2>/dev/null; then
	if ! { cp "$tmp/tc.zip" "$cache/.$ver.zip.$$" && mv "$cache/.$ver.zip.$$" "$cache/$ver.zip"; }; then
		rm -f "$cache/.$ver.zip.$$"
	fi
fi
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$tmp/x/$mod@$ver" "$dest"
echo "installed $("$dest/bin/go" version) in .work/go" >&2
