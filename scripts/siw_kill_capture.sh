#!/bin/bash
# Reproduces INTEROP.md's killed-client row: siw's `ib_write_bw -s 65536 -D 60` in the lab
# VM, killed (SIGKILL) 10 s into the run, against our embedded `iwperf write_bw -R`
# server, with a capture of the test port in the lab's netns. Prints whether our server
# saw the connection end (rc 1, "the peer ended the test early") or waited (rc 124), and
# the capture's conversations; the capture stays in /tmp/siw-kill-N.pcapng.
#
#   sudo scripts/siw_kill_capture.sh 5            # five runs, the default kernel (6.1)
#   sudo LAB_KERNEL_PKG=linux-image-6.12-amd64 LAB_CACHE=/var/tmp/siw-lab-cache-k612 \
#        scripts/siw_kill_capture.sh 5
set -uo pipefail
runs=${1:-5}
source "$(dirname "$0")/siw_lab.sh"
hung=0
for n in $(seq "$runs"); do
  lab_serve 90 "" 'sleep 5; ib_write_bw -d siw0 -F -R -s 65536 -D 60 10.231.0.1 & P=$!; sleep 10; kill -9 $P; wait $P; sleep 8'
  cap=/tmp/siw-kill-$n.pcapng
  ip netns exec iwlab timeout 50 dumpcap -q -i any -f 'tcp port 18515' -s 128 -w "$cap" >/dev/null 2>&1 &
  sleep 1
  timeout 40 ip netns exec iwlab target/debug/iwperf write_bw -R -s 65536 >/dev/null 2>&1
  rc=$?
  [ "$rc" = 124 ] && hung=$((hung + 1))
  echo "run $n: server rc=$rc ($( [ "$rc" = 124 ] && echo "waited on a silent peer" || echo "saw the connection end"))"
  wait "$LAB_PID" 2>/dev/null
  sleep 12   # dumpcap ends and flushes
  tshark -r "$cap" -q -z conv,tcp 2>/dev/null | sed -n '6,7p'
done
echo "$hung of $runs runs: our server waited on a silent peer"
