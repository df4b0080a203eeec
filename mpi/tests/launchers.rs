//! MPICH-built programs on fm's libmpich.so.12 under the launchers
//! clusters already run, with no fmrun and no GRM: MPICH's own `mpiexec`
//! (hydra, PMI-1), Slurm's `srun --mpi=pmi2` and `srun --mpi=pmix` (root
//! only, a real slurmctld and slurmd), and Open MPI's `mpirun` (PMIx). fm's library is first on
//! `LD_LIBRARY_PATH`, as a user would put it; each rank's fm counters
//! (`FM_STATS=json`) prove the messages went through fm's shared memory,
//! not MPICH's. A rank killed, or one calling `MPI_Abort`, ends the job
//! with the launcher's own report; no segment is left behind.

mod common;

use common::*;
use fm_tests::slurm::Slurm;
use fm_tests::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MPIEXEC: &str = "/usr/bin/mpiexec.mpich";

/// The folder of this build's libmpich.so.12 (`mpi/` in the profile).
fn fm_mpi_dir() -> PathBuf {
    Path::new(&own_bin()).with_file_name("mpi")
}

/// What every rank needs from the environment under a foreign launcher:
/// fm's library first, the job's segments in `dir`, the counters printed.
fn fm_env(c: &mut Command, dir: &TempDir) {
    c.env("LD_LIBRARY_PATH", fm_mpi_dir())
        .env("FM_SHM_DIR", &dir.0)
        .env("FM_STATS", "json")
        .env("FM_PACER", "off")
        .env_remove("FM_LOG")
        .env_remove("FM_GRM")
        .env_remove("FM_BOOTSTRAP");
}

/// `mpiexec.mpich -n N PROGRAM ARGS` under a limit, or `None` (SKIPPED).
fn under_hydra(dir: &TempDir, n: usize, program: &[&Path], args: &[&str]) -> Option<Output> {
    if !Path::new(MPIEXEC).exists() {
        eprintln!("SKIPPED: no mpiexec.mpich (apt-get install mpich)");
        return None;
    }
    let mut c = Command::new("timeout");
    c.args(["120", MPIEXEC, "-n", &n.to_string()]);
    c.args(program).args(args);
    fm_env(&mut c, dir);
    Some(c.output().expect("mpiexec.mpich"))
}

/// `srun --mpi=MPI -n N PROGRAM ARGS` in `slurm`.
fn under_srun(
    slurm: &Slurm,
    mpi: &str,
    dir: &TempDir,
    n: usize,
    program: &[&Path],
    args: &[&str],
) -> Output {
    let mut c = slurm.command("timeout");
    let mpi = format!("--mpi={mpi}");
    c.args(["120", "srun", &mpi, "-n", &n.to_string(), "--time=5"]);
    c.args(program).args(args);
    fm_env(&mut c, dir);
    c.output().expect("srun")
}

/// The value of counter `name` of `device` in each `fm-stats:` line, by
/// rank.
fn device_counter(t: &str, device: &str, name: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for line in t.lines().filter_map(|l| l.strip_prefix("fm-stats: ")) {
        let rank = line
            .strip_prefix("{\"rank\":")
            .and_then(|r| r.split(',').next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no rank in {line}"));
        let dev = line
            .split(&format!("\"{device}\":{{"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {device} in {line}"));
        let v = dev
            .split(&format!("\"{name}\":"))
            .nth(1)
            .and_then(|v| v.split([',', '}']).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} of {device} in {line}"));
        out.push((rank, v));
    }
    out.sort();
    out
}

/// The run passed (`passed` printed), and every one of the `n` ranks
/// sent packets through fm's `device`.
fn passed_over_fm(o: &Output, n: usize, passed: &str, device: &str) {
    let t = text(o);
    assert!(o.status.success() && t.contains(passed), "{t}");
    let sent = device_counter(&t, device, "packets_sent");
    assert_eq!(sent.len(), n, "one fm-stats line per rank:\n{t}");
    for (i, (rank, packets)) in sent.iter().enumerate() {
        assert_eq!(*rank, i as u64, "{t}");
        assert!(
            *packets > 0,
            "rank {rank} sent nothing through fm's {device}:\n{t}"
        );
    }
}

/// Two virtual hosts: each rank names its host by its rank's parity
/// before fm starts, so half the pairs go over fm's ethernet device with
/// endpoints exchanged through the launcher.
fn two_hosts_wrapper(dir: &TempDir) -> PathBuf {
    let w = dir.0.join("two-hosts.sh");
    std::fs::write(
        &w,
        "#!/bin/sh\nr=${PMI_RANK:-$SLURM_PROCID}\nexport FM_HOST=virtual$((r % 2))\nexec \"$@\"\n",
    )
    .expect("write the wrapper");
    let mut c = Command::new("chmod");
    fm_tests::succeed(c.arg("+x").arg(&w));
    w
}

/// MPICH's mpiexec starts MPICH-built programs on fm: point-to-point
/// and collectives on 4 ranks over fm's shmem, then across two virtual
/// hosts over fm's ethernet; a killed rank and `MPI_Abort` end the job
/// with hydra's report and the abort's code.
#[test]
fn mpiexec_mpich_runs_mpich_built_programs_over_fm() {
    let dir = TempDir::for_segments("mpi-hydra");
    let (Some(p2p), Some(coll)) = (mpich_built(&dir, "p2p"), mpich_built(&dir, "coll")) else {
        return;
    };
    let Some(o) = under_hydra(&dir, 4, &[&p2p], &[]) else {
        return;
    };
    passed_over_fm(&o, 4, "all passed on 4 ranks", "shmem");
    let o = under_hydra(&dir, 4, &[&coll], &[]).expect("mpiexec");
    passed_over_fm(&o, 4, "all collectives passed on 4 ranks", "shmem");
    // The checker fails when the data is wrong.
    let o = under_hydra(&dir, 2, &[&p2p], &["sabotage"]).expect("mpiexec");
    assert!(
        !o.status.success() && text(&o).contains("FAILED"),
        "{}",
        text(&o)
    );

    let w = two_hosts_wrapper(&dir);
    let o = under_hydra(&dir, 4, &[&w, &p2p], &[]).expect("mpiexec");
    passed_over_fm(&o, 4, "all passed on 4 ranks", "ethernet");

    // Rank 1 killed while the others wait for it: hydra's own report.
    let o = under_hydra(&dir, 3, &[&p2p], &["die"]).expect("mpiexec");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("BAD TERMINATION"), "{t}");
    // MPI_Abort(7) ends the job through PMI with that code. (Hydra kills
    // every rank at once: the aborting rank's own line may not reach it.)
    let o = under_hydra(&dir, 3, &[&p2p], &["abort"]).expect("mpiexec");
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// `srun --mpi=pmi2` and `srun --mpi=pmix` in a real Slurm cluster start
/// MPICH-built programs on fm; a killed rank ends the others — fm's watch
/// of the host under pmi2, where srun lets them run on; Slurm itself
/// under pmix — with srun's report of the kill.
#[test]
fn srun_runs_mpich_built_programs_over_fm() {
    let test = "srun_runs_mpich_built_programs_over_fm";
    let dir = TempDir::for_segments("mpi-srun");
    let (Some(p2p), Some(coll)) = (mpich_built(&dir, "p2p"), mpich_built(&dir, "coll")) else {
        return;
    };
    let Some(slurm) = Slurm::start(test, &dir.0.join("slurm")) else {
        return;
    };
    for mpi in ["pmi2", "pmix"] {
        let o = under_srun(&slurm, mpi, &dir, 4, &[&p2p], &[]);
        passed_over_fm(&o, 4, "all passed on 4 ranks", "shmem");
        let o = under_srun(&slurm, mpi, &dir, 4, &[&coll], &[]);
        passed_over_fm(&o, 4, "all collectives passed on 4 ranks", "shmem");

        let o = under_srun(&slurm, mpi, &dir, 3, &[&p2p], &["die"]);
        let t = text(&o);
        assert!(!o.status.success(), "{mpi}: {t}");
        // pmix: Slurm ends the step and reports the others killed too.
        assert!(t.contains(": Killed"), "{mpi}: {t}");
        let o = under_srun(&slurm, mpi, &dir, 3, &[&p2p], &["abort"]);
        let t = text(&o);
        assert!(!o.status.success(), "{mpi}: {t}");
        assert!(t.contains("task 1: Exited with exit code 7"), "{mpi}: {t}");
    }
    // Under pmi2 the host names are fm's own (FM_HOST), so two virtual
    // hosts run there; under pmix they are the launcher's.
    let w = two_hosts_wrapper(&dir);
    let o = under_srun(&slurm, "pmi2", &dir, 4, &[&w, &coll], &[]);
    passed_over_fm(&o, 4, "all collectives passed on 4 ranks", "ethernet");
    // fm's watch names the killed rank under pmi2.
    let o = under_srun(&slurm, "pmi2", &dir, 3, &[&p2p], &["die"]);
    let t = text(&o);
    assert!(
        t.contains("rank 1 (pid") && t.contains("ended without leaving the job"),
        "{t}"
    );
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// Open MPI's `mpirun` (a PMIx server) starts MPICH-built programs on fm:
/// a program written for MPICH, run by Open MPI's launcher, over fm.
#[test]
fn open_mpi_mpirun_runs_mpich_built_programs_over_fm() {
    let mpirun = Path::new("/usr/bin/mpirun.openmpi");
    if !mpirun.exists() {
        eprintln!("SKIPPED: no mpirun.openmpi (apt-get install openmpi-bin)");
        return;
    }
    let dir = TempDir::for_segments("mpi-ompi");
    let (Some(p2p), Some(coll)) = (mpich_built(&dir, "p2p"), mpich_built(&dir, "coll")) else {
        return;
    };
    let run = |n: &str, program: &Path, args: &[&str]| {
        let mut c = Command::new("timeout");
        c.arg("120").arg(mpirun);
        // Root (the CI) must say so; -x passes fm's library to the ranks.
        c.args(["--allow-run-as-root", "--oversubscribe", "-n", n]);
        c.args([
            "-x",
            "LD_LIBRARY_PATH",
            "-x",
            "FM_SHM_DIR",
            "-x",
            "FM_STATS",
        ]);
        c.arg(program).args(args);
        fm_env(&mut c, &dir);
        c.output().expect("mpirun.openmpi")
    };
    passed_over_fm(&run("4", &p2p, &[]), 4, "all passed on 4 ranks", "shmem");
    let o = run("4", &coll, &[]);
    passed_over_fm(&o, 4, "all collectives passed on 4 ranks", "shmem");
    let o = run("3", &p2p, &["die"]);
    let t = text(&o);
    assert!(t.contains("exited on signal 9"), "{t}");
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}
