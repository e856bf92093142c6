#!/usr/bin/env bash
# Builds the rdma-core compatible library (crate cverbs, issue 34) and links it into one
# shared object with rdma-core's symbol versions, named as the programs ask for it:
#   target/rdma-core/libibverbs.so.1  (the object; its SONAME)
#   target/rdma-core/librdmacm.so.1   -> libibverbs.so.1
#   target/rdma-core/libmlx5.so.1     -> libibverbs.so.1 (perftest links these two
#   target/rdma-core/libefa.so.1      -> libibverbs.so.1  providers' extensions)
# The dynamic loader maps a file it already loaded under another name once, so all four
# names are the same library. Prints the directory; then, for example:
#   LD_LIBRARY_PATH=target/rdma-core ibv_devinfo
#
#   scripts/rdma_core_lib.sh [--release]
#   scripts/rdma_core_lib.sh --link-only LIBCVERBS.a OUTDIR   (what the tests use)
# (A cdylib cannot carry rdma-core's versions: rustc gives it an anonymous version script
# of its own, which ld will not combine with another. So: a static library, linked here.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if [ "${1:-}" = "--link-only" ]; then
  archive="$2"; out="$3"
else
  profile=debug
  flags=()
  if [ "${1:-}" = "--release" ]; then profile=release; flags=(--release); fi
  cargo build -q -p cverbs "${flags[@]}"
  archive="$root/target/$profile/libcverbs.a"
  out="$root/target/rdma-core"
fi
mkdir -p "$out"
cc -shared -o "$out/libibverbs.so.1.tmp" \
  -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
  -Wl,--version-script="$root/cverbs/rdma-core.map" -Wl,-soname,libibverbs.so.1 \
  -lpthread -ldl -lm -lgcc_s -lc
mv -f "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
for name in librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
  ln -sf libibverbs.so.1 "$out/$name"
done
echo "$out"
