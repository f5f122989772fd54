#!/usr/bin/env bash
# Builds a Debian package of what `make install` installs (PREFIX=/usr),
# with dpkg-deb alone: OUT/slopbox_VERSION_ARCH.deb (OUT: the first
# argument, default bin/). Install it with apt-get install ./slopbox_*.deb.
# DEB_COMPRESS picks dpkg-deb's compressor (default xz; make vm-test uses
# gzip, 1-2 s where xz takes 40 s on these machines, for the same files).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bin}
SLOPBOX=${SLOPBOX:-bin/slopbox}
arch=$(dpkg --print-architecture)
# A Debian version starts with a digit: 0.1.0+git<hash> from a checkout.
version=${DEB_VERSION:-0.1.0+git$(git describe --always --dirty 2>/dev/null | tr -c 'A-Za-z0-9.+~\n' '.' || echo 0)}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
DESTDIR=$stage PREFIX=/usr SLOPBOX=$SLOPBOX scripts/install.sh >/dev/null
install -d "$stage/DEBIAN" "$stage/usr/share/doc/slopbox"
install -m 0644 README.md SECURITY.md "$stage/usr/share/doc/slopbox/"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: slopbox
Version: $version
Architecture: $arch
Maintainer: slopbox developers <slopbox@localhost>
Installed-Size: $size
Depends: uidmap, slirp4netns
Recommends: iproute2
Suggests: docker.io | docker-ce-cli, python3-docker
Section: admin
Priority: optional
Homepage: https://github.com/slopbox/slopbox
Description: rootless, daemonless containers for evaluation harnesses
 slopbox runs containers (sandboxes) without a daemon and without root,
 through runc's libcontainer embedded in one static binary, with a
 docker-compatible command line and, with slopbox serve (socket-activated
 by slopbox.socket), the Docker Engine API for the docker CLI and
 docker-py. uidmap gives rootless users their subordinate id ranges and
 slirp4netns their network.
CONTROL
# The units are not enabled by the package: systemctl [--user] enable --now slopbox.socket.
cat >"$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
POSTINST
chmod 0755 "$stage/DEBIAN/postinst"
mkdir -p "$OUT"
deb=$OUT/slopbox_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"${DEB_COMPRESS:-xz}" --build "$stage" "$deb" >/dev/null
echo "$deb"
