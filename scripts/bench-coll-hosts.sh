#!/usr/bin/env bash
# bench-coll-hosts.sh — collectives across hosts: scripts/coll-bench.c
# (built with mpicc.mpich) on 4 network-namespace hosts × 2 ranks, whose
# hosts talk over fm's ethernet device through a bridge, with host-aware
# collectives (FM_COLL_HOSTS=auto, the default) and without (off),
# alternating in every round. Needs root; the namespaces and links are
# removed on exit. Addresses are in 198.18.0.0/15 (set aside for
# benchmarks): nothing of the machine's own network is touched.
#
# Usage: sudo scripts/bench-coll-hosts.sh   (ROUNDS=3, PER_HOST=2,
#                                            SIZES=8,1024,65536,1048576)
#   FMRUN: the fmrun to use (default target/release/fmrun)
# Prints, per collective and size, the median over the rounds of the mean
# time per call (µs) with and without host-awareness, and their ratio
# (below 1: host-aware is faster); and each rank's bytes sent on the
# ethernet device in the last host-aware and flat runs.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
ROUNDS=${ROUNDS:-3}
PER_HOST=${PER_HOST:-2}
SIZES=${SIZES:-8,1024,65536,1048576}
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
command -v mpicc.mpich >/dev/null || { echo "needs mpich and libmpich-dev" >&2; exit 1; }
tag=fmcb$$
out=$(mktemp -d)
cleanup() {
    for k in 0 1 2 3; do
        ip netns del "${tag}h$k" 2>/dev/null || true
        ip link del "${tag}v$k" 2>/dev/null || true
    done
    ip link del "${tag}br" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
ip link add "${tag}br" type bridge
ip addr add 198.18.251.1/24 dev "${tag}br"
ip link set "${tag}br" up
hosts=""
for k in 0 1 2 3; do
    ip netns add "${tag}h$k"
    ip link add "${tag}v$k" type veth peer name fm0 netns "${tag}h$k"
    ip link set "${tag}v$k" master "${tag}br" up
    ip -n "${tag}h$k" addr add "198.18.251.1$k/24" dev fm0
    ip -n "${tag}h$k" link set fm0 up
    ip -n "${tag}h$k" link set lo up
    hosts="$hosts${hosts:+,}${tag}h$k:$PER_HOST"
done
mpicc.mpich -O2 -o "$out/coll" scripts/coll-bench.c
n=$((4 * PER_HOST))
job() { # job MODE ROUND [fmrun options]
    local mode=$1 r=$2
    shift 2
    FM_COLL_HOSTS=$mode timeout 900 "$FMRUN" -n "$n" --hosts "$hosts" --net self,shmem,ethernet,null \
        --rsh "ip netns exec {host}" --grm-listen 198.18.251.1:0 --no-prefix "$@" \
        "$out/coll" "$SIZES" > "$out/$mode.$r" 2>&1 || echo "$mode, round $r: failed" >&2
}
for r in $(seq "$ROUNDS"); do
    job auto "$r"
    job off "$r"
done
job auto stats --stats=json
job off stats --stats=json
python3 - "$out" "$ROUNDS" "$n" <<'PY'
import json, statistics, sys
out, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def read(path):
    t = {}
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) == 6 and f[0] == "coll":
            t[(f[1], int(f[2]))] = float(f[4])
    return t
runs = {m: [read(f"{out}/{m}.{r}") for r in range(1, rounds + 1)] for m in ("auto", "off")}
keys = sorted({k for m in runs.values() for t in m for k in t}, key=lambda k: (k[0], k[1]))
print(f"{n} ranks on 4 namespace hosts, µs per call (median of {rounds} rounds)")
print(f"{'collective':<10} {'bytes':>8} {'host-aware':>11} {'flat':>9} {'ratio':>6}")
for k in keys:
    a = [t[k] for t in runs["auto"] if k in t]
    o = [t[k] for t in runs["off"] if k in t]
    if a and o:
        ma, mo = statistics.median(a), statistics.median(o)
        print(f"{k[0]:<10} {k[1]:>8} {ma:>11.1f} {mo:>9.1f} {ma / mo:>6.2f}")
for m in ("auto", "off"):
    sent = {}
    for line in open(f"{out}/{m}.stats", errors="replace"):
        try:
            v = json.loads(line)
        except ValueError:
            continue
        sent[v["rank"]] = v["devices"]["ethernet"]["bytes_sent"]
    print(f"ethernet bytes sent by rank, FM_COLL_HOSTS={m}:", [sent.get(i) for i in range(int(n))])
PY
