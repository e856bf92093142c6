#!/usr/bin/env bash
# System calls of a latency pair through one local iwarpd, counted with `perf stat` over
# 2 s mid-run (two processes, loopback): the daemon's, then the client's. The pair is
# iwperf, or with C=1 Debian's perftest through the C library (target/rdma-core, built by
# scripts/rdma_core_lib.sh --release). Prints the client's result line last (iwperf's
# ends with how often the servant slept and how many inputs it read itself).
#
#   scripts/daemon_syscalls.sh                 # iwperf send_lat -s 8
#   TEST=write_lat scripts/daemon_syscalls.sh
#   C=1 scripts/daemon_syscalls.sh             # ib_send_lat -s 8 through the library
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release test=${TEST:-send_lat} port=${PORT:-20555}
cargo build -q --release -p iwarpd --bin iwarpd -p examples --bin iwperf
. scripts/local_iwarpd.sh
start_iwarpd "$bin" daemon-syscalls
if [ "${C:-0}" = 1 ]; then
    export LD_LIBRARY_PATH=target/rdma-core IWARP_DEVICE=unix:$sock
    "ib_$test" -R -p "$port" -D 6 -s 8 >/dev/null 2>&1 &
    server=$!
    sleep 0.5
    "ib_$test" -R -p "$port" -D 6 -s 8 127.0.0.1 >"$out" 2>&1 &
else
    "$bin/iwperf" "$test" -s 8 -D 6 -p "$port" --daemon "$sock" >/dev/null 2>&1 &
    server=$!
    sleep 0.3
    "$bin/iwperf" "$test" -s 8 -D 6 -p "$port" --connect-wait 3 --daemon "$sock" 127.0.0.1 >"$out" 2>&1 &
fi
client=$!
sleep 2
events=recvfrom,sendto,sendmsg,writev,epoll_wait,sched_yield,futex,read,write
ev=$(echo "$events" | sed 's/\([a-z_]*\)/syscalls:sys_enter_\1/g')
for who in daemon client; do
    pid=$daemon
    [ "$who" = client ] && pid=$client
    echo "$who, 2 s:"
    perf stat -e "$ev" -p "$pid" -- sleep 2 2>&1 | awk '/syscalls/ { printf "  %12s %s\n", $1, $2 }'
done
wait "$client" || true
wait "$server" || true
grep -E '^ *8 |slept' "$out" || cat "$out"
