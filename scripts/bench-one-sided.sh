#!/usr/bin/env bash
# bench-one-sided.sh — FM's one-sided windows (fm-bench put, get, atomic)
# against UCX's ucx_perftest (ucp_put_lat, ucp_put_bw, ucp_get, ucp_fadd,
# ucp_swap, ucp_cswap) in one sitting, alternating round by round: on one
# host (fm's shared-memory windows; UCX_TLS=posix,cma,self) and over
# loopback (fm's ethernet device, UDP; UCX_TLS=tcp on lo).
#
# Usage: scripts/bench-one-sided.sh     (ROUNDS=3, SIZES=8,65536,1048576)
#   FMBENCH: the fm-bench to use (default target/release/fm-bench:
#   cargo build --release -p fm-bench). Needs ucx-utils (ucx_perftest).
# Prints, per path, measure and size, the medians over the rounds: fm's
# and UCX's, and fm over UCX (latency: below 1 is fm faster; bandwidth:
# above 1 is). Raw output in OUT (default target/bench-one-sided/DATE).
set -eu
cd "$(dirname "$0")/.."
FMBENCH=${FMBENCH:-target/release/fm-bench}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-8,65536,1048576}
OUT=${OUT:-target/bench-one-sided/$(date +%Y%m%d-%H%M%S)}
command -v ucx_perftest >/dev/null || { echo "needs ucx_perftest (apt-get install ucx-utils)" >&2; exit 1; }
mkdir -p "$OUT"
port=$((20000 + RANDOM % 20000))

# ucx TLS-NAME "ENV" TEST SIZE: one ucx_perftest pair on loopback, its
# "Final:" line appended to $OUT/ucx.txt as "path test size line".
ucx() {
    local name=$1 envs=$2 t=$3 s=$4 it=20000
    [ "$s" -ge 65536 ] && it=2000
    [ "$s" -ge 1048576 ] && it=500
    port=$((port + 1))
    env $envs timeout 60 ucx_perftest -p $port > "$OUT/ucx-server.log" 2>&1 &
    local server=$!
    sleep 0.3
    local line
    line=$(env $envs timeout 60 ucx_perftest 127.0.0.1 -p $port -t "$t" -s "$s" -n $it -w $((it / 10)) 2>&1 | grep '^Final:' || true)
    wait $server 2>/dev/null || true
    echo "$name $t $s ${line:-failed}" >> "$OUT/ucx.txt"
}

for r in $(seq "$ROUNDS"); do
    echo "[$(date +%H:%M:%S)] round $r" >&2
    for dev in shmem ethernet; do
        for b in put get atomic; do
            timeout 300 "$FMBENCH" "$b" --device $dev --sizes "$SIZES" --csv 2>/dev/null |
                grep -v '^#' | grep -v '^bench,' | sed "s/^/$dev $r /" >> "$OUT/fm.txt" || true
        done
    done
    for cfg in "shmem:UCX_TLS=posix,cma,self" "ethernet:UCX_TLS=tcp UCX_NET_DEVICES=lo"; do
        name=${cfg%%:*}; envs=${cfg#*:}
        for s in ${SIZES//,/ }; do
            for t in ucp_put_lat ucp_put_bw ucp_get; do ucx "$name" "$envs" $t "$s"; done
        done
        for t in ucp_fadd ucp_swap ucp_cswap; do ucx "$name" "$envs" $t 8; done
    done
done

python3 - "$OUT" <<'PY'
import statistics, sys
out = sys.argv[1]
fm, ucx = {}, {}
for line in open(f"{out}/fm.txt"):
    path, _, row = line.split(" ", 2)
    c = row.strip().split(",")
    bench, size, median, mb_s = c[0], int(c[3]), float(c[6]), c[10]
    if bench == "put_bw":
        fm.setdefault((path, "put bandwidth MB/s", size), []).append(float(mb_s))
    else:
        fm.setdefault((path, f"{bench} µs", size), []).append(median)
names = {"ucp_put_lat": "put µs", "ucp_get": "get µs", "ucp_fadd": "fetch_add µs",
         "ucp_swap": "swap µs", "ucp_cswap": "compare_swap µs"}
for line in open(f"{out}/ucx.txt"):
    f = line.split()
    if len(f) < 11 or f[3] != "Final:":
        continue
    path, test, size = f[0], f[1], int(f[2])
    if test == "ucp_put_bw":
        ucx.setdefault((path, "put bandwidth MB/s", size), []).append(float(f[9]))
    else:
        ucx.setdefault((path, names[test], size), []).append(float(f[5]))
print(f"{'path':9} {'measure':20} {'bytes':>8} {'fm':>10} {'UCX':>10} {'fm/UCX':>7}")
for key in sorted(fm):
    a = statistics.median(fm[key])
    b = statistics.median(ucx[key]) if key in ucx else float("nan")
    print(f"{key[0]:9} {key[1]:20} {key[2]:>8} {a:>10.3f} {b:>10.3f} {a / b if b else float('nan'):>7.2f}")
PY
echo "raw: $OUT" >&2
