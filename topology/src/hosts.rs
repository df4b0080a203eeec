//! Hosts and their slots, and the placement of ranks on them.
//!
//! A host file has one host per line: its name, then `slots=N` (how many
//! ranks it takes), `ranks=0,5` (exactly which), `address=…` (where to
//! start them, when the name is not that); `name:N` is short for
//! `name slots=N`. `#` starts a comment. A host without slots or ranks
//! takes an even share of what the others leave.

use fm_grm::proto::MAX_JOB;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a host was named: a file and line, or the `--hosts` option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub file: Option<PathBuf>,
    pub line: usize,
}

impl Origin {
    pub fn option() -> Origin {
        Origin {
            file: None,
            line: 0,
        }
    }
    pub fn at(file: &Path, line: usize) -> Origin {
        Origin {
            file: Some(file.to_path_buf()),
            line,
        }
    }
    /// `file:line: what`, or `--hosts: what`.
    pub fn error(&self, what: impl fmt::Display) -> String {
        format!("{self}: {what}")
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}:{}", p.display(), self.line),
            None => write!(f, "--hosts"),
        }
    }
}

/// A host of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// Its name: ranks with the same name share memory (`FM_HOST`).
    pub name: String,
    /// What `{host}` becomes in the launch command: its address, or its name.
    pub target: String,
    /// How many ranks it takes; `None`: an even share of what is left.
    pub slots: Option<u32>,
    /// The most ranks it may take (Open MPI's `max_slots=`).
    pub max_slots: Option<u32>,
    /// Ranks placed here by number.
    pub ranks: Vec<u32>,
    /// Its cluster, in a topology file.
    pub cluster: Option<usize>,
    pub origin: Origin,
}

impl HostEntry {
    pub fn new(name: &str, origin: Origin) -> HostEntry {
        HostEntry {
            name: name.to_string(),
            target: name.to_string(),
            slots: None,
            max_slots: None,
            ranks: Vec::new(),
            cluster: None,
            origin,
        }
    }

    /// Ranks it takes, if it says.
    fn count(&self) -> Option<u32> {
        self.slots
            .or((!self.ranks.is_empty()).then_some(self.ranks.len() as u32))
    }
}

/// A valid host name: what a hostname or an ssh destination may hold.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._@[]:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a host name (letters, digits, '-', '.', '_', '@')"
        ))
    }
}

/// `a:2,b:2` or `a,b` (the `--hosts` option).
pub fn parse_spec(spec: &str) -> Result<Vec<HostEntry>, String> {
    let mut hosts = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let h = host_word(part, &Origin::option())?;
        if hosts.iter().any(|o: &HostEntry| o.name == h.name) {
            return Err(format!("--hosts: host {:?} is named twice", h.name));
        }
        hosts.push(h);
    }
    if hosts.is_empty() {
        return Err("--hosts names no host".into());
    }
    Ok(hosts)
}

/// `name` or `name:N`.
fn host_word(word: &str, at: &Origin) -> Result<HostEntry, String> {
    let (name, slots) =
        match word.rsplit_once(':') {
            Some((n, c)) if !n.contains(':') || n.starts_with('[') => (
                n,
                Some(c.parse::<u32>().map_err(|_| {
                    at.error(format!("{word:?}: the count after ':' is not a number"))
                })?),
            ),
            _ => (word, None),
        };
    check_name(name).map_err(|e| at.error(e))?;
    let mut h = HostEntry::new(name, at.clone());
    h.slots = slots;
    Ok(h)
}

/// A host file (see the module documentation).
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<HostEntry>, String> {
    let mut hosts: Vec<HostEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let at = Origin::at(path, i + 1);
        let line = raw.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        let mut h = host_word(first, &at)?;
        for w in words {
            let Some((key, value)) = w.split_once('=') else {
                return Err(at.error(format!(
                    "{w:?}: expected key=value (slots=N, max_slots=N, ranks=0,1, address=…)"
                )));
            };
            match key {
                "slots" => {
                    h.slots = Some(
                        value
                            .parse()
                            .map_err(|_| at.error(format!("slots={value:?} is not a number")))?,
                    )
                }
                "max_slots" => {
                    h.max_slots =
                        Some(value.parse().map_err(|_| {
                            at.error(format!("max_slots={value:?} is not a number"))
                        })?)
                }
                "ranks" => h.ranks = parse_ranks(value).map_err(|e| at.error(e))?,
                "address" => {
                    check_name(value).map_err(|e| at.error(format!("address: {e}")))?;
                    h.target = value.to_string();
                }
                _ => {
                    return Err(at.error(format!(
                        "unknown key {key:?} (known: slots, max_slots, ranks, address)"
                    )))
                }
            }
        }
        if let Some(first) = hosts.iter().find(|o| o.name == h.name) {
            return Err(at.error(format!(
                "host {:?} is listed twice (first at line {})",
                h.name, first.origin.line
            )));
        }
        hosts.push(h);
    }
    if hosts.is_empty() {
        return Err(format!("{}: names no host", path.display()));
    }
    Ok(hosts)
}

/// `0,1,5` or `0-3`.
fn parse_ranks(v: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("ranks={v:?}: a list of ranks like 0,1 or 0-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if b < a || b - a >= MAX_JOB {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    if out.is_empty() {
        return Err(format!("ranks={v:?} names no rank"));
    }
    Ok(out)
}

/// Rank i's host (an index into `hosts`) for a job of `n` ranks, or of as
/// many as the hosts have slots when `n` is `None`. Ranks named by number
/// go where they are named; the others fill the hosts' slots in order.
pub fn place(hosts: &[HostEntry], n: Option<u32>) -> Result<Vec<usize>, String> {
    let counted: u64 = hosts.iter().filter_map(|h| h.count()).map(u64::from).sum();
    let uncounted = hosts.iter().filter(|h| h.count().is_none()).count() as u64;
    let source = hosts
        .first()
        .map_or_else(|| "--hosts".to_string(), |h| origin_name(&h.origin));
    let n = match n {
        Some(n) => n as u64,
        None if uncounted == 0 => counted,
        None => {
            return Err(format!(
                "{source}: say how many processes (-n) or give every host its slots"
            ))
        }
    };
    if n == 0 || n > MAX_JOB as u64 {
        return Err(format!(
            "{source} places {n} processes: 1 to {} can run",
            MAX_JOB
        ));
    }
    let share = match uncounted {
        0 => 0,
        u => n.saturating_sub(counted).div_ceil(u),
    };
    let mut placed = place_named(hosts, n)?;
    let mut free = placed
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_none())
        .map(|(r, _)| r)
        .collect::<Vec<_>>()
        .into_iter();
    for (i, h) in hosts.iter().enumerate() {
        if !h.ranks.is_empty() {
            continue;
        }
        for _ in 0..h.count().map_or(share, u64::from) {
            match free.next() {
                Some(r) => placed[r] = Some(i),
                None => break,
            }
        }
    }
    let missing: Vec<usize> = free.collect();
    if let Some(first) = missing.first() {
        return Err(format!(
            "{source}: the hosts take {} processes but -n is {n}: rank {first}{} placed on no host",
            n as usize - missing.len(),
            if missing.len() > 1 {
                format!(" and {} more are", missing.len() - 1)
            } else {
                " is".into()
            }
        ));
    }
    let placed: Vec<usize> = placed.into_iter().map(|p| p.unwrap_or(0)).collect();
    for (i, h) in hosts.iter().enumerate() {
        let Some(max) = h.max_slots else { continue };
        let got = placed.iter().filter(|&&p| p == i).count();
        if got > max as usize {
            return Err(h.origin.error(format!(
                "host {:?} would take {got} processes, more than its max_slots={max}",
                h.name
            )));
        }
    }
    Ok(placed)
}

/// The ranks hosts name by number (`ranks=`), each on its host; the rest
/// `None`. A rank named twice or beyond the job is an error.
fn place_named(hosts: &[HostEntry], n: u64) -> Result<Vec<Option<usize>>, String> {
    let mut placed: Vec<Option<usize>> = vec![None; n as usize];
    for (i, h) in hosts.iter().enumerate() {
        if h.slots
            .is_some_and(|s| !h.ranks.is_empty() && s as usize != h.ranks.len())
        {
            return Err(h.origin.error(format!(
                "host {:?} has slots={} but names {} ranks",
                h.name,
                h.slots.unwrap_or(0),
                h.ranks.len()
            )));
        }
        for &r in &h.ranks {
            let Some(slot) = placed.get_mut(r as usize) else {
                return Err(h.origin.error(format!(
                    "host {:?} names rank {r}, but the job has {n} ranks (0 to {})",
                    h.name,
                    n - 1
                )));
            };
            if let Some(other) = *slot {
                let o = &hosts[other];
                return Err(h.origin.error(format!(
                    "rank {r} is placed twice: on host {:?} and on host {:?} ({})",
                    o.name, h.name, o.origin
                )));
            }
            *slot = Some(i);
        }
    }
    Ok(placed)
}

/// The file the hosts came from, or `--hosts`.
fn origin_name(o: &Origin) -> String {
    o.file
        .as_ref()
        .map_or_else(|| "--hosts".into(), |p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<Vec<HostEntry>, String> {
        parse_file(Path::new("hosts"), text)
    }

    #[test]
    fn a_spec_places_ranks_in_blocks() {
        let h = parse_spec("a:2,b:2").unwrap();
        assert_eq!(place(&h, Some(4)).unwrap(), [0, 0, 1, 1]);
        assert_eq!(place(&h, None).unwrap(), [0, 0, 1, 1]);
        assert_eq!(place(&h, Some(3)).unwrap(), [0, 0, 1]);
        let even = parse_spec("a,b").unwrap();
        assert_eq!(place(&even, Some(5)).unwrap(), [0, 0, 0, 1, 1]);
        assert!(place(&even, None).unwrap_err().contains("-n"));
        let e = place(&h, Some(6)).unwrap_err();
        assert!(
            e.contains("take 4 processes but -n is 6: rank 4 and 1 more are placed on no host"),
            "{e}"
        );
        assert!(parse_spec("a:x").unwrap_err().contains("not a number"));
        assert!(parse_spec("a,a").unwrap_err().contains("twice"));
        assert!(parse_spec(" , ").unwrap_err().contains("names no host"));
    }

    #[test]
    fn a_host_file_with_slots_ranks_and_addresses() {
        let h = file("# two hosts\na0 slots=2 address=198.18.1.10\n\na1:1   # one\nb0 ranks=0,4\n")
            .unwrap();
        assert_eq!(h[0].target, "198.18.1.10");
        assert_eq!(h[1].slots, Some(1));
        assert_eq!(place(&h, None).unwrap(), [2, 0, 0, 1, 2]);
    }

    /// Open MPI's `max_slots=`: a host takes at most that many; -n
    /// beyond the hosts' caps is refused, naming the host.
    #[test]
    fn an_open_mpi_host_file_with_max_slots() {
        let h = file("a0 slots=2 max_slots=2\na1 max_slots=3\n").unwrap();
        assert_eq!(h[1].max_slots, Some(3));
        assert_eq!(place(&h, Some(5)).unwrap(), [0, 0, 1, 1, 1]);
        let e = place(&h, Some(6)).unwrap_err();
        assert!(
            e.contains("host \"a1\" would take 4 processes, more than its max_slots=3"),
            "{e}"
        );
        let e = file("a0 max_slots=x\n").unwrap_err();
        assert!(e.contains("max_slots=\"x\" is not a number"), "{e}");
    }

    #[test]
    fn bad_host_files_name_the_line() {
        for (text, want) in [
            (
                "a0 slots=2\na0 slots=1\n",
                "hosts:2: host \"a0\" is listed twice (first at line 1)",
            ),
            ("a0 slot=2\n", "hosts:1: unknown key \"slot\""),
            ("\na0 slots=two\n", "hosts:2: slots=\"two\" is not a number"),
            ("a0 2\n", "hosts:1: \"2\": expected key=value"),
            ("a/0\n", "hosts:1: \"a/0\" is not a host name"),
            ("a0 ranks=1-x\n", "hosts:1: ranks=\"1-x\""),
            ("# nothing\n", "hosts: names no host"),
        ] {
            let e = file(text).expect_err(text);
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
        let h = file("a0 ranks=0,1\na1 ranks=1\n").unwrap();
        let e = place(&h, None).unwrap_err();
        assert!(
            e.starts_with(
                "hosts:2: rank 1 is placed twice: on host \"a0\" and on host \"a1\" (hosts:1)"
            ),
            "{e}"
        );
        let h = file("a0 ranks=0,7\n").unwrap();
        let e = place(&h, Some(2)).unwrap_err();
        assert!(
            e.starts_with("hosts:1: host \"a0\" names rank 7, but the job has 2 ranks"),
            "{e}"
        );
        let h = file("a0 slots=3 ranks=0\n").unwrap();
        assert!(place(&h, None)
            .unwrap_err()
            .starts_with("hosts:1: host \"a0\" has slots=3 but names 1 ranks"));
    }
}
