#!/usr/bin/env bash
# bench-vs-peers.sh — fm-bench next to UCX, libfabric and the raw floors, in one run.
#
# Machines are shared and noisy, and the host sometimes places the two vCPUs
# far apart (the cache-line floor jumps from ~0.03 to ~0.16 µs), so numbers
# only compare within one run. This script interleaves fm and the peers REPS
# times, logs a placement probe before each repetition, and prints medians.
#
# Usage: scripts/bench-vs-peers.sh [OUT_DIR]
#   REPS=3            repetitions (default 3)
#   GROUP=shmem       shmem (default): fm shmem vs UCX posix/sm and libfabric shm;
#                     ethernet: fm ethernet vs UCX tcp and libfabric udp;ofi_rxd (loopback)
#   SKIP_INSTALL=1    do not apt-get the peers (ucx-utils, libfabric-bin)
# Needs: cargo; the peers come from Debian packages. Pins the two sides to CPUs 0 and 1.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-target/bench-vs-peers/$(date +%Y%m%d-%H%M%S)}
REPS=${REPS:-3}
GROUP=${GROUP:-shmem}
mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }

if [ "${SKIP_INSTALL:-0}" != 1 ] && ! command -v ucx_perftest >/dev/null; then
    log "installing peers (ucx-utils libfabric-bin)"
    apt-get update -qq >/dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ucx-utils libfabric-bin >/dev/null 2>&1 \
        || log "peer install failed: peers will be missing"
fi
cargo build --release -q -p fm-bench || exit 1
FMB=$ROOT/target/release/fm-bench
PEERS=$ROOT/../shared/peers
FLOOR=""
if [ -f "$PEERS/shm_baseline.c" ]; then
    cc -O2 -pthread -o "$OUT/shm_baseline" "$PEERS/shm_baseline.c" && FLOOR=$OUT/shm_baseline
fi
{
    echo "date: $(date -u +%FT%TZ)"
    echo "cpu: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')"
    echo "nproc: $(nproc)"; echo "kernel: $(uname -r)"
    echo "ucx: $(ucx_info -v 2>/dev/null | head -1)"
    echo "libfabric: $(fi_info --version 2>/dev/null | head -1)"
    echo "fm: $(git rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/machine.txt"

PORT=14000
ucx() { # name tls test size iters
    PORT=$((PORT + 1))
    env UCX_TLS=$2 UCX_NET_DEVICES=${UCX_NET_DEVICES:-all} taskset -c 0 ucx_perftest -p $PORT >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    env UCX_TLS=$2 UCX_NET_DEVICES=${UCX_NET_DEVICES:-all} timeout 120 taskset -c 1 ucx_perftest 127.0.0.1 -p $PORT -t $3 -s $4 -n $5 -w $(($5 / 10)) -f -v 2>/dev/null |
        tail -1 | awk -F, -v n="$1" -v s="$4" -v t="$3" '{print "{\"peer\":\"" n "\",\"test\":\"" t "\",\"size\":" s ",\"median_us\":" $2 ",\"mb_s\":" $5 ",\"mmsg_s\":" $7/1e6 "}"}'
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
}
fi_pp() { # provider endpoint-type size iters
    PORT=$((PORT + 1))
    taskset -c 0 fi_pingpong -p "$1" -e "$2" -B $PORT -S $3 -I $4 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    timeout 120 taskset -c 1 fi_pingpong -p "$1" -e "$2" -P $PORT -S $3 -I $4 127.0.0.1 2>/dev/null |
        awk -v s="$3" -v p="libfabric-$1" 'NR==2 {print "{\"peer\":\"" p "\",\"test\":\"fi_pingpong\",\"size\":" s ",\"median_us\":" $7 "}"}'
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
}
# Open MPI over TCP on loopback (ob1 with the tcp BTL), the peers' MPI ping-pong.
MPIPP=""
if [ "$GROUP" = ethernet ] && command -v mpicc >/dev/null && [ -f "$PEERS/mpi_pingpong.c" ]; then
    mpicc -O2 -o "$OUT/mpi_pingpong" "$PEERS/mpi_pingpong.c" 2>/dev/null && MPIPP=$OUT/mpi_pingpong
fi
mpi_tcp() {
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo "$MPIPP" 10000 1000 2>/dev/null |
        awk '!/^#/ && ($1 == 8 || $1 == 1024 || $1 == 65536 || $1 == 1048576) {print "{\"peer\":\"openmpi-tcp\",\"test\":\"mpi_pingpong\",\"size\":" $1 ",\"median_us\":" $4 "}"}'
}
probe() {
    [ -n "$FLOOR" ] || return
    $FLOOR line-proc 0 1 2>/dev/null | tail -1 | grep -o 'oneway_p50_us=[0-9.]*' | cut -d= -f2
}

for r in $(seq "$REPS"); do
    p=$(probe)
    log "rep $r: placement probe (cache-line one-way) ${p:-n/a} us"
    echo "{\"rep\":$r,\"probe_us\":${p:-null}}" >> "$OUT/results.jsonl"
    if [ "$GROUP" = ethernet ]; then {
        $FMB pingpong --device ethernet --sizes 8,1024,65536,1048576 --json
        $FMB bw --device ethernet --sizes 1048576 --json
        if command -v ucx_perftest >/dev/null; then
            export UCX_NET_DEVICES=lo
            for s in 8 1024; do ucx ucx-tcp tcp tag_lat $s 100000; done
            ucx ucx-tcp tcp tag_lat 65536 10000
            ucx ucx-tcp tcp tag_lat 1048576 1000
            ucx ucx-tcp tcp ucp_am_bw 1048576 2000
            unset UCX_NET_DEVICES
        fi
        command -v fi_pingpong >/dev/null && { fi_pp "udp;ofi_rxd" rdm 8 10000; fi_pp "udp;ofi_rxd" rdm 1048576 300; }
        [ -n "$MPIPP" ] && mpi_tcp
    } else {
        $FMB pingpong --sizes 8,1024,65536,1048576 --json
        if command -v ucx_perftest >/dev/null; then
            for s in 8 1024; do ucx ucx-posix posix,self tag_lat $s 100000; done
            ucx ucx-posix posix,self tag_lat 65536 10000
            ucx ucx-posix posix,self tag_lat 1048576 1000
            ucx ucx-sm sm,self tag_lat 1048576 1000
        fi
        command -v fi_pingpong >/dev/null && { fi_pp shm rdm 8 10000; fi_pp shm rdm 65536 2000; fi_pp shm rdm 1048576 500; }
        $FMB rate --json
        command -v ucx_perftest >/dev/null && ucx ucx-posix posix,self ucp_am_bw 8 2000000
        $FMB pollcost --json
        $FMB overhead --json
    }; fi 2>>"$OUT/run.log" | sed "s/^{/{\"rep\":$r,/" >> "$OUT/results.jsonl"
    if [ -n "$FLOOR" ]; then
        $FLOOR copy-proc 0 1 2>/dev/null | grep RESULT | sed "s/^/rep $r /" >> "$OUT/floors.txt"
    fi
done
python3 "$ROOT/scripts/summarize-bench.py" "$OUT/results.jsonl" | tee "$OUT/summary.md"
log "raw results in $OUT"
