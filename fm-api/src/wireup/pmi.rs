//! A client of the Process Management Interface's two wire protocols, as
//! the launchers clusters run serve them: PMI-1 (MPICH's hydra, `mpiexec`;
//! Slurm's `mpi/pmi2` plugin answers it too) and PMI-2 (`srun
//! --mpi=pmi2`, hydra). The launcher hands each process a connected socket
//! (`PMI_FD`) or an address (`PMI_PORT`); over it a process learns its
//! rank and size, puts keys into the job's key-value space, waits at a
//! fence until every process has put its own, and gets the others'.
//!
//! PMI-1 is a line of `key=value` words per message; PMI-2 a message of
//! `key=value;` pairs after its length in a 6-character field. Both start
//! with the same PMI-1 `init` line, which says the version the client
//! speaks. Values here are what fm puts (hexadecimal, no separators) and
//! the launcher's own (job ids, the process mapping).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// Which PMI wire protocol to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    V1,
    V2,
}

impl Wire {
    /// The version and subversion `init` names: PMI-1.1 (Slurm refuses
    /// 1.0) or PMI-2.0.
    fn version(self) -> (u32, u32) {
        match self {
            Wire::V1 => (1, 1),
            Wire::V2 => (2, 0),
        }
    }
}

/// Why talking to the launcher failed.
#[derive(Debug, thiserror::Error)]
pub enum PmiError {
    #[error("{var}={value:?}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("the launcher's PMI connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("the launcher answered {what} with {answer:?}")]
    Refused { what: String, answer: String },
    #[error("the launcher closed the PMI connection during {0}")]
    Closed(String),
    #[error("the launcher's key-value space has no {key:?}")]
    Missing { key: String },
    #[error("PMIx needs OpenPMIx's client library {library} (Debian: apt-get install libpmix2; or name it in FM_PMIX_LIBRARY): {why}")]
    NoLibrary { library: String, why: String },
    #[error("{call} failed: {status}")]
    Pmix { call: &'static str, status: String },
}

type Result<T> = std::result::Result<T, PmiError>;

/// A process's connection to its launcher's PMI server.
pub struct Pmi {
    wire: Wire,
    reader: BufReader<File>,
    writer: File,
    pub rank: u32,
    pub size: usize,
    /// The key-value space: PMI-1's kvsname, PMI-2's job id.
    space: String,
    finalized: bool,
}

/// A variable the launcher sets, parsed.
fn env_number<T: std::str::FromStr>(var: &'static str) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|e: T::Err| PmiError::Env {
                var,
                value: v.clone(),
                reason: e.to_string(),
            }),
        Err(_) => Ok(None),
    }
}

/// The `key=value` fields of a message, split by `sep`; PMI-2 writes a
/// `;` inside a value as `;;`.
fn fields(message: &str, wire: Wire) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let parts: Vec<String> = match wire {
        Wire::V1 => message.split_whitespace().map(str::to_string).collect(),
        Wire::V2 => {
            let mut parts = Vec::new();
            let mut cur = String::new();
            let mut chars = message.chars().peekable();
            while let Some(c) = chars.next() {
                if c == ';' {
                    if chars.peek() == Some(&';') {
                        chars.next();
                        cur.push(';');
                    } else {
                        parts.push(std::mem::take(&mut cur));
                    }
                } else {
                    cur.push(c);
                }
            }
            if !cur.is_empty() {
                parts.push(cur);
            }
            parts
        }
    };
    for p in parts {
        if let Some((k, v)) = p.split_once('=') {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

fn field<'a>(f: &'a [(String, String)], key: &str) -> Option<&'a str> {
    f.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

impl Pmi {
    /// Connect as the launcher's environment says (`PMI_FD` or `PMI_PORT`)
    /// and initialise: rank, size and the key-value space are known after.
    pub fn connect(wire: Wire) -> Result<Pmi> {
        let fd = match env_number::<i32>("PMI_FD")? {
            Some(fd) => {
                // SAFETY: the launcher opened this descriptor for this process
                // and nothing else in the process uses it; it is checked to be
                // a socket before it is taken.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                let ok = fd >= 0 && unsafe { libc::fstat(fd, &mut st) } == 0;
                if !ok || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                    return Err(PmiError::Env {
                        var: "PMI_FD",
                        value: fd.to_string(),
                        reason: "not an open socket in this process".into(),
                    });
                }
                unsafe { OwnedFd::from_raw_fd(fd) }
            }
            None => {
                let Ok(port) = std::env::var("PMI_PORT") else {
                    return Err(PmiError::Env {
                        var: "PMI_FD",
                        value: String::new(),
                        reason: "neither PMI_FD nor PMI_PORT is set: this process was not started by a PMI launcher".into(),
                    });
                };
                let s = std::net::TcpStream::connect(port.trim()).map_err(|e| PmiError::Env {
                    var: "PMI_PORT",
                    value: port.clone(),
                    reason: format!("cannot connect: {e}"),
                })?;
                OwnedFd::from(s)
            }
        };
        let writer = File::from(fd);
        let reader = BufReader::new(writer.try_clone()?);
        let mut p = Pmi {
            wire,
            reader,
            writer,
            rank: env_number("PMI_RANK")?.unwrap_or(0),
            size: env_number("PMI_SIZE")?.unwrap_or(1),
            space: String::new(),
            finalized: false,
        };
        p.init()?;
        Ok(p)
    }

    fn init(&mut self) -> Result<()> {
        if let Ok(id) = std::env::var("PMI_ID") {
            // A process that connected by PMI_PORT says who it is first; the
            // server then sets its size and rank.
            self.send_v1(&format!("cmd=initack pmiid={}", id.trim()))?;
            self.expect_v1("initack", "cmd=initack")?;
            for _ in 0..3 {
                let f = self.read_v1("initack")?;
                match (field(&f, "cmd"), f.get(1)) {
                    (Some("set"), Some((k, v))) if k == "size" => {
                        self.size = v.parse().unwrap_or(self.size)
                    }
                    (Some("set"), Some((k, v))) if k == "rank" => {
                        self.rank = v.parse().unwrap_or(self.rank)
                    }
                    _ => {}
                }
            }
        }
        let (v, sub) = self.wire.version();
        self.send_v1(&format!("cmd=init pmi_version={v} pmi_subversion={sub}"))?;
        let f = self.read_v1("init")?;
        if field(&f, "rc") != Some("0") || field(&f, "pmi_version") != Some(&v.to_string()) {
            return Err(PmiError::Refused {
                what: format!("init for PMI-{v}"),
                answer: join(&f),
            });
        }
        match self.wire {
            Wire::V1 => {
                let f = self.call("get_my_kvsname", &[])?;
                self.space = self.value(&f, "kvsname", "get_my_kvsname")?;
            }
            Wire::V2 => {
                let rank = self.rank.to_string();
                let mut args = vec![("pmirank", rank.as_str()), ("threaded", "FALSE")];
                let jobid = std::env::var("PMI_JOBID").unwrap_or_default();
                if !jobid.is_empty() {
                    args.insert(0, ("pmijobid", jobid.as_str()));
                }
                let f = self.call("fullinit", &args)?;
                let number = |k: &str| field(&f, k).and_then(|v| v.parse().ok());
                self.rank = number("rank").unwrap_or(self.rank as usize) as u32;
                self.size = number("size").unwrap_or(self.size);
                let f = self.call("job-getid", &[])?;
                self.space = self.value(&f, "jobid", "job-getid")?;
            }
        }
        Ok(())
    }

    fn value(&self, f: &[(String, String)], key: &str, what: &str) -> Result<String> {
        field(f, key)
            .map(str::to_string)
            .ok_or_else(|| PmiError::Refused {
                what: what.into(),
                answer: join(f),
            })
    }

    /// Put `key` = `value` into the job's space, for the others to get
    /// after the next fence.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        match self.wire {
            Wire::V1 => {
                let space = self.space.clone();
                self.call(
                    "put",
                    &[("kvsname", &space), ("key", key), ("value", value)],
                )?
            }
            Wire::V2 => self.call("kvs-put", &[("key", key), ("value", value)])?,
        };
        Ok(())
    }

    /// Wait until every process of the job reached its fence; what each
    /// put before is then there to get.
    pub fn fence(&mut self) -> Result<()> {
        match self.wire {
            Wire::V1 => self.call("barrier_in", &[])?,
            Wire::V2 => self.call("kvs-fence", &[])?,
        };
        Ok(())
    }

    /// The value of `key` in the job's space (put by any process before
    /// the last fence, or by the launcher).
    pub fn get(&mut self, key: &str) -> Result<String> {
        let space = self.space.clone();
        let f = match self.wire {
            Wire::V1 => self.call_any("get", &[("kvsname", &space), ("key", key)])?,
            Wire::V2 => self.call_any(
                "kvs-get",
                &[("jobid", &space), ("srcid", "-1"), ("key", key)],
            )?,
        };
        let found = match self.wire {
            Wire::V1 => field(&f, "rc") == Some("0"),
            Wire::V2 => field(&f, "rc") == Some("0") && field(&f, "found") == Some("TRUE"),
        };
        match field(&f, "value") {
            Some(v) if found => Ok(v.to_string()),
            _ => Err(PmiError::Missing { key: key.into() }),
        }
    }

    /// End the whole job through the launcher, which kills every process
    /// and reports `code`.
    pub fn abort(&mut self, code: i32, message: &str) {
        let message: String = (message.chars())
            .map(|c| {
                if c.is_whitespace() || c == ';' {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        let _ = match self.wire {
            Wire::V1 => self.send_v1(&format!("cmd=abort exitcode={code}")),
            Wire::V2 => self.send_v2(&format!("cmd=abort;isworldabort=TRUE;msg={message};")),
        };
    }

    /// Say this process is done with the launcher's services (before it
    /// exits; a launcher may take an exit without it for a failure).
    pub fn finalize(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        // The same command in both protocols.
        self.call("finalize", &[])?;
        Ok(())
    }

    /// Send command `cmd` with `args` and read its answer, which must say
    /// `rc=0` (PMI-1's barrier and finalize answers say nothing).
    fn call(&mut self, cmd: &str, args: &[(&str, &str)]) -> Result<Vec<(String, String)>> {
        let f = self.call_any(cmd, args)?;
        match field(&f, "rc") {
            None | Some("0") => Ok(f),
            Some(_) => Err(PmiError::Refused {
                what: cmd.into(),
                answer: join(&f),
            }),
        }
    }

    fn call_any(&mut self, cmd: &str, args: &[(&str, &str)]) -> Result<Vec<(String, String)>> {
        match self.wire {
            Wire::V1 => {
                let mut line = format!("cmd={cmd}");
                for (k, v) in args {
                    line.push_str(&format!(" {k}={v}"));
                }
                self.send_v1(&line)?;
                self.read_v1(cmd)
            }
            Wire::V2 => {
                let mut m = format!("cmd={cmd};");
                for (k, v) in args {
                    m.push_str(&format!("{k}={};", v.replace(';', ";;")));
                }
                self.send_v2(&m)?;
                self.read_v2(cmd)
            }
        }
    }

    fn send_v1(&mut self, line: &str) -> Result<()> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        Ok(())
    }

    fn read_v1(&mut self, what: &str) -> Result<Vec<(String, String)>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(PmiError::Closed(what.into()));
        }
        Ok(fields(line.trim_end(), Wire::V1))
    }

    fn expect_v1(&mut self, what: &str, line: &str) -> Result<()> {
        let f = self.read_v1(what)?;
        if join(&f) != line {
            return Err(PmiError::Refused {
                what: what.into(),
                answer: join(&f),
            });
        }
        Ok(())
    }

    fn send_v2(&mut self, message: &str) -> Result<()> {
        self.writer
            .write_all(format!("{:<6}{message}", message.len()).as_bytes())?;
        Ok(())
    }

    fn read_v2(&mut self, what: &str) -> Result<Vec<(String, String)>> {
        let mut head = [0u8; 6];
        read_all(&mut self.reader, &mut head, what)?;
        let len: usize = (std::str::from_utf8(&head).ok())
            .and_then(|h| h.trim().parse().ok())
            .filter(|&n| n <= 1 << 20)
            .ok_or_else(|| PmiError::Refused {
                what: what.into(),
                answer: String::from_utf8_lossy(&head).into_owned(),
            })?;
        let mut body = vec![0u8; len];
        read_all(&mut self.reader, &mut body, what)?;
        Ok(fields(&String::from_utf8_lossy(&body), Wire::V2))
    }
}

fn read_all(r: &mut BufReader<File>, buf: &mut [u8], what: &str) -> Result<()> {
    use std::io::Read;
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => PmiError::Closed(what.into()),
        _ => PmiError::Io(e),
    })
}

fn join(f: &[(String, String)]) -> String {
    let parts: Vec<String> = f.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(" ")
}

impl Drop for Pmi {
    fn drop(&mut self) {
        if let Err(e) = self.finalize() {
            tracing::debug!("fm: PMI finalize: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmi2_fields_unescape_doubled_semicolons() {
        let f = fields(
            "cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b=c;",
            Wire::V2,
        );
        assert_eq!(field(&f, "cmd"), Some("kvs-get-response"));
        assert_eq!(field(&f, "value"), Some("a;b=c"));
        assert_eq!(field(&f, "found"), Some("TRUE"));
    }

    #[test]
    fn pmi1_fields_split_on_spaces_and_the_first_equals() {
        let f = fields(
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))",
            Wire::V1,
        );
        assert_eq!(field(&f, "value"), Some("(vector,(0,1,1))"));
        assert_eq!(field(&f, "msg"), Some("success"));
    }
}
