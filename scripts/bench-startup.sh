#!/usr/bin/env bash
# bench-startup.sh — how long a job of N ranks on this host takes to start
# (first line of output) and to finish, and the shared memory it holds:
# the segment's size and the sum of the ranks' proportional set sizes.
#
# Usage: scripts/bench-startup.sh [N...]      (default 2 16 64 256)
#   FMRUN, RING: the fmrun and ring example to run (default target/release)
#   ROUNDS (default 5): runs per N; medians are printed
# Prints one line per N: n, first-output s, wall s, segment MiB, ranks' PSS MiB.
set -eu
cd "$(dirname "$0")/.."
FMRUN=${FMRUN:-target/release/fmrun}
RING=${RING:-target/release/examples/ring}
ROUNDS=${ROUNDS:-5}
[ $# -gt 0 ] || set -- 2 16 64 256
python3 - "$FMRUN" "$RING" "$ROUNDS" "$@" <<'PY'
import glob, os, statistics, subprocess, sys, time
fmrun, ring, rounds, ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(n) for n in sys.argv[4:]]

def pss_and_segment(pids):
    """Sum of the ranks' PSS, and the size of the fm segment they map (MiB)."""
    pss, seg = 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for l in f:
                    if l.startswith("Pss:"):
                        pss += int(l.split()[1])
            with open(f"/proc/{pid}/maps") as f:
                for l in f:
                    if "/dev/shm/fm-" in l:
                        a, b = l.split()[0].split("-")
                        seg = max(seg, int(b, 16) - int(a, 16))
        except OSError:
            pass
    return pss / 1024, seg / 2**20

print("n first_output_s wall_s segment_mib ranks_pss_mib")
comm = os.path.basename(ring)[:15]
for n in ns:
    firsts, walls, mems = [], [], []
    for _ in range(rounds):
        env = dict(os.environ, FM_PACER="off")
        t0 = time.monotonic()
        p = subprocess.Popen([fmrun, "-n", str(n), "--oversubscribe", ring], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env)
        os.set_blocking(p.stdout.fileno(), False)
        first, peak = None, (0.0, 0.0)
        # Sample the ranks' memory every 20 ms while the job runs; keep the
        # largest sum.
        while p.poll() is None:
            chunk = p.stdout.read()
            if chunk and first is None:
                first = time.monotonic() - t0
            pids = subprocess.run(["pgrep", "-x", comm], capture_output=True, text=True).stdout.split()
            m = pss_and_segment(int(x) for x in pids)
            peak = max(peak, m)
            time.sleep(0.02)
        walls.append(time.monotonic() - t0)
        firsts.append(first if first is not None else time.monotonic() - t0)
        mems.append(peak)
    pss = statistics.median(m[0] for m in mems)
    seg = statistics.median(m[1] for m in mems)
    print(f"{n} {statistics.median(firsts):.2f} {statistics.median(walls):.2f} {seg:.1f} {pss:.1f}", flush=True)
PY
