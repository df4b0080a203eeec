//! fm-clidocs: each tool's man page and shell completions, generated from
//! its clap definition, so they never drift from the options it takes.
//! Every tool answers `TOOL --generate-docs DIR` (as its only arguments,
//! kept out of its help); `scripts/gen-docs.sh` runs them all.
//!
//! A page has clap's sections (name, synopsis, description, options,
//! subcommands) and the tool's own [`Page`]: EXAMPLES, EXIT STATUS and
//! ENVIRONMENT. A tool with subcommands also gets a page per visible
//! subcommand, `TOOL-SUB.1`, which its page's SEE ALSO names.

use clap_complete::Shell;
use std::io::Write;
use std::path::Path;

/// What a tool's man page says beyond its options.
#[derive(Clone, Copy, Default)]
pub struct Page {
    /// (command line, what it does).
    pub examples: &'static [(&'static str, &'static str)],
    /// (status, when).
    pub exit_status: &'static [(&'static str, &'static str)],
    /// (variable, what it does).
    pub environment: &'static [(&'static str, &'static str)],
    /// Other pages, as `fm-info(1)`.
    pub see_also: &'static [&'static str],
}

/// A roff paragraph's text: backslashes and leading dots escaped.
fn roff_text(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    match s.starts_with('.') || s.starts_with('\'') {
        true => format!("\\&{s}"),
        false => s,
    }
}

/// `.SH TITLE` and a tagged paragraph per entry.
fn tagged(out: &mut Vec<u8>, title: &str, rows: &[(&str, &str)]) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out, ".SH {title}")?;
    for (tag, text) in rows {
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff_text(tag), roff_text(text))?;
    }
    Ok(())
}

/// The man page of `cmd`, with `page`'s sections and `see_also`.
fn render(cmd: &clap::Command, page: &Page, see_also: &[String]) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    tagged(&mut out, "EXAMPLES", page.examples)?;
    tagged(&mut out, "EXIT STATUS", page.exit_status)?;
    tagged(&mut out, "ENVIRONMENT", page.environment)?;
    if !see_also.is_empty() {
        writeln!(out, ".SH \"SEE ALSO\"\n{}", roff_text(&see_also.join(", ")))?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// Write `DIR/man1/NAME.1` (and `NAME-SUB.1` for each visible subcommand)
/// and the bash, zsh and fish completions under `DIR/completions/` for the
/// command `cmd`.
pub fn generate(mut cmd: clap::Command, page: &Page, dir: &Path) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let man = dir.join("man1");
    std::fs::create_dir_all(&man)?;
    cmd.build();
    let subs: Vec<clap::Command> = (cmd.get_subcommands())
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .cloned()
        .collect();
    let mut see_also: Vec<String> = (subs.iter())
        .map(|s| format!("{name}-{}(1)", s.get_name()))
        .collect();
    see_also.extend(page.see_also.iter().map(|s| s.to_string()));
    std::fs::write(
        man.join(format!("{name}.1")),
        render(&cmd, page, &see_also)?,
    )?;
    for sub in subs {
        let (full, words) = (
            format!("{name}-{}", sub.get_name()),
            format!("{name} {}", sub.get_name()),
        );
        let sub = sub.name(full.clone()).bin_name(words);
        let back = [format!("{name}(1)")];
        std::fs::write(
            man.join(format!("{full}.1")),
            render(&sub, &Page::default(), &back)?,
        )?;
    }
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, &name, &completions)?;
    }
    Ok(())
}

/// Called first in a tool's `main`: when its arguments are exactly
/// `--generate-docs DIR`, write the docs of `command()` and `page` there
/// and exit.
pub fn generate_if_asked(command: impl FnOnce() -> clap::Command, page: &Page) {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [flag, dir] = &args[..] else { return };
    if flag != "--generate-docs" {
        return;
    }
    let cmd = command();
    let name = cmd.get_name().to_string();
    match generate(cmd, page, Path::new(dir)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A page has the tool's sections, and each subcommand a page of its
    /// own that the main page names.
    #[test]
    fn pages_have_examples_exit_status_environment_and_subcommand_pages() {
        let cmd = clap::Command::new("tool")
            .version("1.0")
            .about("does things")
            .arg(clap::Arg::new("all").long("all").help("every thing"))
            .subcommand(clap::Command::new("check").about("checks things"));
        let page = Page {
            examples: &[("tool check", "checks")],
            exit_status: &[("0", "all went well")],
            environment: &[("TOOL_LOG", "what to log")],
            see_also: &["fmrun(1)"],
        };
        let dir = std::env::temp_dir().join(format!("clidocs-{}", std::process::id()));
        generate(cmd, &page, &dir).expect("docs");
        let main = std::fs::read_to_string(dir.join("man1/tool.1")).expect("tool.1");
        let sub = std::fs::read_to_string(dir.join("man1/tool-check.1")).expect("tool-check.1");
        let _ = std::fs::remove_dir_all(&dir);
        for s in [
            ".SH EXAMPLES",
            ".SH \"EXIT STATUS\"",
            ".SH ENVIRONMENT",
            "tool\\-check(1)",
        ] {
            assert!(
                main.contains(s) || main.contains(&s.replace('"', "")),
                "{s} in {main}"
            );
        }
        assert!(main.contains("fmrun(1)"), "{main}");
        assert!(
            sub.contains("checks things") && sub.contains("tool(1)"),
            "{sub}"
        );
    }
}
