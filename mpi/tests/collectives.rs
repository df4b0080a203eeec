//! Every collective and reduction of `tests/c/coll.c` (compiled with
//! MPICH's `mpicc`, so every handle is MPICH's), checked against a
//! reference each rank computes alone: on 1 to 8 ranks of one host
//! (non-powers of two included), across two and four virtual hosts, and
//! under packet loss. The same program under `mpiexec.mpich` checks the
//! test itself, and its checker must fail on one wrong value.
//!
//! They need `mpich` and `libmpich-dev` (`.ci/run` installs them) and say
//! SKIPPED without.

mod common;

use common::*;
use fm_tests::{only_the_lowest_rank_of_each_host_sent, TempDir};

fn passes(
    dir: &TempDir,
    exe: &std::path::Path,
    fmrun_args: &[&str],
    seed: &str,
    env: &[(&str, &str)],
) {
    passes_on(
        dir,
        exe,
        fmrun_args,
        &[seed],
        env,
        "all collectives passed on",
    );
}

#[test]
fn every_collective_on_one_to_eight_ranks_of_one_host() {
    let dir = TempDir::for_segments("mpi-coll");
    let Some(exe) = mpich_built(&dir, "coll") else {
        return;
    };
    for n in ["1", "2", "3", "4", "5", "7", "8"] {
        passes(&dir, &exe, &["-n", n, "--oversubscribe"], n, &[]);
    }
}

/// The collective area of a host (`coll::area`): `tests/c/area.c`'s
/// small collectives in tight loops (a root running ahead, sizes on both
/// sides of the area's limit on one communicator, a non-commutative
/// operation, non-blocking ones completed in reverse, two communicators
/// in turn, barriers seen through a shared window) on 2 to 8 ranks; with
/// every wait sleeping at once, so that a lost wake-up would hang; and
/// `coll.c` with the area off and with a limit of 16 bytes, so that the
/// one-host message paths of small collectives stay tested and mix with
/// the area's. No area file is left behind.
#[test]
fn small_collectives_through_the_host_area() {
    let dir = TempDir::for_segments("mpi-coll-area");
    let (Some(area), Some(coll)) = (mpich_built(&dir, "area"), mpich_built(&dir, "coll")) else {
        return;
    };
    let passed = "area collectives passed on";
    passes_fails_and_agrees_with_mpich(&dir, &area, 2, passed);
    for n in ["3", "5", "8"] {
        passes_on(&dir, &area, &["-n", n, "--oversubscribe"], &[], &[], passed);
    }
    let asleep = [("FM_WAIT", "block"), ("FM_WAIT_SPIN_US", "0")];
    passes_on(
        &dir,
        &area,
        &["-n", "4", "--oversubscribe"],
        &[],
        &asleep,
        passed,
    );
    let off = [("FM_COLL_SHM_BYTES", "0")];
    passes_on(
        &dir,
        &area,
        &["-n", "3", "--oversubscribe"],
        &[],
        &off,
        passed,
    );
    passes(&dir, &coll, &["-n", "3", "--oversubscribe"], "7", &off);
    let mixed = [("FM_COLL_SHM_BYTES", "16")];
    passes(&dir, &coll, &["-n", "5", "--oversubscribe"], "8", &mixed);
    let left: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("the test's segment directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("-area-"))
        .collect();
    assert!(left.is_empty(), "area files left: {left:?}");
}

#[test]
fn collectives_across_virtual_hosts_and_under_loss() {
    let dir = TempDir::for_segments("mpi-coll-hosts");
    let Some(exe) = mpich_built(&dir, "coll") else {
        return;
    };
    let local = ["--rsh", "local", "--oversubscribe"];
    let two = [&["-n", "4", "--hosts", "a,b"][..], &local].concat();
    let four = [&["-n", "8", "--hosts", "a,b,c,d"][..], &local].concat();
    passes(&dir, &exe, &two, "3", &[]);
    passes(&dir, &exe, &four, "4", &[]);
    // Every message but empty ones by rendezvous (the default where each
    // rank has a CPU of its own sends those past 16 KiB so).
    passes(&dir, &exe, &four, "6", &[("FM_COLL_EAGER_LIMIT", "0")]);
    passes(
        &dir,
        &exe,
        &two,
        "5",
        &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")],
    );
}

/// Each rank's bytes sent on the ethernet device, and its host, from a
/// run of `hostaware allreduce` on 8 ranks under `fmrun --stats=json`.
fn ethernet_bytes_by_rank(o: &std::process::Output) -> Vec<(u64, String)> {
    let t = text(o);
    let passed = "host-aware collectives passed on 8 ranks";
    assert!(o.status.success() && t.contains(passed), "{t}");
    fm_tests::ethernet_bytes_by_rank(&t, 8)
}

/// Host-aware collectives, seen in the device counters: in barriers and
/// allreduces over 4 hosts × 2 ranks, only one rank per host (its lowest)
/// sends on the network; the other combines with it over shared memory.
/// With `FM_COLL_HOSTS=off` every rank sends on the network, so the
/// counters tell the two apart. The rooted collectives (whose root leads
/// its host) run checked in the same program on 2 and 4 hosts, and under
/// MPICH, whose checker fails on one wrong sum.
#[test]
fn only_one_rank_per_host_sends_on_the_network_in_an_allreduce() {
    let dir = TempDir::for_segments("mpi-coll-hostaware");
    let Some(exe) = mpich_built(&dir, "hostaware") else {
        return;
    };
    let four = fm_tests::FOUR_HOSTS_WITH_STATS;
    let aware = run(&dir, &four, &exe, &["allreduce"], &[]);
    only_the_lowest_rank_of_each_host_sent(&ethernet_bytes_by_rank(&aware));
    let flat = run(
        &dir,
        &four,
        &exe,
        &["allreduce"],
        &[("FM_COLL_HOSTS", "off")],
    );
    let flat = ethernet_bytes_by_rank(&flat);
    assert!(flat.iter().all(|(b, _)| *b > 0), "{flat:?}");
    let local = ["--rsh", "local", "--oversubscribe"];
    for hosts in [
        &["-n", "4", "--hosts", "a,b"][..],
        &["-n", "7", "--hosts", "a,b,c"],
    ] {
        let o = run(&dir, &[hosts, &local].concat(), &exe, &[], &[]);
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("host-aware collectives passed"),
            "{t}"
        );
    }
    for (args, ok) in [(&[][..], true), (&["sabotage"][..], false)] {
        let Some(o) = under_mpich(&exe, 3, args) else {
            return;
        };
        let t = text(&o);
        assert_eq!(o.status.success(), ok, "mpiexec.mpich {args:?}:\n{t}");
        assert_eq!(
            t.contains("host-aware collectives passed on 3 ranks"),
            ok,
            "{t}"
        );
    }
}

#[test]
fn the_collective_checker_fails_on_a_wrong_value() {
    let dir = TempDir::for_segments("mpi-coll-sabotage");
    let Some(exe) = mpich_built(&dir, "coll") else {
        return;
    };
    let o = run(
        &dir,
        &["-n", "3", "--oversubscribe"],
        &exe,
        &["1", "sabotage"],
        &[],
    );
    let t = text(&o);
    assert!(!o.status.success() && t.contains("FAILED"), "{t}");
}

/// The program's expectations are MPICH's behaviour too (less MPICH's own
/// bugs, which the program names): run under `mpiexec.mpich`.
#[test]
fn the_collective_checks_hold_under_mpich() {
    let dir = TempDir::for_segments("mpi-coll-mpich");
    let Some(exe) = mpich_built(&dir, "coll") else {
        return;
    };
    for (args, ok) in [(&["4"][..], true), (&["4", "sabotage"][..], false)] {
        let Some(o) = under_mpich(&exe, 4, args) else {
            return;
        };
        let t = text(&o);
        assert_eq!(o.status.success(), ok, "mpiexec.mpich {args:?}:\n{t}");
        assert_eq!(t.contains("all collectives passed on 4 ranks"), ok, "{t}");
    }
}

/// The collectives' intercommunicator forms (`tests/c/intercoll.c`), on
/// an intercommunicator, its duplicate, split and `MPI_Comm_create`.
fn intercoll_passes(
    dir: &TempDir,
    exe: &std::path::Path,
    fmrun_args: &[&str],
    env: &[(&str, &str)],
) {
    let n = fmrun_args[1];
    let o = run(dir, fmrun_args, exe, &[], env);
    let t = text(&o);
    let passed = format!("all intercommunicator collectives passed on {n} ranks");
    assert!(
        o.status.success() && t.contains(&passed),
        "{fmrun_args:?} {env:?}:\n{t}"
    );
}

#[test]
fn intercommunicator_collectives_on_one_host_across_hosts_and_under_loss() {
    let dir = TempDir::for_segments("mpi-intercoll");
    let Some(exe) = mpich_built(&dir, "intercoll") else {
        return;
    };
    for n in ["2", "3", "4", "5", "7", "8"] {
        intercoll_passes(&dir, &exe, &["-n", n, "--oversubscribe"], &[]);
    }
    let local = ["--rsh", "local", "--oversubscribe"];
    let four = [&["-n", "8", "--hosts", "a,b,c,d"][..], &local].concat();
    let two = [&["-n", "5", "--hosts", "a,b"][..], &local].concat();
    intercoll_passes(&dir, &exe, &four, &[]);
    let faults = [("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")];
    intercoll_passes(&dir, &exe, &two, &faults);
}

#[test]
fn the_intercommunicator_checks_hold_under_mpich_and_fail_on_a_wrong_value() {
    let dir = TempDir::for_segments("mpi-intercoll-mpich");
    let Some(exe) = mpich_built(&dir, "intercoll") else {
        return;
    };
    let passed = "all intercommunicator collectives passed on 5 ranks";
    passes_fails_and_agrees_with_mpich(&dir, &exe, 5, passed);
}

/// The same on real hosts: 4 network namespaces × 2 ranks, whose hosts
/// talk over the ethernet device; only the lowest rank of each sends on
/// it. Needs root (SKIPPED otherwise).
#[test]
fn only_one_rank_per_namespace_host_sends_on_the_ethernet() {
    let test = "only_one_rank_per_namespace_host_sends_on_the_ethernet";
    let Some(c) = fm_tests::netns::Cluster::new(test, 4) else {
        return;
    };
    let dir = TempDir::for_segments("mpi-coll-netns");
    let Some(exe) = mpich_built(&dir, "hostaware") else {
        return;
    };
    let mut args = c.fmrun_args(&c.hosts_spec(2), fm_tests::netns::NET_ETHERNET);
    args.push("--stats=json".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = fm_tests::fmrun(&own_bin(), &dir, &args, &exe, &["allreduce"])
        .output()
        .expect("fmrun");
    only_the_lowest_rank_of_each_host_sent(&ethernet_bytes_by_rank(&o));
}
