#!/usr/bin/env bash
# Pack a sweep store for the device tool's carry: runs/h200 (or $1) -> runs/h200z (or $2),
# its verdicts gzipped (29,254 records: 34 MB -> 2 MB). benchmarks/h200_session.sh unpacks
# runs/h200z over runs/h200 before its steps. Usage: bash benchmarks/pack_store.sh [STORE [PACKED]]
set -euo pipefail
src=${1:-runs/h200}; dst=${2:-runs/h200z}
[ -f "$src/verdicts.jsonl" ] || { echo "no run store at $src (verdicts.jsonl missing)" >&2; exit 2; }
rm -rf "$dst" && mkdir -p "$dst"
cp "$src"/*.json "$dst"/
gzip -c "$src/verdicts.jsonl" > "$dst/verdicts.jsonl.gz"
echo "$dst: $(wc -l < "$src/verdicts.jsonl") records, $(du -sh "$dst" | cut -f1)"
