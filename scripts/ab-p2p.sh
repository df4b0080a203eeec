#!/usr/bin/env bash
# ab-p2p.sh — A/B of fm builds on scripts/p2p-bench.c (built once with
# mpicc.mpich), the builds alternating in every round, each run after a
# placement probe (fm-bench's FM-level 8 B one-way time), and the medians
# reported per placement: near (probe below 0.17 µs) and far, since the
# two vCPUs of this machine move between the two within minutes
# (docs/PERFORMANCE.md, "Machine and method").
#
# Usage: scripts/ab-p2p.sh NAME=FMRUN NAME=FMRUN ...
#   e.g. scripts/ab-p2p.sh old=/tmp/old/release/fmrun new=target/release/fmrun
#   (an fmrun with its build's mpi/libmpich.so.12 beside it: build a
#   commit with CARGO_TARGET_DIR=... cargo build --release --workspace
#   --lib --bins)
#   ROUNDS (default 6), SIZES (p2p-bench's, default
#   16384,65536,131072,1048576,4194304).
# Prints, per placement, each pattern and size: each build's median and
# its ratio to the first build's (for MB/s and Mmsg/s above 1 is better,
# for µs below 1).
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
ROUNDS=${ROUNDS:-6}
SIZES=${SIZES:-16384,65536,131072,1048576,4194304}
FMBENCH=${FMBENCH:-target/release/fm-bench}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -Wno-stringop-overflow -o "$out/p2p-bench" scripts/p2p-bench.c
for r in $(seq "$ROUNDS"); do
    for v in "$@"; do
        probe=$("$FMBENCH" pingpong --sizes 8 --csv 2>/dev/null | tail -1 | cut -d, -f7)
        timeout 600 "${v#*=}" -n 2 --no-prefix "$out/p2p-bench" "$SIZES" 2>&1 |
            sed "s/^/$probe /" > "$out/${v%%=*}.$r" || echo "${v%%=*}, round $r: failed" >&2
    done
done
python3 - "$out" "$@" <<'PY'
import collections, glob, statistics, sys
out, names = sys.argv[1], [v.split("=")[0] for v in sys.argv[2:]]
rounds = collections.defaultdict(list)
for path in glob.glob(out + "/*.*"):
    name = path.rsplit("/", 1)[1].split(".")[0]
    if name not in names:
        continue
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) == 6 and f[1] == "p2p":
            try:
                place = "near" if float(f[0]) < 0.17 else "far"
            except ValueError:
                continue
            rounds[(place, f[2], int(f[3]), name)].append(float(f[4]))
for place in ("near", "far"):
    keys = sorted({(k[1], k[2]) for k in rounds if k[0] == place})
    if not keys:
        continue
    counts = {n: len(rounds[(place, keys[0][0], keys[0][1], n)]) for n in names}
    print(f"{place} placement, runs per build: {counts}")
    for pattern, size in keys:
        med = [statistics.median(rounds[(place, pattern, size, n)] or [float("nan")]) for n in names]
        cells = " ".join(f"{n} {m:10.2f}" for n, m in zip(names, med))
        ratios = " ".join(f"{n}/{names[0]} {m / med[0]:.2f}" for n, m in zip(names[1:], med[1:]))
        print(f"  {pattern:9} {size:8} {cells}  {ratios}")
PY
