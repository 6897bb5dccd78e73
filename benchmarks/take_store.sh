#!/usr/bin/env bash
# Take a device call's sweep store back into runs/h200 (or $2) and pack it again for the next call.
# Usage: bash benchmarks/take_store.sh FILES_AT [STORE]
#   FILES_AT: the folder the device tool returned (`files_at`), holding h200_results.tgz (a call
#   that ended) or h200/sweep_checkpoint.jsonl.gz (a call killed at its limit: the verdicts of
#   the last minute, benchmarks/h200_session.sh's checkpoint).
# The store is append-only, so the copy with more verdict lines is the newer one: a returned
# store with fewer lines than the local one (a stale pack was unpacked there) is left aside.
set -euo pipefail
src=${1:?usage: bash benchmarks/take_store.sh FILES_AT [STORE]}; dst=${2:-runs/h200}
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -f "$src/h200_results.tgz" ] && tar xzf "$src/h200_results.tgz" -C "$tmp" h200/sweep_store 2>/dev/null; then
  got=$tmp/h200/sweep_store
elif [ -f "$src/h200/sweep_checkpoint.jsonl.gz" ]; then
  got=$tmp/checkpoint; mkdir -p "$got"; gunzip -c "$src/h200/sweep_checkpoint.jsonl.gz" > "$got/verdicts.jsonl"
else
  echo "no sweep store in $src (h200_results.tgz with h200/sweep_store, or h200/sweep_checkpoint.jsonl.gz)" >&2; exit 2
fi
have=$(lines "$dst/verdicts.jsonl"); new=$(lines "$got/verdicts.jsonl")
if [ "$new" -lt "$have" ]; then
  echo "kept $dst: $have records, the returned store $new" >&2; exit 1
fi
mkdir -p "$dst"; cp "$got"/* "$dst"/
echo "$dst: $new records ($((new - have)) new)"
bash "$(dirname "$0")/pack_store.sh" "$dst" "${dst%/}z"   # runs/h200 -> runs/h200z
