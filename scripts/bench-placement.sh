#!/usr/bin/env bash
# bench-placement.sh — large-message latency by placement, A/B across builds or settings.
#
# This host moves its two vCPUs between a near placement (shared cache; the
# cache-line probe ~0.03 µs) and a far one (~0.16 µs) every few tens of
# seconds, and large messages behave very differently in each. So every
# round takes the probe before and after, then runs each variant once; keep
# the rounds whose two probes agree.
#
# Usage: scripts/bench-placement.sh VARIANT...
#   VARIANT: "NAME=COMMAND", e.g. 'adaptive=target/release/fm-bench'
#            or 'frames=env FM_SHM_CMA_ADAPT=off target/release/fm-bench'
#   ROUNDS=10   SIZES=65536,1048576   ITERS=2000
# Prints per round: the probes, then per variant the median one-way µs per size.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-10}
SIZES=${SIZES:-65536,1048576}
ITERS=${ITERS:-2000}
PEERS=../shared/peers
PROBE=$(mktemp)
trap 'rm -f "$PROBE"' EXIT
cc -O2 -pthread -o "$PROBE" "$PEERS/shm_baseline.c"
probe() { "$PROBE" line-proc 0 1 100 | sed -n 's/.*oneway_p50_us=\([0-9.]*\).*/\1/p'; }
for _ in $(seq "$ROUNDS"); do
    line="probe $(probe)"
    for v in "$@"; do
        name=${v%%=*}
        # shellcheck disable=SC2086 # the command is words on purpose
        r=$(${v#*=} pingpong --sizes "$SIZES" --iters "$ITERS" --json |
            sed -n 's/.*"median_us":\([0-9.]*\).*/\1/p' | xargs printf '%.2f ')
        line="$line | $name ${r% }"
    done
    echo "$line | probe $(probe)"
done
