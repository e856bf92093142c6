#!/usr/bin/env bash
# Two iwperf builds, alternately, two processes on loopback: `write_bw -s 65536 --crc` for
# 4 s each, ROUNDS rounds; prints each round's Gbit/s side by side. Alternation cancels
# most of a shared machine's drift; compare round by round, not the columns' ends.
#
#   git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release -p examples --bin iwperf)
#   scripts/ab_iwperf.sh /tmp/old/target/release/iwperf target/release/iwperf 6
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: scripts/ab_iwperf.sh IWPERF_A IWPERF_B [ROUNDS]" >&2
    exit 2
fi
a=$1 b=$2 rounds=${3:-6}
port=20100
run() { # BIN PORT -> Gbit/s
    "$1" write_bw -p "$2" -s 65536 --crc >/dev/null 2>&1 &
    local server=$!
    sleep 0.4
    "$1" write_bw -p "$2" -s 65536 --crc -D 4 --json --report_gbits 127.0.0.1 2>/dev/null |
        grep '^{' | python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["bw_avg"])'
    wait "$server"
}
for i in $(seq "$rounds"); do
    echo "round $i: A $(run "$a" $port)  B $(run "$b" $((port + 1))) Gbit/s"
    port=$((port + 2))
done
