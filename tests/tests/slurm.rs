//! fmrun inside a real Slurm allocation (root only, Slurm installed): it
//! starts the ranks with srun, and they take rank, size and host from
//! Slurm's environment.

use fm_tests::slurm::Slurm;
use fm_tests::{workspace_bin, TempDir};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

#[test]
fn fmrun_in_a_slurm_allocation_starts_ranks_through_srun() {
    let test = "fmrun_in_a_slurm_allocation_starts_ranks_through_srun";
    let dir = TempDir::for_segments("slurm");
    let Some(slurm) = Slurm::start(test, &dir.0) else {
        return;
    };
    let fmrun = workspace_bin(TESTPROG, "fmrun");
    let run = |n: &str, args: &[&str]| {
        let o = slurm
            .command("salloc")
            .args(["-n", n, "--time=5", "-J", "fm-test"])
            .arg(&fmrun)
            .args(["--show-table", "--timeout", "120", TESTPROG])
            .args(args)
            .env("FM_SHM_DIR", &dir.0)
            .env("FM_PACER", "off")
            .env_remove("FM_LOG")
            .output()
            .expect("run salloc");
        (
            o.status,
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // No -n: the allocation's four tasks.
    let (status, out, err) = run("4", &["alltoall", "2000", "65536", "5"]);
    assert!(status.success(), "{status:?}\n{out}\n{err}");
    for r in 0..4 {
        // srun's labels became fmrun's rank prefixes; the rank is Slurm's.
        assert!(
            err.contains(&format!("[{r}] rank {r}: ok, received")),
            "rank {r}\n{out}\n{err}"
        );
    }
    // One node: every other rank through shared memory.
    assert!(out.contains("destination device table of rank 3"), "{out}");
    assert_eq!(out.matches("  shmem").count(), 4 * 3, "{out}");
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());

    // A failing task fails the job, and srun's account of it is shown.
    let (status, out, err) = run("2", &["exit", "1", "7"]);
    assert!(!status.success(), "{out}\n{err}");
    assert!(
        err.contains("task 1: Exited with exit code 7"),
        "{out}\n{err}"
    );
    assert!(err.contains("stopping the job"), "{out}\n{err}");
}
