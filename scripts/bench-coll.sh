#!/usr/bin/env bash
# bench-coll.sh — the same collective benchmark (scripts/coll-bench.c) on
# fm's MPI, on MPICH and on Open MPI, in one sitting: 2, 4 and 8 ranks on
# this host, the three libraries alternating in every round. fm runs the
# binary built with mpicc.mpich under fmrun, the very binary MPICH runs
# under mpiexec.mpich; Open MPI runs the same source built with
# mpicc.openmpi.
#
# Usage: scripts/bench-coll.sh    (ROUNDS=3, RANKS="2 4 8",
#                                  SIZES=8,1024,65536,1048576, DIVIDE=1:
#                                  1/DIVIDE of coll-bench's usual calls)
#   FMRUN: the fmrun to use (default target/release/fmrun, with its
#   mpi/libmpich.so.12: cargo build --release --workspace --lib --bins)
# Needs: mpich, libmpich-dev, openmpi-bin, libopenmpi-dev.
# Prints, per number of ranks, collective and size, the median over the
# rounds of the mean time per call (µs, the mean over ranks of each one's
# mean), for fm, MPICH and Open MPI, and fm's time over the better of the
# other two (below 1: fm is faster); the same collectives of FM programs
# (`fm-bench coll`, the median over ranks of each one's mean: fm's MPI
# without MPI's matching and packing); and fm-bench's FM-level 8 B
# ping-pong of each round, which says where the two vCPUs sat.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
FMBENCH=${FMBENCH:-$(dirname "$FMRUN")/fm-bench}
ROUNDS=${ROUNDS:-3}
RANKS=${RANKS:-2 4 8}
SIZES=${SIZES:-8,1024,65536,1048576}
DIVIDE=${DIVIDE:-1}
command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null || {
    echo "needs mpich, libmpich-dev, openmpi-bin and libopenmpi-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -o "$out/coll-mpich" scripts/coll-bench.c
mpicc.openmpi -O2 -o "$out/coll-openmpi" scripts/coll-bench.c
for r in $(seq "$ROUNDS"); do
    "$FMBENCH" pingpong --sizes 8 --csv > "$out/fmlevel.$r" 2>&1 || true
    for n in $RANKS; do
        timeout 600 "$FMRUN" -n "$n" --oversubscribe --no-prefix "$FMBENCH" coll --csv \
            --ops barrier,bcast,reduce,allreduce,allgather,alltoall --sizes "$SIZES" \
            > "$out/fmlevelcoll.$n.$r" 2>&1 || echo "FM level, $n ranks, round $r: failed" >&2
        timeout 600 "$FMRUN" -n "$n" --oversubscribe --no-prefix "$out/coll-mpich" "$SIZES" "$DIVIDE" \
            > "$out/fm.$n.$r" 2>&1 || echo "fm, $n ranks, round $r: failed" >&2
        timeout 600 mpiexec.mpich -n "$n" "$out/coll-mpich" "$SIZES" "$DIVIDE" \
            > "$out/mpich.$n.$r" 2>&1 || echo "MPICH, $n ranks, round $r: failed" >&2
        timeout 600 mpirun --allow-run-as-root --oversubscribe -n "$n" "$out/coll-openmpi" "$SIZES" "$DIVIDE" \
            > "$out/openmpi.$n.$r" 2>&1 || echo "Open MPI, $n ranks, round $r: failed" >&2
    done
done
python3 - "$out" "$ROUNDS" "$RANKS" <<'PY'
import statistics, sys
sys.path.insert(0, "scripts")
from placement import placement_line
out, rounds, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
libs = ["fm", "mpich", "openmpi", "fmlevelcoll"]

def read(path):
    times = {}
    try:
        for line in open(path, errors="replace"):
            f = line.split()
            c = line.strip().split(",")
            if len(f) == 6 and f[0] == "coll":
                times[(f[1], int(f[2]))] = float(f[4])
            elif len(c) > 6 and c[2] == "fm" and c[5] == "us":
                times[(c[0], int(c[3]))] = float(c[6])
    except (FileNotFoundError, ValueError):
        pass
    return times

print(placement_line(out, rounds))
for n in ranks:
    runs = {lib: [read(f"{out}/{lib}.{n}.{r}") for r in range(1, rounds + 1)] for lib in libs}
    keys = sorted({k for lib in libs for t in runs[lib] for k in t},
                  key=lambda k: (["barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall"].index(k[0]), k[1]))
    print(f"\n{n} ranks: median µs per call over {rounds} rounds")
    print(f"{'collective':10} {'bytes':>8} {'fm':>10} {'MPICH':>10} {'Open MPI':>10} {'fm/best':>8} {'FM level':>9}")
    for k in keys:
        med = {}
        for lib in libs:
            v = [t[k] for t in runs[lib] if k in t]
            med[lib] = statistics.median(v) if v else float("nan")
        best = min(med["mpich"], med["openmpi"])
        print(f"{k[0]:10} {k[1]:8} {med['fm']:10.2f} {med['mpich']:10.2f} {med['openmpi']:10.2f} {med['fm'] / best:8.2f} {med['fmlevelcoll']:9.2f}")
PY
