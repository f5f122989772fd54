#!/usr/bin/env bash
# The sandbox half of the demo: an example workspace, setup commands through
# the entry script, and a Python program that writes a result file into the
# workspace, which the host then reads.
set -euo pipefail
SLOPBOX=$1 ROOT=$2 IMAGE=$3 WS=$4
rm -rf "$WS" && mkdir -p "$WS"
cat >"$WS/main.py" <<'PY'
import json, os, platform, sys
primes = [n for n in range(2, 200) if all(n % d for d in range(2, int(n ** 0.5) + 1))]
result = {
    "python": platform.python_version(),
    "uid": os.getuid(),
    "cwd": os.getcwd(),
    "hostname": platform.node(),
    "primes_below_200": len(primes),
    "setup_saw": open("/tmp/setup-note").read().strip(),
}
with open("result.json", "w") as f:
    json.dump(result, f, indent=2)
print("wrote result.json:", json.dumps(result))
PY
echo "workspace: $(ls "$WS")"
set -x
# shellcheck disable=SC2016 # the setup commands are expanded in the sandbox, not here
"$SLOPBOX" --root "$ROOT" run --rm --workspace "$WS" \
	--setup 'echo "setting up in $(pwd) as $(id -un)"' \
	--setup 'echo "prepared by setup" > /tmp/setup-note' \
	"$IMAGE" python3 main.py
set +x
echo "result file on the host ($(stat -c '%U:%G' "$WS/result.json")):"
cat "$WS/result.json"
echo
echo "the same sandbox API, one JSON result (--json):"
"$SLOPBOX" --root "$ROOT" run --rm --workspace "$WS" --json --setup 'echo setup-out' "$IMAGE" python3 -c 'print("cmd-out")'
echo "no sandbox is left behind:"
"$SLOPBOX" --root "$ROOT" ps -a
