#!/usr/bin/env python3
"""The two-process comparisons users make: `iwperf` against `iperf3` and `sockperf` on the
same path, in the same run, alternating rounds, medians printed as ratios next to the
targets of BENCHMARKS.md. Nothing here is a test: it only prints numbers.

    scripts/vs_tcp.py                  # loopback, 3 rounds of 5 s per line
    scripts/vs_tcp.py --netns          # two network namespaces joined by a veth, MTU 1500 (root)
    scripts/vs_tcp.py --only write,rate --secs 3 --rounds 5
    scripts/vs_tcp.py --netns --large-fpdus   # both iwperf sides offer FPDUs above one segment
    scripts/vs_tcp.py --iwperf /tmp/old/target/release/iwperf   # another build (A/B)

Lines (the server runs in one process, the client in another; with --netns each in its
own namespace):
  write  iwperf write_bw -s 65536 --crc        vs  iperf3 -l 64K          (Gbit/s)
  write-nocrc  the same without CRC (siw's default; payloads are read from the socket
         straight into the region)              vs  iperf3 -l 64K          (Gbit/s)
  read   iwperf read_bw  -s 65536 --crc        vs  iperf3 -l 64K          (Gbit/s)
  rate   iwperf write_bw -s 64 (depth 128)     vs  iperf3 -l 64           (M messages/s:
         RDMA Writes completed, against write() calls of 64 octets)
  lat    iwperf send_lat -s 8 (t_typical)      vs  sockperf ping-pong --tcp -m 14 (median;
         both are one-way: half the round trip)

Needs iperf3 and sockperf (apt-get install -y iperf3 sockperf); builds iwperf in release.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IWPERF = os.path.join(ROOT, "target", "release", "iwperf")
NS = ("iwvs-a", "iwvs-b")
ADDR = {"lo": ("127.0.0.1", "127.0.0.1"), "veth": ("10.77.0.1", "10.77.0.2")}

TARGETS = {
    ("write", "lo"): (">=", 0.9),
    ("write", "veth"): (">=", 0.7),
    ("read", "lo"): (">=", 0.8),
    ("read", "veth"): (">=", 0.8),
    ("rate", "lo"): (">=", 1.0),
    ("rate", "veth"): (">=", 1.0),
    ("lat", "lo"): ("<=", 1.2),
    ("lat", "veth"): ("<=", 1.2),
}
# Lines the issue sets no target for.
NO_TARGET = {"write-nocrc"}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


class Path:
    """Where the server and the client run: both on loopback, or one per namespace."""

    def __init__(self, netns):
        self.kind = "veth" if netns else "lo"
        self.server_addr, _ = ADDR[self.kind]
        if netns:
            self.setup()

    def setup(self):
        self.teardown()
        a, b = NS
        for ns in NS:
            sh(["ip", "netns", "add", ns])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        sh(["ip", "link", "add", "iwvs0", "netns", a, "type", "veth", "peer", "iwvs1", "netns", b])
        for ns, dev, ip in ((a, "iwvs0", ADDR["veth"][0]), (b, "iwvs1", ADDR["veth"][1])):
            sh(["ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev])
            sh(["ip", "-n", ns, "link", "set", dev, "mtu", "1500", "up"])

    def teardown(self):
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def wrap(self, side, cmd):
        if self.kind == "lo":
            return cmd
        return ["ip", "netns", "exec", NS[0] if side == "server" else NS[1]] + cmd


def pair(path, server, client, settle=0.4):
    """Runs `server` in the background, then `client`; returns the client's stdout."""
    srv = subprocess.Popen(path.wrap("server", server), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(settle)
        out = subprocess.run(path.wrap("client", client), text=True, capture_output=True,
                             timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(client)} failed: {out.stderr.strip()[-400:]}")
        return out.stdout
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


# Extra iwperf flags of this run, on both sides (--large-fpdus).
IWPERF_EXTRA = []


def iwperf(path, test, args, secs, port):
    # -D on both sides: a latency server counts its own iterations (without it, it stopped
    # after -n's default and the client measured that many, whatever -D asked).
    base = [IWPERF, test, "-p", str(port), "-D", str(secs)] + args + IWPERF_EXTRA
    out = pair(path, base, base + ["--json", path.server_addr])
    line = next(l for l in out.splitlines() if l.startswith("{"))
    return json.loads(line)


def iperf3(path, size, secs, port):
    out = pair(path, ["iperf3", "-s", "-1", "-p", str(port)],
               ["iperf3", "-c", path.server_addr, "-p", str(port), "-l", size, "-t", str(secs),
                "-J"])
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def sockperf(path, secs, port):
    srv = ["sockperf", "sr", "--tcp", "-i", path.server_addr, "-p", str(port)]
    srv_proc = subprocess.Popen(path.wrap("server", srv), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        out = sh(path.wrap("client", ["sockperf", "pp", "--tcp", "-i", path.server_addr,
                                      "-p", str(port), "-m", "14", "-t", str(secs)])).stdout
    finally:
        srv_proc.kill()
        srv_proc.wait()
    m = re.search(r"percentile 50\.000 =\s+([\d.]+)", out)
    if not m:
        raise RuntimeError("no median in sockperf's output:\n" + out[-800:])
    return float(m.group(1))


def measure(line, path, secs, port):
    """(stack value, baseline value, unit) for one round of one line."""
    if line in ("write", "read", "write-nocrc"):
        test, crc = {"write": ("write_bw", ["--crc"]), "read": ("read_bw", ["--crc"]),
                     "write-nocrc": ("write_bw", [])}[line]
        r = iwperf(path, test, ["-s", "65536", "--report_gbits"] + crc, secs, port)
        return r["bw_avg"], iperf3(path, "64K", secs, port + 1) / 1e9, "Gbit/s"
    if line == "rate":
        r = iwperf(path, "write_bw", ["-s", "64"], secs, port)
        writes = iperf3(path, "64", secs, port + 1) / 8 / 64
        return r["msg_rate"], writes / 1e6, "M msg/s"
    if line == "lat":
        r = iwperf(path, "send_lat", ["-s", "8"], secs, port)
        return r["t_typical"], sockperf(path, secs, port + 1), "us"
    raise ValueError(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", action="store_true", help="veth between two namespaces, MTU 1500")
    p.add_argument("--secs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="write,read,write-nocrc,rate,lat")
    p.add_argument("--port", type=int, default=19500)
    p.add_argument("--iwperf", help="use this iwperf binary instead of building this tree's")
    p.add_argument("--large-fpdus", action="store_true",
                   help="pass --large-fpdus to both iwperf sides (FPDUs above one TCP segment)")
    a = p.parse_args()
    if a.large_fpdus:
        IWPERF_EXTRA.append("--large-fpdus")
    for tool in ("iperf3", "sockperf"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit(f"vs_tcp: {tool} is not installed: apt-get install -y iperf3 sockperf")
    if a.netns and os.geteuid() != 0:
        sys.exit("vs_tcp: --netns creates network namespaces and needs root")
    global IWPERF
    if a.iwperf:
        IWPERF = os.path.abspath(a.iwperf)
    else:
        sh(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "iwperf"], cwd=ROOT)
    path = Path(a.netns)
    try:
        fpdus = "large FPDUs" if a.large_fpdus else "segment-sized FPDUs"
        print(f"vs_tcp: {path.kind}, {fpdus}, {a.rounds} rounds of {a.secs} s per line, "
              "alternating, medians")
        for i, line in enumerate(a.only.split(",")):
            ours, base = [], []
            unit = ""
            for r in range(a.rounds):
                o, b, unit = measure(line, path, a.secs, a.port + 10 * (i * a.rounds + r))
                ours.append(o)
                base.append(b)
            o, b = statistics.median(ours), statistics.median(base)
            target = ("no target" if line in NO_TARGET else
                      "target {} {}x".format(*TARGETS[(line, path.kind)]))
            ratio = o / b if b else float("nan")
            names = {"write": "RDMA Write 64 KiB, CRC   vs iperf3 -l 64K",
                     "read": "RDMA Read 64 KiB, CRC    vs iperf3 -l 64K",
                     "write-nocrc": "RDMA Write 64 KiB, no CRC vs iperf3 -l 64K",
                     "rate": "write_bw -s 64 msg rate  vs iperf3 -l 64 writes",
                     "lat": "send_lat -s 8 typical    vs sockperf pp median"}
            spread = f"[{min(ours):.2f}..{max(ours):.2f} vs {min(base):.2f}..{max(base):.2f}]"
            print(f"{names[line]:48} {o:8.2f} vs {b:8.2f} {unit:8} = {ratio:5.2f}x "
                  f"({target})  {spread}", flush=True)
    finally:
        if a.netns:
            path.teardown()


if __name__ == "__main__":
    main()
