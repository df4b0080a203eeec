#!/usr/bin/env bash
# bench-nic.sh — nic vs ethernet over the same veth pair between two network
# namespaces, interleaved in one run (root). Prints medians per device.
#
# Usage: scripts/bench-nic.sh [OUT_DIR]     REPS=3 (default)
# The namespaces fmbn-a and fmbn-b and their veth pair (198.18.251.0/24)
# are removed on exit, also on failure.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-target/bench-nic/$(date +%Y%m%d-%H%M%S)}
REPS=${REPS:-3}
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] || { echo "bench-nic.sh: needs root (namespaces, CAP_NET_RAW)" >&2; exit 1; }
cargo build --release -q -p fm-bench -p fm-launcher || exit 1
FMB=$ROOT/target/release/fm-bench
FMRUN=$ROOT/target/release/fmrun
A=fmbn-a B=fmbn-b
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
trap cleanup EXIT
cleanup
ip netns add $A && ip netns add $B || exit 1
ip link add fmbn0 netns $A type veth peer name fmbn0 netns $B || exit 1
for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set fmbn0 up; done
ip -n $A addr add 198.18.251.1/24 dev fmbn0
ip -n $B addr add 198.18.251.2/24 dev fmbn0
{
    echo "date: $(date -u +%FT%TZ)"; echo "kernel: $(uname -r)"; echo "nproc: $(nproc)"
    echo "link: veth, mtu $(ip netns exec $A cat /sys/class/net/fmbn0/mtu)"
    echo "fm: $(git rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/machine.txt"

# fm-bench on one rank per namespace; rank 0's JSON lines, tagged.
bench() { # device args…
    local dev=$1; shift
    ip netns exec $A "$FMRUN" -n 2 --hosts $A:1,$B:1 --rsh 'ip netns exec {host}' \
        --grm-listen 198.18.251.1:0 --net "self,shmem,$dev,null" --timeout 300 \
        "$FMB" "$@" --device "$dev" --json 2>>"$OUT/run.log" |
        sed -n 's/^\[0\] {/{/p'
}

for r in $(seq "$REPS"); do
    echo "[$(date +%H:%M:%S)] rep $r" >&2
    for dev in nic ethernet; do
        bench $dev pingpong --sizes 8,1024,65536,1048576
        bench $dev bw --sizes 65536,1048576
    done | sed "s/^{/{\"rep\":$r,/" >> "$OUT/results.jsonl"
done
# The system call tracepoint's ID, for the idle-poll count inside the namespace.
export FM_BENCH_SYS_ENTER_ID=$(cat /sys/kernel/tracing/events/raw_syscalls/sys_enter/id 2>/dev/null)
bench nic pollcost --iters 2100000 | sed 's/^{/{"rep":0,/' >> "$OUT/results.jsonl"

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if r.get("bench") != "meta"]
def med(bench, dev, size, key):
    v = [r[key] for r in rows if r["bench"] == bench and r["device"] == dev and r["size"] == size and key in r]
    return statistics.median(v) if v else None
print("| over one veth pair | nic | ethernet | nic / ethernet |\n|---|---|---|---|")
for size in (8, 1024, 65536, 1048576):
    n, e = med("pingpong", "nic", size, "median_us"), med("pingpong", "ethernet", size, "median_us")
    if n and e:
        print(f"| one-way latency {size} B, µs | {n:.2f} | {e:.2f} | {n / e:.2f} |")
for size in (65536, 1048576):
    n, e = med("bw", "nic", size, "mb_s"), med("bw", "ethernet", size, "mb_s")
    if n and e:
        print(f"| bandwidth {size} B, MB/s | {n:.0f} | {e:.0f} | {n / e:.2f} |")
for r in rows:
    if r["bench"] == "pollcost" and r["device"] == "nic" and r["layer"] == "device":
        print(f"\nidle nic poll: {r['median_ns']:.2f} ns median over {r['iters']} polls, "
              f"{r.get('syscalls', 'n/a')} system calls")
EOF
echo "raw results in $OUT" >&2
