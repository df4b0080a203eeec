#!/usr/bin/env bash
# bench-comm-create.sh — what making and freeing a communicator costs
# (scripts/comm-create-bench.c: MPI_Comm_split, MPI_Comm_dup,
# MPI_Comm_create) on fm's MPI, MPICH and Open MPI in one sitting, the
# libraries alternating in every round; fm runs the binary built with
# mpicc.mpich under fmrun, the very binary MPICH runs under mpiexec.mpich.
#
# Usage: scripts/bench-comm-create.sh   (ROUNDS=5, NP=2, N=2000)
#   FMRUN: the fmrun to use (default target/release/fmrun)
#   FMRUN_B: a second fmrun (another build, e.g. the commit before) in
#   the same rounds: the A/B of a change.
# Prints per library and call the median over rounds of the average
# time to make and free one communicator (µs).
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
ROUNDS=${ROUNDS:-5}
NP=${NP:-2}
N=${N:-2000}
command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null || {
    echo "needs mpich, libmpich-dev, openmpi-bin and libopenmpi-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.mpich -O2 -o "$out/cc-mpich" scripts/comm-create-bench.c
mpicc.openmpi -O2 -o "$out/cc-openmpi" scripts/comm-create-bench.c
over=()
[ "$NP" -gt "$(nproc)" ] && over=(--oversubscribe)
for r in $(seq "$ROUNDS"); do
    timeout 120 "$FMRUN" -n "$NP" "${over[@]}" --no-prefix "$out/cc-mpich" "$N" >> "$out/fm" 2>/dev/null \
        || echo "fm, round $r: failed" >&2
    if [ -n "${FMRUN_B:-}" ]; then
        timeout 120 "$FMRUN_B" -n "$NP" "${over[@]}" --no-prefix "$out/cc-mpich" "$N" >> "$out/fmB" 2>/dev/null \
            || echo "fm B, round $r: failed" >&2
    fi
    timeout 120 mpiexec.mpich -n "$NP" "$out/cc-mpich" "$N" >> "$out/mpich" 2>/dev/null \
        || echo "MPICH, round $r: failed" >&2
    timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -n "$NP" "$out/cc-openmpi" "$N" \
        >> "$out/openmpi" 2>/dev/null || echo "Open MPI, round $r: failed" >&2
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "-" }'; }
printf '%-8s %10s %10s %10s   (µs to make and free one, %d ranks, median of %d rounds)\n' \
    library split dup create "$NP" "$ROUNDS"
for lib in fm fmB mpich openmpi; do
    [ -s "$out/$lib" ] || continue
    row=()
    for call in split dup create; do
        row+=("$(awk -v c="$call" '$1 == c { print $2 }' "$out/$lib" | median)")
    done
    printf '%-8s %10s %10s %10s\n' "$lib" "${row[@]}"
done
