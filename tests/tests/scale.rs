//! Many ranks on one host: a 256-rank job starts and ends on 2 CPUs, its
//! shared memory grows with the ranks, not their square, and fmrun starts
//! 1,024 processes within a small open-files limit.

use fm_tests::{fmrun, TempDir};
use std::path::Path;

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// 256 ranks, oversubscribed (they block when idle: `FM_WAIT=auto`), enter
/// three barriers; `--show-table` gives a line of runs per rank (not
/// 65,536 lines), and nothing is left behind.
#[test]
fn a_host_of_256_ranks_starts_and_ends() {
    let dir = TempDir::for_segments("scale-256");
    let o = fmrun(
        TESTPROG,
        &dir,
        &[
            "-n",
            "256",
            "--oversubscribe",
            "--timeout",
            "5m",
            "--show-table",
        ],
        Path::new(TESTPROG),
        &["barrier", "3"],
    )
    .env("FM_PACER", "off")
    .output()
    .expect("fmrun");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("barriers done: 3 rounds of 256 ranks"),
        "{out}\n{err}"
    );
    assert_eq!(out.matches("device table of rank").count(), 256, "{out}");
    assert!(
        out.contains("device table of rank 5: 0-4 shmem, 5 self, 6-255 shmem\n"),
        "{out}"
    );
    // Nothing left behind in the job's segment directory.
    let left = std::fs::read_dir(&dir.0).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "segments left behind");
}

/// What a job of N local ranks allocates, from the geometry every rank
/// computes: the frames within a small /dev/shm's budget up to 16 ranks,
/// and from 64 ranks on under 1 MiB per rank (a fixed pool of frames, and
/// 64-byte slots for each sender's credit window).
#[test]
fn shared_memory_grows_with_the_ranks_not_their_square() {
    use fm_devices::shmem::{ShmemConfig, SEGMENT_BUDGET};
    let bytes = |n: u32| {
        let c = ShmemConfig::new(fm_devices::JobKey(1), 0, (0..n).collect());
        c.geometry().total_bytes()
    };
    for n in [64, 256, 1024] {
        let per_rank = bytes(n) / n as u64;
        assert!(
            per_rank <= 1 << 20,
            "{n} ranks: {} MiB, {per_rank} bytes per rank",
            bytes(n) >> 20
        );
    }
    // Up to 16 ranks the frames stay within the budget of a small /dev/shm.
    for n in 2..=16 {
        assert!(
            bytes(n) <= SEGMENT_BUDGET + (4 << 20),
            "{n} ranks: {}",
            bytes(n)
        );
    }
}

/// fmrun raises its open-files limit to the hard limit: 1,024 ranks of a
/// trivial program start and end under a soft limit of 1,024 descriptors
/// (each rank costs fmrun a few).
#[test]
fn fmrun_starts_1024_ranks_under_a_small_open_files_limit() {
    let dir = TempDir::for_segments("scale-1024");
    let fmrun_bin = fm_tests::workspace_bin(TESTPROG, "fmrun");
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -S -n 1024 && exec \"$0\" -n 1024 --oversubscribe --timeout 5m true")
        .arg(&fmrun_bin)
        .env("FM_SHM_DIR", &dir.0)
        .env_remove("FM_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sh");
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
