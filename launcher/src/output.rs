//! Each rank's stdout and stderr, forwarded line by line with a `[rank] `
//! prefix (or none, `--no-prefix`), so lines of different ranks never
//! interleave mid-line; or written to a file per rank and stream
//! (`--output-filename DIR`: DIR/rank.N/stdout and stderr).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone)]
enum Prefix {
    /// The lines of this rank: `[rank] ` before each (or nothing).
    Rank { rank: u32, text: Vec<u8> },
    /// srun's `--label` output: lines start `  3: `; rewritten as `[3] `
    /// (or nothing).
    Label { width: usize, show: bool },
}

impl Prefix {
    /// The rank a line is from (`None`: srun's own messages) and the
    /// rank's own bytes of it (without srun's label).
    fn split<'l>(&self, line: &'l [u8]) -> (Option<u32>, &'l [u8]) {
        match self {
            Prefix::Rank { rank, .. } => (Some(*rank), line),
            Prefix::Label { .. } => {
                let labelled = (line.windows(2).position(|w| w == b": ")).and_then(|at| {
                    let r = std::str::from_utf8(&line[..at]).ok()?.trim().parse().ok()?;
                    Some((r, &line[at + 2..]))
                });
                match labelled {
                    Some((r, rest)) => (Some(r), rest),
                    None => (None, line),
                }
            }
        }
    }

    /// The line as it goes to the terminal.
    fn write(&self, line: &[u8], buf: &mut Vec<u8>) {
        match (self, self.split(line)) {
            (Prefix::Rank { text, .. }, (_, body)) => {
                buf.extend_from_slice(text);
                buf.extend_from_slice(body);
            }
            (Prefix::Label { width, show: true }, (Some(r), body)) => {
                buf.extend_from_slice(format!("[{r:>width$}] ").as_bytes());
                buf.extend_from_slice(body);
            }
            (Prefix::Label { .. }, (_, body)) => buf.extend_from_slice(body),
        }
    }
}

/// `--output-filename DIR`: rank r's stream goes to DIR/rank.r/NAME.
struct Files {
    dir: PathBuf,
    name: &'static str,
    open: HashMap<u32, File>,
}

impl Files {
    fn file(&mut self, rank: u32) -> Option<&mut File> {
        if !self.open.contains_key(&rank) {
            let dir = self.dir.join(format!("rank.{rank}"));
            let f = std::fs::create_dir_all(&dir).and_then(|()| File::create(dir.join(self.name)));
            match f {
                Ok(f) => _ = self.open.insert(rank, f),
                Err(e) => {
                    tracing::warn!("fmrun: cannot write {}: {e}", dir.display());
                    return None;
                }
            }
        }
        self.open.get_mut(&rank)
    }
}

pub struct Forwarder {
    width: usize,
    /// The `[rank] ` prefix on the terminal.
    prefix: bool,
    /// `--output-filename`: files instead of the terminal.
    dir: Option<PathBuf>,
    threads: Vec<JoinHandle<()>>,
    /// Streams still open.
    open: Arc<AtomicUsize>,
}

impl Forwarder {
    pub fn new(size: u32, prefix: bool, dir: Option<PathBuf>) -> Forwarder {
        Forwarder {
            width: (size.saturating_sub(1)).to_string().len(),
            prefix,
            dir,
            threads: Vec::new(),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn attach(&mut self, rank: u32, out: Option<ChildStdout>, err: Option<ChildStderr>) {
        let text = match self.prefix {
            true => format!("[{rank:>w$}] ", w = self.width).into_bytes(),
            false => Vec::new(),
        };
        let prefix = Prefix::Rank { rank, text };
        if let Some(o) = out {
            self.start(prefix.clone(), o, false);
        }
        if let Some(e) = err {
            self.start(prefix, e, true);
        }
    }

    /// The output of `srun --label`, whose lines start with `RANK: `: the
    /// same prefix as [`Forwarder::attach`] gives.
    pub fn attach_labelled(&mut self, out: Option<ChildStdout>, err: Option<ChildStderr>) {
        let prefix = Prefix::Label {
            width: self.width,
            show: self.prefix,
        };
        if let Some(o) = out {
            self.start(prefix.clone(), o, false);
        }
        if let Some(e) = err {
            self.start(prefix, e, true);
        }
    }

    fn start(&mut self, prefix: Prefix, stream: impl Read + Send + 'static, to_stderr: bool) {
        let open = self.open.clone();
        open.fetch_add(1, Ordering::SeqCst);
        let mut files = (self.dir.as_deref()).map(|d: &Path| Files {
            dir: d.to_path_buf(),
            name: if to_stderr { "stderr" } else { "stdout" },
            open: HashMap::new(),
        });
        let spawned = std::thread::Builder::new()
            .name("fmrun-output".into())
            .spawn(move || {
                let mut r = BufReader::new(stream);
                let mut line = Vec::with_capacity(256);
                let mut buf = Vec::with_capacity(256);
                loop {
                    line.clear();
                    match r.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    if let (Some(files), (Some(r), own)) = (files.as_mut(), prefix.split(&line)) {
                        if let Some(f) = files.file(r) {
                            let _ = f.write_all(own);
                        }
                        continue;
                    }
                    buf.clear();
                    prefix.write(&line, &mut buf);
                    // One write per line under the stream's lock.
                    let _ = if to_stderr {
                        std::io::stderr().lock().write_all(&buf)
                    } else {
                        let mut o = std::io::stdout().lock();
                        o.write_all(&buf).and_then(|()| o.flush())
                    };
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        match spawned {
            Ok(h) => self.threads.push(h),
            Err(e) => {
                self.open.fetch_sub(1, Ordering::SeqCst);
                tracing::warn!("fmrun: cannot forward a rank's output: {e}");
            }
        }
    }

    /// Let lines already read reach the terminal before fmrun speaks.
    pub fn flush(&self) {
        let _ = std::io::stdout().lock().flush();
    }

    /// Wait for every stream to reach its end (a rank's helper that keeps the
    /// pipe open is not waited for beyond `grace`).
    pub fn finish(self, grace: Duration) {
        let until = Instant::now() + grace;
        while self.open.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        for t in self.threads {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        let _ = std::io::stdout().lock().flush();
    }
}
