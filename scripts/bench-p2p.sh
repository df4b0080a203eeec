#!/usr/bin/env bash
# bench-p2p.sh — the same point-to-point benchmark (scripts/p2p-bench.c:
# windowed streaming bandwidth and message rate, bidirectional bandwidth,
# a fixed-count blocking ping-pong) on fm's MPI, on MPICH and on Open MPI,
# in one sitting, 2 ranks on this host, the three libraries alternating
# in every round. fm runs the binary built with mpicc.mpich under fmrun,
# the very binary MPICH runs under mpiexec.mpich; Open MPI runs the same
# source built with mpicc.openmpi.
#
# Usage: scripts/bench-p2p.sh    (ROUNDS=3, SIZES: p2p-bench's default,
#                                 every power of two from 1 B to 4 MiB)
#   FMRUN: the fmrun to use (default target/release/fmrun, with its
#   mpi/libmpich.so.12: cargo build --release --workspace --lib --bins)
# Needs: mpich, libmpich-dev, openmpi-bin, libopenmpi-dev.
# Prints, per pattern and size, the median over the rounds for fm, MPICH
# and Open MPI, and fm over the better of the other two, oriented so that
# below 1 means fm is better (time over time; the other's rate over fm's);
# and fm-bench's FM-level 8 B ping-pong of each round, which says where
# the two vCPUs sat.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
FMBENCH=${FMBENCH:-$(dirname "$FMRUN")/fm-bench}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-}
command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null || {
    echo "needs mpich, libmpich-dev, openmpi-bin and libopenmpi-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -Wno-stringop-overflow: GCC misreads MPICH's MPI_STATUSES_IGNORE as an empty array.
mpicc.mpich -O2 -Wno-stringop-overflow -o "$out/p2p-mpich" scripts/p2p-bench.c
mpicc.openmpi -O2 -o "$out/p2p-openmpi" scripts/p2p-bench.c
for r in $(seq "$ROUNDS"); do
    "$FMBENCH" pingpong --sizes 8 --csv > "$out/fmlevel.$r" 2>&1 || true
    timeout 600 "$FMRUN" -n 2 --no-prefix "$out/p2p-mpich" $SIZES \
        > "$out/fm.$r" 2>&1 || echo "fm, round $r: failed" >&2
    timeout 600 mpiexec.mpich -n 2 "$out/p2p-mpich" $SIZES \
        > "$out/mpich.$r" 2>&1 || echo "MPICH, round $r: failed" >&2
    timeout 600 mpirun --allow-run-as-root -n 2 "$out/p2p-openmpi" $SIZES \
        > "$out/openmpi.$r" 2>&1 || echo "Open MPI, round $r: failed" >&2
done
python3 - "$out" "$ROUNDS" <<'PY'
import statistics, sys
sys.path.insert(0, "scripts")
from placement import placement_line
out, rounds = sys.argv[1], int(sys.argv[2])
libs = ["fm", "mpich", "openmpi"]
patterns = ["stream", "rate", "bidir", "pingpong"]

def read(path):
    values, units = {}, {}
    try:
        for line in open(path, errors="replace"):
            f = line.split()
            if len(f) == 5 and f[0] == "p2p":
                values[(f[1], int(f[2]))] = float(f[3])
                units[f[1]] = f[4]
    except (FileNotFoundError, ValueError):
        pass
    return values, units

print(placement_line(out, rounds))
runs = {lib: [read(f"{out}/{lib}.{r}") for r in range(1, rounds + 1)] for lib in libs}
units = {}
for lib in libs:
    for _, u in runs[lib]:
        units.update(u)
keys = sorted({k for lib in libs for v, _ in runs[lib] for k in v},
              key=lambda k: (patterns.index(k[0]) if k[0] in patterns else 9, k[1]))
print(f"\n2 ranks: medians over {rounds} rounds (fm/best below 1: fm is better)")
print(f"{'pattern':9} {'bytes':>8} {'unit':>7} {'fm':>10} {'MPICH':>10} {'Open MPI':>10} {'fm/best':>8}")
for k in keys:
    med = {}
    for lib in libs:
        v = [t[k] for t, _ in runs[lib] if k in t]
        med[lib] = statistics.median(v) if v else float("nan")
    if k[0] == "pingpong":
        ratio = med["fm"] / min(med["mpich"], med["openmpi"])
    else:
        ratio = max(med["mpich"], med["openmpi"]) / med["fm"]
    print(f"{k[0]:9} {k[1]:8} {units.get(k[0], ''):>7} {med['fm']:10.3f} {med['mpich']:10.3f} {med['openmpi']:10.3f} {ratio:8.2f}")
PY
