#!/usr/bin/env python3
"""Debian's perftest through the C library (cverbs, issue 34) against this stack's own
iwperf, on the same path and in alternating rounds, as issue 34 asks:
`ib_write_bw -s 65536` at least 0.9x `iwperf write_bw`, and `ib_send_lat -s 8` at most
1.15x `iwperf send_lat` (the mean one-way latency: perftest's duration mode prints t_avg).
Embedded (the engine in each process), or with --daemon both through one local iwarpd
(perftest by IWARP_DEVICE, its buffers registered in place; iwperf by --daemon). Nothing
here is a test: it only prints numbers.

    scripts/cverbs_vs.py                     # 3 rounds of 3 s per line, loopback
    scripts/cverbs_vs.py --rounds 5 --secs 5 --netns
    scripts/cverbs_vs.py --daemon            # through iwarpd, loopback
    scripts/cverbs_vs.py --events            # and send_lat -e (completion events) on both

Needs perftest; builds iwperf and the library in release.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_vs  # noqa: E402
import vs_tcp  # noqa: E402

ROOT = vs_tcp.ROOT
LIB = os.path.join(ROOT, "target", "rdma-core")


def perftest(path, test, args, secs, port, device=None):
    """perftest's result line: (bw_avg in Gbit/s) or (t_typical in us); through the
    iwarpd `device` names (IWARP_DEVICE) if given."""
    os.environ["LD_LIBRARY_PATH"] = LIB
    if device:
        os.environ["IWARP_DEVICE"] = device
    else:
        os.environ.pop("IWARP_DEVICE", None)
    base = [test, "-R", "-p", str(port), "-D", str(secs)] + args
    out = vs_tcp.pair(path, base, base + [path.server_addr], settle=0.8)
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+", l)]
    if not rows:
        raise RuntimeError(f"{test}: no result line in {out[-400:]}")
    row = rows[-1]
    # bw: #bytes #iterations BW-peak BW-avg MsgRate (MB/sec = 10^6 octets/s);
    # lat with -D: #bytes #iterations t_avg tps
    if test.endswith("_bw"):
        return float(row[3]) * 8 / 1000
    return float(row[2])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--secs", type=int, default=3)
    p.add_argument("--netns", action="store_true", help="server and client in two namespaces")
    p.add_argument("--daemon", action="store_true", help="both sides through one iwarpd")
    p.add_argument("--events", action="store_true",
                   help="also send_lat -s 8 -e: the program sleeps on completion events")
    a = p.parse_args()
    if a.daemon and a.netns:
        sys.exit("cverbs_vs: --daemon runs on loopback (one iwarpd); drop --netns")
    # Two builds: `--bin iwperf` would also keep iwarpd's binary from being built.
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "iwperf"],
                   cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "iwarpd", "--bin", "iwarpd"],
                   cwd=ROOT, check=True)
    subprocess.run([os.path.join(ROOT, "scripts", "rdma_core_lib.sh"), "--release"], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    path = vs_tcp.Path(a.netns)
    keys = ["ib_write_bw", "iwperf write_bw", "ib_send_lat", "iwperf send_lat"]
    if a.events:
        keys += ["ib_send_lat -e", "iwperf send_lat -e"]
    got = {k: [] for k in keys}
    port = 19000
    daemon, device, via = None, None, []
    if a.daemon:
        daemon = daemon_vs.start_iwarpd([])
        device, via = f"unix:{daemon_vs.SOCK}", ["--daemon", daemon_vs.SOCK]
    else:
        # The same framing on both lines: the library asks for MPA CRC, iwperf only with
        # --crc (through iwarpd, both take the daemon's settings).
        via = ["--crc"]
    try:
        for r in range(a.rounds):
            port += 10
            got["ib_write_bw"].append(perftest(path, "ib_write_bw", ["-s", "65536"], a.secs,
                                               port, device))
            got["iwperf write_bw"].append(vs_tcp.iwperf(
                path, "write_bw", ["-s", "65536", "--report_gbits"] + via, a.secs,
                port + 1)["bw_avg"])
            got["ib_send_lat"].append(perftest(path, "ib_send_lat", ["-s", "8"], a.secs,
                                               port + 2, device))
            got["iwperf send_lat"].append(vs_tcp.iwperf(
                path, "send_lat", ["-s", "8"] + via, a.secs, port + 3)["t_avg"])
            if a.events:
                got["ib_send_lat -e"].append(perftest(path, "ib_send_lat", ["-s", "8", "-e"],
                                                      a.secs, port + 4, device))
                got["iwperf send_lat -e"].append(vs_tcp.iwperf(
                    path, "send_lat", ["-s", "8", "-e"] + via, a.secs, port + 5)["t_avg"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in got.items()),
                  file=sys.stderr)
    finally:
        if daemon:
            daemon.kill()
        if a.netns:
            path.teardown()
    med = {k: statistics.median(v) for k, v in got.items()}
    where = "through iwarpd" if a.daemon else "embedded"
    print(f"cverbs_vs: {path.kind}, {where}, {a.rounds} rounds of {a.secs} s, medians [min..max]")
    for k, v in got.items():
        unit = "Gbit/s" if k.endswith("_bw") else "us"
        print(f"  {k:18} {med[k]:8.2f} {unit}  [{min(v):.2f}..{max(v):.2f}]")
    print(f"  ib_write_bw / iwperf write_bw = {med['ib_write_bw'] / med['iwperf write_bw']:.2f}x"
          " (target >= 0.9x)")
    print(f"  ib_send_lat / iwperf send_lat = {med['ib_send_lat'] / med['iwperf send_lat']:.2f}x"
          " (target <= 1.15x)")
    if a.events:
        print(f"  ib_send_lat -e / iwperf send_lat -e = "
              f"{med['ib_send_lat -e'] / med['iwperf send_lat -e']:.2f}x (no target)")


if __name__ == "__main__":
    main()
