#!/usr/bin/env python3
"""The two-process comparisons users make: `iwperf` against plain TCP on the same path, in
the same run, alternating rounds, medians printed as ratios next to the targets of
BENCHMARKS.md. Nothing here is a test: it only prints numbers.

Every line has two baselines. The floor is TCP driven as iwperf drives its completion
queue, spinning on non-blocking sockets (`sockperf --nonblocked`, `tcp-spin stream`): the
ratio that matters. The blocking tools (`sockperf`, `iperf3`) sleep in recv/select and pay
a scheduler wake-up per message, 25-30 us on these VMs, so against a spinning consumer
they flatter it; their ratio is printed second.

    scripts/vs_tcp.py                  # loopback, 3 rounds of 5 s per line
    scripts/vs_tcp.py --netns          # two network namespaces joined by a veth, MTU 1500 (root)
    scripts/vs_tcp.py --only write,rate --secs 3 --rounds 5
    scripts/vs_tcp.py --netns --large-fpdus   # both iwperf sides offer FPDUs above one segment
    scripts/vs_tcp.py --iwperf /tmp/old/target/release/iwperf   # another build (A/B)
    scripts/vs_tcp.py --pin --only lat  # servers on CPU 1, clients on CPU 0
    scripts/vs_tcp.py --base /tmp/old/target/release/iwperf   # A/B in the same rounds

Lines (the server runs in one process, the client in another; with --netns each in its
own namespace), each as "ours  vs  floor / blocking":
  write  iwperf write_bw -s 65536 --crc    vs  tcp-spin stream -s 65536 / iperf3 -l 64K
  write-nocrc  the same without CRC (siw's default: payloads are read from the socket
         straight into the region)
  read   iwperf read_bw  -s 65536 --crc    vs  the same floors                (Gbit/s)
  rate   iwperf write_bw -s 64 (depth 128): the octets of its FPDUs (84 per 64-octet
         Write: MPA length, DDP/RDMAP header, payload, CRC) as Gbit/s, against the floor
         stream's 64 KiB writes; and its M messages/s against iperf3 -l 64's write() calls
  lat    iwperf send_lat  -s 8 (t_typical) vs  sockperf ping-pong --tcp --nonblocked -m 14
  wlat   iwperf write_lat -s 8                  (median, server --nonblocked too) /
  rlat   iwperf read_lat  -s 8                  sockperf ping-pong --tcp -m 14 (median);
         one-way (half the round trip), but read_lat, as perftest's, is the whole round
         trip of a Read, so its baselines are twice sockperf's
  elat   iwperf send_lat -s 8 -e (t_typical): the application sleeps on completion
         events, as most do; its like for like is blocking sockperf (one wake-up per
         message), so its target is against that one

Needs iperf3 and sockperf (apt-get install -y iperf3 sockperf); builds iwperf and
tcp-spin in release.
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
TCP_SPIN = os.path.join(ROOT, "target", "release", "tcp-spin")
# Octets on the wire per 64-octet RDMA Write: MPA length (2), DDP/RDMAP tagged header (14),
# payload (64, no pad), CRC (4).
FPDU_64 = 2 + 14 + 64 + 4
NS = ("iwvs-a", "iwvs-b")
ADDR = {"lo": ("127.0.0.1", "127.0.0.1"), "veth": ("10.77.0.1", "10.77.0.2")}

# Issue 33's targets, against the floor.
TARGETS = {
    ("write", "lo"): (">=", 0.95),
    ("write", "veth"): (">=", 0.85),
    ("read", "lo"): (">=", 0.9),
    ("read", "veth"): (">=", 0.8),
    ("lat", "lo"): ("<=", 1.25),
    ("lat", "veth"): ("<=", 1.25),
    ("wlat", "lo"): ("<=", 1.4),
    ("wlat", "veth"): ("<=", 1.4),
    ("rlat", "lo"): ("<=", 1.4),
    ("rlat", "veth"): ("<=", 1.4),
}
# Against the blocking tool, for a line whose application sleeps as that tool does.
TARGETS_BLOCKING = {
    ("elat", "lo"): ("<=", 1.1),
    ("elat", "veth"): ("<=", 1.1),
}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


class Path:
    """Where the server and the client run: both on loopback, or one per namespace."""

    def __init__(self, netns, pin=False):
        self.kind = "veth" if netns else "lo"
        self.pin = pin
        # Pinning is for the latency lines: a stream on one CPU per side swings widely.
        self.pin_now = False
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
        if self.pin and self.pin_now:
            cmd = ["taskset", "-c", "1" if side == "server" else "0"] + cmd
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


# Another iwperf build measured in the same rounds (--base): an A/B.
BASE = None


def iwperf(path, test, args, secs, port, binary=None):
    # -D on both sides: a latency server counts its own iterations (without it, it stopped
    # after -n's default and the client measured that many, whatever -D asked).
    base = [binary or IWPERF, test, "-p", str(port), "-D", str(secs)] + args + IWPERF_EXTRA
    out = pair(path, base, base + ["--json", path.server_addr])
    line = next(l for l in out.splitlines() if l.startswith("{"))
    return json.loads(line)


def iperf3(path, size, secs, port):
    out = pair(path, ["iperf3", "-s", "-1", "-p", str(port)],
               ["iperf3", "-c", path.server_addr, "-p", str(port), "-l", size, "-t", str(secs),
                "-J"])
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def sockperf(path, secs, port, nonblocked):
    """sockperf ping-pong's median one-way latency (us); `nonblocked` spins on both sides."""
    spin = ["--nonblocked"] if nonblocked else []
    srv = ["sockperf", "sr", "--tcp", "-i", path.server_addr, "-p", str(port)] + spin
    srv_proc = subprocess.Popen(path.wrap("server", srv), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        out = sh(path.wrap("client", ["sockperf", "pp", "--tcp", "-i", path.server_addr,
                                      "-p", str(port), "-m", "14", "-t", str(secs)]
                           + spin)).stdout
    finally:
        srv_proc.kill()
        srv_proc.wait()
    m = re.search(r"percentile 50\.000 =\s+([\d.]+)", out)
    if not m:
        raise RuntimeError("no median in sockperf's output:\n" + out[-800:])
    return float(m.group(1))


def tcp_spin_stream(path, secs, port):
    """The floor stream: 64 KiB non-blocking writes and reads in spin loops (Gbit/s)."""
    base = [TCP_SPIN, "stream", "-p", str(port), "-D", str(secs)]
    out = pair(path, base, base + ["--json", path.server_addr], settle=0.3)
    return json.loads(out.strip().splitlines()[-1])["gbits"]


# How each line is named, its unit, and what its ratios mean.
NAMES = {
    "write": ("RDMA Write 64 KiB, CRC", "Gbit/s"),
    "write-nocrc": ("RDMA Write 64 KiB, no CRC", "Gbit/s"),
    "read": ("RDMA Read 64 KiB, CRC", "Gbit/s"),
    "rate": ("write_bw -s 64, FPDU octets", "Gbit/s"),
    "lat": ("send_lat -s 8 typical", "us"),
    "wlat": ("write_lat -s 8 typical", "us"),
    "rlat": ("read_lat -s 8 typical (RTT)", "us"),
    "elat": ("send_lat -s 8 -e typical", "us"),
}


def measure(line, path, secs, port):
    """{"ours", "floor", "blocking"} for one round of one line (and "msgs"/"writes" for
    rate: M messages/s against iperf3's write() calls; "base": the --base build's)."""
    r = measure_one(line, path, secs, port, IWPERF)
    if BASE:
        r["base"] = measure_one(line, path, secs, port + 5, BASE)["ours"]
    return r


def measure_one(line, path, secs, port, binary):
    if line in ("write", "read", "write-nocrc"):
        test, crc = {"write": ("write_bw", ["--crc"]), "read": ("read_bw", ["--crc"]),
                     "write-nocrc": ("write_bw", [])}[line]
        r = iwperf(path, test, ["-s", "65536", "--report_gbits"] + crc, secs, port, binary)
        return {"ours": r["bw_avg"], "floor": tcp_spin_stream(path, secs, port + 1),
                "blocking": iperf3(path, "64K", secs, port + 2) / 1e9}
    if line == "rate":
        r = iwperf(path, "write_bw", ["-s", "64"], secs, port, binary)
        writes = iperf3(path, "64", secs, port + 1) / 8 / 64 / 1e6
        return {"ours": r["msg_rate"] * 1e6 * FPDU_64 * 8 / 1e9,
                "floor": tcp_spin_stream(path, secs, port + 2),
                "blocking": writes * 64 * 8 / 1e3, "msgs": r["msg_rate"], "writes": writes}
    if line in ("lat", "wlat", "rlat", "elat"):
        test = {"lat": "send_lat", "wlat": "write_lat", "rlat": "read_lat",
                "elat": "send_lat"}[line]
        events = ["-e"] if line == "elat" else []
        r = iwperf(path, test, ["-s", "8"] + events, secs, port, binary)
        # perftest's read_lat is the whole round trip (a Read is one), the others half.
        trips = 2 if line == "rlat" else 1
        return {"ours": r["t_typical"], "floor": trips * sockperf(path, secs, port + 1, True),
                "blocking": trips * sockperf(path, secs, port + 2, False)}
    raise ValueError(line)


def ratio(ours, base):
    return ours / base if base else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", action="store_true", help="veth between two namespaces, MTU 1500")
    p.add_argument("--secs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="write,read,write-nocrc,rate,lat,wlat,rlat,elat")
    p.add_argument("--port", type=int, default=19500)
    p.add_argument("--iwperf", help="use this iwperf binary instead of building this tree's")
    p.add_argument("--base", help="another iwperf build, measured in the same rounds (A/B)")
    p.add_argument("--pin", action="store_true",
                   help="latency lines: every server on CPU 1 and every client on CPU 0 "
                   "(taskset), less spread between runs for A/B comparisons; users' runs "
                   "are unpinned")
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
    global IWPERF, BASE
    if a.base:
        BASE = os.path.abspath(a.base)
    if a.iwperf:
        IWPERF = os.path.abspath(a.iwperf)
    else:
        sh(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "iwperf"], cwd=ROOT)
    sh(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "tcp-spin"], cwd=ROOT)
    path = Path(a.netns, a.pin)
    try:
        fpdus = "large FPDUs" if a.large_fpdus else "segment-sized FPDUs"
        print(f"vs_tcp: {path.kind}, {fpdus}, {a.rounds} rounds of {a.secs} s per line, "
              "alternating, medians")
        print(f"{'line':30} {'ours':>8}   {'floor':>8}   {'blocking':>8} {'unit':7} "
              f"{'/floor':>7} {'/blocking':>9}  target vs floor")
        for i, line in enumerate(a.only.split(",")):
            path.pin_now = line in ("lat", "wlat", "rlat", "elat")
            rounds = [measure(line, path, a.secs, a.port + 10 * (i * a.rounds + r))
                      for r in range(a.rounds)]
            med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            name, unit = NAMES[line]
            target = TARGETS.get((line, path.kind))
            blocking = TARGETS_BLOCKING.get((line, path.kind))
            if target:
                target = "target {} {}x".format(*target)
            elif blocking:
                target = "target {} {}x vs blocking".format(*blocking)
            else:
                target = "no target"
            spread = "[{:.2f}..{:.2f} vs {:.2f}..{:.2f}]".format(
                min(r["ours"] for r in rounds), max(r["ours"] for r in rounds),
                min(r["floor"] for r in rounds), max(r["floor"] for r in rounds))
            print(f"{name:30} {med['ours']:8.2f} vs {med['floor']:8.2f} / {med['blocking']:8.2f} "
                  f"{unit:7} {ratio(med['ours'], med['floor']):6.2f}x "
                  f"{ratio(med['ours'], med['blocking']):8.2f}x  {target}  {spread}",
                  flush=True)
            if BASE:
                print(f"{'  --base build':30} {med['base']:8.2f} {unit:7} this build / base = "
                      f"{ratio(med['ours'], med['base']):.2f}x  "
                      f"[{min(r['base'] for r in rounds):.2f}..{max(r['base'] for r in rounds):.2f}]",
                      flush=True)
            if line == "rate":
                print(f"{'  messages':30} {med['msgs']:8.2f} M/s vs iperf3 -l 64 "
                      f"{med['writes']:.2f} M write()s/s "
                      f"(target: 5.0 M/s, twice issue 33's 2.5)", flush=True)
    finally:
        if a.netns:
            path.teardown()


if __name__ == "__main__":
    main()
