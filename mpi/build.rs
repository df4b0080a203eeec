//! The library's soname is MPICH's, `libmpich.so.12`, so that a program
//! linked against Debian's MPICH loads this one when it is found first on
//! the library path. Cargo names the file `libmpich.so` (in the profile's
//! `deps/`, and beside it once uplifted); the build also leaves
//! `mpi/libmpich.so.12` and `mpi/libmpi.so.12` in the profile's folder,
//! links to `deps/libmpich.so`, which is where fmrun looks.

use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpich.so.12");
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is PROFILE/build/fm-mpi-HASH/out.
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let Some(profile) = out.ancestors().nth(3) else {
        return;
    };
    let dir = profile.join("mpi");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let target = std::path::Path::new("../deps/libmpich.so");
    for name in ["libmpich.so.12", "libmpi.so.12"] {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target) {
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(target, &link);
        }
    }
}
