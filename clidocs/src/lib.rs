//! fm-clidocs: each tool's man page and shell completions, generated from
//! its clap definition, so they never drift from the options it takes.
//! Every tool answers `TOOL --generate-docs DIR` (as its only arguments,
//! kept out of its help); `scripts/gen-docs.sh` runs them all.

use clap_complete::Shell;
use std::path::Path;

/// Write `DIR/man1/NAME.1` and the bash, zsh and fish completions under
/// `DIR/completions/` for the command `cmd`.
pub fn generate(mut cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let man = dir.join("man1");
    std::fs::create_dir_all(&man)?;
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    std::fs::write(man.join(format!("{name}.1")), page)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, &name, &completions)?;
    }
    Ok(())
}

/// Called first in a tool's `main`: when its arguments are exactly
/// `--generate-docs DIR`, write the docs of `command()` there and exit.
pub fn generate_if_asked(command: impl FnOnce() -> clap::Command) {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [flag, dir] = &args[..] else { return };
    if flag != "--generate-docs" {
        return;
    }
    let cmd = command();
    let name = cmd.get_name().to_string();
    match generate(cmd, Path::new(dir)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!(
                "{name}: cannot write the docs to {}: {e}",
                dir.to_string_lossy()
            );
            std::process::exit(2)
        }
    }
}
