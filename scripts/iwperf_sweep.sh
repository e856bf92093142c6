#!/bin/bash
# iwperf server/client pairs in every configuration of the list on standard input (one
# iwperf argument line each), through one fresh iwarpd and then embedded; prints ok or
# FAIL with the tails of both outputs, exits 1 if any failed. Nothing here is a test.
#   scripts/iwperf_sweep.sh < scripts/iwperf_sweep.txt
# Needs the release builds: cargo build --release -p examples --bin iwperf -p iwarpd --bin iwarpd
B="$(dirname "$0")/../target/release"
rm -f /tmp/sw.sock
$B/iwarpd --listen 127.0.0.1:0 --control /tmp/sw.sock > /tmp/sw-d.log 2>&1 &
DP=$!
for i in $(seq 50); do [ -S /tmp/sw.sock ] && break; sleep 0.05; done
fail=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  for mode in daemon embedded; do
    A=""; [ $mode = daemon ] && A="--daemon /tmp/sw.sock"
    P=$((20000 + RANDOM % 20000))
    timeout 60 $B/iwperf $line $A -p $P > /tmp/sw-s.log 2>&1 &
    SP=$!
    sleep 0.3
    timeout 60 $B/iwperf $line $A -p $P 127.0.0.1 > /tmp/sw-c.log 2>&1
    c=$?; wait $SP; s=$?
    if [ $c != 0 ] || [ $s != 0 ]; then
      fail=1; echo "FAIL [$mode] $line: client=$c server=$s"; tail -2 /tmp/sw-c.log /tmp/sw-s.log | sed 's/^/    /'
    else echo "ok   [$mode] $line"; fi
  done
done
kill $DP; wait $DP 2>/dev/null
exit $fail
