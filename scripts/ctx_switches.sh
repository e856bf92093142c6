#!/usr/bin/env bash
# Context switches a second of each thread of an iwperf pair on loopback, as BENCHMARKS.md
# quotes them ("8,000 a second per process" before the driver stopped registering the
# socket while the application polls). Reads /proc/PID/task/*/status over 2 s mid-run.
#
#   scripts/ctx_switches.sh [IWPERF] [TEST] [iwperf flags]   # default: this tree's, send_lat
#   SIZE=65536 scripts/ctx_switches.sh target/release/iwperf read_bw --crc  # a Read responder
#
# SIZE: the message size (default 8).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/iwperf}
test=${2:-send_lat}
shift $(($# > 2 ? 2 : $#))
port=$((20500 + RANDOM % 1000))
"$bin" "$test" -p $port -s "${SIZE:-8}" -D 5 "$@" >/dev/null 2>&1 &
server=$!
sleep 0.3
"$bin" "$test" -p $port -s "${SIZE:-8}" -D 5 "$@" 127.0.0.1 >/dev/null 2>&1 &
client=$!
sleep 1.5
snap() {
    for p in $server $client; do
        for t in /proc/$p/task/*; do
            printf '%s %s %s %s\n' "$p" "$(basename "$t")" \
                "$(awk '/^voluntary_ctxt/ {print $2}' "$t/status")" \
                "$(awk '/^nonvoluntary_ctxt/ {print $2}' "$t/status")"
        done
    done
}
a=$(snap)
sleep 2
b=$(snap)
wait
join <(echo "$a" | awk '{print $1"/"$2, $3, $4}' | sort) \
    <(echo "$b" | awk '{print $1"/"$2, $3, $4}' | sort) |
    awk -v s=$server '{split($1, id, "/"); side = id[1] == s ? "server" : "client";
        printf "%s thread %s: %d voluntary, %d involuntary switches a second\n",
            side, id[2], ($4 - $2) / 2, ($5 - $3) / 2}'
