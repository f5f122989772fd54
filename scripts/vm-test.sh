#!/usr/bin/env bash
# make vm-test: the cgroup v2 suite (test/vm) in a Debian 12 VM with
# systemd, as root and as the unprivileged `vagrant` user logged in over
# ssh (its controllers delegated by user@.service). The VM comes from the
# box `make vm-box` builds offline; the test binary and the Debian package
# (make deb) are built here and uploaded (compiling in the guest is 15-30x
# slower), apt installs the package in the guest, and the suite runs the
# installed /usr/bin/slopbox and units (TestInstalledPackage). The
# results are copied to .work/vm/results/, and the VM is destroyed on every
# exit path, failure and interrupt included, with the libvirt network and
# the daemons this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $(id -u) -eq 0 ]] || { echo "vm-test: run as root (libvirt's system instance)" >&2; exit 1; }
MACHINE=bookworm
# The domain is named after this checkout's path (the Vagrantfile reads
# SLOPBOX_VM_PREFIX), not vagrant-libvirt's default of the directory's
# basename: two checkouts named "main" must not share a domain name.
SLOPBOX_VM_PREFIX="slopbox-$(printf %s "$PWD" | sha256sum | cut -c1-12)-"
export SLOPBOX_VM_PREFIX
DOMAIN="$SLOPBOX_VM_PREFIX$MACHINE"
WORK=$PWD/.work/vm
RESULTS=$WORK/results
# The guest's serial console (Vagrantfile), kept for the record.
CONSOLE=$WORK/console.log
export SLOPBOX_VM_CONSOLE=$CONSOLE
TAGS="seccomp netgo osusergo slopbox_helper vmsuite"
# Tests that need root by nature (root opens the login sessions).
ROOT_ONLY='TestExecFromAnotherSession'
export VAGRANT_CWD=$PWD VAGRANT_DEFAULT_PROVIDER=libvirt VAGRANT_CHECKPOINT_DISABLE=1

phase_start=$SECONDS
phase() {
	echo "vm-test: $1 took $((SECONDS - phase_start)) s" >&2
	phase_start=$SECONDS
}

# Every libvirt call is bounded: a hung daemon must fail the suite with
# its evidence, not hold it (and its cleanup) until CI's limit.
virsh() { timeout -k 5 "${VIRSH_LIMIT:-60}" /usr/bin/virsh "$@"; }

scripts/vm-deps.sh
scripts/vm-box.sh
phase "box (make vm-box)"

mkdir -p "$WORK" && rm -rf "$RESULTS" "$CONSOLE" && mkdir -p "$RESULTS"
go test -c -tags "$TAGS" -ldflags "-extldflags -static" -o "$WORK/vm.test" ./test/vm/
[[ -x bin/slopbox ]] || make -s build
# The package of bin/slopbox, as make deb builds it.
rm -rf "$WORK/deb" && mkdir -p "$WORK/deb"
deb=$(DEB_COMPRESS=gzip SLOPBOX=bin/slopbox scripts/deb.sh "$WORK/deb")
phase "build"

# The domain of this checkout and its volumes, whether vagrant knows of
# them or not.
remove_domain() {
	if virsh -q dominfo "$DOMAIN" >/dev/null 2>&1; then
		virsh -q destroy "$DOMAIN" || true
		virsh -q undefine --remove-all-storage "$DOMAIN" || true
	fi
	local vol
	for vol in $(virsh -q vol-list default 2>/dev/null | awk '{print $1}' | grep "^${DOMAIN}[.-]" || true); do
		virsh -q vol-delete --pool default "$vol" || true
	done
}

# One VM suite at a time on a host: each run starts the libvirt daemons
# it needs when none runs and stops them, with the networks it started,
# when it ends, which would pull them from under a second checkout's run
# (seen: "virDomainLookupByUUID failed: Cannot write data: Broken pipe").
# The lock goes with this process.
exec 9>/run/lock/slopbox-vm-test.lock
if ! flock -n 9; then
	echo "vm-test: waiting for another checkout's VM suite to end" >&2
	flock 9
fi

started=()
# stop_started stops the daemons this run started, killing one that does
# not stop within 20 s (seen: a libvirtd hung in its QEMU probe never
# finished its own shutdown), and the QEMU capability probes they left.
stop_started() {
	local pidfile pid qp
	for pidfile in "${started[@]}"; do
		[[ -f $pidfile ]] || continue
		pid=$(cat "$pidfile")
		kill "$pid" 2>/dev/null || continue
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "vm-test: daemon $pid ($pidfile) did not stop in 20 s: killed" >&2
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	if ((${#started[@]})); then
		for qp in /var/lib/libvirt/qemu/qmp-*/qmp.pid; do
			[[ -f $qp ]] || continue
			pid=$(cat "$qp")
			if tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q -- "-qmp unix:${qp%/qmp.pid}/"; then
				kill -9 "$pid" 2>/dev/null || true
			fi
		done
	fi
	started=()
}
nets_before=" $(virsh -q net-list --name 2>/dev/null | tr '\n' ' ' || true) "
cleanup() {
	local rc=$?
	# Nothing interrupts the cleanup, and it writes to a file: a caller's
	# tee killed by the same Ctrl-C must not end it with SIGPIPE.
	trap '' INT TERM PIPE HUP
	{
		echo "vm-test: destroying the VM"
		timeout 300 vagrant destroy -f "$MACHINE" || echo "vm-test: vagrant destroy failed"
		# Whatever vagrant left (an interrupted up, a failed destroy): the
		# domain of this checkout, its volumes, the networks started
		# during the run.
		remove_domain
		for net in $(virsh -q net-list --name 2>/dev/null || true); do
			[[ $nets_before == *" $net "* ]] && continue
			virsh -q net-destroy "$net" || true
			[[ $net != vagrant-libvirt ]] || virsh -q net-undefine "$net" || true
		done
		stop_started
	} >>"$WORK/cleanup.log" 2>&1
	echo "vm-test: VM destroyed (log: $WORK/cleanup.log)" >&2 || true
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# libvirt's stock NAT network ("default") is not wanted: the VM uses
# vagrant-libvirt's isolated one. It must not start with the daemon.
rm -f /etc/libvirt/qemu/networks/autostart/default.xml
# libvirtd probes QEMU (a qemu process it drives over QMP) when it first
# needs its capabilities, which `vagrant up`'s domain definition does. On
# these machines that probe hung once, libvirtd waiting for a reply and
# qemu for a request, and took `vagrant up` and the daemon's own stop with
# it. So the probe is made here, bounded; a daemon this run started that
# hangs in it is killed and started again (three tries), with the
# evidence printed.
for attempt in 1 2 3; do
	for d in virtlogd libvirtd; do
		if ! pgrep -x "$d" >/dev/null; then
			"$d" -d -p "$WORK/$d.pid" 9>&-
			started+=("$WORK/$d.pid")
		fi
	done
	for _ in $(seq 50); do virsh -q version >/dev/null 2>&1 && break; sleep 0.2; done
	if VIRSH_LIMIT=180 virsh -q domcapabilities --virttype qemu >/dev/null 2>"$WORK/domcapabilities.err"; then
		break
	fi
	echo "vm-test: libvirtd did not give QEMU's capabilities within 180 s (try $attempt): $(cat "$WORK/domcapabilities.err")" >&2
	ps -o pid,ppid,stat,etime,wchan:32,args -p "$(pgrep -d, -f 'libvirtd|virtlogd|qemu-system' || echo 1)" >&2 || true
	if ((${#started[@]} == 0)); then
		echo "vm-test: that libvirtd was running before this run: stop it and run again" >&2
		exit 1
	fi
	((attempt < 3)) || exit 1
	stop_started
done
# A domain of this checkout left by a run that never reached its cleanup
# (the machine stopped under it) would make `vagrant up` fail with "name
# already taken"; this checkout's .vagrant does not know it, so remove it.
if virsh -q dominfo "$DOMAIN" >/dev/null 2>&1; then
	echo "vm-test: removing the stale domain $DOMAIN left by an earlier run" >&2
	remove_domain >>"$WORK/cleanup.log" 2>&1
fi
# Long steps run in the background and are waited for, so that a signal
# reaches the traps at once; each is bounded.
bounded() {
	local limit=$1
	shift
	timeout -k 30 "$limit" "$@" &
	wait $!
}
bounded 900 vagrant up "$MACHINE" --provider libvirt >"$WORK/vagrant-up.log" 2>&1 ||
	{ tail -30 "$WORK/vagrant-up.log" >&2; echo "vm-test: vagrant up failed (log: $WORK/vagrant-up.log)" >&2; exit 1; }
phase "vagrant up"

bounded 300 vagrant upload "$WORK/vm.test" /tmp/slopbox-vm/vm.test "$MACHINE" >/dev/null
bounded 300 vagrant upload "$deb" "/tmp/slopbox-vm/${deb##*/}" "$MACHINE" >/dev/null
phase "upload"
# apt installs the package as a user would (in the same ssh session as the
# chmod: each vagrant command costs seconds). The box is offline and keeps
# no package lists: the package's Depends (scripts/deb.sh) must be in the
# box already (scripts/vm-box.sh's PKGS), or apt says what it cannot find.
if ! bounded 300 vagrant ssh "$MACHINE" -c "chmod 755 /tmp/slopbox-vm /tmp/slopbox-vm/vm.test && chmod 644 /tmp/slopbox-vm/*.deb &&
	cd /tmp/slopbox-vm && s=\$(date +%s) && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ./${deb##*/} &&
	echo \"apt-get install took \$((\$(date +%s) - s)) s in the guest\"" >"$RESULTS/apt-install.txt" 2>&1; then
	tail -20 "$RESULTS/apt-install.txt" >&2
	echo "vm-test: apt-get install of ${deb##*/} failed in the guest (log: $RESULTS/apt-install.txt)" >&2
	exit 1
fi
tail -1 "$RESULTS/apt-install.txt" >&2
phase "apt-get install of the package"

# Each pass writes its -test.v output to a file in the guest, fetched
# afterwards with a command of its own: vagrant holds what ssh gives it in
# a buffer until it exits, so output streamed through it is lost when its
# bound kills it. The bounds nest so that the innermost fires first and
# says most: the test binary's own timeout (its goroutines' stacks), the
# guest's timeout, then this host's bound on the ssh session. Each ssh
# session sends keepalives, so a connection that died ends in a minute.
# A pass that fails leaves the guest's evidence (its processes, the
# kernel's last words) in the results and on stderr, and the serial
# console's tail shows what the guest's kernel said when ssh could not.
# VM_PASS_TIMEOUT (a Go duration, 6m) is the test binary's own limit per pass.
PASS_TIMEOUT=${VM_PASS_TIMEOUT:-6m}
SSH_ALIVE=(-- -o ServerAliveInterval=15 -o ServerAliveCountMax=4)
status=0
run_pass() {
	local name=$1 cmd=$2 rc=0
	echo "== VM suite as $name" >&2
	bounded 480 vagrant ssh "$MACHINE" -c "cd /tmp/slopbox-vm && { $cmd; } >$name.txt 2>&1" "${SSH_ALIVE[@]}" >"$RESULTS/$name.ssh.txt" 2>&1 || rc=$?
	bounded 120 vagrant ssh "$MACHINE" -c "cat /tmp/slopbox-vm/$name.txt" "${SSH_ALIVE[@]}" >"$RESULTS/$name.txt" 2>&1 ||
		echo "vm-test: could not fetch the pass's output from the guest" >>"$RESULTS/$name.txt"
	grep -E '^(=== RUN|--- (PASS|FAIL)|PASS|FAIL|ok|panic:)|vm_test.go' "$RESULTS/$name.txt" >&2 || true
	if ((rc)); then
		status=1
		echo "vm-test: the suite as $name failed (exit $rc); its output: $RESULTS/$name.txt" >&2
		tail -5 "$RESULTS/$name.ssh.txt" >&2
		evidence "$name"
	fi
	phase "suite as $name"
}
# evidence NAME: what the guest looked like after a failed pass.
evidence() {
	bounded 120 vagrant ssh "$MACHINE" -c 'uptime; free -m; ps -eo pid,ppid,user,stat,wchan:32,etimes,args --forest; echo "--- dmesg"; sudo dmesg | tail -100' "${SSH_ALIVE[@]}" >"$RESULTS/$1.evidence.txt" 2>&1 ||
		echo "vm-test: the guest did not answer for its evidence" >&2
	echo "--- the guest after the failed pass (its dmesg too: $RESULTS/$1.evidence.txt):" >&2
	sed '/^--- dmesg$/q' "$RESULTS/$1.evidence.txt" | head -150 >&2
	echo "--- the guest's serial console, last lines ($CONSOLE):" >&2
	tail -20 "$CONSOLE" 2>/dev/null | tr -d '\r' >&2 || true
}
run_pass vagrant "echo '(left out as vagrant, root only: $ROOT_ONLY)'; SLOPBOX_BIN=/usr/bin/slopbox timeout -k 10 420 ./vm.test -test.v -test.timeout $PASS_TIMEOUT -test.skip '^($ROOT_ONLY)\$'"
run_pass root "sudo SLOPBOX_BIN=/usr/bin/slopbox timeout -k 10 420 ./vm.test -test.v -test.timeout $PASS_TIMEOUT"
# What the guest's kernel and cgroups looked like, for the record.
bounded 120 vagrant ssh "$MACHINE" -c 'uname -r; stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/cgroup.controllers' >"$RESULTS/guest.txt" 2>&1 || true
echo "vm-test: results in $RESULTS" >&2
if ((status)); then
	echo "vm-test: FAILED (see $RESULTS)" >&2
	exit 1
fi
echo "vm-test: PASS" >&2
