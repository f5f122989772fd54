# shellcheck shell=bash disable=SC2034 # an adapter sourced by the bench harness, which reads A_*
# slopbox as root with the CLI's warm pool on (issue 45): see slopbox-pool.sh.
A_USER=root
SLOPBOX_BIN=${SLOPBOX_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/slopbox}
A_DESC="slopbox $("$SLOPBOX_BIN" --version 2>/dev/null | awk '{print $NF}') as root, warm pool (pool keep --count 2), --network none"
a_available() { [[ -x $SLOPBOX_BIN ]]; }
a_setup() {
	install -m 755 "$SLOPBOX_BIN" /usr/local/bin/slopbox-bench
	slopbox-bench pull -q "$BUSYBOX_REF" >/dev/null
	slopbox-bench pool keep --count 2 "$BUSYBOX_REF" >/dev/null
}
a_teardown() { slopbox-bench pool rm; }
a_run_cmd() { echo "slopbox-bench run --rm $BUSYBOX_REF true"; }
