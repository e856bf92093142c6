#!/usr/bin/env python3
"""Daemon mode against embedded against raw TCP, as users compare: `iwperf` processes
attached to a local `iwarpd` (--daemon), the same binary with its engine embedded, and
plain TCP on the same loopback, in alternating rounds, medians printed as ratios next to
the targets of issue 33. Nothing here is a test: it only prints numbers.

The floor is TCP spinning on non-blocking sockets, as iwperf spins on its completion queue
(`sockperf --nonblocked`, `tcp-spin stream`); the blocking tools (sockperf, iperf3) pay a
scheduler wake-up per message and are printed second (see vs_tcp.py).

    scripts/daemon_vs.py                     # 3 rounds of 5 s per line
    scripts/daemon_vs.py --rounds 5 --secs 3 --only lat
    scripts/daemon_vs.py --bin-dir /tmp/old/target/release   # another build's iwperf
                                                             # and iwarpd (an A/B)

Lines:
  lat   iwperf send_lat -s 8 (t_typical, and t_avg through the daemon): through iwarpd
        with seed 000's push through the daemon (IWARP_PUSH_SOCKET=0), with the push path
        that skips it (the shared socket, the default), with --no-push, embedded (push and not);
        against sockperf ping-pong --tcp -m 14 --nonblocked (the floor) and without
        --nonblocked (blocking), medians
  bw    iwperf write_bw -s 65536: through iwarpd (its CRC setting: on), embedded with
        --crc, each from the registered buffer and with --bytes (owned payloads: through
        iwarpd by the staging area); against tcp-spin stream (the floor) and iperf3 -l 64K
        (blocking)

Needs iperf3 and sockperf; builds iwperf, tcp-spin and iwarpd in release.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vs_tcp  # noqa: E402

ROOT = vs_tcp.ROOT
IWARPD = os.path.join(ROOT, "target", "release", "iwarpd")
SOCK = "/tmp/iwarpd-daemon-vs.sock"


def start_iwarpd(extra):
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    d = subprocess.Popen([IWARPD, "--listen", "127.0.0.1:0", "--control", SOCK] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(SOCK):
            return d
        time.sleep(0.05)
    d.kill()
    sys.exit("daemon_vs: iwarpd did not create its control socket")


def run(line, path, secs, port):
    """{name: value} for one round of one line."""
    daemon = ["--daemon", SOCK]
    if line == "lat":
        r = {}
        for name, extra in (("push", daemon), ("push-socket", daemon),
                            ("no-push", daemon + ["--no-push"]),
                            ("embedded", []), ("emb-nopush", ["--no-push"])):
            # The push path that skips the daemon (the shared socket) is the default;
            # IWARP_PUSH_SOCKET=0 pushes through the daemon (seed 000 as in hardware).
            os.environ["IWARP_PUSH_SOCKET"] = "1" if name == "push-socket" else "0"
            j = vs_tcp.iwperf(path, "send_lat", ["-s", "8"] + extra, secs, port)
            r[name] = j["t_typical"]
            if name in ("push", "push-socket", "no-push"):
                r[name + " avg"] = j["t_avg"]
            port += 1
        os.environ.pop("IWARP_PUSH_SOCKET", None)
        r["floor"] = vs_tcp.sockperf(path, secs, port, True)
        r["blocking"] = vs_tcp.sockperf(path, secs, port + 1, False)
        return r
    if line == "bw":
        gb = ["-s", "65536", "--report_gbits"]
        return {
            "daemon": vs_tcp.iwperf(path, "write_bw", gb + daemon, secs, port)["bw_avg"],
            "daemon-bytes": vs_tcp.iwperf(path, "write_bw", gb + daemon + ["--bytes"], secs,
                                          port + 4)["bw_avg"],
            "embedded": vs_tcp.iwperf(path, "write_bw", gb + ["--crc"], secs, port + 1)["bw_avg"],
            "emb-bytes": vs_tcp.iwperf(path, "write_bw", gb + ["--crc", "--bytes"], secs,
                                       port + 5)["bw_avg"],
            "floor": vs_tcp.tcp_spin_stream(path, secs, port + 2),
            "iperf3": vs_tcp.iperf3(path, "64K", secs, port + 3) / 1e9,
        }
    raise ValueError(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--secs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="lat,bw")
    p.add_argument("--port", type=int, default=19700)
    p.add_argument("--iwarpd-args", default="",
                   help="more flags for iwarpd, e.g. '--local-threads 1' (an A/B of settings)")
    p.add_argument("--bin-dir", help="iwperf and iwarpd of another build (an A/B of "
                   "revisions); nothing is built")
    a = p.parse_args()
    for tool in ("iperf3", "sockperf"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit(f"daemon_vs: {tool} is not installed: apt-get install -y iperf3 sockperf")
    global IWARPD
    if a.bin_dir:
        IWARPD = os.path.join(a.bin_dir, "iwarpd")
        vs_tcp.IWPERF = os.path.join(a.bin_dir, "iwperf")
    else:
        vs_tcp.sh(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "iwperf",
                   "-p", "iwarpd", "--bin", "iwarpd"], cwd=ROOT)
    vs_tcp.sh(["cargo", "build", "--release", "-q", "-p", "examples", "--bin", "tcp-spin"],
              cwd=ROOT)
    path = vs_tcp.Path(False)
    d = start_iwarpd(a.iwarpd_args.split())
    try:
        print(f"daemon_vs: loopback, {a.rounds} rounds of {a.secs} s per line, alternating, "
              "medians [min..max]")
        for i, line in enumerate(a.only.split(",")):
            rounds = [run(line, path, a.secs, a.port + 10 * (i * a.rounds + r))
                      for r in range(a.rounds)]
            med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            span = {k: (min(r[k] for r in rounds), max(r[k] for r in rounds)) for k in rounds[0]}
            for k, v in med.items():
                unit = "us" if line == "lat" else "Gbit/s"
                print(f"  {line:4} {k:11} {v:8.2f} {unit:7} [{span[k][0]:.2f}..{span[k][1]:.2f}]")
            if line == "lat":
                f, b = med["floor"], med["blocking"]
                for k in ("push", "push-socket"):
                    print(f"  lat  {k} / no-push = {med[k] / med['no-push']:.2f}x typical, "
                          f"{med[k + ' avg'] / med['no-push avg']:.2f}x mean (target <= 0.75x)")
                for k in ("push", "push-socket", "no-push", "embedded", "emb-nopush"):
                    goal = {"push-socket": " (target <= 2.0x the floor)",
                            "emb-nopush": " (target <= 1.25x the floor)"}.get(k, "")
                    print(f"  lat  {k:10} / floor    = {med[k] / f:.2f}x, "
                          f"/ blocking = {med[k] / b:.2f}x{goal}")
            else:
                f = med["floor"]
                print(f"  bw   daemon / floor       = {med['daemon'] / f:.2f}x (target >= 0.9x), "
                      f"/ iperf3 = {med['daemon'] / med['iperf3']:.2f}x")
                print(f"  bw   embedded / floor     = {med['embedded'] / f:.2f}x, "
                      f"/ iperf3 = {med['embedded'] / med['iperf3']:.2f}x")
                for k in ("daemon-bytes", "emb-bytes"):
                    print(f"  bw   {k:12} / floor = {med[k] / f:.2f}x, "
                          f"/ registered = {med[k] / med[k.split('-')[0].replace('emb', 'embedded')]:.2f}x")
            sys.stdout.flush()
    finally:
        d.kill()
        d.wait()


if __name__ == "__main__":
    main()
