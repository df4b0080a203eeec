#!/usr/bin/env bash
# Blocking waits, measured (docs/PERFORMANCE.md, "Blocking waits"):
#  1. 8 B and 64 KiB shmem ping-pong with 2 ranks, then with 8 ranks on
#     this machine's CPUs (6 idle in a barrier), fm with FM_WAIT=auto
#     (the default: blocks when oversubscribed) and =spin (polls for ever),
#     and Open MPI's and MPICH's ping-pong in the same situation;
#  2. wake-up latency: 8 B ping-pong with both ranks sleeping at once
#     (FM_WAIT=block FM_WAIT_SPIN_US=0) next to spinning, shmem and ethernet;
#  3. dedicated CPUs: FM_WAIT=auto against =spin, alternated.
#  4. idle CPU of 8 ranks (scripts/idle-cpu.sh).
#   usage: scripts/bench-wait.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/bench-wait}
mkdir -p "$out"
bin=target/release
cargo build -q --release -p fm-bench -p fm-launcher
fmrun=$bin/fmrun
bench=$bin/fm-bench
row() {
    grep '"pingpong"' | sed -E 's/.*"median_us":([0-9.]+).*"size":([0-9]+).*/\2 B: \1 us/' | tr '\n' ' '
    echo
}

echo "== 1. oversubscribed ping-pong (median one-way)"
echo -n "fm 2 ranks            : "; $fmrun -n 2 $bench pingpong --device shmem --sizes 8,65536 --json | row
echo -n "fm 8 ranks, auto      : "; $fmrun -n 8 --oversubscribe $bench pingpong --device shmem --sizes 8,65536 --json | row
echo -n "fm 8 ranks, spin      : "; FM_WAIT=spin $fmrun -n 8 --oversubscribe $bench pingpong --device shmem --sizes 8,65536 --iters 20000 --json | row
for mpi in openmpi mpich; do
    cc=mpicc.$mpi; run=mpirun.$mpi
    command -v $cc >/dev/null || { echo "$mpi: not installed"; continue; }
    $cc -O2 -o "$out/pp-$mpi" scripts/mpi-oversub-pingpong.c || continue
    extra=(); [ $mpi = openmpi ] && extra=(--allow-run-as-root --oversubscribe)
    for n in 2 8; do
        echo -n "$mpi $n ranks       : "
        timeout 600 $run "${extra[@]}" -np $n "$out/pp-$mpi" 2000 2>/dev/null | awk '{printf "%s B: %s us ", $1, $3} END {print ""}'
    done
done

echo "== 2. wake-up latency (standalone pair, median one-way)"
for dev in shmem ethernet; do
    echo -n "$dev spin             : "; FM_WAIT=spin $bench pingpong --device $dev --sizes 8 --iters 20000 --json | row
    echo -n "$dev block, no busy   : "; FM_WAIT=block FM_WAIT_SPIN_US=0 $bench pingpong --device $dev --sizes 8 --iters 20000 --json | row
done

echo "== 3. dedicated CPUs: auto against spin (alternated)"
for i in 1 2 3; do
    for w in auto spin; do
        echo -n "$w: "; FM_WAIT=$w $bench pingpong --device shmem --sizes 8,1024 --json | row
    done
done

echo "== 4. idle CPU, 8 ranks"
for w in spin block auto; do echo -n "FM_WAIT=$w: "; FM_WAIT=$w scripts/idle-cpu.sh 8 5; done
