#!/usr/bin/env bash
# make vm-box: builds the Vagrant box local/bookworm offline, from the
# Debian mirror apt already uses, and adds it to Vagrant. The guest is a
# Debian 12 with systemd booting pure cgroup v2, a `vagrant` user with
# passwordless sudo and Vagrant's insecure key, DHCP through
# systemd-networkd, controllers delegated to user sessions
# (Delegate=cpu cpuset io memory pids) and what slopbox needs (uidmap,
# slirp4netns, libseccomp, a D-Bus user session for transient scopes).
#
# The disk is built without loop devices: the root file system is made
# from a directory (mkfs.ext4 -d) into a partition image written at 1 MiB
# of a partitioned raw disk, and GRUB's boot.img + core.img go into the
# MBR and the gap before the partition.
#
# A box built from the same inputs (this script, the mirror) is kept:
# VM_BOX_FORCE=1 rebuilds it.
set -euo pipefail
cd "$(dirname "$0")/.."

BOX=${VM_BOX:-local/bookworm}
WORK=$PWD/.work/vm
# The Debian mirror apt uses (deb822 or one-line sources), and its proxy.
# shellcheck disable=SC2016 # $(REPO_URI) is apt's template
MIRROR=${VM_MIRROR:-$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null | grep -v security | grep -m1 -E '/debian/?$' || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
MIRROR=${MIRROR%/}
eval "$(apt-config shell http_proxy Acquire::http::Proxy)"
[[ -z ${http_proxy:-} ]] || export http_proxy
SIZE_GB=8
PKGS=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,linux-image-amd64,initramfs-tools,openssh-server,sudo,iproute2,ca-certificates,procps,kmod,udev,uidmap,slirp4netns,libseccomp2,busybox-static,psmisc

[[ $(id -u) -eq 0 ]] || { echo "vm-box: run as root (debootstrap and the box's file ownership need it)" >&2; exit 1; }
scripts/vm-deps.sh

stamp=$( (cat "$0"; echo "$MIRROR $PKGS") | sha256sum | cut -c1-16)
# The stamp lives with the box Vagrant keeps (outside the work tree), so a
# fresh clone on a machine that has the box does not build it again.
STAMP=${VM_BOX_STAMP:-${VAGRANT_HOME:-$HOME/.vagrant.d}/slopbox-box.stamp}
if [[ -z ${VM_BOX_FORCE:-} && -f $STAMP && $(cat "$STAMP") == "$stamp" ]] &&
	vagrant box list 2>/dev/null | grep -q "^$BOX "; then
	echo "vm-box: $BOX is up to date ($STAMP)"
	exit 0
fi

t0=$SECONDS
rm -rf "$WORK/rootfs" "$WORK/disk.raw" "$WORK/part.img" "$WORK/box"
mkdir -p "$WORK/box"
# debootstrap's tree is kept (rootfs.base) for a rebuild with the same
# mirror and packages; the box is configured in a copy.
base=$WORK/rootfs.base
bstamp=$(echo "$MIRROR $PKGS" | sha256sum | cut -c1-16)
if [[ ! -f $base.stamp || $(cat "$base.stamp") != "$bstamp" ]]; then
	rm -rf "$base" "$base.stamp"
	echo "vm-box: debootstrap bookworm from $MIRROR" >&2
	debootstrap --variant=minbase --include="$PKGS" bookworm "$base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -20 "$WORK/debootstrap.log" >&2; echo "vm-box: debootstrap failed (log: $WORK/debootstrap.log)" >&2; exit 1; }
	chroot "$base" apt-get clean
	rm -rf "$base"/var/lib/apt/lists/* "$base"/var/cache/apt/*.bin
	echo "$bstamp" >"$base.stamp"
	echo "vm-box: debootstrap took $((SECONDS - t0)) s" >&2
fi
root=$WORK/rootfs
cp -a "$base" "$root"

# The guest's configuration.
echo slopbox-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 slopbox-vm\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
echo 'LABEL=root / ext4 defaults,errors=remount-ro 0 1' >"$root/etc/fstab"
: >"$root/etc/machine-id"
cat >"$root/etc/systemd/network/10-dhcp.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
DHCP=yes
EOF
ln -sf /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# Controllers for user sessions' cgroups (what podman's and slopbox's
# rootless limits need), and the user manager kept without a login.
mkdir -p "$root/etc/systemd/system/user@.service.d"
printf '[Service]\nDelegate=cpu cpuset io memory pids\n' >"$root/etc/systemd/system/user@.service.d/delegate.conf"
# Each VM makes its own ssh host keys at first boot.
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' >"$root/etc/systemd/system/ssh.service.d/hostkeys.conf"
mkdir -p "$root/etc/ssh/sshd_config.d"
printf 'UseDNS no\nPasswordAuthentication no\n' >"$root/etc/ssh/sshd_config.d/vagrant.conf"
chroot "$root" id vagrant >/dev/null 2>&1 || chroot "$root" useradd -m -s /bin/bash -u 1000 vagrant
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$(dpkg -L vagrant | grep '/keys/vagrant.pub$' | head -1)" "$root/home/vagrant/.ssh/authorized_keys"
mkdir -p "$root/var/lib/systemd/linger" && touch "$root/var/lib/systemd/linger/vagrant"

kernel=$(find "$root/boot" -maxdepth 1 -name "vmlinuz-*" -printf "%f\n" | sort -V | tail -1)
initrd=initrd.img-${kernel#vmlinuz-}
[[ -f $root/boot/$initrd ]] || { echo "vm-box: no $initrd in the guest's /boot" >&2; exit 1; }
mkdir -p "$root/boot/grub"
cat >"$root/boot/grub/grub.cfg" <<EOF
set timeout=0
linux /boot/$kernel root=LABEL=root ro console=ttyS0,115200 net.ifnames=0
initrd /boot/$initrd
boot
EOF

# The disk: an MBR with one partition from 1 MiB, GRUB before it.
echo "vm-box: disk image" >&2
truncate -s "${SIZE_GB}G" "$WORK/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$WORK/disk.raw"
part_mib=$((SIZE_GB * 1024 - 1))
mkfs.ext4 -q -L root -d "$root" "$WORK/part.img" "${part_mib}M"
dd if="$WORK/part.img" of="$WORK/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$WORK/part.img"
grub-mkimage -O i386-pc -o "$WORK/core.img" -p '(hd0,msdos1)/boot/grub' biosdisk part_msdos ext2 normal linux configfile
(($(stat -c %s "$WORK/core.img") < 2047 * 512)) || { echo "vm-box: GRUB's core.img does not fit before the partition" >&2; exit 1; }
dd if="$WORK/core.img" of="$WORK/disk.raw" bs=512 seek=1 conv=notrunc status=none
dd if=/usr/lib/grub/i386-pc/boot.img of="$WORK/disk.raw" bs=440 count=1 conv=notrunc status=none

qemu-img convert -O qcow2 "$WORK/disk.raw" "$WORK/box/box.img"
rm -f "$WORK/disk.raw" "$WORK/core.img"
printf '{"provider":"libvirt","format":"qcow2","virtual_size":%d}\n' "$SIZE_GB" >"$WORK/box/metadata.json"
cat >"$WORK/box/Vagrantfile" <<'EOF'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |v|
    v.disk_bus = "virtio"
  end
end
EOF
tar -C "$WORK/box" -cf "$WORK/bookworm.box" metadata.json Vagrantfile box.img
rm -rf "$WORK/box" "$root"
vagrant box add --force --name "$BOX" "$WORK/bookworm.box" >/dev/null
# vagrant-libvirt copied the previous box into libvirt's pool as a base
# volume; it is stale now.
rm -f /var/lib/libvirt/images/"${BOX//\//-VAGRANTSLASH-}"_vagrant_box_image_*
! pgrep -x libvirtd >/dev/null || timeout -k 5 60 virsh -q pool-refresh default >/dev/null 2>&1 || true
rm -f "$WORK/bookworm.box"
mkdir -p "$(dirname "$STAMP")" && echo "$stamp" >"$STAMP"
echo "vm-box: $BOX built in $((SECONDS - t0)) s" >&2
