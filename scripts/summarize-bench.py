#!/usr/bin/env python3
"""Medians of bench-vs-peers.sh results (JSON lines) as Markdown.

Repetitions are grouped by the placement probe taken before each one
(cache-line one-way latency between the two CPUs): the host sometimes places
the two vCPUs far apart, and numbers only compare within one placement.
"""
import json
import statistics
import sys
from collections import defaultdict

NEAR_BELOW_US = 0.1

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
probe = {r["rep"]: r["probe_us"] for r in rows if "probe_us" in r}


def placement(rep):
    p = probe.get(rep)
    if p is None:
        return "unknown placement"
    return "near placement" if p < NEAR_BELOW_US else "far placement"


groups = defaultdict(list)
for r in rows:
    if "probe_us" not in r:
        groups[placement(r.get("rep"))].append(r)

med = lambda v: statistics.median(v) if v else float("nan")
for name in sorted(groups):
    reps = sorted({r["rep"] for r in groups[name]})
    probes = [probe[k] for k in reps if probe.get(k) is not None]
    print(f"### {name}: {len(reps)} repetitions, probe {min(probes):.3f}–{max(probes):.3f} µs\n")
    lat, rate, other = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in groups[name]:
        if "peer" in r:
            if r["test"] == "ucp_am_bw":
                rate[r["peer"] + " (ucp_am_bw)"].append(r["mmsg_s"])
            else:
                lat[(r["peer"], r["size"])].append(r["median_us"])
        elif r.get("bench") == "pingpong":
            lat[("fm-" + r["device"], r["size"])].append(r["median_us"])
        elif r.get("bench") == "rate":
            rate["fm-shmem (fm-bench rate)"].append(r["mmsg_s"])
        elif r.get("bench") == "pollcost":
            other[f"idle poll, {r['layer']} ({r['device']}), ns"].append(r["median_ns"])
        elif r.get("bench") == "overhead" and "composite_minus_device_ns" in r:
            other["composite overhead, one-way, ns"].append(r["composite_minus_device_ns"])
    sizes = sorted({s for (_, s) in lat})
    who = sorted({w for (w, _) in lat}, key=lambda w: (not w.startswith("fm"), w))
    print("| one-way latency, median µs | " + " | ".join(f"{s} B" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for w in who:
        cells = [f"{med(lat[(w, s)]):.3f}" if lat.get((w, s)) else "" for s in sizes]
        print(f"| {w} | " + " | ".join(cells) + " |")
    print("\n| message rate, 8 B | Mmsg/s |\n|---|---|")
    for w, v in sorted(rate.items()):
        print(f"| {w} | {med(v):.2f} |")
    print("\n| cost | median |\n|---|---|")
    for k, v in sorted(other.items()):
        print(f"| {k} | {med(v):.1f} |")
    print()
