#!/usr/bin/env bash
# bench-rma.sh — the same one-sided benchmark (scripts/rma-bench.c) on
# fm's MPI, on MPICH and on Open MPI, in one sitting, 2 ranks on this
# host, the three libraries alternating in every round. fm runs the binary
# built with mpicc.mpich under fmrun, the very binary MPICH runs under
# mpiexec.mpich; Open MPI runs the same source built with mpicc.openmpi.
#
# Usage: scripts/bench-rma.sh    (ROUNDS=3, MAX=1048576)
#   FMRUN: the fmrun to use (default target/release/fmrun, with its
#   mpi/libmpich.so.12: cargo build --release --workspace --lib --bins)
# Needs: mpich, libmpich-dev, openmpi-bin, libopenmpi-dev.
# Prints per size the median over the rounds of put and get latency (µs,
# each access flushed), of a lock-put-unlock epoch (µs) and of put
# bandwidth (MB/s), for fm, MPICH and Open MPI, and fm's over the better
# of the other two (latency below 1, bandwidth above 1: fm is ahead).
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
ROUNDS=${ROUNDS:-3}
MAX=${MAX:-1048576}
command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null || {
    echo "needs mpich, libmpich-dev, openmpi-bin and libopenmpi-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -o "$out/rma-mpich" scripts/rma-bench.c
mpicc.openmpi -O2 -o "$out/rma-openmpi" scripts/rma-bench.c
for r in $(seq "$ROUNDS"); do
    timeout 600 "$FMRUN" -n 2 --no-prefix "$out/rma-mpich" "$MAX" > "$out/fm.$r" 2>&1 ||
        echo "fm, round $r: failed" >&2
    timeout 600 mpiexec.mpich -n 2 "$out/rma-mpich" "$MAX" > "$out/mpich.$r" 2>&1 ||
        echo "MPICH, round $r: failed" >&2
    timeout 600 mpirun --allow-run-as-root --oversubscribe -n 2 "$out/rma-openmpi" "$MAX" \
        > "$out/openmpi.$r" 2>&1 || echo "Open MPI, round $r: failed" >&2
done
python3 - "$out" "$ROUNDS" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
libs = ["fm", "mpich", "openmpi"]
cols = ["put_us", "get_us", "epoch_us", "put_MBps"]

def read(path):
    rows = {}
    try:
        for line in open(path, errors="replace"):
            f = line.split()
            if len(f) == 5 and f[0].isdigit():
                rows[int(f[0])] = [float(x) for x in f[1:]]
    except OSError:
        pass
    return rows

runs = {l: [read(f"{out}/{l}.{r}") for r in range(1, rounds + 1)] for l in libs}
sizes = sorted(set().union(*[set(x) for l in libs for x in runs[l]]))
print(f"{'bytes':>8} {'measure':>9} " + " ".join(f"{l:>9}" for l in libs) + f" {'fm/best':>8}")
for s in sizes:
    for c, name in enumerate(cols):
        med = {}
        for l in libs:
            vals = [x[s][c] for x in runs[l] if s in x]
            med[l] = statistics.median(vals) if vals else None
        peers = [med[l] for l in libs[1:] if med[l] is not None]
        ratio = ""
        if med["fm"] is not None and peers:
            best = max(peers) if name == "put_MBps" else min(peers)
            ratio = f"{med['fm'] / best:8.2f}" if best else ""
        cells = " ".join(f"{med[l]:9.2f}" if med[l] is not None else f"{'-':>9}" for l in libs)
        print(f"{s:>8} {name:>9} {cells} {ratio}")
PY
