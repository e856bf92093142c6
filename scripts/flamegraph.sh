#!/usr/bin/env bash
# Profiles one iwbench line with perf and draws a flamegraph of it.
#
#   scripts/flamegraph.sh write|read|pingpong|qps [more iwbench flags]
#
# Needs perf (linux-perf / linux-tools) and inferno (`cargo install inferno`). Writes
# flamegraph-LINE.svg in the current folder (OUT=path to choose another). The release
# profile keeps debug info, so the frames have names and inlined functions.
set -euo pipefail

line=${1:-}
case "$line" in
    write | read | pingpong | qps) shift ;;
    *)
        echo "usage: scripts/flamegraph.sh write|read|pingpong|qps [iwbench flags]" >&2
        exit 2
        ;;
esac
for tool in perf inferno-collapse-perf inferno-flamegraph; do
    if ! command -v "$tool" >/dev/null; then
        echo "flamegraph.sh: $tool not found: install perf (apt-get install linux-perf)" \
            "and inferno (cargo install inferno)" >&2
        exit 2
    fi
done

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=${OUT:-flamegraph-$line.svg}
data=$(mktemp /tmp/iwbench-perf.XXXXXX)
trap 'rm -f "$data"' EXIT

(cd "$root" && cargo build --release -p examples --bin iwbench)
perf record -F 999 --call-graph dwarf,16384 -o "$data" \
    "$target/release/iwbench" --only "$line" --rounds 1 "$@"
perf script -i "$data" 2>/dev/null | inferno-collapse-perf |
    inferno-flamegraph --title "iwbench --only $line" >"$out"
echo "flamegraph.sh: wrote $out"
