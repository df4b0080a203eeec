#!/usr/bin/env bash
# count-p2p-rate.sh — instructions per message of the small-message rate
# pattern (scripts/p2p-rate-count.c: windows of 64 MPI_Isend of 8 B
# against 64 MPI_Irecv, MPI_Waitall on both sides), counted by callgrind
# in each MPI call, on fm's MPI and on MPICH. One rank runs under
# callgrind while the other runs natively; each side is counted at 1 000
# and 3 000 windows and the difference is divided by the 128 000 messages
# between, so start-up and the first windows drop out. Counts, not times:
# they do not depend on the machine's load or placement.
#
# Usage: scripts/count-p2p-rate.sh [FMRUN]   (default target/release/fmrun,
#   with its mpi/libmpich.so.12: cargo build --release --workspace --lib --bins)
# Needs: valgrind, mpich, libmpich-dev.
# Prints one line per library, side and call: instructions per message.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${1:-target/release/fmrun}
command -v valgrind >/dev/null && command -v mpicc.mpich >/dev/null || {
    echo "needs valgrind, mpich and libmpich-dev" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -Wno-stringop-overflow: GCC misreads MPICH's MPI_STATUSES_IGNORE as an empty array.
mpicc.mpich -O2 -Wno-stringop-overflow -o "$out/rate" scripts/p2p-rate-count.c
# fm's entry points are MPI_x (each calls its PMPI_x); MPICH's MPI_x are
# aliases that callgrind names PMPI_x. Toggling both would switch the
# count off again inside fm's.
cat > "$out/wrap" <<'W'
#!/bin/sh
rank=${FM_RANK:-$PMI_RANK}
if [ "$rank" = "$WHO" ]; then
  exec valgrind --tool=callgrind --callgrind-out-file="$OUT.$WHO.$N" \
    --toggle-collect="${P}MPI_Isend" --toggle-collect="${P}MPI_Irecv" \
    --toggle-collect="${P}MPI_Waitall" "$@" 2>/dev/null
fi
exec "$@"
W
chmod +x "$out/wrap"
for lib in fm mpich; do
    for who in 0 1; do
        for n in 1000 3000; do
            if [ $lib = fm ]; then
                WHO=$who N=$n OUT="$out/$lib" P= "$FMRUN" -n 2 --no-prefix "$out/wrap" "$out/rate" $n
            else
                WHO=$who N=$n OUT="$out/$lib" P=P mpiexec.mpich -n 2 "$out/wrap" "$out/rate" $n 2>/dev/null
            fi
        done
    done
done
for lib in fm mpich; do
    for who in 0 1; do
        side=$([ $who = 0 ] && echo sender || echo receiver)
        for call in Isend Irecv Waitall; do
            a=$(callgrind_annotate --inclusive=yes "$out/$lib.$who.1000" 2>/dev/null |
                awk -v c="MPI_$call" '$0 ~ ":P?"c" " {gsub(",","",$1); print $1; exit}')
            b=$(callgrind_annotate --inclusive=yes "$out/$lib.$who.3000" 2>/dev/null |
                awk -v c="MPI_$call" '$0 ~ ":P?"c" " {gsub(",","",$1); print $1; exit}')
            [ -n "$a" ] && [ -n "$b" ] || continue
            echo "$lib $side MPI_$call $(( (b - a) / 128000 )) instructions a message"
        done
    done
done
