# shellcheck shell=bash disable=SC2034 # an adapter sourced by the bench harness, which reads A_*
# slopbox, rootless as $BENCH_USER (the project's own adapter; see
# ../shared/bench/adapters/README.md). SLOPBOX_BIN defaults to the repo's build.
A_USER=bench
SLOPBOX_BIN=${SLOPBOX_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/slopbox}
A_DESC="slopbox $("$SLOPBOX_BIN" --version 2>/dev/null | awk '{print $NF}') rootless as $BENCH_USER, embedded libcontainer, --network none"
a_available()        { [[ -x $SLOPBOX_BIN ]]; }
a_setup()            { install -m 755 "$SLOPBOX_BIN" /usr/local/bin/slopbox-bench; as_user slopbox-bench pull -q "$BUSYBOX_REF" >/dev/null; }
a_pull_prepare_cmd() { echo "slopbox-bench rmi -f $PYSLIM_REF >/dev/null"; }
a_pull_cmd()         { echo "slopbox-bench pull -q $PYSLIM_REF"; }
a_run_cmd()          { echo "slopbox-bench run --rm $BUSYBOX_REF true"; }
a_start_long()       { as_user slopbox-bench run -d --name "$1" "$BUSYBOX_REF" sleep infinity >/dev/null; }
a_exec_cmd()         { local n=$1; shift; echo "slopbox-bench exec $n ${*@Q}"; }
a_stop_long()        { as_user slopbox-bench rm -f "$1" >/dev/null; }
