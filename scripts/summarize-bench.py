#!/usr/bin/env python3
"""Medians across repetitions of bench-vs-peers.sh results (JSON lines) as Markdown."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
probes = [r["probe_us"] for r in rows if "probe_us" in r and r["probe_us"] is not None]
lat = defaultdict(list)   # (who, size) -> [µs]
rate = defaultdict(list)  # who -> [Mmsg/s]
other = defaultdict(list)
for r in rows:
    if "peer" in r:
        if r["test"] == "ucp_am_bw":
            rate[r["peer"] + " am_bw"].append(r["mmsg_s"])
        else:
            lat[(r["peer"], r["size"])].append(r["median_us"])
    elif r.get("bench") == "pingpong":
        lat[("fm-" + r["device"], r["size"])].append(r["median_us"])
    elif r.get("bench") == "rate":
        rate["fm-shmem"].append(r["mmsg_s"])
    elif r.get("bench") == "pollcost":
        other[f"idle poll, {r['layer']} ({r['device']}) ns"].append(r["median_ns"])
    elif r.get("bench") == "overhead" and "composite_minus_device_ns" in r:
        other["composite overhead, one-way ns"].append(r["composite_minus_device_ns"])

med = lambda v: statistics.median(v) if v else float("nan")
print(f"placement probe (cache-line one-way, µs) per repetition: {probes}\n")
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
