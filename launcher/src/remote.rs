//! Starting a rank on another host through a remote shell (OpenSSH by
//! default, or any command template such as `ip netns exec {host}`), and
//! all ranks through Slurm's srun.
//!
//! The job token never appears on a command line, where `ps` on either
//! host would show it: the rank's shell reads it from its standard input,
//! which fmrun writes first (the rest of rank 0's input follows, as
//! mpirun forwards it). Every other setting is on the command line, so
//! `ps` tells which rank a process is.

use std::path::Path;
use std::process::Command;

/// The remote shell: a command template where `{host}` is replaced.
pub struct RemoteShell {
    words: Vec<String>,
    /// OpenSSH and rsh hand their arguments to the remote user's shell as
    /// one line: each must be quoted. Other commands exec them as they are.
    through_shell: bool,
}

impl RemoteShell {
    pub fn parse(template: &str) -> Result<RemoteShell, String> {
        let words: Vec<String> = template.split_whitespace().map(str::to_string).collect();
        let Some(first) = words.first() else {
            return Err("--rsh is empty: give a command such as \"ssh {host}\"".into());
        };
        if !words.iter().any(|w| w.contains("{host}")) {
            return Err(format!("--rsh {template:?} has no {{host}} to replace"));
        }
        let program = Path::new(first)
            .file_name()
            .map_or(first.as_str(), |n| n.to_str().unwrap_or(""));
        Ok(RemoteShell {
            through_shell: matches!(program, "ssh" | "rsh"),
            words,
        })
    }

    /// The command that starts `program` on `target` with `env`, reading
    /// `FM_JOB_TOKEN` from its first line of input, in the directory fmrun
    /// runs in when that exists there.
    pub fn command(&self, target: &str, env: &[(String, String)], program: &[String]) -> Command {
        let mut words = self.words.iter().map(|w| w.replace("{host}", target));
        let mut c = Command::new(words.next().unwrap_or_else(|| "ssh".into()));
        c.args(words);
        let mut script =
            String::from("IFS= read -r FM_JOB_TOKEN || exit 126; export FM_JOB_TOKEN; ");
        if let Ok(dir) = std::env::current_dir() {
            script += &format!("cd {} 2>/dev/null; ", quote(&dir.to_string_lossy()));
        }
        script += "exec env";
        for (k, v) in env {
            script.push(' ');
            script += &quote(&format!("{k}={v}"));
        }
        for w in program {
            script.push(' ');
            script += &quote(w);
        }
        if self.through_shell {
            c.arg(format!("sh -c {}", quote(&script)));
        } else {
            c.args(["sh", "-c", &script]);
        }
        c
    }
}

/// `s` as one word of a POSIX shell.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Whether a host list's name or address is this machine: `localhost`,
/// its host name (full or up to the first dot), a loopback address or one
/// of its interfaces' addresses.
pub fn is_this_machine(target: &str) -> bool {
    let t = target.trim().trim_start_matches('[').trim_end_matches(']');
    if t.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = t.parse::<std::net::IpAddr>() {
        return ip.is_loopback()
            || fm_platform::find_address(|_, a, _| (a == ip).then_some(())).is_some();
    }
    let me = fm_platform::hostname();
    let short = |n: &str| n.split('.').next().unwrap_or(n).to_ascii_lowercase();
    t.eq_ignore_ascii_case(&me) || (!t.contains('.') && short(t) == short(&me))
}

/// srun for all `n` ranks: Slurm numbers them (SLURM_PROCID) and names
/// their nodes; `--label` prefixes each line with the task's number, which
/// fmrun's forwarder turns into its own prefix. The token travels in the
/// environment srun passes on, not on its command line.
pub fn srun(n: u32, program: &[String]) -> Command {
    let srun = crate::settings::SRUN.env().unwrap_or_else(|| "srun".into());
    let mut c = Command::new(srun);
    c.arg(format!("--ntasks={n}"))
        .args(["--kill-on-bad-exit=1", "--label", "--export=ALL"])
        .args(program);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_a_shell() {
        for s in ["plain", "a b", "it's", "$HOME `x` \"q\"", "", "a\nb", "*"] {
            let out = Command::new("sh")
                .args(["-c", &format!("printf %s {}", quote(s))])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), s, "{s:?}");
        }
    }

    #[test]
    fn the_token_is_read_not_passed() {
        // `sh -c SCRIPT` run here as the remote side would: through a shell
        // for ssh, as arguments for other commands.
        for template in ["ssh {host}", "env {host}"] {
            let r = RemoteShell::parse(template).unwrap();
            let c = r.command(
                "X=1",
                &[("FM_RANK".into(), "3".into())],
                &[
                    "sh".into(),
                    "-c".into(),
                    "echo $FM_RANK $FM_JOB_TOKEN $X".into(),
                ],
            );
            let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
            assert!(!args.join(" ").contains("secret"));
            let mut local = if r.through_shell {
                let mut l = Command::new("sh");
                l.arg("-c").arg(&args[1]);
                l
            } else {
                let mut l = Command::new("env");
                l.args(&args);
                l
            };
            use std::io::Write;
            let mut child = local
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(b"secret\n").unwrap();
            let out = child.wait_with_output().unwrap();
            let want = if r.through_shell {
                "3 secret\n"
            } else {
                "3 secret 1\n"
            };
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{template}");
        }
        assert!(RemoteShell::parse("ssh").is_err());
        assert!(RemoteShell::parse("").is_err());
    }
}
