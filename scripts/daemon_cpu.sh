#!/usr/bin/env bash
# Where the processors go in a 64 KiB Write stream through one iwarpd: the CPU time of
# iwarpd, the server and the client over 2 s mid-run (/proc/PID/stat, in processors), and
# the client's bandwidth. WHO=ib runs Debian's ib_write_bw through this tree's C library
# (scripts/rdma_core_lib.sh --release first), WHO=iw runs iwperf write_bw; the same
# iwarpd build either way, so the two lines compare what the daemon does per octet.
#
#   WHO=ib scripts/daemon_cpu.sh; WHO=iw scripts/daemon_cpu.sh
#   LIB=OTHER/target/rdma-core WHO=ib scripts/daemon_cpu.sh   # another build of the library
#   SYSCALLS=1 WHO=ib scripts/daemon_cpu.sh   # and each process's context switches,
#                                             # sched_yield and futex calls (perf stat)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rel=$root/target/release
who=${WHO:-ib}
port=$((21500 + RANDOM % 1000))
. "$root/scripts/local_iwarpd.sh"
start_iwarpd "$rel" daemon-cpu
case "$who" in
ib)
    export LD_LIBRARY_PATH=${LIB:-$root/target/rdma-core} IWARP_DEVICE=unix:$sock
    ib_write_bw -R -p $port -D 5 -s 65536 >/dev/null 2>&1 &
    server=$!
    sleep 0.8
    ib_write_bw -R -p $port -D 5 -s 65536 127.0.0.1 >"$out" 2>&1 &
    client=$!
    ;;
iw)
    "$rel/iwperf" write_bw -s 65536 -D 5 -p $port --daemon "$sock" >/dev/null 2>&1 &
    server=$!
    sleep 0.8
    "$rel/iwperf" write_bw 127.0.0.1 -s 65536 -D 5 -p $port --daemon "$sock" >"$out" 2>&1 &
    client=$!
    ;;
*) echo "WHO is ib or iw" >&2; exit 2 ;;
esac
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sleep 1.5
d0=$(ticks $daemon) s0=$(ticks $server) c0=$(ticks $client)
perfs=()
if [ "${SYSCALLS:-0}" = 1 ]; then
    # The same 2 s: how often each process yields and switches (perf stat).
    ev=context-switches,syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex
    for p in daemon:$daemon client:$client; do
        perf stat -e "$ev" -p "${p#*:}" -- sleep 2 2>"$out.${p%%:*}" &
        perfs+=($!)
    done
fi
sleep 2
d1=$(ticks $daemon) s1=$(ticks $server) c1=$(ticks $client)
wait $client $server
hz=$(getconf CLK_TCK)
gbit=$(awk '/^ *65536 / {printf "%.2f", $4 * 8 / 1000}' "$out")
for p in "${perfs[@]}"; do wait "$p" || true; done
for who_ in daemon client; do
    [ -f "$out.$who_" ] && awk -v who="$who_" \
        '/context|syscalls/ { printf "  %s, 2 s: %12s %s\n", who, $1, $2 }' "$out.$who_"
    rm -f "$out.$who_"
done
awk -v w="$who" -v d=$((d1 - d0)) -v s=$((s1 - s0)) -v c=$((c1 - c0)) -v hz="$hz" -v g="$gbit" \
    'BEGIN {printf "%s: %s Gbit/s; processors: iwarpd %.2f, server %.2f, client %.2f\n",
        w, g, d / hz / 2, s / hz / 2, c / hz / 2}'
