#!/usr/bin/env bash
# bench-mpi.sh — the same NetPIPE, built for MPI, on fm's MPI and on the
# MPI libraries it is meant to beat, in one sitting: both ranks on this
# host. fm runs Debian's NPmpich2 (built against MPICH) under fmrun, so
# the binary is the one MPICH runs; Open MPI runs the same NetPIPE source
# built for it (NPopenmpi).
#
# Usage: scripts/bench-mpi.sh            (ROUNDS=5 alternating runs each)
#   FMRUN: the fmrun to use (default target/release/fmrun; its libmpich.so.12
#   is target/release/mpi/, built by cargo build --release -p fm-mpi)
#   FMRUN_OLD: another build's fmrun (e.g. of a git worktree), run in the
#   same rounds as "fm old", for an A/B of fm's MPI against itself
# Needs: netpipe-mpich2, netpipe-openmpi, mpich, openmpi-bin.
# Prints per library and size the median one-way latency (µs) and, at
# 1 MiB, the median bandwidth (Gbit/s), over the rounds; and, for scale,
# fm-bench's FM-level ping-pong (no MPI) at the same sizes in the same rounds.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
FMBENCH=${FMBENCH:-$(dirname "$FMRUN")/fm-bench}
ROUNDS=${ROUNDS:-5}
[ -x /usr/bin/NPmpich2 ] && [ -x /usr/bin/NPopenmpi ] || {
    echo "needs netpipe-mpich2 and netpipe-openmpi" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$ROUNDS"); do
    "$FMBENCH" pingpong --sizes 8,1024,65536,1048576 --csv > "$out/fmlevel.$r" 2>&1
    # -p 0: no perturbation (sizes 8, 1024, 65536, 1048576 are measured as is).
    (cd "$out" && "$OLDPWD/$FMRUN" -n 2 --no-prefix /usr/bin/NPmpich2 -p 0 -u 1048576 -o /dev/null > "fm.$r" 2>&1)
    if [ -n "${FMRUN_OLD:-}" ]; then
        (cd "$out" && "$FMRUN_OLD" -n 2 --no-prefix /usr/bin/NPmpich2 -p 0 -u 1048576 -o /dev/null > "fmold.$r" 2>&1)
    fi
    (cd "$out" && mpiexec.mpich -n 2 /usr/bin/NPmpich2 -p 0 -u 1048576 -o /dev/null > "mpich.$r" 2>&1)
    (cd "$out" && mpirun --allow-run-as-root --oversubscribe -n 2 /usr/bin/NPopenmpi -p 0 -u 1048576 -o /dev/null > "openmpi.$r" 2>&1)
done
python3 - "$out" "$ROUNDS" <<'PY'
import os, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
sizes = [8, 1024, 65536, 1048576]
line = re.compile(r"^\s*\d+:\s+(\d+) bytes\s+\d+ times -->\s+([\d.]+) Mbps in\s+([\d.]+) usec")

def netpipe(path):
    lat, bw = {}, float("nan")
    for l in open(path, errors="replace"):
        m = line.match(l)
        if m and int(m.group(1)) in sizes:
            # The one-way time from the rate (5 digits), not from NetPIPE's
            # usec column (2 decimals: 4% steps at 8 B).
            n, mbps = int(m.group(1)), float(m.group(2))
            lat[n] = n * 8 / mbps if mbps > 0 else float(m.group(3))
            if int(m.group(1)) == 1048576:
                bw = float(m.group(2)) / 1000
    return [lat.get(s, float("nan")) for s in sizes] + [bw]

def fmlevel(path):
    lat = {}
    for l in open(path, errors="replace"):
        f = l.split(",")
        if len(f) > 6 and f[0] == "pingpong" and f[3].isdigit():
            lat[int(f[3])] = float(f[6])
    return [lat.get(s, float("nan")) for s in sizes] + [float("nan")]

libs = {"FM level": fmlevel, "fm": netpipe, "mpich": netpipe, "openmpi": netpipe}
files = {"FM level": "fmlevel", "fm": "fm", "mpich": "mpich", "openmpi": "openmpi"}
if os.path.exists(f"{out}/fmold.1"):
    libs["fm old"], files["fm old"] = netpipe, "fmold"
runs = {lib: [f(f"{out}/{files[lib]}.{r}") for r in range(1, rounds + 1)] for lib, f in libs.items()}
# This host's two vCPUs sit near (shared cache) or far apart, and move
# between the two: FM's own 8 B one-way time says which (about 0.1 µs
# near, 0.3 µs far). Medians are over the near rounds when there are any.
near = [r for r in range(rounds) if runs["FM level"][r][0] < 0.2] or list(range(rounds))
head = "library   8 B µs   1 KiB µs  64 KiB µs  1 MiB µs  1 MiB Gbit/s"
print("per round (FM level's 8 B says the placement):")
for r in range(rounds):
    print(f"  round {r + 1}: " + "; ".join(f"{lib} " + " ".join(f"{v:.3f}" for v in runs[lib][r][:4]) for lib in libs))
print(f"medians over rounds {[r + 1 for r in near]}:")
print(head)
for lib in libs:
    med = [statistics.median(runs[lib][r][i] for r in near) for i in range(5)]
    print(f"{lib:8} {med[0]:8.3f} {med[1]:9.3f} {med[2]:10.2f} {med[3]:9.1f} {med[4]:12.1f}")
fm = [statistics.median(runs[lib][r][0] for r in near) for lib in ("fm", "FM level")]
print(f"fm's MPI 8 B over FM level's 8 B: {fm[0] / fm[1]:.2f}x")
PY
