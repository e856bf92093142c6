#!/usr/bin/env bash
# An application that uses verbs only through iwarpd (verbs without its default `embedded`
# feature), built as a user would build it: its own crate, with
#   verbs = { path = ..., default-features = false }
# Shows that such an application compiles neither the engine nor what only iwarpd needs,
# that the README's quick start runs through iwarpd that way, and that without
# IWARP_DEVICE it says what to do instead of failing obscurely.
#
#   scripts/daemon_only.sh        # needs the debug iwarpd: cargo build -p iwarpd
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

echo "== what verbs --no-default-features compiles"
tree=$(cargo tree -p verbs --no-default-features -e normal --prefix none | sort -u)
bad=$(echo "$tree" | grep -E '^(offload-engine|iwarpd|clap|toml|prometheus-client|serde_json|tracing-subscriber|pcap-file|etherparse) ' || true)
if [ -n "$bad" ]; then
  echo "FAILED: the daemon-only library depends on:"; echo "$bad"; exit 1
fi
echo "$(echo "$tree" | wc -l) crates; none of the engine's or iwarpd's own"

app=$(mktemp -d /tmp/daemon-only-app.XXXXXX)
trap 'rm -rf "$app"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; true' EXIT
mkdir -p "$app/src"
cat >"$app/Cargo.toml" <<TOML
[package]
name = "daemon-only-app"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
verbs = { path = "$root/verbs", default-features = false }
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }

[workspace]
TOML
cp examples/src/bin/quickstart.rs "$app/src/main.rs"
echo "== building the quick start against the daemon-only library"
export CARGO_TARGET_DIR="${DAEMON_ONLY_TARGET:-$root/target/daemon-only}"
# The workspace's lock file: the same versions as the workspace builds (cargo drops what the
# application does not use).
cp Cargo.lock "$app/Cargo.lock"
cargo build -q --manifest-path "$app/Cargo.toml"
bin="$CARGO_TARGET_DIR/debug/daemon-only-app"
if cargo tree -q --manifest-path "$app/Cargo.toml" -e normal --prefix none | grep -q '^offload-engine '; then
  echo "FAILED: the application's build includes the engine"; exit 1
fi

echo "== through iwarpd"
iwarpd="$root/target/debug/iwarpd"
[ -x "$iwarpd" ] || cargo build -q -p iwarpd --bin iwarpd
sock="$app/iwarpd.sock"
port=$((20000 + RANDOM % 20000))
"$iwarpd" --listen "127.0.0.1:$port" --control "$sock" >"$app/iwarpd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
IWARP_DEVICE="unix:$sock" "$bin" "127.0.0.1:$port" | tee "$app/out"
grep -q '^read back: hello, iWARP$' "$app/out" && grep -q '^echo: ping$' "$app/out" ||
  { echo "FAILED: the quick start did not read back and echo"; exit 1; }

echo "== without IWARP_DEVICE"
if env -u IWARP_DEVICE "$bin" "127.0.0.1:$port" 2>"$app/err"; then
  echo "FAILED: ran with no engine and no iwarpd named"; exit 1
fi
cat "$app/err"
grep -q 'IWARP_DEVICE=unix' "$app/err" || { echo "FAILED: the message names no fix"; exit 1; }
echo "daemon-only library: OK"
