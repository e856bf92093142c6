#!/usr/bin/env bash
# Where the CPU goes in `iwperf write_bw -s 65536 --crc` across a veth at MTU 1500 (root):
# two network namespaces, `perf record -g` on the server (receiver) and the client
# (sender) process each, then the top symbols of each.
#
#   scripts/veth_profile.sh [SECS]
set -euo pipefail
secs=${1:-4}
cd "$(dirname "$0")/.."
cargo build -q --release -p examples --bin iwperf
w=$PWD/target/release/iwperf
out=$(mktemp -d /tmp/veth-profile-XXXXXX)
cleanup() { ip netns del vpa 2>/dev/null || true; ip netns del vpb 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add vpa
ip netns add vpb
ip link add vpa0 netns vpa type veth peer vpb0 netns vpb
ip -n vpa addr add 10.79.0.1/24 dev vpa0
ip -n vpb addr add 10.79.0.2/24 dev vpb0
for ns in vpa vpb; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "${ns}0" up
done
ip netns exec vpa perf record -q -g -o "$out/receiver.data" \
    "$w" write_bw -s 65536 --crc -D "$secs" -p 19990 >/dev/null 2>&1 &
receiver=$!
sleep 0.5
ip netns exec vpb perf record -q -g -o "$out/sender.data" \
    "$w" write_bw -s 65536 --crc -D "$secs" -p 19990 --report_gbits 10.79.0.1 | tail -2
wait "$receiver" || true
for side in receiver sender; do
    echo "== $side (top symbols, self time)"
    perf report -q -i "$out/$side.data" --no-children --sort symbol 2>/dev/null |
        grep -E '^ +[0-9.]+%' | cut -c1-90 | sed 's/ *$//' | head -8 || true
done
rm -rf "$out"
