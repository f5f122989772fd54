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


def create_start_ms(client, image, runs, network_mode, **kw):
    """Median ms of containers.create + start until reload() says running,
    as SlopCodeBench's DockerEnvironment, after two warm-up rounds."""
    times = []
    for i in range(runs + 2):
        t0 = time.perf_counter()
        c = client.containers.create(image, command="sleep infinity", detach=True,
                                     network_mode=network_mode, **kw)
        c.start()
        c.reload()
        while c.status != "running":
            time.sleep(0.001)
            c.reload()
        t = time.perf_counter() - t0
        c.remove(force=True)
        if i >= 2:
            times.append(t * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--exec-runs", type=int, default=100)
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--service-pids", default="", help="the service's own processes, measured before and after")
    ap.add_argument("--ports-image", default="", help="a Python image: time bridge spawns and a published port (issue 10)")
    ap.add_argument("--port", type=int, default=18431, help="the host port to publish")
    args = ap.parse_args()
    client = docker.DockerClient(base_url="unix://" + args.socket, timeout=120)
    try:
        client.images.get(args.image)
    except docker.errors.ImageNotFound:
        client.images.pull(args.image)
    out = {"peer": args.name, "runs": args.runs}

    out["create_start_ms"] = create_start_ms(client, args.image, args.runs, "none", working_dir="/")

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
    try:
        t0 = time.perf_counter()
        for i in range(args.scale):
            c = client.containers.create(args.image, command="sleep infinity", detach=True, network_mode="none")
            made.append(c)
            c.start()
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
    finally:
        # A failed start part-way leaves none of the batch behind.
        for c in made:
            c.remove(force=True)
    if args.ports_image:
        ports(client, args, out)
    client.close()
    print(json.dumps(out))


# The server inside: port 8000 sends THROUGHPUT_MIB MiB and closes; port
# 8001 sends one byte and closes (connection set-up); both threaded.
SERVER = r"""
import socket, threading
def serve(port, body):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(512)
    def one(c):
        try:
            body(c)
        finally:
            c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()
buf = b"\0" * (1 << 20)
def bulk(c):
    for _ in range(%d):
        c.sendall(buf)
threading.Thread(target=serve, args=(8000, bulk), daemon=True).start()
serve(8001, lambda c: c.sendall(b"x"))
"""
THROUGHPUT_MIB = 512


def ports(client, args, out):
    """Bridge spawn beside none, and a published port: throughput (MiB/s,
    best of 5 transfers of THROUGHPUT_MIB MiB) and connection set-up (median
    of 300 connect-to-first-byte)."""
    import socket
    out["create_start_bridge_ms"] = create_start_ms(client, args.image, args.runs, "bridge")
    c = client.containers.run(args.ports_image, ["python3", "-c", SERVER % THROUGHPUT_MIB], detach=True,
                              network_mode="bridge",
                              ports={"8000/tcp": ("127.0.0.1", args.port), "8001/tcp": ("127.0.0.1", args.port + 1)})
    try:
        def fetch(port):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            n = 0
            b = bytearray(1 << 20)
            while True:
                k = s.recv_into(b)
                if k == 0:
                    break
                n += k
            s.close()
            return n
        deadline = time.time() + 60
        while True:
            try:
                if fetch(args.port + 1) == 1:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("the published port never answered")
            time.sleep(0.05)
        best = 0
        for _ in range(5):
            t0 = time.perf_counter()
            n = fetch(args.port)
            t = time.perf_counter() - t0
            if n != THROUGHPUT_MIB << 20:
                sys.exit(f"short transfer: {n} bytes")
            best = max(best, THROUGHPUT_MIB / t)
        out["port_throughput_mib_s"] = best
        lat = []
        for i in range(320):
            t0 = time.perf_counter()
            if fetch(args.port + 1) != 1:
                sys.exit("connection set-up: no byte")
            if i >= 20:
                lat.append((time.perf_counter() - t0) * 1000)
        out["port_connect_ms"] = statistics.median(lat)
    finally:
        c.remove(force=True)


if __name__ == "__main__":
    main()
