#!/usr/bin/env bash
# Compares two revisions of the stack with iwbench, run alternately on this machine, and
# prints the median of each line per revision: how the before/after numbers in
# BENCHMARKS.md were taken (alternation cancels most of a shared machine's drift).
#
#   scripts/ab.sh REV_A REV_B ROUNDS [iwbench flags]
#   scripts/ab.sh 0d9c17c HEAD 6 --only write,read --total 256M
#
# Each revision is built in its own git worktree under ${AB_DIR:-/tmp/iwarp-ab}.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: scripts/ab.sh REV_A REV_B ROUNDS [iwbench flags]" >&2
    exit 2
fi
rev_a=$1 rev_b=$2 rounds=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${AB_DIR:-/tmp/iwarp-ab}
mkdir -p "$dir"

build() { # REV -> path of its iwbench
    local rev=$1 sha
    sha=$(git -C "$root" rev-parse --short "$rev")
    if [ ! -d "$dir/$sha" ]; then
        git -C "$root" worktree add --detach "$dir/$sha" "$sha" >/dev/null
    fi
    (cd "$dir/$sha" && CARGO_TARGET_DIR="$dir/target-$sha" \
        cargo build --release -q -p examples --bin iwbench)
    echo "$dir/target-$sha/release/iwbench"
}

bin_a=$(build "$rev_a")
bin_b=$(build "$rev_b")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$rounds"); do
    echo "ab.sh: round $i of $rounds" >&2
    "$bin_a" "$@" --rounds 1 | grep -E "Gbit/s|us " >>"$out/a"
    "$bin_b" "$@" --rounds 1 | grep -E "Gbit/s|us " >>"$out/b"
done
python3 - "$out" "$rev_a" "$rev_b" <<'PY'
import re, statistics, sys
out, names = sys.argv[1], {"a": sys.argv[2], "b": sys.argv[3]}
for side in "ab":
    rows = {}
    for line in open(f"{out}/{side}"):
        m = re.search(r"([\d.]+) (Gbit/s|us)\s+cpu ([\d.]+)", line)
        if m:
            rows.setdefault(line[:28].strip(), []).append((float(m[1]), float(m[3]), m[2]))
    for name, v in rows.items():
        rate = statistics.median(x for x, _, _ in v)
        cpu = statistics.median(c for _, c, _ in v)
        unit = v[0][2]
        cpu_unit = "s/GiB" if unit == "Gbit/s" else "us"
        print(f"{names[side]:>10}  {name:<28} median {rate:8.2f} {unit:<6}  cpu {cpu:6.2f} {cpu_unit}  (n={len(v)})")
PY
