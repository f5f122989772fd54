#!/usr/bin/python3
"""Times the Docker SDK for Python (docker-py) against one Engine API
socket: SlopCodeBench's containers.create + start until reload() says
running, exec_run("true"), and the memory of the service's processes with
N idle containers. Prints one JSON object. Run as root (it reads other
users' /proc/PID/smaps_rollup).

usage: apibench.py --name PEER --socket PATH --image REF [--runs N]
                   [--scale N] [--service-pids PID,...] [--procs-re RE]
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import docker


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def pids():
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--exec-runs", type=int, default=100)
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--service-pids", default="", help="the service's own processes, measured before and after")
    args = ap.parse_args()
    client = docker.DockerClient(base_url="unix://" + args.socket, timeout=120)
    try:
        client.images.get(args.image)
    except docker.errors.ImageNotFound:
        client.images.pull(args.image)
    out = {"peer": args.name, "runs": args.runs}

    # create + start until running, as SlopCodeBench's DockerEnvironment.
    times = []
    for i in range(args.runs + 2):
        t0 = time.perf_counter()
        c = client.containers.create(args.image, command="sleep infinity", detach=True,
                                     working_dir="/", network_mode="none")
        c.start()
        c.reload()
        while c.status != "running":
            time.sleep(0.001)
            c.reload()
        t = time.perf_counter() - t0
        c.remove(force=True)
        if i >= 2:  # two warm-up rounds
            times.append(t * 1000)
    out["create_start_ms"] = statistics.median(times)

    # exec_run("true") into a long-lived container.
    c = client.containers.create(args.image, command="sleep infinity", detach=True, network_mode="none")
    c.start()
    times = []
    for i in range(args.exec_runs + 5):
        t0 = time.perf_counter()
        r = c.exec_run("true")
        t = time.perf_counter() - t0
        if r.exit_code != 0:
            sys.exit(f"exec_run true exited {r.exit_code}")
        if i >= 5:
            times.append(t * 1000)
    c.remove(force=True)
    out["exec_run_true_ms"] = statistics.median(times)

    # N idle containers: the PSS of every process that appeared (the
    # containers' own `sleep` excluded: the same for every runtime) plus
    # the service's growth.
    service = [int(p) for p in args.service_pids.split(",") if p]
    before = pids()
    svc_before = sum(pss_kib(p) for p in service)
    made = []
    t0 = time.perf_counter()
    for i in range(args.scale):
        c = client.containers.create(args.image, command="sleep infinity", detach=True, network_mode="none")
        c.start()
        made.append(c)
    out["scale_start_total_ms"] = (time.perf_counter() - t0) * 1000
    time.sleep(2)
    new = [p for p in pids() - before if comm(p) != "sleep"]
    new_pss = sum(pss_kib(p) for p in new)
    svc_after = sum(pss_kib(p) for p in service)
    out["scale_n"] = args.scale
    out["scale_new_procs"] = len(new)
    out["scale_new_procs_pss_kib"] = new_pss
    out["service_pss_kib_before"] = svc_before
    out["service_pss_kib_after"] = svc_after
    out["scale_total_pss_kib"] = new_pss + svc_after
    for c in made:
        c.remove(force=True)
    client.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
