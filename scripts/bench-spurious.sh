#!/usr/bin/env bash
# Spurious retransmissions between two virtual hosts on a loaded machine.
#
#   scripts/bench-spurious.sh DIR_A [DIR_B ...]
#
# Each DIR is a cargo target profile directory holding fmrun and
# fm-testprog (e.g. target/debug of two checkouts). With two CPU hogs
# running, each build runs fm-testprog's all-to-all (4 ranks on the virtual
# hosts a and b, ethernet between them, no faults injected) REPS times
# (default 5), the builds alternating run by run. No fault is injected and
# loopback neither loses nor duplicates, so every retransmission is
# unneeded: the counts are the peer being late, not the network. Prints
# per run and build: data packets, retransmissions, timeouts, duplicates
# received, spurious timeouts found (F-RTO; "-" where the build has no such
# counter), and retransmissions per 1,000 data packets; then the median of
# that ratio per build.
set -euo pipefail
REPS=${REPS:-5}
MESSAGES=${MESSAGES:-3000}
[ $# -ge 1 ] || { echo "usage: $0 DIR_A [DIR_B ...]" >&2; exit 2; }
hogs=()
for _ in 1 2; do
    ( while :; do :; done ) &
    hogs+=($!)
done
shm=$(mktemp -d /dev/shm/fm-spurious.XXXXXX)
trap 'kill "${hogs[@]}" 2>/dev/null; rm -rf "$shm"' EXIT
declare -A ratios
printf '%-40s %4s %9s %8s %8s %8s %8s %9s\n' build run data retrans timeouts dups spurious per-1000
for rep in $(seq "$REPS"); do
    for dir in "$@"; do
        out=$(FM_SHM_DIR=$shm "$dir/fmrun" -n 4 --hosts a,b --rsh local --timeout 300 \
            "$dir/fm-testprog" alltoall "$MESSAGES" 65536 "$rep" 2>/dev/null)
        sum() { echo "$out" | grep 'ethernet rank' | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) s += $(i+1) } END { print s + 0 }'; }
        data=$(sum data-sent); re=$(sum retransmits); to=$(sum timeouts); dup=$(sum duplicates)
        if echo "$out" | grep -q spurious-timeouts; then sp=$(sum spurious-timeouts); else sp=-; fi
        ratio=$(awk -v r="$re" -v d="$data" 'BEGIN { printf "%.2f", d ? 1000 * r / d : 0 }')
        ratios[$dir]+="$ratio "
        printf '%-40s %4s %9s %8s %8s %8s %8s %9s\n' "$dir" "$rep" "$data" "$re" "$to" "$dup" "$sp" "$ratio"
    done
done
for dir in "$@"; do
    med=$(echo "${ratios[$dir]}" | tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    echo "median retransmissions per 1,000 data packets, $dir: $med"
done
