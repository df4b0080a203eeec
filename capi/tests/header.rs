//! `include/fm.h` is what cbindgen makes of `src/lib.rs` now. To update it:
//! `FM_BLESS=1 cargo test -p fm-capi --test header`.

#[test]
fn fm_h_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut made = Vec::new();
    cbindgen::generate_with_config(dir, config)
        .expect("cbindgen reads src/lib.rs")
        .write(&mut made);
    let made = String::from_utf8(made).expect("UTF-8");
    let path = format!("{dir}/include/fm.h");
    if std::env::var_os("FM_BLESS").is_some() {
        std::fs::write(&path, &made).expect("write include/fm.h");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == made,
        "include/fm.h is not what cbindgen makes of src/lib.rs; run FM_BLESS=1 cargo test -p fm-capi --test header"
    );
}
