//! The ABI is stated twice in this crate: `mpi/src/abi.rs` (what the
//! library reads) and `mpi/include/mpi.h` (what `fm-mpicc` programs are
//! compiled against). A C program prints each constant as the header
//! defines it, and the test compares them with the Rust values: a change
//! to either file alone fails it. (That fm's header has MPICH's values is
//! `mpich_programs.rs`, `fm_header_agrees_with_mpich`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_file(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// `pub const MPI_X: T = literal;` of abi.rs (its other constants, such
/// as the handle kinds of objects made at run time, are the library's own), with their values (a literal
/// such as `0x8400_0000_u32 as Handle` is the 32-bit pattern, as C reads it).
fn rust_constants() -> BTreeMap<String, i64> {
    let src = std::fs::read_to_string(crate_file("src/abi.rs")).expect("abi.rs");
    let mut out = BTreeMap::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const MPI_") else {
            continue;
        };
        let (name, value) = rest.split_once(':').expect("a typed constant");
        let value = value.split_once('=').expect("a value").1;
        let literal = value
            .trim()
            .trim_end_matches(';')
            .split(" as ")
            .next()
            .expect("literal")
            .replace('_', "");
        let literal = literal.trim_end_matches("u32").trim_end_matches("usize");
        let (neg, digits) = match literal.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, literal),
        };
        let v = match digits.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16),
            None => digits.parse::<i64>(),
        };
        let Ok(mut v) = v else {
            continue; // not a literal (an expression of other constants)
        };
        if neg {
            v = -v;
        }
        // As C's int reads a 32-bit pattern.
        let v = if (0x8000_0000..=0xffff_ffff).contains(&v) {
            v - (1 << 32)
        } else {
            v
        };
        out.insert(format!("MPI_{name}"), v);
    }
    out
}

/// The names fm's mpi.h defines as integers: a literal, or a literal cast
/// to a handle type (not pointers, functions or expressions of names).
fn header_names() -> Vec<String> {
    let h = std::fs::read_to_string(crate_file("include/mpi.h")).expect("mpi.h");
    let integer = |v: &str| {
        let v = v.trim().trim_start_matches('(').trim_end_matches(')');
        // An optional `(MPI_Handle)` cast, then the literal.
        let v = match v.split_once(')') {
            Some((cast, lit)) if cast.starts_with("MPI_") && !cast.contains('*') => lit,
            Some(_) => return false,
            None => v,
        };
        let v = v.trim().trim_start_matches('-');
        let v = v.strip_prefix("0x").unwrap_or(v);
        !v.is_empty() && v.chars().all(|c| c.is_ascii_hexdigit())
    };
    h.lines()
        .filter_map(|l| l.strip_prefix("#define MPI_"))
        .filter_map(|rest| rest.split_once(char::is_whitespace))
        .filter(|(name, value)| !name.contains('(') && integer(value))
        .map(|(name, _)| format!("MPI_{name}"))
        .collect()
}

/// Each of `names` as the header found with the flag `include` defines
/// it, printed by a C program compiled against it.
fn c_values(include: &str, names: &[String], dir: &Path) -> BTreeMap<String, i64> {
    let mut c = String::from("#include <mpi.h>\n#include <stdio.h>\nint main(void) {\n");
    for n in names {
        c += &format!("    printf(\"{n} %lld\\n\", (long long)({n}));\n");
    }
    c += "    return 0;\n}\n";
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, c).expect("write abi.c");
    let out = Command::new("cc")
        .arg(include)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc {include}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run abi");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_string(), v.parse().expect("a number")))
        .collect()
}

#[test]
fn abi_rs_and_fm_mpi_h_agree() {
    let dir = fm_tests::TempDir::new("abi-drift");
    let rust = rust_constants();
    let names = header_names();
    assert!(
        rust.len() > 40 && names.len() > 60,
        "{} {}",
        rust.len(),
        names.len()
    );
    // Every constant the library reads is in the header programs compile
    // against, with the same value.
    let include = format!("-I{}", crate_file("include").display());
    let ours = c_values(&include, &names, &dir.0);
    let mut wrong = Vec::new();
    for (n, v) in &rust {
        match ours.get(n) {
            Some(h) if h == v => {}
            Some(h) => wrong.push(format!("{n}: abi.rs {v}, mpi.h {h}")),
            None => wrong.push(format!("{n}: in abi.rs ({v}), not in mpi.h")),
        }
    }
    assert!(
        wrong.is_empty(),
        "abi.rs and mpi.h differ:\n{}",
        wrong.join("\n")
    );
}
