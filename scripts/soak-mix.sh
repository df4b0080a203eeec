#!/usr/bin/env bash
# The adversarial mix (tests/src/bin/fm-mix.rs) many times over: counts the
# runs that passed, failed, hung (fm-mix saw nothing arrive for HANG seconds)
# and were slow (fmrun's --timeout ended them while messages still arrived).
#
#   RUNS=50 scripts/soak-mix.sh                    # 4 and 8 ranks, spin and auto
#   HOG=1 RUNS=50 scripts/soak-mix.sh              # with a busy loop per CPU at nice 0, fm at nice 10
#   HOSTS=a,b FM_FAULTS=drop=0.05,dup=0.01,reorder=0.02 scripts/soak-mix.sh
#   RANKS="8 16" REQUESTS=500 scripts/soak-mix.sh  # on a machine with that many cores
#   BIN=dir LOGS=dir ...                           # prebuilt fmrun and fm-mix; keep logs there
#   FIRST_SEED=11 RUNS=40 ...                      # seeds 11..50, to extend an earlier soak
#   BUDGET=60 ...                                  # start no new seed of a configuration after 60 s
#
# HANG: seconds without a message before fm-mix calls a run hung and says
# what it misses (before fmrun's TIMEOUT ends it).
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-50} FIRST_SEED=${FIRST_SEED:-1} RANKS=${RANKS:-"4 8"} WAITS=${WAITS:-"spin auto"}
REQUESTS=${REQUESTS:-300} MAX_SIZE=${MAX_SIZE:-4194304} TIMEOUT=${TIMEOUT:-120} HANG=${HANG:-60}
if [ -z "${BIN:-}" ]; then
    cargo build -q --release --bin fmrun --bin fm-mix || exit 1
    BIN=target/release
fi
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
log=${LOGS:-$(mktemp -d)}
mkdir -p "$log"
for n in $RANKS; do
    for wait in $WAITS; do
        pass=0 fail=0 hung=0 slow=0 started=$SECONDS last=$((FIRST_SEED - 1))
        for seed in $(seq "$FIRST_SEED" $((FIRST_SEED + RUNS - 1))); do
            [ -n "${BUDGET:-}" ] && [ $((SECONDS - started)) -ge "$BUDGET" ] && break
            last=$seed
            out="$log/n$n-$wait-$seed.txt"
            FM_WAIT=$wait nice -n 10 "$BIN/fmrun" -n "$n" "${hosts[@]}" --timeout "$TIMEOUT" \
                "$BIN/fm-mix" "$seed" "$REQUESTS" "$MAX_SIZE" 200 "$HANG" >"$out" 2>&1
            rc=$?
            if [ $rc = 0 ] && [ "$(grep -c ': ok' "$out")" = "$n" ]; then
                pass=$((pass + 1)); rm -f "$out"
            elif grep -q '(hung)' "$out"; then
                hung=$((hung + 1))
            elif grep -q 'ran past --timeout' "$out"; then
                slow=$((slow + 1))
            else
                fail=$((fail + 1))
            fi
        done
        echo "ranks $n, FM_WAIT=$wait, seeds $FIRST_SEED..$last${HOSTS:+, hosts $HOSTS}${FM_FAULTS:+, FM_FAULTS=$FM_FAULTS}: $pass passed, $fail failed, $hung hung, $slow slow (logs of the others in $log)"
    done
done
