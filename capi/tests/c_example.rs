//! The C example (`examples/ring.c`) compiled with the system's C compiler
//! against `fm.h` and the library this build made, statically and as a
//! shared library, and run under fmrun on 1, 2 and 4 ranks. Built with
//! `-DSABOTAGE`, one byte of the big message is wrong and the receiver's
//! check must fail the job.

mod common;

use common::{c_library_dir, target_dir};
use std::path::Path;
use std::process::{Command, Output};

fn compile(out: &Path, extra: &[&str], shared: bool) {
    let dir = env!("CARGO_MANIFEST_DIR");
    let t = c_library_dir();
    let mut c = Command::new("cc");
    c.args(["-O1", "-Wall", "-Wextra", "-Werror", "-std=c11"])
        .arg(format!("-I{dir}/include"))
        .args(extra)
        .arg(format!("{dir}/examples/ring.c"));
    if shared {
        c.arg(format!("-L{}", t.display()))
            .arg(format!("-Wl,-rpath,{}", t.display()))
            .arg("-lfm_c");
    } else {
        c.arg(t.join("libfm_c.a")).args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ]);
    }
    let o = c.arg("-o").arg(out).output().expect("a C compiler (cc)");
    assert!(
        o.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn fmrun(n: u32, program: &Path) -> Output {
    let fmrun = target_dir().join("fmrun");
    assert!(
        fmrun.exists(),
        "{} is not built: run the workspace's tests",
        fmrun.display()
    );
    Command::new(fmrun)
        .args(["-n", &n.to_string(), "--oversubscribe", "--timeout", "60s"])
        .arg(program)
        .env_remove("FM_LOG")
        // cargo test puts target/debug on the library path, ahead of the
        // program's rpath: a libfm_c.so left there by an earlier build
        // would be loaded instead of the one this test built.
        .env("LD_LIBRARY_PATH", c_library_dir())
        .output()
        .expect("fmrun")
}

#[test]
fn the_c_example_runs_under_fmrun_static_and_shared() {
    let tmp = fm_tests::TempDir::new("capi");
    for shared in [false, true] {
        let exe = tmp
            .0
            .join(if shared { "ring-shared" } else { "ring-static" });
        compile(&exe, &[], shared);
        for n in [1u32, 2, 4] {
            let o = fmrun(n, &exe);
            let (out, err) = (
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
            );
            assert!(o.status.success(), "{} ranks: {out}{err}", n);
            for r in 0..n {
                let want = format!("[{r}] rank {r} of {n}: token seen 3 times");
                assert!(out.contains(&want), "{want:?} in\n{out}");
            }
            assert_eq!(
                out.matches("big message checked").count(),
                n as usize,
                "{out}"
            );
        }
    }
}

/// A misspelt setting is said once for a job of 4 C ranks (by fmrun), and
/// once by a C program on its own (which sets up no logging).
#[test]
fn a_misspelt_setting_is_said_once_to_a_c_program() {
    let tmp = fm_tests::TempDir::new("capi-misspelt");
    let exe = tmp.0.join("ring");
    compile(&exe, &[], true);
    let mut c = Command::new(target_dir().join("fmrun"));
    c.args(["-n", "4", "--oversubscribe", "--timeout", "60s"])
        .arg(&exe)
        .env_remove("FM_LOG")
        .env("LD_LIBRARY_PATH", c_library_dir())
        .env("FM_CREDTIS", "4");
    let alone = Command::new(&exe)
        .env_remove("FM_LOG")
        .env("LD_LIBRARY_PATH", c_library_dir())
        .env("FM_CREDTIS", "4")
        .output()
        .expect("ring alone");
    for o in [c.output().expect("fmrun"), alone] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert_eq!(
            err.matches("FM_CREDTIS is not a setting of fm").count(),
            1,
            "{err}"
        );
    }
}

#[test]
fn a_wrong_byte_fails_the_c_example() {
    let tmp = fm_tests::TempDir::new("capi-sabotage");
    let exe = tmp.0.join("ring-sabotaged");
    compile(&exe, &["-DSABOTAGE"], false);
    let o = fmrun(2, &exe);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("is wrong"), "{err}");
}

/// The README's two commands after its first (NetPIPE built against MPICH,
/// and the C ring) run as written, but for where this build keeps its
/// files: `target/release` becomes this test build's folders, and the ring
/// is written to a scratch folder instead of the checkout.
#[test]
fn the_readme_commands_for_mpi_and_c_programs_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    // The backquoted command on the README's line that contains `key`.
    let command = |key: &str| -> String {
        let line = readme.lines().find(|l| l.contains(key)).expect(key);
        line.split('`').nth(1).expect("a `command`").to_string()
    };
    let tmp = fm_tests::TempDir::new("readme-commands");
    let (lib, bin) = (c_library_dir(), target_dir());
    let here = |c: String| {
        c.replace("$PWD/target/release", &lib.display().to_string())
            .replace("-Ltarget/release", &format!("-L{}", lib.display()))
            .replace(
                "target/release/fmrun",
                &bin.join("fmrun").display().to_string(),
            )
            .replace("-o ring", &format!("-o {}/ring", tmp.0.display()))
            .replace("./ring", &format!("{}/ring", tmp.0.display()))
    };
    let ring = here(command("cc capi/examples/ring.c"));
    let (out, _) = fm_tests::succeed(
        Command::new("sh")
            .args(["-c", &ring])
            .current_dir(&root)
            .env_remove("FM_LOG")
            .env_remove("LD_LIBRARY_PATH"),
    );
    assert_eq!(
        out.matches("big message checked").count(),
        4,
        "{ring}: {out}"
    );
    if !Path::new("/usr/bin/NPmpich2").exists() {
        eprintln!("SKIPPED the NetPIPE command: netpipe-mpich2 is not installed");
        return;
    }
    let netpipe = here(command("NPmpich2 -u 1024"));
    let (_, err) = fm_tests::succeed(
        Command::new("sh")
            .args(["-c", &netpipe])
            .current_dir(&tmp.0) // NetPIPE writes np.out where it runs
            .env_remove("FM_LOG"),
    );
    assert!(
        err.contains("1024 bytes") || err.contains("1027 bytes"),
        "{netpipe}: {err}"
    );
}
