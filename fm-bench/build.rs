//! The commit fm-bench was built from, for its metadata line: `BUILD_COMMIT`
//! (`git describe`, marked `-dirty` with uncommitted changes), absent
//! outside a git checkout.

fn main() {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output();
    if let Some(o) = out.ok().filter(|o| o.status.success()) {
        let commit = String::from_utf8_lossy(&o.stdout).trim().to_string();
        println!("cargo:rustc-env=BUILD_COMMIT={commit}");
    }
    // Rebuilt when HEAD moves (a new commit, another branch).
    for f in ["../.git/HEAD", "../.git/index"] {
        if std::path::Path::new(f).exists() {
            println!("cargo:rerun-if-changed={f}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
