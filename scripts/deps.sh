#!/usr/bin/env bash
# Installs what slopbox's build, tests and demo need on Debian 12, and the
# unprivileged test user with subordinate id ranges. Idempotent; only root
# can install, a non-root caller just gets told what is missing.
set -euo pipefail

PKGS=(gcc libc6-dev musl-tools curl ca-certificates unzip libseccomp-dev uidmap busybox-static debootstrap docker-registry iproute2 slirp4netns procps psmisc shellcheck python3-docker python3-pytest python3-pytest-timeout python3-paramiko docker.io docker-compose containerd runc crun)
TEST_USER=${SLOPBOX_TEST_USER:-slopbox-test}

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "missing Debian packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2
		exit 1
	fi
	echo "installing: ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# No service starts during the install (containerd's tests start
	# their own, on a private socket).
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	for i in 1 2 3 4 5; do
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null && break
		((i < 5)) || { echo "could not install ${missing[*]}" >&2; exit 1; }
		echo "apt failed (try $i), retrying in 10s" >&2
		sleep 10
	done
fi
scripts/go-toolchain.sh

if [[ $(id -u) -eq 0 ]]; then
	if ! id "$TEST_USER" >/dev/null 2>&1; then
		useradd -m -s /bin/bash "$TEST_USER"
	fi
	grep -q "^$TEST_USER:" /etc/subuid || usermod --add-subuids 300000-365535 "$TEST_USER"
	grep -q "^$TEST_USER:" /etc/subgid || usermod --add-subgids 300000-365535 "$TEST_USER"
	# Root's own range: container root is never host root, also as root.
	grep -q "^root:" /etc/subuid || usermod --add-subuids 1000000000-1000065535 root
	grep -q "^root:" /etc/subgid || usermod --add-subgids 1000000000-1000065535 root
fi
