#!/usr/bin/env bash
# Installs what make vm-box and make vm-test need on a Debian 12 host:
# Vagrant with its libvirt provider, libvirt's QEMU driver, QEMU, and
# GRUB's BIOS images. --no-install-recommends keeps out what the
# recommends would bring (a kernel, grub-pc on the host's disk, an NFS
# server), and the libvirt-daemon-system-sysv flavour keeps systemd off a
# host that has none. Services are not started by the install: vm-test
# starts the daemons it needs and stops them again.
set -euo pipefail

# A host booted with systemd keeps libvirt's systemd flavour.
flavour=libvirt-daemon-system-sysv
[[ ! -d /run/systemd/system ]] || flavour=libvirt-daemon-system-systemd
PKGS=(vagrant vagrant-libvirt libvirt-daemon-system "$flavour" libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base grub-pc-bin fdisk debootstrap)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
	echo "missing Debian packages: ${missing[*]} (run as root: apt-get install --no-install-recommends ${missing[*]})" >&2
	exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# No service starts during the install (invoke-rc.d asks policy-rc.d).
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
	trap 'rm -f "$policy"' EXIT
fi
for i in 1 2 3 4 5; do
	apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null && exit 0
	((i < 5)) || break
	echo "apt failed (try $i), retrying in 10s" >&2
	sleep 10
done
echo "vm-deps: could not install ${missing[*]}" >&2
exit 1
