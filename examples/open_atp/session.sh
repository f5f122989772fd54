#!/bin/sh
# An open_atp-style session: one long-lived container per session, one
# `docker exec` per command, state kept between commands, `docker kill` at
# the end (the container was started with --rm). These are the docker argv
# open_atp runs; slopbox takes them as they are:
#
#   DOCKER=slopbox examples/open_atp/session.sh WORKDIR
#   ln -s "$(command -v slopbox)" ~/bin/docker   # or: binary: slopbox in the harness's config
#
# DOCKER is the docker command (default: docker), IMAGE the image.
set -eu
DOCKER=${DOCKER:-docker}
IMAGE=${IMAGE:-docker.io/library/python:3.12-slim}
wd=${1:?usage: session.sh WORKDIR}
wd=$(cd "$wd" && pwd)
name=open-atp-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')

$DOCKER image inspect "$IMAGE" >/dev/null 2>&1 || $DOCKER pull -q "$IMAGE" >/dev/null
$DOCKER run --rm -d --name "$name" -v "$wd:/workspace/wd" -e SESSION=1 "$IMAGE" sleep infinity >/dev/null
trap '$DOCKER kill "$name" >/dev/null' EXIT

# Each command: its own exec, its own env, a timeout inside, its exit code.
# shellcheck disable=SC2016 # expanded in the container
$DOCKER exec -e CMD=2 "$name" sh -lc 'timeout 30 sh -c "echo session \$SESSION command \$CMD > /workspace/wd/out.txt"'
cat "$wd/out.txt"
# State persists between the execs of one session.
$DOCKER exec "$name" sh -c 'echo kept > /tmp/state'
$DOCKER exec "$name" cat /tmp/state
status=0
$DOCKER exec "$name" sh -c 'exit 3' || status=$?
echo "exit status $status"
