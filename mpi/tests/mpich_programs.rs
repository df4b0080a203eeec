//! Programs built against MPICH, run unmodified on fm's libmpich.so.12
//! under fmrun: Debian's NetPIPE (`NPmpich2`) in its integrity mode, and
//! `tests/c/p2p.c` compiled with MPICH's own `mpicc` (so every handle,
//! constant and the `MPI_Status` layout are MPICH's), on shared memory,
//! across two virtual hosts over ethernet, and under packet loss.
//!
//! They need `mpich`, `libmpich-dev` and `netpipe-mpich2` (`.ci/run`
//! installs them) and say SKIPPED without.

mod common;

use common::*;
use fm_tests::TempDir;
use std::path::{Path, PathBuf};

const NETPIPE: &str = "/usr/bin/NPmpich2";

/// Statuses and empty objects as the standard and MPICH have them
/// (tests/c/status.c; each of its parts failed before its fix): the empty
/// status of an inactive or null request, the status of a receive or
/// probe from MPI_PROC_NULL, MPI_ERROR never written by a call completing
/// one operation, MPI_GROUP_EMPTY for a group with no members, a keyval
/// freed twice let pass as MPICH lets it, a freed Issend to oneself that
/// does not hang MPI_Finalize, MPI-1's MPI_LB and MPI_UB in a struct,
/// messages from and to MPI_BOTTOM, attribute callbacks that fail,
/// a persistent send outliving its datatype, MPI_Isend returning while
/// its receiver is idle, MPI_Request_get_status, MPI-4's hardware splits
/// (also on two virtual hosts, where the unguided split is a host),
/// MPI_Isendrecv(_replace), MPI_Bsend_init and MPI_Type_match_size.
#[test]
fn statuses_and_empty_groups_are_mpichs() {
    let dir = TempDir::for_segments("mpi-status");
    let Some(exe) = mpich_built(&dir, "status") else {
        return;
    };
    for n in ["1", "2"] {
        let o = run(&dir, &["-n", n], &exe, &[], &[]);
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("all checks passed"),
            "{n} ranks:\n{t}"
        );
    }
    let o = run(&dir, &TWO_HOSTS, &exe, &["split-type"], &[]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("all checks passed"), "{t}");
}

/// Every check of p2p.c, on 2 and 3 ranks of one host; its checker fails
/// when one byte is wrong; an invalid rank under MPI_ERRORS_ARE_FATAL ends
/// the job naming rank, function and reason.
#[test]
fn mpich_built_point_to_point_on_shared_memory() {
    let dir = TempDir::for_segments("mpi-p2p");
    let Some(exe) = p2p(&dir) else { return };
    for n in ["2", "3"] {
        let o = run(&dir, &["-n", n, "--oversubscribe"], &exe, &[], &[]);
        let t = text(&o);
        assert!(o.status.success(), "{n} ranks:\n{t}");
        assert!(t.contains(&format!("all passed on {n} ranks")), "{t}");
    }
    let o = run(&dir, &["-n", "2"], &exe, &["sabotage"], &[]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("FAILED"),
        "the checker missed a wrong byte:\n{t}"
    );
    let o = run(&dir, &["-n", "2"], &exe, &["fatal"], &[]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("fm MPI: rank 1: MPI_Send: rank 3 is not in a communicator of 2 processes"),
        "{t}"
    );
    job_ends_with_rank_1(&dir, &exe, &["-n", "3", "--oversubscribe"]);
    // Blocking sends around the short-message path, with eager limits
    // below, inside and above it (0: every non-empty message waits for
    // its receive); the checker fails on one wrong byte.
    for limit in ["0", "16", "40", "65536"] {
        let o = run(
            &dir,
            &["-n", "2"],
            &exe,
            &["short"],
            &[("FM_MPI_EAGER_LIMIT", limit)],
        );
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("short sends: ok"),
            "eager limit {limit}:\n{t}"
        );
    }
    let o = run(&dir, &["-n", "2"], &exe, &["short-sabotage"], &[]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("FAILED") && t.contains("short send"),
        "{t}"
    );
    // Datatype constructors on random and extreme arguments: every call
    // returns (fmrun's time limit would end a hang), with a class.
    let o = run(&dir, &["-n", "1"], &exe, &["type-fuzz"], &[]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("type fuzz: "), "{t}");
    // Source -1 is any source only when asked for; without the setting
    // it is MPI_PROC_NULL and the same checks fail.
    let three = &["-n", "3", "--oversubscribe"];
    let o = run(
        &dir,
        three,
        &exe,
        &["minus-one"],
        &[(MINUS_ONE, "any-source")],
    );
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("source -1 is any source on 3 ranks"),
        "{t}"
    );
    let o = run(&dir, three, &exe, &["minus-one"], &[]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("from -1: source -1"),
        "{t}"
    );
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// Ranks 0 and 1 stream windows of non-blocking messages of random sizes
/// to each other at once (`p2p windows`): a rendezvous message's data
/// goes in pieces sized by the credits towards its receiver, and a queued
/// eager message is sent from the sender's own buffer. So the same
/// program runs with windows of a few credits and small frames (pieces of
/// a few packets), with every message a rendezvous one, with pieces by
/// single copy, over ethernet between two virtual hosts, and there under
/// loss, duplication and reordering. The checker fails on one flipped
/// byte.
#[test]
fn messages_streamed_both_ways_at_once_arrive_whole_and_in_order() {
    let dir = TempDir::for_segments("mpi-windows");
    let Some(exe) = p2p(&dir) else { return };
    let two: &[&str] = &["-n", "2"];
    let hosts: &[&str] = &["-n", "2", "--hosts", "a,b", "--rsh", "local"];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let runs: [(&[&str], Env); 7] = [
        (two, &[]),
        (two, &[("FM_CREDITS", "4")]),
        (two, &[("FM_SHM_PAYLOAD", "4080"), ("FM_CREDITS", "8")]),
        (two, &[("FM_MPI_EAGER_LIMIT", "0")]),
        (two, &[("FM_SHM_CMA_THRESHOLD", "100000")]),
        (hosts, &[]),
        (hosts, &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")]),
    ];
    for (args, env) in runs {
        let o = run(&dir, args, &exe, &["windows"], env);
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("windows: ok"),
            "{args:?} {env:?}:\n{t}"
        );
    }
    let o = run(&dir, two, &exe, &["windows-sabotage"], &[]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("FAILED") && t.contains("windows"),
        "the checker missed a flipped byte:\n{t}"
    );
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// The setting that reads source -1 as `MPI_ANY_SOURCE` (docs/MPI.md).
const MINUS_ONE: &str = "FM_MPI_SOURCE_MINUS_ONE";

/// `MPI_Abort(7)` in rank 1 ends the job with code 7, and a rank 1 killed
/// mid-job ends it too, while the other ranks wait for rank 1 in
/// `MPI_Recv` (none of them returns from it).
fn job_ends_with_rank_1(dir: &TempDir, exe: &Path, fmrun_args: &[&str]) {
    let o = run(dir, fmrun_args, exe, &["abort"], &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(7), "{t}");
    assert!(
        t.contains("rank 1 called MPI_Abort with error code 7"),
        "{t}"
    );
    assert!(!t.contains("returned though"), "{t}");
    let o = run(dir, fmrun_args, exe, &["die"], &[]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("rank 1") && t.contains("SIGKILL"), "{t}");
    assert!(!t.contains("returned though"), "{t}");
}

/// The same on four ranks over two virtual hosts, two each (shared memory
/// within a host, ethernet between them: a communicator split by host
/// has two), and again with 2% of packets dropped.
#[test]
fn mpich_built_point_to_point_over_ethernet_and_loss() {
    let dir = TempDir::for_segments("mpi-eth");
    let Some(exe) = p2p(&dir) else { return };
    for faults in ["", "drop=0.02"] {
        let o = run(
            &dir,
            &["-n", "4", "--hosts", "a:2,b:2", "--rsh", "local"],
            &exe,
            &[],
            &[("FM_FAULTS", faults)],
        );
        let t = text(&o);
        assert!(o.status.success(), "FM_FAULTS={faults}:\n{t}");
        assert!(t.contains("all passed on 4 ranks"), "{t}");
    }
    job_ends_with_rank_1(
        &dir,
        &exe,
        &["-n", "4", "--hosts", "a:2,b:2", "--rsh", "local"],
    );
}

/// Debian's NetPIPE, built against MPICH, checks every byte it moves
/// (`-i`): blocking, with receives posted ahead (`-a`) and with
/// synchronous sends (`-S`), up to 1 MiB, on shared memory; and across two
/// virtual hosts over ethernet, also under loss.
/// `-2` has both ranks call a blocking MPI_Send before either receives
/// (it hangs under MPICH's own `mpiexec.mpich` past 12 KiB); fm copies a
/// send aside then, so it passes here at every size.
///
/// `-z` (receive from any source): Debian's NetPIPE 3.7 passes -1 as the
/// source for it, which is MPI_PROC_NULL in MPICH's ABI, not
/// MPI_ANY_SOURCE (it hangs under `mpiexec.mpich -n 2 NPmpich2 -z`), so
/// it runs with `FM_MPI_SOURCE_MINUS_ONE=any-source` (docs/MPI.md).
#[test]
fn netpipe_built_for_mpich_passes_its_integrity_check() {
    if !Path::new(NETPIPE).exists() {
        eprintln!("SKIPPED: no {NETPIPE} (apt-get install netpipe-mpich2)");
        return;
    }
    let dir = TempDir::for_segments("mpi-netpipe");
    let two_hosts: &[&str] = &["-n", "2", "--hosts", "a,b", "--rsh", "local"];
    let cases: [(&[&str], &[&str], &str); 11] = [
        (&["-n", "2"], &["-i", "-u", "1048576"], ""),
        (&["-n", "2"], &["-i", "-a", "-u", "1048576"], ""),
        (&["-n", "2"], &["-i", "-S", "-u", "1048576"], ""),
        (&["-n", "2"], &["-i", "-2", "-u", "4194304"], ""),
        (&["-n", "2"], &["-i", "-z", "-u", "4194304"], ""),
        (two_hosts, &["-i", "-u", "1048576"], ""),
        (two_hosts, &["-i", "-2", "-u", "1048576"], ""),
        (two_hosts, &["-i", "-z", "-u", "1048576"], ""),
        (two_hosts, &["-i", "-u", "262144"], "drop=0.02"),
        (two_hosts, &["-i", "-2", "-u", "262144"], "drop=0.02"),
        (two_hosts, &["-i", "-z", "-u", "262144"], "drop=0.02"),
    ];
    for (fmrun_args, np_args, faults) in cases {
        let minus_one = if np_args.contains(&"-z") {
            "any-source"
        } else {
            "proc-null"
        };
        let o = run(
            &dir,
            fmrun_args,
            Path::new(NETPIPE),
            np_args,
            &[("FM_FAULTS", faults), (MINUS_ONE, minus_one)],
        );
        let t = text(&o);
        assert!(
            o.status.success(),
            "{fmrun_args:?} NPmpich2 {np_args:?}:\n{t}"
        );
        let passed = t.matches("Integrity check passed").count();
        assert!(
            passed > 20 && !t.contains("Integrity check failed"),
            "{fmrun_args:?} NPmpich2 {np_args:?}: {passed} sizes passed\n{t}"
        );
    }
}

/// The value of each `#define NAME VALUE` of a C header whose value is an
/// integer (decimal or hex, maybe negative, maybe in a cast), by name.
fn header_values(text: &str) -> std::collections::BTreeMap<String, i64> {
    let mut v = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("#define ") else {
            continue;
        };
        let Some((name, value)) = rest.split_once(char::is_whitespace) else {
            continue;
        };
        // ((MPI_Comm)0x44000000), (-2), 0x64400001, 14 /* comment */
        let value = value.split("/*").next().unwrap_or("").trim();
        let value = value
            .rsplit(')')
            .find(|p| !p.trim().is_empty())
            .unwrap_or(value);
        let value = value.trim_start_matches('(').trim();
        let n = match value.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16).ok(),
            None => value.parse::<i64>().ok(),
        };
        if let Some(n) = n {
            v.insert(name.to_string(), n);
        }
    }
    v
}

/// fm's own mpi.h gives every name MPICH's header also defines the same
/// value (the ABI).
#[test]
fn fm_header_agrees_with_mpich() {
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mpi.h");
    let ours = header_values(&std::fs::read_to_string(&ours).expect("mpi/include/mpi.h"));
    assert!(
        ours.len() > 80,
        "only {} values read from fm's mpi.h",
        ours.len()
    );
    let mpich = Path::new("/usr/include/x86_64-linux-gnu/mpich/mpi.h");
    match std::fs::read_to_string(mpich) {
        Ok(text) => {
            let theirs = header_values(&text);
            let mut compared = 0;
            for (name, v) in &ours {
                if let Some(t) = theirs.get(name) {
                    assert_eq!(v, t, "{name}: fm's mpi.h {v:#x}, MPICH's {t:#x}");
                    compared += 1;
                }
            }
            assert!(compared > 80, "only {compared} names compared");
        }
        Err(_) => eprintln!(
            "SKIPPED the comparison: no {} (libmpich-dev)",
            mpich.display()
        ),
    }
}

/// Every function fm's mpi.h declares, the library exports.
#[test]
fn every_function_of_fm_header_is_exported() {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mpi.h"))
            .expect("mpi/include/mpi.h");
    let declared: Vec<&str> = header
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| {
            (w.starts_with("MPI_") || w.starts_with("PMPI_")) && header.contains(&format!("{w}("))
        })
        .collect();
    assert!(
        declared.len() > 150,
        "only {} functions found in mpi.h",
        declared.len()
    );
    let lib = std::env::current_exe()
        .expect("the test's path")
        .with_file_name("libmpich.so");
    match std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    {
        Ok(o) if o.status.success() => {
            let symbols = String::from_utf8_lossy(&o.stdout);
            let exported: std::collections::BTreeSet<&str> = symbols
                .lines()
                .filter_map(|l| l.split_whitespace().nth(2))
                .collect();
            let missing: Vec<_> = declared
                .iter()
                .filter(|f| !exported.contains(**f))
                .collect();
            assert!(
                missing.is_empty(),
                "declared in mpi.h, not exported: {missing:?}"
            );
        }
        _ => eprintln!("SKIPPED the export check: no nm, or no {}", lib.display()),
    }
}

/// The suite compiled against fm's own mpi.h, with the system's C
/// compiler (not MPICH's wrapper), passes on fm.
#[test]
fn the_suite_built_with_fm_header_passes() {
    let dir = TempDir::for_segments("mpi-header");
    let exe = dir.0.join("p2p-fm-header");
    let profile = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.to_path_buf()))
        .expect("target/PROFILE/deps");
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    fm_tests::succeed(
        std::process::Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-std=c11"])
            .arg(format!("-I{}", crate_dir.join("include").display()))
            .arg(crate_dir.join("tests/c/p2p.c"))
            .arg(format!("-L{}", profile.display()))
            .args(["-lmpich", "-o"])
            .arg(&exe),
    );
    let o = run(&dir, &["-n", "3", "--oversubscribe"], &exe, &[], &[]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("all passed on 3 ranks"),
        "{t}"
    );
}

/// An MPI hello world built with MPICH's `mpicc`, in `dir`.
fn mpi_hello(dir: &TempDir) -> Option<PathBuf> {
    let Some(cc) = mpicc() else {
        eprintln!("SKIPPED: no mpicc.mpich (apt-get install mpich libmpich-dev)");
        return None;
    };
    let src = dir.0.join("hello.c");
    std::fs::write(
        &src,
        "#include <mpi.h>\n#include <stdio.h>\nint main(int c, char **v) { int r, n;\n\
         MPI_Init(&c, &v); MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);\n\
         printf(\"hello %d of %d\\n\", r, n); MPI_Finalize(); return 0; }\n",
    )
    .expect("hello.c");
    let exe = dir.0.join("hello");
    fm_tests::succeed(std::process::Command::new(cc).arg("-o").arg(&exe).arg(&src));
    Some(exe)
}

/// A misspelt setting is said once for a job of 4 MPICH-built ranks (by
/// fmrun; the ranks say nothing of it).
#[test]
fn a_misspelt_setting_is_said_once_to_an_mpi_job() {
    let dir = TempDir::for_segments("mpi-misspelt");
    let Some(exe) = mpi_hello(&dir) else { return };
    let o = run(&dir, &["-n", "4"], &exe, &[], &[("FM_CREDTIS", "4")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("hello ").count(), 4, "{t}");
    assert!(t.contains("hello 3 of 4"), "{t}");
    assert_eq!(
        t.matches("FM_CREDTIS is not a setting of fm").count(),
        1,
        "{t}"
    );
}

/// A process fmrun started that is not a rank of the job (here: a second
/// MPI program after the rank's first has left) fails at MPI_Init; it never
/// runs as a job of one.
#[test]
fn mpi_init_outside_the_job_fmrun_started_is_an_error_not_a_singleton() {
    let dir = TempDir::for_segments("mpi-second");
    let Some(exe) = mpi_hello(&dir) else { return };
    let script = format!("{0}; echo first=$?; {0}; echo second=$?", exe.display());
    let o = run(&dir, &["-n", "2"], Path::new("sh"), &["-c", &script], &[]);
    let t = text(&o);
    assert!(t.contains("hello 1 of 2") && t.contains("first=0"), "{t}");
    assert!(!t.contains("of 1"), "a singleton ran: {t}");
    assert_eq!(t.matches("second=1").count(), 2, "{t}");
    assert!(t.contains("MPI_Init"), "{t}");
}

/// Intercommunicators (point-to-point across, merged both ways round),
/// `MPI_Comm_create_group`, `MPI_Intercomm_create_from_groups`, and
/// groups by ranges and set operations (tests/c/comms.c), on 2, 3 and 5
/// ranks, and under mpiexec.mpich; its checker fails on one wrong rank.
#[test]
fn communicators_some_members_make_are_mpichs() {
    let dir = TempDir::for_segments("mpi-comms");
    let Some(exe) = mpich_built(&dir, "comms") else {
        return;
    };
    for n in ["2", "5"] {
        let o = run(&dir, &["-n", n, "--oversubscribe"], &exe, &[], &[]);
        let t = text(&o);
        assert!(
            o.status.success()
                && t.contains(&format!("all communicator checks passed on {n} ranks")),
            "{n} ranks:\n{t}"
        );
    }
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, "all communicator checks passed on 3 ranks");
}

/// Info objects, MPI_Alloc_mem, names, MPI_Type_dup and MPI_Dims_create
/// (tests/c/info.c); its checker fails on one wrong value; the same
/// program passes under mpiexec.mpich (less what MPICH does otherwise
/// than the standard, which it names).
#[test]
fn info_objects_names_and_dims_are_the_standards() {
    let dir = TempDir::for_segments("mpi-info");
    let Some(exe) = mpich_built(&dir, "info") else {
        return;
    };
    let o = run(&dir, &["-n", "2"], &exe, &[], &[]);
    let t = text(&o);
    assert!(
        o.status.success() && t.matches("info: all checks passed").count() == 2,
        "{t}"
    );
    let o = run(&dir, &["-n", "1"], &exe, &["sabotage"], &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("FAILED"), "{t}");
    if let Some(o) = under_mpich(&exe, 2, &[]) {
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("info: all checks passed"),
            "{t}"
        );
    }
}

/// `MPI_Comm_idup` (tests/c/idup.c): several in flight among non-blocking
/// collectives, overlapping ones started in different orders, random
/// splits duplicated in an order of each rank's own with blocking
/// agreements between, an intercommunicator; every communicator made
/// carries its own messages. On 1 to 8 ranks, across 4 hosts, and on 2
/// under loss; its checker fails on one wrong value; MPICH agrees.
#[test]
fn idups_in_flight_at_once_each_get_a_context_of_their_own() {
    let dir = TempDir::for_segments("mpi-idup");
    let Some(exe) = mpich_built(&dir, "idup") else {
        return;
    };
    let local = ["--rsh", "local", "--oversubscribe"];
    let four = [&["-n", "8", "--hosts", "a,b,c,d"][..], &local].concat();
    let two = [&["-n", "5", "--hosts", "a,b"][..], &local].concat();
    type Env<'a> = &'a [(&'a str, &'a str)];
    let runs: Vec<(Vec<&str>, Env)> = vec![
        (vec!["-n", "1"], &[]),
        (vec!["-n", "2"], &[]),
        (vec!["-n", "3", "--oversubscribe"], &[]),
        (vec!["-n", "8", "--oversubscribe"], &[]),
        (four, &[]),
        (two, &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")]),
    ];
    for (args, env) in runs {
        let n = args[1];
        let o = run(&dir, &args, &exe, &[], env);
        let t = text(&o);
        let passed = format!("all idup checks passed on {n} ranks");
        assert!(o.status.success() && t.contains(&passed), "{args:?}:\n{t}");
    }
    passes_fails_and_agrees_with_mpich(&dir, &exe, 5, "all idup checks passed on 5 ranks");
}

/// `exe` with `program_args` passes under fmrun with each of `runs`
/// (fmrun's arguments, `-n N` first), saying "all `what` checks passed on
/// N ranks".
fn passes_under(dir: &TempDir, exe: &Path, runs: &[&[&str]], program_args: &[&str], what: &str) {
    for args in runs {
        let o = run(dir, args, exe, program_args, &[]);
        let t = text(&o);
        let passed = format!("all {what} checks passed on {} ranks", args[1]);
        assert!(
            o.status.success() && t.contains(&passed),
            "{args:?} {program_args:?}:\n{t}"
        );
    }
}

/// Two virtual hosts of two ranks each.
const TWO_HOSTS: [&str; 7] = [
    "-n",
    "4",
    "--hosts",
    "a,b",
    "--rsh",
    "local",
    "--oversubscribe",
];

/// MPI-4.0's large-count `_c` functions (tests/c/large.c): the classic
/// and `_c` forms agree where counts fit an int; `_c` constructors keep
/// large counts that only the `_c` queries give; counts past an int come
/// back whole; point-to-point, collectives with `MPI_Aint` displacements
/// and packing move the same data. Across 2 hosts too; its checker fails
/// on one wrong value; MPICH agrees.
#[test]
fn large_count_functions_agree_with_their_classic_forms() {
    let dir = TempDir::for_segments("mpi-large");
    let Some(exe) = mpich_built(&dir, "large") else {
        return;
    };
    let runs: [&[&str]; 3] = [&["-n", "1"], &["-n", "3", "--oversubscribe"], &TWO_HOSTS];
    passes_under(&dir, &exe, &runs, &[], "large-count");
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, "all large-count checks passed on 3 ranks");
}

/// Generalized requests (tests/c/greq.c): complete only after
/// `MPI_Grequest_complete`; the query function's status from every wait,
/// test and `MPI_Request_get_status`; the free function once, after both
/// the completion and the free; cancel with whether it is complete; a
/// query's error is the wait's; the functions call MPI; mixed with
/// point-to-point in Waitall, Waitany and Testsome. Its checker fails on
/// one wrong value; MPICH agrees.
#[test]
fn generalized_requests_call_the_programs_functions_as_mpi_says() {
    let dir = TempDir::for_segments("mpi-greq");
    let Some(exe) = mpich_built(&dir, "greq") else {
        return;
    };
    let o = run(&dir, &["-n", "1"], &exe, &[], &[]);
    let t = text(&o);
    let passed = "all generalized request checks passed on 1 ranks";
    assert!(o.status.success() && t.contains(passed), "{t}");
    let passed = "all generalized request checks passed on 3 ranks";
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, passed);
}

/// MPI-4.0's Sessions (tests/c/sessions.c): MPI started by
/// `MPI_Session_init` alone, process sets, communicators from their
/// groups and a subgroup, two sessions at once, a session's own error
/// handler; inside `MPI_Init` too, a session's communicator working after
/// `MPI_Finalize`. On 1 and 3 ranks and across 2 hosts; its checker fails
/// on one wrong value; MPICH agrees.
#[test]
fn sessions_start_mpi_without_mpi_init_and_make_communicators_of_process_sets() {
    let dir = TempDir::for_segments("mpi-sessions");
    let Some(exe) = mpich_built(&dir, "sessions") else {
        return;
    };
    let runs: [&[&str]; 3] = [&["-n", "1"], &["-n", "3", "--oversubscribe"], &TWO_HOSTS];
    passes_under(&dir, &exe, &runs, &[], "session");
    passes_under(&dir, &exe, &runs, &["world"], "session");
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, "all session checks passed on 3 ranks");
}

/// external32 (tests/c/external.c): every predefined type's bytes as
/// MPI-4.0's Table 14.2 gives them (`long` in 4 bytes, `long double` as
/// binary128), a struct and a vector there and back, the `_c` forms, a
/// buffer too small refused. Its checker fails on one wrong byte; MPICH
/// agrees (but for the struct holding a `long`, on which MPICH 4.0.2
/// crashes).
#[test]
fn external32_packs_as_the_standard_lays_it_out() {
    let dir = TempDir::for_segments("mpi-external");
    let Some(exe) = mpich_built(&dir, "external") else {
        return;
    };
    passes_fails_and_agrees_with_mpich(&dir, &exe, 1, "all external32 checks passed");
}

/// Partitioned communication (tests/c/partitioned.c): three starts of a
/// ring of partitioned sends and receives, parts marked ready one by one,
/// by range and by list, polled with `MPI_Parrived`; an ordinary receive
/// of the same tag untouched by them; a derived datatype's parts; a part
/// out of range refused. On 1 to 5 ranks and across 2 hosts; its checker
/// fails on one wrong value; MPICH agrees.
#[test]
fn partitioned_sends_arrive_whole_and_apart_from_ordinary_messages() {
    let dir = TempDir::for_segments("mpi-partitioned");
    let Some(exe) = mpich_built(&dir, "partitioned") else {
        return;
    };
    let runs: [&[&str]; 3] = [&["-n", "1"], &["-n", "5", "--oversubscribe"], &TWO_HOSTS];
    passes_under(&dir, &exe, &runs, &[], "partitioned");
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, "all partitioned checks passed on 3 ranks");
}

/// `MPI_THREAD_MULTIPLE` (tests/c/threads.c): four threads per rank send
/// to and receive from every other rank at once — ordered blocking sends
/// and receives, non-blocking ones with `MPI_Waitall`, `MPI_Sendrecv`
/// rings, `MPI_ANY_SOURCE` receives with `MPI_Waitsome` — on
/// `MPI_COMM_WORLD` and on one communicator two threads share, each
/// message once, intact and in its thread's order, up to past the eager
/// limit; then a thread blocked in `MPI_Recv`, `MPI_Probe`, `MPI_Wait`,
/// `MPI_Sendrecv` or `MPI_Barrier` does not stop another thread's
/// `MPI_Wtime`, `MPI_Initialized` and `MPI_Send` (with the lock held
/// across waits, as before, every part hangs; counting only the takers of
/// the lock that go through `call` hung at `MPI_Wtime`); then four
/// threads make communicators at once with `MPI_Comm_create`,
/// `_create_group`, `_dup`, `_split`, `MPI_Cart_create`, `MPI_Cart_sub`,
/// `MPI_Dist_graph_create_adjacent` and `MPI_Dist_graph_create`, in
/// opposite orders at odd and
/// even ranks (agreeing holding the lock, that hung); and, only under fm
/// (MPICH 4.0.2 hangs there even with one thread, in an allreduce on a
/// split intercommunicator), `MPI_Intercomm_create`, `_create_from_groups`,
/// `MPI_Intercomm_merge` and splits of intercommunicators so. On one host, across two virtual hosts, and there under packet
/// loss, duplication and reordering; its checker fails on one wrong byte;
/// MPICH agrees.
#[test]
fn threads_call_mpi_at_once_and_a_blocked_thread_blocks_no_other() {
    let dir = TempDir::for_segments("mpi-threads");
    let Some(exe) = mpich_built(&dir, "threads") else {
        return;
    };
    let runs: [&[&str]; 3] = [&["-n", "2"], &["-n", "5", "--oversubscribe"], &TWO_HOSTS];
    passes_under(&dir, &exe, &runs, &[], "thread");
    let faults = "drop=0.02,dup=0.01,reorder=0.02";
    let o = run(&dir, &TWO_HOSTS, &exe, &[], &[("FM_FAULTS", faults)]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("all thread checks passed on 4 ranks"),
        "FM_FAULTS={faults}:\n{t}"
    );
    passes_fails_and_agrees_with_mpich(&dir, &exe, 4, "all thread checks passed on 4 ranks");
    // Intercommunicators made from threads at once (not under MPICH,
    // which hangs there); the checker fails on a wrong sum.
    for (runs, args) in [
        (&["-n", "4", "--oversubscribe"][..], &["inter"][..]),
        (&TWO_HOSTS[..], &["inter"][..]),
        (
            &["-n", "5", "--oversubscribe"][..],
            &["inter", "sabotage"][..],
        ),
    ] {
        let o = run(&dir, runs, &exe, args, &[]);
        let t = text(&o);
        let passed = t.contains("intercommunicator thread checks passed");
        let sabotaged = args.contains(&"sabotage");
        assert_eq!(o.status.success() && passed, !sabotaged, "{args:?}:\n{t}");
        assert_eq!(t.contains("FAILED"), sabotaged, "{args:?}:\n{t}");
    }
    // Ranks at different thread levels make communicators together.
    for n in ["4", "5"] {
        let o = run(&dir, &["-n", n, "--oversubscribe"], &exe, &["mixed"], &[]);
        let t = text(&o);
        let passed = format!("mixed thread levels passed on {n} ranks");
        assert!(o.status.success() && t.contains(&passed), "{t}");
    }
    if let Some(o) = under_mpich(&exe, 4, &["mixed"]) {
        let t = text(&o);
        assert!(
            o.status.success() && t.contains("mixed thread levels passed"),
            "{t}"
        );
    }
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}
