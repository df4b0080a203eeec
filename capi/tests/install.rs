//! The documented install (`scripts/install.sh PREFIX`, here of this
//! debug build) gives working tools, man pages, the library, `fm.h` and
//! `fm.pc`: a C program built with pkg-config's flags runs under the
//! installed fmrun.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn the_install_script_gives_tools_docs_library_and_header() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = std::env::current_exe().expect("the test's path");
    let target = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    let profile = target
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug");
    for tool in ["fmrun", "fm-info", "fm-grm", "fm-bench"] {
        if !target.join(tool).exists() {
            eprintln!("SKIPPED the install: {tool} is not built (run the workspace's tests)");
            return;
        }
    }
    let prefix = fm_tests::TempDir::new("install");
    let o = Command::new(root.join("scripts/install.sh"))
        .arg(&prefix.0)
        .env("PROFILE", profile)
        .env("NO_BUILD", "1")
        .env("LIB_DIR", common::c_library_dir())
        .output()
        .expect("install.sh");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = &prefix.0;
    for f in [
        "bin/fmrun",
        "bin/fm-info",
        "bin/fm-grm",
        "bin/fm-bench",
        "lib/libfm_c.so",
        "lib/libfm_c.a",
        "include/fm.h",
        "lib/pkgconfig/fm.pc",
        "share/man/man1/fmrun.1",
        "share/bash-completion/completions/fmrun",
        "share/zsh/site-functions/_fm-info",
    ] {
        assert!(p.join(f).exists(), "{f} not installed");
    }
    let v = Command::new(p.join("bin/fmrun"))
        .arg("--version")
        .output()
        .expect("fmrun");
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("fmrun "));
    c_program_runs_against(p, &root);
}

/// A C program built with the flags pkg-config gives for the install at
/// `p` runs under the installed fmrun.
fn c_program_runs_against(p: &Path, root: &Path) {
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "fm"])
        .env("PKG_CONFIG_PATH", p.join("lib/pkgconfig"))
        .output();
    let Some(flags) = flags.ok().filter(|o| o.status.success()) else {
        eprintln!("SKIPPED the pkg-config build: no pkg-config here");
        return;
    };
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let ring = p.join("ring");
    let cc = Command::new("cc")
        .arg(root.join("capi/examples/ring.c"))
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(&ring)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(p.join("bin/fmrun"))
        .args(["-n", "2", "--oversubscribe"])
        .arg(&ring)
        .env("LD_LIBRARY_PATH", p.join("lib"))
        .env_remove("FM_LOG")
        .output()
        .expect("fmrun");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(out.matches("big message checked").count(), 2, "{out}");
}
