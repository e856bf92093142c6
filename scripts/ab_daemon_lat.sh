#!/usr/bin/env bash
# Two builds through iwarpd, alternately: for each, a fresh iwarpd and an iwperf pair
# attached to it (two processes, loopback), 3 s a round; prints each round's result side
# by side: t_typical and t_avg (us) for a latency test, Gbit/s for a bandwidth test.
# Compare round by round. The test is `send_lat -s 8` unless TEST and FLAGS say otherwise;
# CLIENT_FLAGS go to the client only.
#
#   git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release -p examples \
#       --bin iwperf && cargo build --release -p iwarpd --bin iwarpd)
#   scripts/ab_daemon_lat.sh /tmp/old/target/release target/release 4
#   TEST=write_bw FLAGS='-s 65536' CLIENT_FLAGS=--bytes scripts/ab_daemon_lat.sh OLD NEW 6
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: [TEST=.. FLAGS=.. CLIENT_FLAGS=..] scripts/ab_daemon_lat.sh BIN_DIR_A BIN_DIR_B [ROUNDS]" >&2
    exit 2
fi
a=$1 b=$2 rounds=${3:-4}
test=${TEST:-send_lat}
read -r -a flags <<<"${FLAGS:--s 8}"
read -r -a client <<<"${CLIENT_FLAGS:-}"
case "$test" in
*_bw) flags+=(--report_gbits) unit="Gbit/s" ;;
*) unit="us (t_typical t_avg)" ;;
esac
port=20300
run() { # BIN_DIR PORT -> the result
    local sock
    sock=$(mktemp -u /tmp/ab-daemon-XXXXXX.sock)
    "$1/iwarpd" --listen 127.0.0.1:0 --control "$sock" >/dev/null 2>&1 &
    local daemon=$!
    sleep 0.4
    "$1/iwperf" "$test" "${flags[@]}" -D 3 -p "$2" --daemon "$sock" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$1/iwperf" "$test" "${flags[@]}" "${client[@]}" -D 3 -p "$2" --connect-wait 3 \
        --daemon "$sock" --json 127.0.0.1 2>/dev/null | grep '^{' | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%.2f" % r["bw_avg"] if "bw_avg" in r else "%.2f %.2f" % (r["t_typical"], r["t_avg"]))'
    wait "$server" || true
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
}
for i in $(seq "$rounds"); do
    echo "round $i: A $(run "$a" $port)  B $(run "$b" $((port + 1))) $unit"
    port=$((port + 2))
done
