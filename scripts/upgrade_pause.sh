#!/usr/bin/env bash
# What an application attached to iwarpd sees of an upgrade that moves its session: an
# `iwperf send_lat -s 8 -D 5` pair through one iwarpd, upgraded (`--take-over`) 2.5 s into
# the run, then the same pair without an upgrade; prints both result lines (t_max is the
# worst one-way latency, in us).
#
#   cargo build --release -p examples --bin iwperf && cargo build --release -p iwarpd --bin iwarpd
#   scripts/upgrade_pause.sh [BIN_DIR]        # default target/release
set -euo pipefail
bin=${1:-target/release}
dir=$(mktemp -d /tmp/upgrade-pause-XXXXXX)
sock=$dir/iwarpd.sock handover=$dir/handover
pair() { # PORT [SECONDS_BEFORE_UPGRADE]
    "$bin/iwperf" send_lat -s 8 -D 5 -p "$1" --daemon "$sock" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$bin/iwperf" send_lat -s 8 -D 5 -p "$1" --connect-wait 3 --daemon "$sock" 127.0.0.1 \
        >"$dir/client.out" 2>&1 &
    local client=$!
    if [ $# -gt 1 ]; then
        sleep "$2"
        "$bin/iwarpd" --listen 127.0.0.1:0 --control "$sock" --take-over "$handover" \
            --handover "$handover" >/dev/null 2>&1 &
    fi
    wait "$client"
    wait "$server" || true
    grep -A1 t_max "$dir/client.out" | tail -1
}
"$bin/iwarpd" --listen 127.0.0.1:0 --control "$sock" --handover "$handover" >/dev/null 2>&1 &
sleep 0.4
echo " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec] ..."
echo "with an upgrade:"
pair 20400 2.5
sleep 0.5
echo "without:"
pair 20401
pkill -f -- "--control $sock" || true
rm -rf "$dir"
