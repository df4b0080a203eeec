#!/usr/bin/env bash
# The adversarial mix (tests/src/bin/fm-mix.rs) many times over: counts the
# runs that passed, failed and hung (fmrun's --timeout ended them).
#
#   RUNS=50 scripts/soak-mix.sh                    # 4 and 8 ranks, spin and auto
#   HOG=1 RUNS=50 scripts/soak-mix.sh              # with a busy loop per CPU at nice 0, fm at nice 10
#   HOSTS=a,b FM_FAULTS=drop=0.05,dup=0.01,reorder=0.02 scripts/soak-mix.sh
#   RANKS="8 16" REQUESTS=500 scripts/soak-mix.sh  # on a machine with that many cores
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-50} RANKS=${RANKS:-"4 8"} WAITS=${WAITS:-"spin auto"}
REQUESTS=${REQUESTS:-300} MAX_SIZE=${MAX_SIZE:-4194304} TIMEOUT=${TIMEOUT:-120}
cargo build -q --release --bin fmrun --bin fm-mix || exit 1
hogs=()
if [ "${HOG:-0}" = 1 ]; then
    for _ in $(seq "$(nproc)"); do
        (while :; do :; done) &
        hogs+=($!)
    done
fi
trap '[ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null' EXIT
hosts=()
[ -n "${HOSTS:-}" ] && hosts=(--hosts "$HOSTS" --rsh local)
log=$(mktemp -d)
for n in $RANKS; do
    for wait in $WAITS; do
        pass=0 fail=0 hung=0
        for seed in $(seq "$RUNS"); do
            out="$log/n$n-$wait-$seed.txt"
            FM_WAIT=$wait nice -n 10 target/release/fmrun -n "$n" "${hosts[@]}" --timeout "$TIMEOUT" \
                target/release/fm-mix "$seed" "$REQUESTS" "$MAX_SIZE" >"$out" 2>&1
            rc=$?
            if [ $rc = 0 ] && [ "$(grep -c ': ok' "$out")" = "$n" ]; then
                pass=$((pass + 1)); rm -f "$out"
            elif grep -q 'timed out\|timeout\|hung' "$out"; then
                hung=$((hung + 1))
            else
                fail=$((fail + 1))
            fi
        done
        echo "ranks $n, FM_WAIT=$wait${HOSTS:+, hosts $HOSTS}${FM_FAULTS:+, FM_FAULTS=$FM_FAULTS}: $pass passed, $fail failed, $hung hung (logs of the others in $log)"
    done
done
