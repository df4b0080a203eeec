//! The host agent: one process per remote host that starts all of that
//! host's ranks, so a job of H hosts costs H remote starts (`ssh`), not one
//! per rank (an sshd refuses connections beyond `MaxStartups` at random).
//! fmrun starts it through the remote shell as `fmrun --host-agent PROGRAM
//! ARGS…`. The remote shell's script takes the job's token from the first
//! line of its standard input, as for a rank (`remote.rs`: never on a
//! command line), into `FM_JOB_TOKEN`; the rest of the input brings:
//!
//! 1. one line per rank to start: the rank's number and its own variables,
//!    each `NAME=VALUE` in hexadecimal, separated by spaces;
//! 2. an empty line; the rest is rank 0's standard input, if rank 0 is
//!    here (fmrun forwards its own input to rank 0's host only).
//!
//! Each rank gets the agent's environment (the job's variables common to
//! the host's ranks, and the token) and its own. Its output lines go out labelled
//! `RANK: `, as `srun --label` labels them, which fmrun turns into its own
//! rank prefixes. The agent ends when every rank has, or as soon as one
//! fails: with that rank's status (128 + the signal for one killed), after
//! a line naming it. fmrun then stops the job as for a rank it started
//! itself, and blames that status; the agent does not stop the host's
//! other ranks first, which the resource manager would report as the
//! job's first deaths. Asked to stop (SIGTERM, SIGINT, SIGHUP: fmrun
//! stopping the job, or the remote shell closing), it stops its ranks
//! (SIGTERM, then SIGKILL). A rank outliving its agent ends with the job:
//! when fmrun ends it at the resource manager, or when fmrun is gone and
//! the rank loses the resource manager.
//!
//! The agent is also the GRM as its ranks see it (`fm_grm::host_relay`):
//! their `FM_GRM` points at it, it takes their Joins and joins them at the
//! GRM as one host (one connection, one signature, one heartbeat), passes
//! the node map on to the agents the GRM names, and passes on what its
//! ranks say; a rank that fails is reported to the GRM with its exit
//! status before the agent ends.

use crate::signals;
use fm_grm::host_relay::{HostRelay, RelayConfig};
use fm_platform as sys;
use fm_platform::hex;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What fmrun tells the agent to start: each rank's number and variables.
pub type RankSpec = (u32, Vec<(String, String)>);

/// The agent's standard input after the token and before rank 0's: one
/// line per rank, an empty line.
pub fn spec_input(ranks: &[RankSpec]) -> String {
    let mut s = String::new();
    for (rank, env) in ranks {
        s += &rank.to_string();
        for (k, v) in env {
            s.push(' ');
            s += &hex::encode(format!("{k}={v}").as_bytes());
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

/// One line of the rank list.
fn parse_rank(line: &str) -> Result<RankSpec, String> {
    let mut words = line.split(' ');
    let rank = (words.next().unwrap_or_default().parse())
        .map_err(|e| format!("a rank line that does not start with a rank ({e}): {line:?}"))?;
    let mut env = Vec::new();
    for w in words {
        let kv = hex::decode(w)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| format!("rank {rank}: a variable that is not hexadecimal: {w:?}"))?;
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("rank {rank}: {kv:?} is not NAME=VALUE"))?;
        env.push((k.to_string(), v.to_string()));
    }
    Ok((rank, env))
}

/// How long ranks asked to stop have before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// `fmrun --host-agent PROGRAM ARGS…`.
pub fn run(program: &[String]) -> ExitCode {
    match agent(program) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("fmrun host agent on {}: {e}", host());
            ExitCode::from(2)
        }
    }
}

/// This host's name in the job (`FM_HOST`, which fmrun gives its ranks).
fn host() -> String {
    fm::settings::HOST.env().unwrap_or_else(sys::hostname)
}

struct Rank {
    rank: u32,
    child: Child,
    status: Option<ExitStatus>,
}

fn agent(program: &[String]) -> Result<u8, String> {
    if program.is_empty() {
        return Err("no program to start".into());
    }
    if std::env::var_os(fm::settings::JOB_TOKEN.var).is_none() {
        return Err("FM_JOB_TOKEN is not set (fmrun starts the agent)".into());
    }
    signals::install();
    let mut input = BufReader::new(std::io::stdin());
    let mut specs = read_specs(&mut input)?;
    let relay = relay_for(&mut specs)?;
    let (ranks, to_rank0) = start(program, specs)?;
    // The rest of the input is rank 0's (or nobody's: read to its end, so
    // that fmrun's writes never block).
    std::thread::spawn(move || match to_rank0 {
        Some(mut to) => {
            let _ = std::io::copy(&mut input, &mut to);
        }
        None => {
            let _ = std::io::copy(&mut input, &mut std::io::sink());
        }
    });
    Ok(match wait(ranks) {
        None => {
            if let Some(r) = &relay {
                r.finish(RELAY_FINISH);
            }
            0
        }
        Some((rank, s)) => {
            let (what, code) = match (s.code(), s.signal()) {
                (Some(c), _) => (format!("exited with status {c}"), c as u8),
                (None, Some(sig)) => (
                    format!("was killed by {}", signals::name(sig)),
                    128u8.saturating_add(sig as u8),
                ),
                _ => ("ended".to_string(), 1),
            };
            if let Some(r) = &relay {
                r.rank_ended(rank, &what);
            }
            eprintln!("fmrun host agent on {}: rank {rank} {what}", host());
            code.max(1)
        }
    })
}

/// How long the relay has, once every rank has ended, to pass on what
/// they said last.
const RELAY_FINISH: Duration = Duration::from_secs(5);

/// The job's GRM relay for this host's ranks, when they join through a
/// GRM (`FM_GRM`, fmrun's; not under srun): their `FM_GRM` becomes the
/// relay's address.
fn relay_for(specs: &mut [RankSpec]) -> Result<Option<HostRelay>, String> {
    let own = |spec: &RankSpec| {
        (spec.1.iter().rev())
            .find(|(k, _)| k == fm::settings::GRM.var)
            .map(|(_, v)| v.clone())
    };
    let Some(grm) = specs
        .first()
        .and_then(own)
        .or_else(|| fm::settings::GRM.env())
    else {
        return Ok(None);
    };
    let token = fm::settings::JOB_TOKEN.env().unwrap_or_default();
    let attach = &fm_devices::shmem::settings::ATTACH_TIMEOUT;
    let attach = (attach.env().and_then(|v| v.parse().ok()))
        .or_else(|| attach.default.parse().ok())
        .unwrap_or(30);
    let relay = HostRelay::start(RelayConfig {
        grm,
        token,
        host: host(),
        ranks: specs.len(),
        attach_timeout: Duration::from_secs(attach),
    })
    .map_err(|e| format!("cannot serve its ranks' joins: {e}"))?;
    for (_, env) in specs.iter_mut() {
        env.push((fm::settings::GRM.var.to_string(), relay.rank_addr()));
    }
    Ok(Some(relay))
}

/// The rank list, up to its empty line.
fn read_specs(input: &mut impl BufRead) -> Result<Vec<RankSpec>, String> {
    let mut specs = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return Err("its standard input ended before the rank list did".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("reading its standard input: {e}")),
        }
        let l = line.trim_end_matches('\n');
        if l.is_empty() {
            return Ok(specs);
        }
        specs.push(parse_rank(l)?);
    }
}

/// Start every rank, its output labelled; rank 0's input, if it is here.
fn start(
    program: &[String],
    specs: Vec<RankSpec>,
) -> Result<(Vec<Rank>, Option<std::process::ChildStdin>), String> {
    let exe = &program[0];
    let mut ranks: Vec<Rank> = Vec::with_capacity(specs.len());
    let mut to_rank0 = None;
    for (rank, env) in specs {
        let mut c = Command::new(exe);
        c.args(&program[1..])
            .envs(env)
            .stdin(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            c.pre_exec(|| {
                // Its own group, stopped as one.
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = match c.spawn() {
            Ok(child) => child,
            Err(e) => {
                stop(&mut ranks);
                return Err(format!("cannot start rank {rank} ({exe:?}): {e}"));
            }
        };
        if let Some(i) = child.stdin.take() {
            to_rank0 = Some(i);
        }
        label(rank, child.stdout.take(), false);
        label(rank, child.stderr.take(), true);
        ranks.push(Rank {
            rank,
            child,
            status: None,
        });
    }
    Ok((ranks, to_rank0))
}

/// Wait for the ranks: until all have ended, or one fails (unless the
/// agent is stopping them: then until all have). The first that failed.
fn wait(mut ranks: Vec<Rank>) -> Option<(u32, ExitStatus)> {
    let mut first_failure: Option<(u32, ExitStatus)> = None;
    let mut stopping: Option<Instant> = None;
    while ranks.iter().any(|r| r.status.is_none()) {
        for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(s)) = r.child.try_wait() {
                r.status = Some(s);
                if !s.success() && first_failure.is_none() {
                    first_failure = Some((r.rank, s));
                }
            }
        }
        if first_failure.is_some() && stopping.is_none() {
            break;
        }
        if signals::take().is_some() && stopping.is_none() {
            stopping = Some(Instant::now());
            signal_all(&ranks, libc::SIGTERM);
        }
        if stopping.is_some_and(|t| t.elapsed() > STOP_GRACE) {
            signal_all(&ranks, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    first_failure
}

fn signal_all(ranks: &[Rank], sig: i32) {
    for r in ranks.iter().filter(|r| r.status.is_none()) {
        // SAFETY: signalling the process group of a rank this agent started.
        unsafe {
            libc::kill(-(r.child.id() as i32), sig);
        }
    }
}

/// Stop the ranks already started (the agent cannot start them all).
fn stop(ranks: &mut [Rank]) {
    signal_all(ranks, libc::SIGKILL);
    for r in ranks {
        let _ = r.child.wait();
    }
}

/// Forward `stream`'s lines to the agent's stdout (or stderr), each
/// labelled `RANK: ` and written whole, as srun --label does.
fn label(rank: u32, stream: Option<impl Read + Send + 'static>, to_stderr: bool) {
    let Some(stream) = stream else {
        return;
    };
    std::thread::spawn(move || {
        let mut r = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut out = format!("{rank}: ").into_bytes();
            out.extend_from_slice(&line);
            let _ = match to_stderr {
                true => std::io::stderr().lock().write_all(&out),
                false => std::io::stdout().lock().write_all(&out),
            };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_list_reads_back_what_was_written() {
        let ranks: Vec<RankSpec> = vec![
            (
                3,
                vec![
                    ("FM_RANK".into(), "3".into()),
                    ("X".into(), "a b=c\tä".into()),
                ],
            ),
            (7, vec![]),
        ];
        let input = spec_input(&ranks);
        let mut lines = input.lines();
        let back: Vec<RankSpec> = lines
            .by_ref()
            .take_while(|l| !l.is_empty())
            .map(|l| parse_rank(l).unwrap())
            .collect();
        assert_eq!(back, ranks);
        assert!(parse_rank("x 41").is_err());
        assert!(parse_rank("1 zz").is_err());
        assert!(parse_rank("1 4142").is_err());
    }
}
