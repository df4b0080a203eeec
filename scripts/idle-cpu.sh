#!/usr/bin/env bash
# CPU used by an idle job, after its start and busy period: runs
#   fmrun -n N fm-bench idle --seconds S
# and sums the kernel's run time (schedstat, every thread) of fmrun and its
# ranks over a window in the middle of the wait. Prints the percent of one
# CPU the whole job used in that window.
#   usage: scripts/idle-cpu.sh [N] [S] [extra fmrun arguments...]
#   e.g.   FM_WAIT=spin scripts/idle-cpu.sh 8 5
set -euo pipefail
n=${1:-8}
secs=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
bin=${BIN:-$(dirname "$0")/../target/release}
"$bin/fmrun" -n "$n" --oversubscribe "$@" "$bin/fm-bench" idle --seconds "$secs" &
job=$!
# Every process of the job: fmrun and its descendants.
tree() {
    local p=$1
    echo "$p"
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}
# Nanoseconds run by every thread of the job so far.
runtime() {
    local total=0 p t
    for p in $(tree "$job"); do
        for t in /proc/"$p"/task/*/schedstat; do
            read -r ns _ < "$t" 2>/dev/null || continue
            total=$((total + ns))
        done
    done
    echo "$total"
}
start=$(awk "BEGIN { print ($secs < 4) ? $secs / 4 : 1.5 }")
window=$(awk "BEGIN { print $secs - $start - 0.5 }")
sleep "$start"
a=$(runtime); t0=$(date +%s%N)
sleep "$window"
b=$(runtime); t1=$(date +%s%N)
wait "$job"
awk -v a="$a" -v b="$b" -v t0="$t0" -v t1="$t1" -v n="$n" \
    'BEGIN { printf "idle job of %d ranks: %.2f %% of one CPU (%.1f ms run in %.2f s)\n", n, 100 * (b - a) / (t1 - t0), (b - a) / 1e6, (t1 - t0) / 1e9 }'
