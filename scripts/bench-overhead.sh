#!/usr/bin/env bash
# bench-overhead.sh — A/B of the composite's overhead across fm-bench builds.
#
# One `fm-bench overhead` run is a fraction of a second and moves by a few ns
# from run to run on a shared host, so this runs each given binary RUNS times,
# alternating between them, and prints the quartiles of the runs' results.
#
# Usage: scripts/bench-overhead.sh [FM_BENCH ...]   (default: target/release/fm-bench)
#   RUNS=21     runs per binary
# Example: cp target/release/fm-bench /tmp/before; (change, rebuild);
#          scripts/bench-overhead.sh /tmp/before target/release/fm-bench
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- target/release/fm-bench
RUNS=${RUNS:-21}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for _ in $(seq "$RUNS"); do
    i=0
    for bin in "$@"; do
        i=$((i + 1))
        "$bin" overhead --json 2>/dev/null |
            sed -n 's/.*"composite_minus_device_ns":\([-0-9.e]*\).*/\1/p' >> "$TMP/$i"
    done
done
i=0
for bin in "$@"; do
    i=$((i + 1))
    sort -g "$TMP/$i" | awk -v b="$bin" '{a[NR] = $1}
        END {if (NR == 0) {print b ": no result"; exit 1}
             printf "%s: runs %d, composite overhead ns: min %.1f q1 %.1f median %.1f q3 %.1f max %.1f\n",
                 b, NR, a[1], a[int(NR / 4) + 1], a[int((NR + 1) / 2)], a[int(3 * NR / 4) + 1], a[NR]}'
done
