#!/bin/bash
# Per-thread CPU of every process named NAME over SECS seconds (utime + stime from
# /proc/PID/task/TID/stat, in percent of one processor): what BENCHMARKS.md's per-thread
# splits of ib_write_bw and iwperf are read with, mid-run.
#
#   scripts/thread_cpu.sh ib_write_bw 2
set -euo pipefail
name=${1:?usage: thread_cpu.sh NAME [SECS]}
secs=${2:-2}
hz=$(getconf CLK_TCK)
snap() {
  for p in $(pgrep -x "$name"); do
    for t in /proc/"$p"/task/*; do
      # Fields after the parenthesised name: utime is the 12th, stime the 13th.
      echo "$p $(basename "$t") $(cat "$t"/comm) $(sed 's/.*) //' "$t"/stat | awk '{print $12 + $13}')"
    done
  done
}
a=$(snap); sleep "$secs"; b=$(snap)
join -j 2 <(sort -k2 <<<"$a") <(sort -k2 <<<"$b") |
  awk -v s="$secs" -v hz="$hz" '{d = $7 - $4; if (d > 0) printf "pid %s tid %s %-16s %5.1f%%\n", $2, $1, $3, 100 * d / hz / s}'
