#!/usr/bin/env python3
"""Two builds' latency at one size, alternately: for each round and each build, an
`iwperf` pair (two processes, loopback) runs TEST -s SIZE for SECS seconds, embedded or
(--daemon) attached to a fresh iwarpd of the same build; prints each round and the
medians of t_typical (us). Nothing here is a test: it only prints numbers.

    git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release \\
        -p examples --bin iwperf -p iwarpd --bin iwarpd)
    scripts/ab_lat.py /tmp/old/target/release target/release --size 65536
    scripts/ab_lat.py /tmp/old/target/release target/release --test write_lat --daemon
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_vs  # noqa: E402
import vs_tcp  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="the first build's bin directory (iwperf, iwarpd)")
    p.add_argument("b", help="the second build's bin directory")
    p.add_argument("--test", default="send_lat", choices=["send_lat", "write_lat", "read_lat"])
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--daemon", action="store_true", help="through a fresh iwarpd per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--secs", type=int, default=2)
    p.add_argument("--port", type=int, default=19900)
    a = p.parse_args()
    path = vs_tcp.Path(False)
    builds = {"a": os.path.abspath(a.a), "b": os.path.abspath(a.b)}
    got = {k: [] for k in builds}
    port = a.port
    print(f"ab_lat: {a.test} -s {a.size}{' through iwarpd' if a.daemon else ''}, "
          f"{a.rounds} rounds of {a.secs} s, a = {builds['a']}, b = {builds['b']}")
    for r in range(a.rounds):
        for k, d in builds.items():
            vs_tcp.IWPERF = os.path.join(d, "iwperf")
            daemon_vs.IWARPD = os.path.join(d, "iwarpd")
            extra = []
            iwarpd = None
            if a.daemon:
                iwarpd = daemon_vs.start_iwarpd([])
                extra = ["--daemon", daemon_vs.SOCK]
            try:
                j = vs_tcp.iwperf(path, a.test, ["-s", str(a.size)] + extra, a.secs, port)
            finally:
                if iwarpd:
                    iwarpd.kill()
                    iwarpd.wait()
            got[k].append(j["t_typical"])
            port += 1
        print(f"  round {r + 1}: a {got['a'][-1]:8.2f} us   b {got['b'][-1]:8.2f} us")
        sys.stdout.flush()
    ma, mb = statistics.median(got["a"]), statistics.median(got["b"])
    print(f"  median:  a {ma:8.2f} us   b {mb:8.2f} us   b / a = {mb / ma:.2f}x")


if __name__ == "__main__":
    main()
