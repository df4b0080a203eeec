//! Each rank's stdout and stderr, forwarded line by line with a `[rank] `
//! prefix, so lines of different ranks never interleave mid-line.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone)]
enum Prefix {
    /// Put before every line.
    Rank(Vec<u8>),
    /// Lines start `  3: `; rewrite that as `[3] `.
    Label { width: usize },
}

impl Prefix {
    fn write(&self, line: &[u8], buf: &mut Vec<u8>) {
        match self {
            Prefix::Rank(p) => {
                buf.extend_from_slice(p);
                buf.extend_from_slice(line);
            }
            Prefix::Label { width } => {
                let text = String::from_utf8_lossy(line);
                match text
                    .split_once(": ")
                    .filter(|(r, _)| r.trim().parse::<u32>().is_ok())
                {
                    Some((r, rest)) => {
                        buf.extend_from_slice(format!("[{:>width$}] {rest}", r.trim()).as_bytes())
                    }
                    // srun's own messages.
                    None => buf.extend_from_slice(line),
                }
            }
        }
    }
}

pub struct Forwarder {
    width: usize,
    threads: Vec<JoinHandle<()>>,
    /// Streams still open.
    open: Arc<AtomicUsize>,
}

impl Forwarder {
    pub fn new(size: u32) -> Forwarder {
        Forwarder {
            width: (size.saturating_sub(1)).to_string().len(),
            threads: Vec::new(),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn attach(&mut self, rank: u32, out: Option<ChildStdout>, err: Option<ChildStderr>) {
        let prefix = Prefix::Rank(format!("[{rank:>w$}] ", w = self.width).into_bytes());
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
        let prefix = Prefix::Label { width: self.width };
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
