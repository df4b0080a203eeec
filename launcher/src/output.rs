//! Each rank's stdout and stderr, forwarded line by line with a `[rank] `
//! prefix (or none, `--no-prefix`), so lines of different ranks never
//! interleave mid-line; or written to a file per rank and stream
//! (`--output-filename DIR`: DIR/rank.N/stdout and stderr).
//!
//! One thread forwards every stream, waiting on all of them at once with
//! `poll(2)`: a thread per stream (two per rank) made a job of 1,024 ranks
//! cost fmrun 2,048 threads, and every later `fork` copy their stacks'
//! mappings (start-up grew with the square of the ranks).

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A time fmrun reports: milliseconds under a second (a fast start said
/// "joined in 0.0 s"), else tenths of seconds.
pub fn took(d: Duration) -> String {
    match d < Duration::from_secs(1) {
        true => format!("{} ms", d.as_millis()),
        false => format!("{:.1} s", d.as_secs_f64()),
    }
}

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

/// One rank's stream (or srun's), and the part of a line read so far.
struct Stream {
    fd: OwnedFd,
    prefix: Prefix,
    to_stderr: bool,
    files: Option<Files>,
    partial: Vec<u8>,
    /// `--timestamp-output`: lines begin with the time since this.
    since: Option<Instant>,
    /// A stderr stream: where each rank's last line is kept.
    last_lines: Option<LastLines>,
}

/// Each rank's last line on stderr, for fmrun's report of its failure.
type LastLines = Arc<std::sync::Mutex<HashMap<u32, String>>>;

impl Stream {
    /// Forward the complete lines read so far (all of it, with a newline
    /// added, at the end of the stream) into `out` and `err`, or to the
    /// rank's files.
    fn lines(&mut self, at_end: bool, out: &mut Vec<u8>, err: &mut Vec<u8>) {
        if at_end && !self.partial.is_empty() && self.partial.last() != Some(&b'\n') {
            self.partial.push(b'\n');
        }
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let dst = if self.to_stderr { err } else { out };
        for line in self.partial[..=end].split_inclusive(|&b| b == b'\n') {
            if let (Some(last), (Some(r), own)) = (&self.last_lines, self.prefix.split(line)) {
                let own = String::from_utf8_lossy(own).trim_end().to_string();
                if !own.is_empty() {
                    last.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(r, own);
                }
            }
            if let (Some(files), (Some(r), own)) = (self.files.as_mut(), self.prefix.split(line)) {
                if let Some(f) = files.file(r) {
                    let _ = f.write_all(own);
                }
                continue;
            }
            if let Some(t) = self.since {
                dst.extend_from_slice(format!("{:.3} ", t.elapsed().as_secs_f64()).as_bytes());
            }
            self.prefix.write(line, dst);
        }
        self.partial.drain(..=end);
    }
}

pub struct Forwarder {
    width: usize,
    /// The `[rank] ` prefix on the terminal.
    prefix: bool,
    /// `--output-filename`: files instead of the terminal.
    dir: Option<PathBuf>,
    /// `--timestamp-output`: the job's start.
    since: Option<Instant>,
    /// New streams for the forwarding thread, and its wake-up.
    streams: Sender<Stream>,
    wake: Option<Arc<OwnedFd>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Streams still open.
    open: Arc<AtomicUsize>,
    last_lines: LastLines,
}

impl Forwarder {
    /// `since`: begin each line with the seconds since then
    /// (`--timestamp-output`).
    pub fn new(size: u32, prefix: bool, dir: Option<PathBuf>, since: Option<Instant>) -> Forwarder {
        let (tx, rx) = channel();
        let open = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map(Arc::new)
            .map_err(|e| tracing::warn!("fmrun: cannot forward the ranks' output: {e}"))
            .ok();
        let thread = wake.clone().and_then(|w| {
            let (open, stop) = (open.clone(), stop.clone());
            std::thread::Builder::new()
                .name("fmrun-output".into())
                .spawn(move || forward(rx, &w, &open, &stop))
                .map_err(|e| tracing::warn!("fmrun: cannot forward the ranks' output: {e}"))
                .ok()
        });
        Forwarder {
            width: (size.saturating_sub(1)).to_string().len(),
            prefix,
            dir,
            since,
            streams: tx,
            wake,
            stop,
            thread,
            open,
            last_lines: LastLines::default(),
        }
    }

    /// Rank `rank`'s last line on stderr, waiting up to `wait` for one (a
    /// rank that just exited may not have been read to its end yet).
    pub fn last_line(&self, rank: u32, wait: Duration) -> Option<String> {
        let until = Instant::now() + wait;
        loop {
            let l = (self.last_lines.lock().unwrap_or_else(|p| p.into_inner()))
                .get(&rank)
                .cloned();
            if l.is_some() || Instant::now() >= until {
                return l;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn attach(&mut self, rank: u32, out: Option<ChildStdout>, err: Option<ChildStderr>) {
        let text = match self.prefix {
            true => format!("[{rank:>w$}] ", w = self.width).into_bytes(),
            false => Vec::new(),
        };
        let prefix = Prefix::Rank { rank, text };
        if let Some(o) = out {
            self.start(prefix.clone(), o.into(), false);
        }
        if let Some(e) = err {
            self.start(prefix, e.into(), true);
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
            self.start(prefix.clone(), o.into(), false);
        }
        if let Some(e) = err {
            self.start(prefix, e.into(), true);
        }
    }

    fn start(&mut self, prefix: Prefix, fd: OwnedFd, to_stderr: bool) {
        // Without the thread a stream is dropped (its writer sees a closed
        // pipe), never waited for.
        let Some(wake) = self.wake.as_deref().filter(|_| self.thread.is_some()) else {
            return;
        };
        let files = (self.dir.as_deref()).map(|d: &Path| Files {
            dir: d.to_path_buf(),
            name: if to_stderr { "stderr" } else { "stdout" },
            open: HashMap::new(),
        });
        self.open.fetch_add(1, Ordering::SeqCst);
        let stream = Stream {
            fd,
            prefix,
            to_stderr,
            files,
            partial: Vec::new(),
            since: self.since,
            last_lines: to_stderr.then(|| self.last_lines.clone()),
        };
        if self.streams.send(stream).is_err() {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
    }

    /// Let lines already read reach the terminal before fmrun speaks.
    pub fn flush(&self) {
        let _ = std::io::stdout().lock().flush();
    }

    /// Wait for every stream to reach its end (a rank's helper that keeps the
    /// pipe open is not waited for beyond `grace`).
    pub fn finish(mut self, grace: Duration) {
        let until = Instant::now() + grace;
        while self.open.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = &self.wake {
            let _ = rustix::io::write(&**w, &1u64.to_ne_bytes());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::io::stdout().lock().flush();
    }
}

/// The forwarding thread: wait on every open stream and the wake-up at
/// once; forward what is read as whole lines, one write per stream and
/// batch; until told to stop.
fn forward(new: Receiver<Stream>, wake: &OwnedFd, open: &AtomicUsize, stop: &AtomicBool) {
    let mut streams: Vec<Stream> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut warned = false;
    while !stop.load(Ordering::SeqCst) {
        streams.extend(new.try_iter());
        let ready: Vec<(bool, PollFlags)> = {
            let mut fds: Vec<PollFd> = std::iter::once(PollFd::new(wake, PollFlags::IN))
                .chain(streams.iter().map(|s| PollFd::new(&s.fd, PollFlags::IN)))
                .collect();
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    // More streams than the open-files limit lets poll
                    // take (fmrun raises it to the hard limit): say so
                    // once, and look again later rather than spin.
                    if !warned {
                        warned = true;
                        tracing::warn!(
                            "fmrun: cannot wait on the ranks' output ({} streams): {e}",
                            fds.len() - 1
                        );
                    }
                    drop(fds);
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            fds.iter()
                .skip(1)
                .map(|f| (!f.revents().is_empty(), f.revents()))
                .collect()
        };
        let _ = rustix::io::read(wake, &mut [0u8; 8]);
        let mut ended = vec![false; streams.len()];
        for (i, s) in streams.iter_mut().enumerate() {
            if !ready.get(i).is_some_and(|r| r.0) {
                continue;
            }
            // Readable (or hung up): one read, which does not block.
            let at_end = match rustix::io::read(&s.fd, &mut buf[..]) {
                Ok(0) | Err(_) => true,
                Ok(n) => {
                    s.partial.extend_from_slice(&buf[..n]);
                    false
                }
            };
            s.lines(at_end, &mut out, &mut err);
            ended[i] = at_end;
        }
        // Whole lines, one write per stream and batch.
        if !err.is_empty() {
            let _ = std::io::stderr().lock().write_all(&err);
            err.clear();
        }
        if !out.is_empty() {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(&out).and_then(|()| o.flush());
            out.clear();
        }
        let mut i = 0;
        streams.retain(|_| {
            i += 1;
            !ended[i - 1]
        });
        open.fetch_sub(ended.iter().filter(|&&e| e).count(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::took;
    use std::time::Duration;

    /// A start of a few milliseconds (1,024 ranks on a fast host) is not
    /// "0.0 s".
    #[test]
    fn times_under_a_second_are_in_milliseconds() {
        assert_eq!(took(Duration::from_millis(38)), "38 ms");
        assert_eq!(took(Duration::from_micros(400)), "0 ms");
        assert_eq!(took(Duration::from_millis(999)), "999 ms");
        assert_eq!(took(Duration::from_millis(1000)), "1.0 s");
        assert_eq!(took(Duration::from_millis(12_345)), "12.3 s");
    }
}
