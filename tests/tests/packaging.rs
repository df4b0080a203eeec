//! Every crate but this tests crate packages for crates.io: each internal
//! dependency carries a version beside its path, and no package is named
//! `fm` (taken on crates.io; the API crate is `fm-api`, its library `fm`).
//!
//! `cargo package --workspace` also builds every package from its
//! `.crate` against the others' (a minute and a half here); the test skips
//! that build (`--no-verify`), which the manifests alone decide.

use std::path::Path;
use std::process::Command;

#[test]
fn every_published_crate_packages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scratch = fm_tests::TempDir::new("package");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = Command::new(cargo)
        .args([
            "package",
            "--workspace",
            "--exclude",
            "fm-tests",
            "--no-verify",
            "--allow-dirty",
            "--quiet",
        ])
        .current_dir(&root)
        // Its own target folder: the .crate files are scratch, and no lock
        // is shared with the cargo running this test.
        .env("CARGO_TARGET_DIR", &scratch.0)
        .output()
        .expect("cargo package");
    assert!(
        o.status.success(),
        "cargo package: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let crates: Vec<String> = std::fs::read_dir(scratch.0.join("package"))
        .expect("target/package")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".crate"))
        .collect();
    for name in [
        "fm-platform",
        "fm-devices",
        "fm-composite",
        "fm-grm",
        "fm-pacer",
        "fm-api",
        "fm-topology",
        "fm-launcher",
        "fm-info",
        "fm-bench",
        "fm-capi",
        "fm-clidocs",
        "fm-coll",
    ] {
        let want = format!("{name}-{}.crate", env!("CARGO_PKG_VERSION"));
        assert!(crates.contains(&want), "{want} not packaged: {crates:?}");
    }
    assert!(
        !crates.iter().any(|c| c.starts_with("fm-tests")),
        "the tests crate is not published: {crates:?}"
    );
}

/// Every published crate carries the README and both licences' files.
#[test]
fn every_published_crate_carries_readme_and_licences() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let scratch = fm_tests::TempDir::new("package-list");
    for name in [
        "fm-api",
        "fm-devices",
        "fm-launcher",
        "fm-mpi",
        "fm-capi",
        "fm-bench",
    ] {
        let o = Command::new(&cargo)
            .args(["package", "--list", "--allow-dirty", "-p", name])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &scratch.0)
            .output()
            .expect("cargo package --list");
        let files = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for f in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(files.lines().any(|l| l == f), "{name} lacks {f}: {files}");
        }
    }
}

/// The Debian packages' dependencies on each other name this version.
#[test]
fn the_debian_packages_depend_on_this_version() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../launcher/Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("launcher/Cargo.toml");
    let pins: Vec<&str> = text
        .split("(= ")
        .skip(1)
        .filter_map(|t| t.split(')').next())
        .collect();
    assert!(pins.len() >= 3, "{pins:?}");
    for v in pins {
        assert_eq!(
            v,
            env!("CARGO_PKG_VERSION"),
            "a Debian dependency on fm {v}"
        );
    }
}
