//! What the C tests share: the C library (`libfm_c.a`, `libfm_c.so`) of
//! this source tree. `cargo test` builds the crate only as the Rust
//! library its tests link, so the C library is built here, by cargo, into
//! a target directory of its own (no lock shared with the running cargo).

use std::path::{Path, PathBuf};
use std::process::Command;

/// This build's target directory (`target/debug`), where fmrun is.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/PROFILE")
        .to_path_buf()
}

/// The directory holding `libfm_c.a` and `libfm_c.so`, built now if needed.
pub fn c_library_dir() -> PathBuf {
    let own = target_dir().join("c-library");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = Command::new(cargo)
        .args(["build", "-q", "-p", "fm-capi", "--lib"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &own)
        .output()
        .expect("cargo");
    assert!(
        o.status.success(),
        "building the C library: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    own.join("debug")
}
