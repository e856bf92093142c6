#!/usr/bin/env bash
# The same-VM comparison with Linux siw (issue 33, item 4): both stacks in one siw lab
# VM, same boot, one CPU, the VM's own address (so the VM's loopback) for both, rounds
# alternating. Prints each line's medians and ours / siw. Nothing here is a test.
#
#   sudo scripts/siw_same_vm.sh                # 3 rounds, 2000 iterations per latency run
#   sudo ROUNDS=5 ITERS=5000 scripts/siw_same_vm.sh
#
# Lines: ib_send_lat -e -s 8 (completion events) against iwperf send_lat -e -s 8;
# ib_send_lat -s 8 (busy polling) against iwperf send_lat -s 8; ib_write_bw -s 65536
# against iwperf write_bw -s 65536. Latencies are perftest's t_typical (one way), in us;
# bandwidth in Gbit/s. No CRC on either side (siw's default, and iwperf's).
#
# iwperf gets into the VM over the lab's network: a one-file HTTP server on the host side
# of the lab's netns, and busybox wget in the VM. The lab is ../shared/lab/siw (LAB, or
# /work/shared/lab/siw); its cache is LAB_CACHE (default /var/tmp/siw-lab-cache).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lab=${LAB:-$root/../shared/lab/siw}
[ -x "$lab/run-lab.sh" ] || lab=/work/shared/lab/siw
export LAB_CACHE=${LAB_CACHE:-/var/tmp/siw-lab-cache}
rounds=${ROUNDS:-3}
iters=${ITERS:-2000}
bw_iters=${BW_ITERS:-2000}
[ "$(id -u)" = 0 ] || { echo "siw_same_vm: the lab needs root: sudo $0" >&2; exit 1; }

cargo build --release -q -p examples --bin iwperf --manifest-path "$root/Cargo.toml"
serve_dir=$(mktemp -d)
trap 'kill $http 2>/dev/null || true; rm -rf "$serve_dir"' EXIT
cp "$root/target/release/iwperf" "$serve_dir/iwperf"

"$lab/run-lab.sh" net-up >/dev/null 2>&1
ip netns exec iwlab python3 -m http.server 8765 --bind 10.231.0.1 --directory "$serve_dir" \
    >/dev/null 2>&1 &
http=$!
sleep 1

# The VM's workload: fetch iwperf, then each round runs siw's tool and ours, server in
# the background and client against the VM's own address, each line tagged for parsing.
vm_cmd=$(cat <<EOF
cd /tmp && wget -q -O iwperf http://10.231.0.1:8765/iwperf && chmod +x iwperf || exit 9
A=10.231.0.11
pair() { tag=\$1; shift; "\$@" >/dev/null 2>&1 & s=\$!; sleep 1; "\$@" \$A 2>&1 | sed "s/^/@@ \$tag /"; wait \$s; }
for r in \$(seq 1 $rounds); do
  pair siw-elat ib_send_lat -d siw0 -F -R -e -s 8 -n $iters
  pair our-elat ./iwperf send_lat -R -e -s 8 -n $iters
  pair siw-lat ib_send_lat -d siw0 -F -R -s 8 -n $iters
  pair our-lat ./iwperf send_lat -R -s 8 -n $iters
  pair siw-bw ib_write_bw -d siw0 -F -R -s 65536 -n $bw_iters --report_gbits
  pair our-bw ./iwperf write_bw -R -s 65536 -n $bw_iters --report_gbits
done
EOF
)
echo "siw_same_vm: booting the lab VM ($rounds rounds; the VM emulates one CPU, so this takes minutes)" >&2
"$lab/run-lab.sh" serve 1500 "" "$vm_cmd" >/dev/null 2>&1 || true
console=$LAB_CACHE/run/vm1/console.log
grep -q "LAB\[vm1\] EXIT rc=0" "$console" || {
    echo "siw_same_vm: the VM's workload failed; its console:" >&2
    tail -40 "$console" >&2
    exit 1
}

python3 - "$console" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"@@ (\S+) \s*(\d+)\s+(\d+)\s+(.*)", line.strip())
    if not m:
        continue
    tag, size, _iters, rest = m.groups()
    cols = rest.split()
    # latency: t_min t_max t_typical ...; bandwidth: BW peak, BW average, MsgRate
    value = float(cols[2]) if tag.endswith("lat") else float(cols[1])
    rows.setdefault(tag, []).append(value)
lines = [("elat", "send_lat -s 8 -e, typical", "us"), ("lat", "send_lat -s 8, typical", "us"),
         ("bw", "write_bw -s 65536, average", "Gbit/s")]
print(f"{'line':28} {'ours':>9} {'siw':>9} {'unit':7} ours/siw  (medians; runs: ours, siw)")
for key, name, unit in lines:
    ours, siw = rows.get("our-" + key, []), rows.get("siw-" + key, [])
    if not ours or not siw:
        print(f"{name:28} missing (ours {ours}, siw {siw})")
        continue
    o, s = statistics.median(ours), statistics.median(siw)
    print(f"{name:28} {o:9.2f} {s:9.2f} {unit:7} {o / s:7.2f}x  ({ours}; {siw})")
EOF
