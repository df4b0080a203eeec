#!/usr/bin/env bash
# bench-pacer.sh — streaming bandwidth with the pacer's choice vs the fixed
# default vs the worst candidate, per paced knob, interleaved in one run:
#   shmem.frame          fm-bench bw between two processes (shared memory)
#   ethernet.datagram@lo fm-bench bw --device ethernet (UDP on loopback)
# and, as root, the nic's payload per frame (FM_NIC_MTU) over a veth pair
# between two namespaces, which the pacer does not tune: the largest frame
# is always the fastest (docs/PERFORMANCE.md).
#
# Usage: scripts/bench-pacer.sh [OUT_DIR]     REPS=9 ITERS=8000 NIC=1 (defaults)
# Short runs, many repetitions, a different order each: this host's
# bandwidth flips between modes 3-5x apart within minutes, so compare the
# variants by the median of their ratios within a repetition.
# The curve is measured first (FM_PACER=force fm-info pacer) with a cache
# of its own under OUT_DIR; the namespaces fmbp-a/fmbp-b go on exit.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-target/bench-pacer/$(date +%Y%m%d-%H%M%S)}
REPS=${REPS:-9}
ITERS=${ITERS:-8000}
NIC=${NIC:-1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cargo build --release -q -p fm-bench -p fm-launcher -p fm-info || exit 1
FMB=$ROOT/target/release/fm-bench
FMRUN=$ROOT/target/release/fmrun
export XDG_CACHE_HOME=$OUT/cache
unset FM_PACER FM_CONFIG
{
    echo "date: $(date -u +%FT%TZ)"; echo "kernel: $(uname -r)"; echo "nproc: $(nproc)"
    echo "fm: $(git rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/machine.txt"

FM_PACER=force "$ROOT/target/release/fm-info" pacer --svg "$OUT/pacer.svg" | tee "$OUT/pacer.txt"

# chosen, default and worst size of KNOB from fm-info's table.
sizes_of() { # knob
    python3 - "$OUT/pacer.txt" "$1" <<'EOF'
import re, sys
text, knob = open(sys.argv[1]).read(), sys.argv[2]
block = text.split(f"\n{knob}: ")[1].split("\n\n")[0]
chosen = re.search(r"chosen (\d+) bytes", block).group(1)
default = re.search(r"default (\d+)\)", block).group(1)
rows = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"^\s+(\d+)\s+(\d+)\s", block, re.M)]
print(chosen, default, min(rows, key=lambda r: r[1])[0])
EOF
}
read -r SHM_CHOSEN SHM_DEFAULT SHM_WORST < <(sizes_of shmem.frame)
read -r ETH_CHOSEN ETH_DEFAULT ETH_WORST < <(sizes_of ethernet.datagram@lo)
echo "shmem.frame: chosen $SHM_CHOSEN default $SHM_DEFAULT worst $SHM_WORST" | tee -a "$OUT/machine.txt"
echo "ethernet.datagram@lo: chosen $ETH_CHOSEN default $ETH_DEFAULT worst $ETH_WORST" | tee -a "$OUT/machine.txt"

tag() { sed -n "s/^{/{\"knob\":\"$1\",\"variant\":\"$2\",\"rep\":$3,/p"; }
for r in $(seq "$REPS"); do
    echo "[$(date +%H:%M:%S)] rep $r" >&2
    # A different order each repetition: drift favours no variant.
    case $((r % 3)) in
        1) order="paced default worst" ;;
        2) order="default worst paced" ;;
        0) order="worst paced default" ;;
    esac
    for v in $order; do
        case $v in
            paced) s=$SHM_CHOSEN e=$ETH_CHOSEN ;;
            default) s=off e=off ;;
            worst) s=$SHM_WORST e=$ETH_WORST ;;
        esac
        FM_PACER=$s "$FMB" bw --sizes 65536,1048576 --iters "$ITERS" --json 2>>"$OUT/run.log" | tag shmem.frame $v $r
        FM_PACER=$e "$FMB" bw --device ethernet --sizes 65536,1048576 --iters "$ITERS" --json 2>>"$OUT/run.log" | tag ethernet.datagram $v $r
    done >> "$OUT/results.jsonl"
done

if [ "$NIC" = 1 ] && [ "$(id -u)" = 0 ]; then
    A=fmbp-a B=fmbp-b
    cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
    trap cleanup EXIT
    cleanup
    ip netns add $A && ip netns add $B &&
        ip link add fmbp0 netns $A type veth peer name fmbp0 netns $B || exit 1
    for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set fmbp0 up; done
    ip -n $A addr add 198.18.252.1/24 dev fmbp0
    ip -n $B addr add 198.18.252.2/24 dev fmbp0
    nic() { # knob variant rep VAR=value
        env "$4" ip netns exec $A "$FMRUN" -n 2 --hosts $A:1,$B:1 --rsh "ip netns exec {host}" \
            --grm-listen 198.18.252.1:0 --net self,shmem,nic,null --timeout 300 \
            "$FMB" bw --device nic --sizes 65536,1048576 --iters "$ITERS" --json 2>>"$OUT/run.log" |
            sed -n 's/^\[0\] {/{/p' | tag "$1" "$2" "$3"
    }
    for r in $(seq "$REPS"); do
        echo "[$(date +%H:%M:%S)] nic rep $r" >&2
        for m in 1500 1024 512; do nic nic.frame "$m" "$r" FM_NIC_MTU=$m; done
    done >> "$OUT/results.jsonl"
elif [ "$NIC" = 1 ]; then
    echo "bench-pacer.sh: not root: the nic part (namespaces, CAP_NET_RAW) is skipped" >&2
fi

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if r.get("bench") != "meta"]
def med(knob, variant, size):
    v = [r["mb_s"] for r in rows if r["knob"] == knob and r["variant"] == variant and r["size"] == size]
    return statistics.median(v) if v else None
def ratio(knob, a, b, size):
    # Median over repetitions of a/b within one repetition.
    by = {}
    for r in rows:
        if r["knob"] == knob and r["size"] == size:
            by.setdefault(r["rep"], {})[r["variant"]] = r["mb_s"]
    v = [x[a] / x[b] for x in by.values() if a in x and b in x]
    return (statistics.median(v), min(v), max(v)) if v else None
for knob in ("shmem.frame", "ethernet.datagram"):
    sizes = sorted({r["size"] for r in rows if r["knob"] == knob})
    print(f"\n{knob}: streaming MB/s, median of the repetitions; ratios: median (min–max) within a repetition\n")
    print("| message | paced | default | worst | paced / default | paced / worst |\n|---|---|---|---|---|---|")
    for s in sizes:
        p, d, w = med(knob, "paced", s), med(knob, "default", s), med(knob, "worst", s)
        pd, pw = ratio(knob, "paced", "default", s), ratio(knob, "paced", "worst", s)
        if p and d and w:
            print(f"| {s} B | {p:.0f} | {d:.0f} | {w:.0f} | {pd[0]:.2f} ({pd[1]:.2f}–{pd[2]:.2f}) | {pw[0]:.2f} ({pw[1]:.2f}–{pw[2]:.2f}) |")
for knob in ("nic.frame", "nic.tx_burst"):  # nic.tx_burst: data of earlier runs
    variants = sorted({r["variant"] for r in rows if r["knob"] == knob}, key=int, reverse=True)
    if not variants:
        continue
    sizes = sorted({r["size"] for r in rows if r["knob"] == knob})
    print(f"\n{knob} (FM_NIC_{'MTU' if knob == 'nic.frame' else 'TX_BURST'}): streaming MB/s over veth, median\n")
    print("| message | " + " | ".join(variants) + " |\n|---|" + "---|" * len(variants))
    for s in sizes:
        print(f"| {s} B | " + " | ".join(f"{med(knob, v, s) or 0:.0f}" for v in variants) + " |")
EOF
echo "raw results in $OUT" >&2
