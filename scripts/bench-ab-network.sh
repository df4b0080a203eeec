#!/usr/bin/env bash
# bench-ab-network.sh — A/B of the network devices' hot paths across two
# builds, alternating build by build in every round: ethernet 8 B and
# 64 KiB one-way latency and 1 MiB streaming (loopback), and nic 8 B
# one-way latency over a veth pair between two network namespaces (root).
#
# Usage: scripts/bench-ab-network.sh OLD_RELEASE_DIR NEW_RELEASE_DIR [OUT_DIR]
#   each RELEASE_DIR holds that build's fm-bench and fmrun
#   (e.g. /tmp/old/target/release target/release);  ROUNDS=7 (default)
#   OLD_ENV / NEW_ENV: settings for that side's runs, e.g. the MAC's cost
#   in one build: OLD_ENV=FM_ETH_AUTH=none scripts/bench-ab-network.sh \
#   target/release target/release
# Each round starts with the placement probe (../shared/peers' cache-line
# one-way time) so rounds can be compared by placement. The namespaces
# fmab-a and fmab-b (198.18.252.0/24) are removed on exit, also on failure.
set -u
cd "$(dirname "$0")/.."
OLD=${1:?old release dir}; NEW=${2:?new release dir}
OUT=${3:-target/bench-ab-network/$(date +%Y%m%d-%H%M%S)}
ROUNDS=${ROUNDS:-7}
mkdir -p "$OUT"
BIN=$(mktemp -d)
FLOOR=""
[ -f ../shared/peers/shm_baseline.c ] &&
    cc -O2 -pthread -o "$BIN/shm_baseline" ../shared/peers/shm_baseline.c && FLOOR=$BIN/shm_baseline
A=fmab-a B=fmab-b
NS=0
if [ "$(id -u)" = 0 ]; then
    drop_netns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
    trap 'drop_netns; rm -rf "$BIN"' EXIT
    drop_netns
    ip netns add $A && ip netns add $B &&
        ip link add fmab0 netns $A type veth peer name fmab0 netns $B && NS=1
    for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set fmab0 up; done
    ip -n $A addr add 198.18.252.1/24 dev fmab0
    ip -n $B addr add 198.18.252.2/24 dev fmab0
else
    trap 'rm -rf "$BIN"' EXIT
    echo "bench-ab-network.sh: not root, nic over veth SKIPPED" >&2
fi

tag() { sed -n "s/^\(\[0\] \)\?{/{\"build\":\"$1\",\"round\":$2,/p"; }
for r in $(seq "$ROUNDS"); do
    p=$([ -n "$FLOOR" ] && $FLOOR line-proc 0 1 2>/dev/null | tail -1 | grep -o 'oneway_p50_us=[0-9.]*' | cut -d= -f2)
    echo "{\"round\":$r,\"probe_us\":${p:-null}}" >> "$OUT/results.jsonl"
    echo "[$(date +%H:%M:%S)] round $r, probe ${p:-n/a} us" >&2
    for build in old new; do
        dir=$([ $build = old ] && echo "$OLD" || echo "$NEW")
        vars=$([ $build = old ] && echo "${OLD_ENV:-}" || echo "${NEW_ENV:-}")
        {
            env $vars "$dir/fm-bench" pingpong --device ethernet --sizes 8,65536,1048576 --json 2>/dev/null
            env $vars "$dir/fm-bench" bw --device ethernet --sizes 1048576 --json 2>/dev/null
            [ $NS = 1 ] && ip netns exec $A env $vars "$dir/fmrun" -n 2 --hosts $A:1,$B:1 \
                --rsh 'ip netns exec {host}' --grm-listen 198.18.252.1:0 \
                --net self,shmem,nic,null --timeout 120 \
                "$dir/fm-bench" pingpong --device nic --sizes 8 --json 2>/dev/null
        } | tag $build "$r" >> "$OUT/results.jsonl"
    done
done

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if r.get("bench") != "meta"]
probes = {r["round"]: r["probe_us"] for r in rows if "probe_us" in r}
def vals(build, bench, dev, size, key):
    return [r[key] for r in rows if r.get("build") == build and r["bench"] == bench
            and r["device"] == dev and r["size"] == size and key in r]
print("| metric | old median | new median | new / old | rounds |\n|---|---|---|---|---|")
for bench, dev, size, key, what in [
        ("pingpong", "ethernet", 8, "median_us", "ethernet 8 B one-way µs"),
        ("pingpong", "ethernet", 65536, "median_us", "ethernet 64 KiB one-way µs"),
        ("pingpong", "ethernet", 1048576, "median_us", "ethernet 1 MiB one-way µs"),
        ("bw", "ethernet", 1048576, "mb_s", "ethernet 1 MiB streaming MB/s"),
        ("pingpong", "nic", 8, "median_us", "nic 8 B one-way µs (veth)")]:
    o, n = vals("old", bench, dev, size, key), vals("new", bench, dev, size, key)
    if o and n:
        mo, mn = statistics.median(o), statistics.median(n)
        print(f"| {what} | {mo:.2f} | {mn:.2f} | {mn / mo:.3f} | {len(o)} |")
print("\nplacement probe per round (µs):", ", ".join(f"{k}: {v}" for k, v in sorted(probes.items())))
EOF
echo "raw results in $OUT" >&2
