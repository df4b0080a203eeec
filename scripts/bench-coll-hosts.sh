#!/usr/bin/env bash
# bench-coll-hosts.sh — collectives across hosts: scripts/coll-bench.c
# (built with mpicc.mpich) on 4 network-namespace hosts × 2 ranks, whose
# hosts talk over fm's ethernet device through a bridge, with host-aware
# collectives (FM_COLL_HOSTS=auto, the default) and without (off),
# alternating in every round. Needs root; the namespaces and links are
# removed on exit. Addresses are in 198.18.0.0/15 (set aside for
# benchmarks): nothing of the machine's own network is touched.
#
# With PEERS=1, MPICH (the same binary, under hydra) and Open MPI (the same
# source, over its TCP transport) run across the same namespaces in each
# round, launched through a small ssh stand-in that enters a host's
# namespace under a host name of its own (so that neither takes two hosts
# for one and talks through shared memory).
#
# Usage: sudo scripts/bench-coll-hosts.sh   (ROUNDS=3, PER_HOST=2,
#                                            SIZES=8,1024,65536,1048576,
#                                            PEERS=0, DIVIDE=1: 1/DIVIDE of
#                                            coll-bench's usual calls)
#   FMRUN: the fmrun to use (default target/release/fmrun)
# Prints, per collective and size, the median over the rounds of the mean
# time per call (µs) with and without host-awareness, and their ratio
# (below 1: host-aware is faster), then MPICH's and Open MPI's and fm's
# host-aware time over the better of them; and each rank's bytes sent on
# the ethernet device in the last host-aware and flat runs.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
ROUNDS=${ROUNDS:-3}
PER_HOST=${PER_HOST:-2}
SIZES=${SIZES:-8,1024,65536,1048576}
PEERS=${PEERS:-0}
DIVIDE=${DIVIDE:-1}
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
# The peers' ssh: nsexec [OPTIONS] ADDRESS COMMAND... runs COMMAND in the
# namespace host of ADDRESS (198.18.251.1K: host K) as host nshostK.
cat > "$out/nsexec" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
k=\${1##*.}; k=\${k#1}; shift
exec ip netns exec "${tag}h\$k" unshare --uts sh -c 'hostname "nshost\$0"; exec sh -c "\$*"' "\$k" "\$@"
EOF
chmod +x "$out/nsexec"
peer_hosts=198.18.251.10:$PER_HOST,198.18.251.11:$PER_HOST,198.18.251.12:$PER_HOST,198.18.251.13:$PER_HOST
if [ "$PEERS" = 1 ]; then
    command -v mpicc.openmpi >/dev/null || { echo "PEERS=1 needs openmpi-bin and libopenmpi-dev" >&2; exit 1; }
    mpicc.openmpi -O2 -o "$out/coll-openmpi" scripts/coll-bench.c
fi
peers() { # peers ROUND
    timeout 900 mpiexec.mpich -launcher ssh -launcher-exec "$out/nsexec" -iface "${tag}br" \
        -hosts "$peer_hosts" -n "$n" "$out/coll" "$SIZES" "$DIVIDE" \
        > "$out/mpich.$1" 2>&1 || echo "MPICH, round $1: failed" >&2
    timeout 900 mpirun --allow-run-as-root --oversubscribe -n "$n" --host "$peer_hosts" \
        --mca plm_rsh_agent "$out/nsexec" --mca btl tcp,self,vader \
        --mca btl_tcp_if_include 198.18.251.0/24 --mca oob_tcp_if_include 198.18.251.0/24 \
        "$out/coll-openmpi" "$SIZES" "$DIVIDE" > "$out/openmpi.$1" 2>&1 || echo "Open MPI, round $1: failed" >&2
}
job() { # job MODE ROUND [fmrun options]
    local mode=$1 r=$2
    shift 2
    FM_COLL_HOSTS=$mode timeout 900 "$FMRUN" -n "$n" --hosts "$hosts" --net self,shmem,ethernet,null \
        --rsh "ip netns exec {host}" --grm-listen 198.18.251.1:0 --no-prefix "$@" \
        "$out/coll" "$SIZES" "$DIVIDE" > "$out/$mode.$r" 2>&1 || echo "$mode, round $r: failed" >&2
}
for r in $(seq "$ROUNDS"); do
    job auto "$r"
    job off "$r"
    if [ "$PEERS" = 1 ]; then peers "$r"; fi
done
job auto stats --stats=json
job off stats --stats=json
python3 - "$out" "$ROUNDS" "$n" <<'PY'
import json, math, statistics, sys
out, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def read(path):
    t = {}
    try:
        for line in open(path, errors="replace"):
            f = line.split()
            if len(f) == 6 and f[0] == "coll":
                t[(f[1], int(f[2]))] = float(f[4])
    except FileNotFoundError:
        pass
    return t
modes = ("auto", "off", "mpich", "openmpi")
runs = {m: [read(f"{out}/{m}.{r}") for r in range(1, rounds + 1)] for m in modes}
keys = sorted({k for m in runs.values() for t in m for k in t}, key=lambda k: (k[0], k[1]))
def med(m, k):
    v = [t[k] for t in runs[m] if k in t]
    return statistics.median(v) if v else math.nan
print(f"{n} ranks on 4 namespace hosts, µs per call (median of {rounds} rounds)")
print(f"{'collective':<10} {'bytes':>8} {'host-aware':>11} {'flat':>9} {'ratio':>6} {'MPICH':>9} {'Open MPI':>9} {'fm/best':>8}")
for k in keys:
    ma, mo, mm, mp = (med(m, k) for m in modes)
    peers = [x for x in (mm, mp) if not math.isnan(x)]
    best = min(peers) if peers else math.nan
    print(f"{k[0]:<10} {k[1]:>8} {ma:>11.1f} {mo:>9.1f} {ma / mo:>6.2f} {mm:>9.1f} {mp:>9.1f} {ma / best:>8.2f}")
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
