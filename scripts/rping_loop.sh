#!/usr/bin/env bash
# Debian's rping client through this stack's C library, N times back to back against one
# persistent server, counting the runs that fail (exit status, fewer than 10 verified
# pings, or a hang past 15 s). The server is Debian's `rping -s -P` through the library on
# loopback, or with --siw siw's `rping -s -P` in the lab VM (root; ../shared/lab/siw).
# What INTEROP.md's "N of M runs" for the rping client come from.
#
#   scripts/rping_loop.sh 500            # loopback, both ends through the library
#   sudo scripts/rping_loop.sh --siw 100 # against siw in the lab VM
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
siw=0
[ "${1:-}" = --siw ] && { siw=1; shift; }
runs=${1:-100}
cargo build -q -p cverbs --manifest-path "$root/Cargo.toml" || exit 1
lib=$(mktemp -d)
"$root/scripts/rdma_core_lib.sh" --link-only "$root/target/debug/libcverbs.a" "$lib" >/dev/null || exit 1
export LD_LIBRARY_PATH=$lib
if [ $siw = 1 ]; then
    lab=${LAB:-$root/../shared/lab/siw}
    [ -x "$lab/run-lab.sh" ] || lab=/work/shared/lab/siw
    export LAB_CACHE=${LAB_CACHE:-/var/tmp/siw-lab-cache}
    log=$lib/serve.log
    "$lab/run-lab.sh" serve $((runs * 2 + 120)) >"$log" 2>&1 &
    server=$!
    addr=10.231.0.11 port=7174 wrap=(ip netns exec iwlab)
    # Not a TCP probe: a bare connect to siw's rping server upsets it (the lab's hazard 5).
    until grep -q "is serving" "$log"; do sleep 1; done
    sleep 3
else
    addr=127.0.0.1 port=$((20000 + RANDOM % 10000)) wrap=()
    rping -s -P -a $addr -p $port >/dev/null 2>&1 &
    server=$!
    sleep 1
fi
trap 'kill $server 2>/dev/null; pkill -f "run-lab.sh serve" 2>/dev/null; rm -rf "$lib"' EXIT
failed=0
for i in $(seq 1 "$runs"); do
    out=$("${wrap[@]}" env LD_LIBRARY_PATH="$lib" timeout 15 rping -c -a $addr -p $port -v -V -C 10 2>&1)
    rc=$?
    pings=$(grep -c "ping data: rdma-ping-" <<<"$out")
    if [ $rc -ne 0 ] || [ "$pings" -ne 10 ]; then
        failed=$((failed + 1))
        echo "run $i: exit $rc, $pings pings verified"
    fi
done
echo "rping_loop: $failed of $runs runs failed"
