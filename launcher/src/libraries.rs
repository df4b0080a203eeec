//! Where fm's MPI and C libraries are beside a tool (fmrun, fm-info), and,
//! before any rank starts, the check that a program built against MPICH
//! finds fm's MPI library — else each of its ranks would load MPICH's own
//! and run as a separate one-process job: N copies of "rank 0 of 1", exit 0.

use std::path::{Path, PathBuf};

/// The command that builds everything a user runs, fm's MPI and C
/// libraries included (the README's first command).
pub const BUILD_COMMAND: &str = "cargo build --release --workspace --lib --bins --examples";

/// The folder of fm's `libmpich.so.12` beside the running program: `mpi/`
/// in a build's folder, or `../lib/fm/mpi/` of an installation.
pub fn mpi_library_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?;
    [bin.join("mpi"), bin.join("../lib/fm/mpi")]
        .into_iter()
        .find(|d| d.join("libmpich.so.12").exists())
        .and_then(|d| d.canonicalize().ok())
}

/// fm's C library beside the running program: in a build's folder, or
/// `../lib/` of an installation.
pub fn c_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?;
    [bin.join("libfm_c.so"), bin.join("../lib/libfm_c.so")]
        .into_iter()
        .find(|p| p.exists())
        .and_then(|p| p.canonicalize().ok())
}

/// The MPI libraries of MPICH's ABI a program may name.
const MPICH_SONAMES: [&str; 2] = ["libmpich.so.12", "libmpi.so.12"];

/// Which MPICH library `program` (a path, or a name looked up on PATH)
/// names as needed, if it is an ELF file that names one. Anything that
/// cannot be read or parsed (a script, a missing file) names none: the
/// start then fails or succeeds as it would have.
pub fn needed_mpich_library(program: &str) -> Option<&'static str> {
    let path = resolve(program)?;
    let bytes = std::fs::read(path).ok()?;
    let elf = goblin::elf::Elf::parse(&bytes).ok()?;
    MPICH_SONAMES
        .into_iter()
        .find(|soname| elf.libraries.contains(soname))
}

/// `program` as the shell would find it.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The refusal for an MPICH-built program without fm's library, or `None`
/// when the job may start. `lib`: the folder of fm's `libmpich.so.12` that
/// fmrun will put first on the ranks' path; `no_mpi_lib`: `--no-mpi-lib`.
pub fn refusal(program: &str, n: u32, lib: Option<&Path>, no_mpi_lib: bool) -> Option<String> {
    if n < 2 || lib.is_some() {
        return None;
    }
    let soname = needed_mpich_library(program)?;
    let why = match no_mpi_lib {
        true => "--no-mpi-lib keeps fm's MPI library off the ranks' library path".to_string(),
        false => "fm's MPI library is not beside this fmrun (mpi/libmpich.so.12 in a build, \
                  lib/fm/mpi/ of an installation)"
            .to_string(),
    };
    Some(format!(
        "{program} is an MPI program built against MPICH (it needs {soname}), and {why}: \
         each of its {n} ranks would load MPICH's own library and run as a separate \
         one-process job. Build fm's MPI library with `{BUILD_COMMAND}`, or start the \
         program with MPICH's own mpiexec"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary is no MPI program; a missing file or a script is
    /// none either.
    #[test]
    fn only_programs_that_name_mpich_are_refused() {
        let me = std::env::current_exe().expect("test binary");
        let me = me.to_str().expect("utf-8 path");
        assert_eq!(needed_mpich_library(me), None);
        assert_eq!(needed_mpich_library("/nonexistent/program"), None);
        assert_eq!(needed_mpich_library("/bin/sh"), None);
        assert_eq!(refusal(me, 4, None, false), None);
    }

    /// Debian's NetPIPE for MPICH, where it is installed: refused without
    /// fm's library (or with --no-mpi-lib), accepted with it or alone.
    #[test]
    fn netpipe_for_mpich_is_refused_without_fms_library() {
        let np = "/usr/bin/NPmpich2";
        if !Path::new(np).exists() {
            eprintln!("SKIPPED: {np} not installed (netpipe-mpich2)");
            return;
        }
        assert_eq!(needed_mpich_library(np), Some("libmpich.so.12"));
        let r = refusal(np, 2, None, false).expect("refused");
        assert!(r.contains(BUILD_COMMAND), "{r}");
        assert!(refusal(np, 2, None, true)
            .expect("refused")
            .contains("--no-mpi-lib"));
        assert_eq!(refusal(np, 2, Some(Path::new("/x")), false), None);
        assert_eq!(refusal(np, 1, None, false), None);
    }
}
