#!/usr/bin/env bash
# bench-fmrun.sh — fm-bench ping-pong started by fmrun next to fm-bench
# standalone, interleaved in one run; then 8 ranks under fmrun on this
# machine's cores. Prints medians per launcher and size.
#
# Usage: scripts/bench-fmrun.sh [OUT_DIR]     REPS=5 (default) repetitions
set -u
cd "$(dirname "$0")/.."
OUT=${1:-target/bench-fmrun/$(date +%Y%m%d-%H%M%S)}
REPS=${REPS:-5}
SIZES=${SIZES:-8,1024,65536,1048576}
mkdir -p "$OUT"
cargo build --release -q -p fm-bench -p fm-launcher || exit 1
B=target/release/fm-bench
R=target/release/fmrun
{
    echo "date: $(date -u +%FT%TZ)"; echo "nproc: $(nproc)"; echo "kernel: $(uname -r)"
    echo "fm: $(git rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/machine.txt"
tag() { sed 's/^\[[0-9]*\] //' | grep '^{' | sed "s/^{/{\"launcher\":\"$1\",\"rep\":$2,/"; }
for rep in $(seq 1 "$REPS"); do
    $B pingpong --sizes "$SIZES" --json | tag standalone "$rep" >> "$OUT/results.jsonl"
    $R -n 2 $B pingpong --sizes "$SIZES" --json | tag fmrun-n2 "$rep" >> "$OUT/results.jsonl"
    $R -n 8 $B pingpong --device shmem --sizes "$SIZES" --json | tag fmrun-n8 "$rep" >> "$OUT/results.jsonl"
done
python3 - "$OUT/results.jsonl" <<'PY'
import json, sys, statistics
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("bench") != "meta"]
sizes = sorted({r["size"] for r in rows})
launchers = ["standalone", "fmrun-n2", "fmrun-n8"]
print("one-way latency, µs: median over repetitions of each run's median (min–max of those)")
print(f"{'size':>9} " + " ".join(f"{l:>24}" for l in launchers) + "   n2/standalone")
for s in sizes:
    cells, med = [], {}
    for l in launchers:
        v = [r["median_us"] for r in rows if r["launcher"] == l and r["size"] == s]
        med[l] = statistics.median(v)
        cells.append(f"{med[l]:8.3f} ({min(v):.3f}–{max(v):.3f})")
    print(f"{s:>9} " + " ".join(f"{c:>24}" for c in cells) + f"   {med['fmrun-n2'] / med['standalone']:.2f}")
PY
