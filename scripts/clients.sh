#!/usr/bin/env bash
# Builds the real clients the client tests (test/clients) drive, from the
# Go module proxy at the versions their modules pin, once:
#   .work/bin/docker-compose-VERSION  docker compose v2 (test/tools/compose)
#   OUT/clients.test                  the client tests (test/clients)
#
#   scripts/clients.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
version=$(go mod edit -json test/tools/compose/go.mod | python3 -c 'import json,sys; print(next(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == "github.com/docker/compose/v2"))')
[[ -n $version ]] || { echo "no docker compose version pinned in test/tools/compose/go.mod" >&2; exit 1; }
compose=$PWD/.work/bin/docker-compose-$version
if [[ ! -x $compose ]]; then
	mkdir -p .work/bin
	(cd test/tools/compose && go build -tags tools -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" -o "$compose.tmp" github.com/docker/compose/v2/cmd)
	mv "$compose.tmp" "$compose"
fi
ln -sf "$(basename "$compose")" .work/bin/docker-compose
(cd test/clients && go test -c -o "$out/clients.test" .)
chmod 755 "$out/clients.test" "$compose"
