#!/bin/bash
# Hunts INTEROP.md's open large-Send stall: siw's `ib_send_bw -a -n 5` and
# `ib_send_lat -a -n 5` clients in the lab VM against our embedded `iwperf` servers, each
# run with a capture of the test port in the lab's netns. A run whose server did not
# finish keeps its capture (/tmp/siw-send-N-TEST.pcapng) and the server's output.
#
#   sudo scripts/siw_send_stall.sh 5            # five runs of each, the default kernel
#   sudo LAB_KERNEL_PKG=linux-image-6.12-amd64 LAB_CACHE=/var/tmp/siw-lab-cache-k612 \
#        scripts/siw_send_stall.sh 5
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
tests=${TESTS:-send_bw send_lat}
export LAB_CACHE=${LAB_CACHE:-/var/tmp/siw-lab-cache}
lab=/work/shared/lab/siw/run-lab.sh
[ -x "$lab" ] || lab=../shared/lab/siw/run-lab.sh
cargo build -q -p examples --bin iwperf
stalled=0
for n in $(seq "$runs"); do
  for t in $tests; do
    err=$(mktemp)
    "$lab" serve 400 "" "sleep 5; ib_$t -d siw0 -F -R -a -n 5 10.231.0.1" 2>"$err" &
    labpid=$!
    for _ in $(seq 120); do grep -q "is serving" "$err" && break; sleep 1; done
    cap=/tmp/siw-send-$n-$t.pcapng
    ip netns exec iwlab timeout 400 dumpcap -q -i any -f 'tcp port 18515' -s 160 -w "$cap" >/dev/null 2>&1 &
    cappid=$!
    sleep 1
    timeout 300 ip netns exec iwlab target/debug/iwperf "$t" -R -a -n 5 >/tmp/siw-send-$n-$t.out 2>&1
    rc=$?
    echo "run $n $t: server rc=$rc $(tail -1 /tmp/siw-send-$n-$t.out)"
    wait $labpid 2>/dev/null
    kill -INT $cappid 2>/dev/null; wait $cappid 2>/dev/null
    if [ "$rc" = 0 ]; then rm -f "$cap" "/tmp/siw-send-$n-$t.out"; else stalled=$((stalled + 1)); echo "  kept $cap"; fi
    rm -f "$err"
  done
done
echo "$stalled stalled runs"
