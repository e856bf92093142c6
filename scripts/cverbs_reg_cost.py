#!/usr/bin/env python3
"""What registering a C program's own memory costs through the C library (cverbs, issue
34 item 3): `ibv_reg_mr` + `ibv_dereg_mr` of a malloc'ed buffer, embedded (the engine
in the process: no copy) and through a local iwarpd (the buffer's pages move onto the
library's memory file in place and back: two copies), against a `memcpy` of the same
size measured in the same run (the floor for any design that copies). Nothing here is a
test: it only prints numbers.

    scripts/cverbs_reg_cost.py                 # 4 KiB, 1 MiB, 64 MiB
    scripts/cverbs_reg_cost.py --sizes 65536 16777216 --reps 20

Needs libibverbs-dev and cc; builds the library and iwarpd in release.
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_vs  # noqa: E402
import vs_tcp  # noqa: E402

ROOT = vs_tcp.ROOT
LIB = os.path.join(ROOT, "target", "rdma-core")

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	size_t len = strtoull(argv[1], NULL, 0);
	int reps = atoi(argv[2]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	char *buf = malloc(len), *copy = malloc(len);
	if (!pd || !buf || !copy)
		return 1;
	memset(buf, 1, len), memset(copy, 2, len);
	double reg = 0, dereg = 0, cp = 0;
	for (int i = 0; i < reps; i++) {
		double t0 = now();
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_REMOTE_WRITE);
		double t1 = now();
		if (!mr || ibv_dereg_mr(mr))
			return 1;
		double t2 = now();
		memcpy(copy, buf, len);
		double t3 = now();
		reg += t1 - t0, dereg += t2 - t1, cp += t3 - t2;
		buf[i % len]++, copy[(i * 7) % len]++;
	}
	printf("%.1f %.1f %.1f\n", reg / reps, dereg / reps, cp / reps);
	return 0;
}
"""


def run(exe, size, reps, device):
    env = dict(os.environ, LD_LIBRARY_PATH=LIB)
    env.pop("IWARP_DEVICE", None)
    if device:
        env["IWARP_DEVICE"] = device
    out = subprocess.run([exe, str(size), str(reps)], env=env, text=True, capture_output=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"size {size}: {out.stderr.strip()[-400:]}")
    return [float(x) for x in out.stdout.split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 1 << 20, 64 << 20])
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "iwarpd"], cwd=ROOT, check=True)
    subprocess.run([os.path.join(ROOT, "scripts", "rdma_core_lib.sh"), "--release"], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp()
    src, exe = os.path.join(tmp, "reg.c"), os.path.join(tmp, "reg")
    with open(src, "w") as f:
        f.write(PROGRAM)
    subprocess.run(["cc", "-O2", src, "-o", exe, "-L", LIB, "-l:libibverbs.so.1"], check=True)
    daemon = daemon_vs.start_iwarpd([])
    try:
        print("cverbs_reg_cost: ibv_reg_mr / ibv_dereg_mr of a malloc'ed buffer, "
              f"mean of {a.reps}, us")
        print(f"  {'octets':>10} {'embedded reg':>13} {'dereg':>8} {'iwarpd reg':>11} "
              f"{'dereg':>8} {'memcpy':>8} {'iwarpd reg/memcpy':>18}")
        for size in a.sizes:
            er, ed, _ = run(exe, size, a.reps, None)
            dr, dd, cp = run(exe, size, a.reps, f"unix:{daemon_vs.SOCK}")
            print(f"  {size:>10} {er:>13.1f} {ed:>8.1f} {dr:>11.1f} {dd:>8.1f} {cp:>8.1f} "
                  f"{dr / cp if cp else 0:>17.1f}x")
    finally:
        daemon.kill()


if __name__ == "__main__":
    main()
