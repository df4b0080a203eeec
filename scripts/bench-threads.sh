#!/usr/bin/env bash
# bench-threads.sh — MPI round-trip latency with 0 to 4 threads per rank
# (scripts/mpi-thread-latency.c; 0 is the single-threaded program, which
# calls MPI_Init), on fm's MPI, MPICH and Open MPI in one sitting, the
# libraries alternating in every round; fm runs the binary built with
# mpicc.mpich under fmrun, the very binary MPICH runs under mpiexec.mpich;
# Open MPI runs the same source built with mpicc.openmpi.
#
# Usage: scripts/bench-threads.sh   (ROUNDS=5, THREADS="0 1 2 4", SIZE=8)
#   FMRUN: the fmrun to use (default target/release/fmrun, with its
#   mpi/libmpich.so.12: cargo build --release --workspace --lib --bins)
#   FMRUN_B: a second fmrun (another build, e.g. the commit before) run
#   on the single-threaded program in the same rounds: the A/B of what a
#   change costs a program that asked for no threads.
# Prints per library and thread count the median over rounds of the
# median thread's round trip (µs), and fm-bench's FM-level 8 B one-way
# time of each round, which says where the two vCPUs sat.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
FMBENCH=${FMBENCH:-$(dirname "$FMRUN")/fm-bench}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-0 1 2 4}
SIZE=${SIZE:-8}
command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null || {
    echo "needs mpich, libmpich-dev, openmpi-bin and libopenmpi-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -pthread -o "$out/lat-mpich" scripts/mpi-thread-latency.c
mpicc.openmpi -O2 -pthread -o "$out/lat-openmpi" scripts/mpi-thread-latency.c
iters() { if [ "$1" = 0 ]; then echo 20000; else echo 500; fi; }
for r in $(seq "$ROUNDS"); do
    "$FMBENCH" pingpong --sizes 8 --csv > "$out/fmlevel.$r" 2>&1 || true
    for t in $THREADS; do
        n=$(iters "$t")
        timeout 60 "$FMRUN" -n 2 --no-prefix "$out/lat-mpich" "$t" "$n" "$SIZE" \
            >> "$out/fm.$t" 2>&1 || echo "fm, $t threads, round $r: failed" >&2
        if [ -n "${FMRUN_B:-}" ] && [ "$t" = 0 ]; then
            timeout 60 "$FMRUN_B" -n 2 --no-prefix "$out/lat-mpich" "$t" "$n" "$SIZE" \
                >> "$out/fmB.$t" 2>&1 || echo "fm B, round $r: failed" >&2
        fi
        timeout 60 mpiexec.mpich -n 2 "$out/lat-mpich" "$t" "$n" "$SIZE" \
            >> "$out/mpich.$t" 2>&1 || echo "MPICH, $t threads, round $r: failed" >&2
        timeout 60 mpirun --allow-run-as-root -n 2 "$out/lat-openmpi" "$t" "$n" "$SIZE" \
            >> "$out/openmpi.$t" 2>&1 || echo "Open MPI, $t threads, round $r: failed" >&2
    done
done
python3 - "$out" "$ROUNDS" "$THREADS" <<'PY'
import statistics, sys
sys.path.insert(0, "scripts")
from placement import placement_line
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def times(path):
    try:
        return [float(l.split()[5]) for l in open(path, errors="replace")
                if l.startswith("threads ")]
    except FileNotFoundError:
        return []
print(placement_line(out, rounds))
print(f"{'threads':>7} {'lib':>8} {'median rtt µs':>14} {'rounds':>40}")
for t in threads:
    for lib in ["fm", "fmB", "mpich", "openmpi"]:
        v = times(f"{out}/{lib}.{t}")
        if v:
            print(f"{t:>7} {lib:>8} {statistics.median(v):>14.3f} {' '.join(f'{x:.3f}' for x in v):>40}")
PY
