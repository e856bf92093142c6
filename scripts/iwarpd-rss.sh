#!/usr/bin/env bash
# RSS of iwarpd before and after N connections (default 1000) that each get a 4 MiB region,
# 8 clients at a time (`iwarpd check`: 2 Writes read back and 2 Sends echoed per connection).
# Usage: scripts/iwarpd-rss.sh [N]   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
cargo build --release -q -p iwarpd --bin iwarpd
BIN=target/release/iwarpd
PORT=4799
"$BIN" --listen 127.0.0.1:$PORT --buffer-size 4M --max-qps 64 >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
sleep 0.5
rss() { awk '/VmRSS/{print $2}' "/proc/$PID/status"; }
BEFORE=$(rss)
seq "$N" | xargs -P 8 -I{} "$BIN" check 127.0.0.1:$PORT --size 4M --count 2 >/dev/null
sleep 0.5
AFTER=$(rss)
echo "iwarpd RSS: ${BEFORE} KiB before, ${AFTER} KiB after $N connections with 4 MiB regions" \
  "($(awk "BEGIN{printf \"%.2f\", $AFTER/$BEFORE}")x)"
