//! The shared library names itself: soname `libfm_c.so`, so that a program
//! linked against it records that name (and the dynamic linker cache knows
//! the library) whichever path it was linked from.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfm_c.so");
    println!("cargo:rerun-if-changed=build.rs");
}
