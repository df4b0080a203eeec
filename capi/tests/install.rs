//! The documented install (`scripts/install.sh PREFIX`, here of this
//! debug build) and the Debian package (`scripts/deb.sh`, cargo-deb) give
//! working tools, man pages, the library, `fm.h` and `fm.pc`: a C program
//! built with pkg-config's flags runs under the installed fmrun.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The source tree's root.
fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `scripts/NAME` with `args`, installing this build (its profile, its
/// tools, the C library built for the tests) rather than building anew;
/// `None` when the tools are not built.
fn run_install_script(name: &str, args: &[&Path]) -> Option<std::process::Output> {
    let target = common::target_dir();
    let profile = target
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug");
    for tool in ["fmrun", "fm-info", "fm-grm", "fm-bench"] {
        if !target.join(tool).exists() {
            eprintln!("SKIPPED {name}: {tool} is not built (run the workspace's tests)");
            return None;
        }
    }
    let o = Command::new(source_root().join("scripts").join(name))
        .args(args)
        .env("PROFILE", profile)
        .env("NO_BUILD", "1")
        .env("LIB_DIR", common::c_library_dir())
        .output()
        .expect("the install script");
    assert!(
        o.status.success(),
        "{name}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(o)
}

#[test]
fn the_install_script_gives_tools_docs_library_and_header() {
    let prefix = fm_tests::TempDir::new("install");
    if run_install_script("install.sh", &[&prefix.0]).is_none() {
        return;
    }
    let p = &prefix.0;
    holds_the_installed_files(p, "");
    every_page_named_exists(&p.join("share/man/man1"));
    // Nothing on the library path: fm.pc's rpath finds libfm_c.so.
    c_program_runs_against(p, &[("PKG_CONFIG_PATH", p.join("lib/pkgconfig"))], None);
    mpi_programs_run_against(p);
}

#[test]
fn the_debian_package_gives_tools_docs_library_and_header() {
    let have_cargo_deb = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_cargo_deb {
        eprintln!("SKIPPED the .deb: no cargo-deb here (cargo install cargo-deb)");
        return;
    }
    let out = fm_tests::TempDir::new("deb");
    if run_install_script("deb.sh", &[&out.0]).is_none() {
        return;
    }
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&out.0)
        .expect("the packages' folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    debs.sort();
    let root = fm_tests::TempDir::new("deb-root");
    let Some(mut names) = unpack(&debs, &root.0) else {
        return;
    };
    names.sort();
    assert_eq!(names, ["fm", "fm-dev", "fm-mpi"], "{debs:?}");
    // Debian's own checker finds no error.
    match Command::new("lintian")
        .arg("--fail-on")
        .arg("error")
        .args(&debs)
        .output()
    {
        Ok(o) => assert!(
            o.status.success(),
            "lintian: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => eprintln!("SKIPPED lintian: not installed (apt-get install lintian)"),
    }
    // The runtime package alone holds no development file.
    let runtime = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(
            debs.iter()
                .find(|d| d.to_string_lossy().contains("/fm_"))
                .expect("fm"),
        )
        .output()
        .expect("dpkg-deb");
    let listing = String::from_utf8_lossy(&runtime.stdout);
    assert!(
        !listing.contains("libfm_c.a") && !listing.contains("fm.h"),
        "{listing}"
    );
    // dpkg runs fm-mpi's postinst; unpacked, its link is made by hand.
    let mpi = root.0.join("usr/lib/fm/mpi");
    std::os::unix::fs::symlink("libmpich.so.12", mpi.join("libmpi.so.12")).expect("link");
    let p = root.0.join("usr");
    holds_the_installed_files(&p, ".gz");
    netpipe_runs_against(&p);
    // fm.pc names /usr; the sysroot moves its flags under our root.
    // Unpacked, not installed: our root's lib stands for the system's.
    c_program_runs_against(
        &p,
        &[
            ("PKG_CONFIG_LIBDIR", p.join("lib/pkgconfig")),
            ("PKG_CONFIG_SYSROOT_DIR", root.0.clone()),
        ],
        Some(p.join("lib")),
    );
}

/// Unpack each of `debs` under `root` as dpkg would install it; their
/// package names. Each has a maintainer's address and both licences.
/// `None` without dpkg-deb.
fn unpack(debs: &[PathBuf], root: &Path) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for deb in debs {
        let info = Command::new("dpkg-deb").arg("--info").arg(deb).output();
        let Some(info) = info.ok().filter(|o| o.status.success()) else {
            eprintln!("SKIPPED unpacking the .debs: no dpkg-deb here");
            return None;
        };
        let info = String::from_utf8_lossy(&info.stdout).into_owned();
        let name = (info.lines())
            .find_map(|l| l.trim().strip_prefix("Package: "))
            .expect("a package name")
            .to_string();
        assert!(
            info.contains("Maintainer: ") && info.contains('@'),
            "{info}"
        );
        let x = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(root)
            .status()
            .expect("dpkg-deb");
        assert!(x.success());
        let copyright = root.join(format!("usr/share/doc/{name}/copyright"));
        let text = std::fs::read_to_string(&copyright).expect("a copyright file");
        assert!(
            text.contains("MIT License") && text.contains("Apache"),
            "{text}"
        );
        names.push(name);
    }
    Some(names)
}

/// A program compiled with the installed fm-mpicc and fm's own mpi.h runs
/// under the installed fmrun on the installed library (lib/fm/mpi), as does
/// NetPIPE built against MPICH.
fn mpi_programs_run_against(p: &Path) {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpi/tests/c/p2p.c");
    let exe = p.join("p2p");
    fm_tests::succeed(
        Command::new(p.join("bin/fm-mpicc"))
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&suite),
    );
    // docs/MPI.md's third way: cc with fm-mpi.pc's flags.
    let (flags, _) = fm_tests::succeed(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "fm-mpi"])
            .env("PKG_CONFIG_PATH", p.join("lib/pkgconfig")),
    );
    fm_tests::succeed(
        Command::new("cc")
            .arg(&suite)
            .args(flags.split_whitespace())
            .arg("-o")
            .arg(p.join("p2p-pc")),
    );
    let (show, _) = fm_tests::succeed(Command::new(p.join("bin/fm-mpicc")).args(["-show", "x.c"]));
    assert!(
        show.contains("include/fm") && show.contains("libmpich.so.12"),
        "{show}"
    );
    for exe in [exe, p.join("p2p-pc")] {
        let (out, _) = fm_tests::succeed(&mut installed_fmrun(p, &exe, &[]));
        assert!(out.contains("all passed on 2 ranks"), "{out}");
    }
    netpipe_runs_against(p);
}

/// The installed fmrun at `p`, 2 ranks of `program`, nothing on the
/// library path.
fn installed_fmrun(p: &Path, program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(p.join("bin/fmrun"));
    c.args(["-n", "2", "--timeout", "60s"])
        .arg(program)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .current_dir(p); // NetPIPE writes np.out where it runs
    c
}

/// Debian's NetPIPE, built against MPICH, runs under the installed fmrun
/// on the installed MPI library.
fn netpipe_runs_against(p: &Path) {
    let netpipe = Path::new("/usr/bin/NPmpich2");
    if netpipe.exists() {
        // NetPIPE reports on its standard error.
        let (_, err) = fm_tests::succeed(&mut installed_fmrun(p, netpipe, &["-i", "-u", "4096"]));
        assert!(err.matches("Integrity check passed").count() > 5, "{err}");
    }
}

/// The tools, library, header, pkg-config file, man pages (their files
/// ending in `man_suffix`) and completions are under `p`, and the
/// installed fmrun runs.
fn holds_the_installed_files(p: &Path, man_suffix: &str) {
    for page in [
        "fmrun",
        "fm-info",
        "fm-info-doctor",
        "fm-grm",
        "fm-bench",
        "fm-mpicc",
    ] {
        let f = format!("share/man/man1/{page}.1{man_suffix}");
        assert!(p.join(&f).exists(), "{f} not installed");
    }
    for f in [
        "bin/fmrun",
        "bin/fm-info",
        "bin/fm-grm",
        "bin/fm-bench",
        "lib/libfm_c.so",
        "lib/libfm_c.a",
        "include/fm.h",
        "lib/pkgconfig/fm.pc",
        "lib/fm/mpi/libmpich.so.12",
        "lib/fm/mpi/libmpi.so.12",
        "include/fm/mpi.h",
        "bin/fm-mpicc",
        "lib/pkgconfig/fm-mpi.pc",
        "share/bash-completion/completions/fmrun",
        "share/zsh/site-functions/_fm-info",
        "share/fish/vendor_completions.d/fm-bench.fish",
    ] {
        assert!(p.join(f).exists(), "{f} not installed");
    }
    let v = Command::new(p.join("bin/fmrun"))
        .arg("--version")
        .output()
        .expect("fmrun");
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("fmrun "));
}

/// Every page a page's SEE ALSO names (`fm-info-doctor(1)`) is installed,
/// and every tool's page has EXAMPLES, EXIT STATUS and ENVIRONMENT.
fn every_page_named_exists(man1: &Path) {
    for e in std::fs::read_dir(man1).expect("man1").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("a page");
        let name = e.file_name().to_string_lossy().into_owned();
        let see = text.split(".SH \"SEE ALSO\"").nth(1).unwrap_or("");
        for word in see.split([',', ' ', '\n']) {
            if let Some(page) = word.trim().strip_suffix("(1)") {
                let page = page.replace("\\-", "-");
                if page.starts_with("fm") {
                    assert!(
                        man1.join(format!("{page}.1")).exists(),
                        "{name} names {page}(1)"
                    );
                }
            }
        }
        if [
            "fmrun.1",
            "fm-info.1",
            "fm-grm.1",
            "fm-bench.1",
            "fm-mpicc.1",
        ]
        .contains(&name.as_str())
        {
            for section in [".SH EXAMPLES", "EXIT STATUS", ".SH ENVIRONMENT"] {
                assert!(text.contains(section), "{name} has no {section}");
            }
        }
    }
}

/// A C program built with the flags pkg-config gives (with `env`) for the
/// install at `p` runs under the installed fmrun, with `lib_path` (only)
/// as the library path.
fn c_program_runs_against(p: &Path, env: &[(&str, PathBuf)], lib_path: Option<PathBuf>) {
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "fm"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output();
    let Some(flags) = flags.ok().filter(|o| o.status.success()) else {
        eprintln!("SKIPPED the pkg-config build: no pkg-config here");
        return;
    };
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let ring = p.join("ring");
    let cc = Command::new("cc")
        .arg(source_root().join("capi/examples/ring.c"))
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
    let mut run = Command::new(p.join("bin/fmrun"));
    run.args(["-n", "2", "--oversubscribe"])
        .arg(&ring)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("FM_LOG");
    if let Some(dir) = lib_path {
        run.env("LD_LIBRARY_PATH", dir);
    }
    let run = run.output().expect("fmrun");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(out.matches("big message checked").count(), 2, "{out}");
}
