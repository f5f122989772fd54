# shellcheck shell=bash disable=SC2034 # an adapter sourced by the bench harness, which reads A_*
# slopbox rootless as $BENCH_USER with the CLI's warm pool on (issue 45):
# `slopbox pool keep` keeps two sandboxes of busybox started, and each
# `run --rm` claims one (the keeper refills it off the run's path). Only
# the one-shot run is measured: the pool is for it.
A_USER=bench
SLOPBOX_BIN=${SLOPBOX_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/slopbox}
A_DESC="slopbox $("$SLOPBOX_BIN" --version 2>/dev/null | awk '{print $NF}') rootless as $BENCH_USER, warm pool (pool keep --count 2), --network none"
a_available() { [[ -x $SLOPBOX_BIN ]]; }
a_setup() {
	install -m 755 "$SLOPBOX_BIN" /usr/local/bin/slopbox-bench
	as_user slopbox-bench pull -q "$BUSYBOX_REF" >/dev/null
	as_user slopbox-bench pool keep --count 2 "$BUSYBOX_REF" >/dev/null
}
a_teardown() { as_user slopbox-bench pool rm; }
a_run_cmd() { echo "slopbox-bench run --rm $BUSYBOX_REF true"; }
