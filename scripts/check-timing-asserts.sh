#!/usr/bin/env bash
# check-timing-asserts.sh — no test asserts a timing or a speed ratio: a
# test that fails because the machine was slow is a broken test. Allowed:
# a lower bound (a wait lasted at least its limit), and a hang guard of 30 s
# or more (the thing ended at all). Prints each offending line; exit 1 if any.
set -u
cd "$(dirname "$0")/.."
files=$(git ls-files '*.rs' | grep -E '(^|/)(tests|src)/' )
bad=0
# An upper bound on elapsed time below 30 s.
while IFS= read -r hit; do
    [ -z "$hit" ] && continue
    secs=$(printf '%s\n' "$hit" | sed -nE 's/.*from_secs\(([0-9]+)\).*/\1/p')
    if printf '%s\n' "$hit" | grep -q 'from_millis' || [ -z "$secs" ] || [ "$secs" -lt 30 ]; then
        echo "timing assertion (an upper bound under 30 s): $hit"
        bad=1
    fi
done < <(grep -nE 'assert!?\(.*(\.elapsed\(\)|\btook\b) *<' $files /dev/null)
# A measured value compared with a fractional multiple of another
# (`two >= 1.7 * one`), in the integration tests, where measurements are.
tests=$(printf '%s\n' $files | grep -E '(^|/)tests/')
if grep -nE '\b[a-z_]+ *[<>]=? *[0-9]+\.[0-9]+ *\* *[a-z_(]' $tests /dev/null; then
    echo "speed-ratio assertion (above): ratios belong in benchmarks and docs/PERFORMANCE.md"
    bad=1
fi
exit $bad
