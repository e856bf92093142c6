#!/usr/bin/env bash
# Two builds' daemon-mode latency, alternately: for each, a fresh iwarpd and an
# `iwperf send_lat -s 8 -D 3` pair attached to it (two processes, loopback); prints each
# round's t_typical and t_avg (us) side by side. Compare round by round.
#
#   git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release -p examples \
#       --bin iwperf && cargo build --release -p iwarpd --bin iwarpd)
#   scripts/ab_daemon_lat.sh /tmp/old/target/release target/release 4
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: scripts/ab_daemon_lat.sh BIN_DIR_A BIN_DIR_B [ROUNDS]" >&2
    exit 2
fi
a=$1 b=$2 rounds=${3:-4}
port=20300
run() { # BIN_DIR PORT -> "t_typical t_avg"
    local sock
    sock=$(mktemp -u /tmp/ab-daemon-XXXXXX.sock)
    "$1/iwarpd" --listen 127.0.0.1:0 --control "$sock" >/dev/null 2>&1 &
    local daemon=$!
    sleep 0.4
    "$1/iwperf" send_lat -s 8 -D 3 -p "$2" --daemon "$sock" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$1/iwperf" send_lat -s 8 -D 3 -p "$2" --connect-wait 3 --daemon "$sock" 127.0.0.1 2>/dev/null |
        awk '$1 == 8 { line = $5 " " $6 } END { print line }'
    wait "$server" || true
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
}
for i in $(seq "$rounds"); do
    echo "round $i: A $(run "$a" $port)  B $(run "$b" $((port + 1))) us (t_typical t_avg)"
    port=$((port + 2))
done
