#!/usr/bin/env python3
"""What an idle queue pair costs through iwarpd: ten local client processes (`qp-hold`)
open 1,000 queue pairs in all through one daemon (five accept 100 each, five connect 100
each, so both ends of 500 connections are the daemon's), and the resident memory of the
daemon and of each client is read from /proc before and after. Nothing here is a test:
it only prints numbers.

    scripts/daemon_scale.py                  # 10 clients x 100 queue pairs
    scripts/daemon_scale.py --clients 4 --per-client 250
    scripts/daemon_scale.py --embedded       # the same clients with their engines embedded

Builds qp-hold and iwarpd in release.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")
SOCK = "/tmp/iwarpd-daemon-scale.sock"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def hold(args):
    return subprocess.Popen([os.path.join(BIN, "qp-hold")] + args, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def wait_line(p, prefix):
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit(f"daemon_scale: qp-hold ended before `{prefix}`")
        if line.startswith(prefix):
            return line.split()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=10, help="processes (even: half listen)")
    p.add_argument("--per-client", type=int, default=100)
    p.add_argument("--embedded", action="store_true")
    p.add_argument("--port", type=int, default=19800)
    a = p.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "qp-hold",
                    "-p", "iwarpd", "--bin", "iwarpd"], cwd=ROOT, check=True)
    d = None
    dev = []
    if not a.embedded:
        if os.path.exists(SOCK):
            os.unlink(SOCK)
        d = subprocess.Popen([os.path.join(BIN, "iwarpd"), "--listen", "127.0.0.1:0",
                              "--control", SOCK], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
        d.stdout.readline()
        dev = ["--daemon", SOCK]
    procs = []
    try:
        # A client with the device open and no queue pair: the baseline of a client.
        base = hold(dev + ["--listen", f"127.0.0.1:{a.port - 1}", "-n", "1"])
        wait_line(base, "listening")
        time.sleep(0.5)
        base_rss = rss_kib(base.pid)
        before = rss_kib(d.pid) if d else 0
        pairs = a.clients // 2
        for i in range(pairs):
            srv = hold(dev + ["--listen", f"127.0.0.1:{a.port + i}", "-n", str(a.per_client)])
            wait_line(srv, "listening")
            cli = hold(dev + ["--connect", f"127.0.0.1:{a.port + i}", "-n", str(a.per_client)])
            procs += [srv, cli]
        t0 = time.time()
        rss = [int(wait_line(c, "rss_kib")) for c in procs]
        took = time.time() - t0
        time.sleep(1)
        after = rss_kib(d.pid) if d else 0
        qps = a.per_client * len(procs)
        mode = "embedded" if a.embedded else "through iwarpd"
        print(f"daemon_scale: {len(procs)} clients x {a.per_client} queue pairs = {qps} "
              f"({mode}), connected in {took:.1f} s")
        if d:
            print(f"  iwarpd rss        {before} KiB idle -> {after} KiB: "
                  f"{(after - before) / qps:.1f} KiB per idle queue pair")
        per_client = [(r - base_rss) / a.per_client for r in rss]
        print(f"  client rss        {base_rss} KiB with no queue pair; "
              f"{min(rss)}..{max(rss)} KiB with {a.per_client}: "
              f"{min(per_client):.1f}..{max(per_client):.1f} KiB per queue pair")
    finally:
        for c in procs + [base]:
            c.stdin.close()
        for c in procs + [base]:
            try:
                c.wait(timeout=20)
            except subprocess.TimeoutExpired:
                c.kill()
        if d:
            d.kill()
            d.wait()


if __name__ == "__main__":
    main()
