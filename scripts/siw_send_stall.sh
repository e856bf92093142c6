#!/bin/bash
# Hunts INTEROP.md's open large-Send stall: siw's `ib_send_bw -a -n 5` and
# `ib_send_lat -a -n 5` clients in the lab VM against our embedded `iwperf` servers, each
# run with a capture of the test port in the lab's netns. A run whose server did not
# finish keeps its capture (/tmp/siw-send-N-TEST.pcapng), the server's output and the VM's
# console (.console). Our server waits up to 200 s for the next message; a siw client not
# done after 120 s has its sockets (`ss -tmie`), eth0's transmit counters around a ping of
# the host, the ARP table and the kernel's network messages printed on the console first.
# The capture holds every packet of the VM's address, ARP and ICMP included.
#
#   sudo scripts/siw_send_stall.sh 5            # five runs of each, the default kernel
#   sudo PARAMS=zcopy_tx=N scripts/siw_send_stall.sh 5     # siw module parameters
#   sudo LAB_KERNEL_PKG=linux-image-6.12-amd64 LAB_CACHE=/var/tmp/siw-lab-cache-k612 \
#        scripts/siw_send_stall.sh 5
set -uo pipefail
runs=${1:-5}
tests=${TESTS:-send_bw send_lat}
params=${PARAMS:-}
source "$(dirname "$0")/siw_lab.sh"
stalled=0
for n in $(seq "$runs"); do
  for t in $tests; do
    diag='ss -tmie; s=/sys/class/net/eth0/statistics; echo tx_packets $(cat $s/tx_packets) dropped $(cat $s/tx_dropped) errors $(cat $s/tx_errors); ping -c 3 -W 1 10.231.0.1; echo tx_packets $(cat $s/tx_packets); cat /proc/net/arp; dmesg | grep -i -e watchdog -e virtio -e timed -e siw -e tx | tail -20'
    lab_serve 400 "$params" "sleep 5; ib_$t -d siw0 -F -R -a -n 5 10.231.0.1 & P=\$!; for i in \$(seq 120); do kill -0 \$P 2>/dev/null || break; sleep 1; done; kill -0 \$P 2>/dev/null && { $diag; kill \$P; }; wait \$P"
    cap=/tmp/siw-send-$n-$t.pcapng
    ip netns exec iwlab timeout 400 dumpcap -q -i any -f 'host 10.231.0.11 or arp' -s 160 -w "$cap" >/dev/null 2>&1 &
    cappid=$!
    sleep 1
    timeout 330 ip netns exec iwlab target/debug/iwperf "$t" -R -a -n 5 --timeout 200 >/tmp/siw-send-$n-$t.out 2>&1
    rc=$?
    echo "run $n $t: server rc=$rc $(tail -1 /tmp/siw-send-$n-$t.out)"
    wait "$LAB_PID" 2>/dev/null
    kill -INT $cappid 2>/dev/null; wait $cappid 2>/dev/null
    if [ "$rc" = 0 ]; then
      rm -f "$cap" "/tmp/siw-send-$n-$t.out"
    else
      stalled=$((stalled + 1))
      cp "$LAB_CACHE/run/vm1/console.log" "/tmp/siw-send-$n-$t.console"
      echo "  kept $cap and /tmp/siw-send-$n-$t.console"
    fi
  done
done
echo "$stalled stalled runs"
