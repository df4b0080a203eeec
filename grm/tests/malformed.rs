//! Bad bytes against a running fm-grm daemon: the fuzzer's corpus and a set
//! of malformed frames (truncated, oversized length, unknown version or
//! type, forged counts, random bytes). Each one is refused, a job running
//! meanwhile on the same GRM never notices, and the daemon's memory stays flat.

use fm_grm::proto::{self, GrmStatus, Msg, MAX_FRAME, VERSION};
use fm_grm::{Event, LauncherLink, Membership};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/grm_decode")
}

struct Daemon(Child, String);

impl Daemon {
    fn start() -> Daemon {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fm-grm"))
            .args(["--listen", "127.0.0.1:0", "--print-addr"])
            .env("FM_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fm-grm");
        let mut line = String::new();
        BufReader::new(c.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("address");
        Daemon(c, line.trim().to_string())
    }

    /// Resident memory of the daemon, KiB.
    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).expect("status");
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }

    fn status(&self) -> GrmStatus {
        fm_grm::client::status(&self.1).expect("status")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Send raw bytes as a whole connection; return what the GRM answered.
fn send_raw(addr: &str, bytes: &[u8]) -> Option<Msg> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    // The GRM speaks first (its challenge); then its answer.
    let reply = match proto::read_msg(&mut s).ok() {
        Some(Msg::Challenge { .. }) => proto::read_msg(&mut s).ok(),
        other => other,
    };
    // The GRM closes its side after refusing.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    reply
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// Malformed frames, each a whole connection's bytes.
fn malformed(rng: &mut impl Rng) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    let good: Vec<Vec<u8>> = proto::examples().iter().map(Msg::encode).collect();
    for (i, f) in good.iter().enumerate() {
        // Truncated: a length that promises more than comes.
        v.push((format!("truncated {i}"), f[..f.len() - 1].to_vec()));
        // Unknown version.
        let mut g = f.clone();
        g[4..6].copy_from_slice(&(VERSION + 1).to_le_bytes());
        v.push((format!("version {i}"), g));
        // Trailing garbage inside the frame.
        let mut body = f[4..].to_vec();
        body.push(0xAA);
        v.push((format!("trailing {i}"), framed(&body)));
        // One byte flipped.
        let mut g = f.clone();
        let at = rng.gen_range(4..g.len());
        g[at] ^= 0xFF;
        v.push((format!("flipped {i}@{at}"), g));
    }
    v.push((
        "oversized length".into(),
        ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec(),
    ));
    v.push(("4 GiB length".into(), u32::MAX.to_le_bytes().to_vec()));
    v.push(("length below the header".into(), framed(&[1, 0])));
    v.push(("unknown type".into(), framed(&[1, 0, 0xEE])));
    v.push(("empty".into(), Vec::new()));
    // A Join claiming a billion handlers in a few bytes.
    let mut forged = vec![1, 0, 3, 4, 0];
    forged.extend_from_slice(b"toke");
    forged.extend_from_slice(&[0, 1, 0, b'h', 7, 0, 0, 0]);
    forged.extend_from_slice(&[0; 8]);
    forged.extend_from_slice(&1_000_000_000u32.to_le_bytes());
    v.push(("forged handler count".into(), framed(&forged)));
    for i in 0..64 {
        let n = rng.gen_range(0..600);
        let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        v.push((format!("random {i}"), bytes));
        let body: Vec<u8> = [1u8, 0]
            .into_iter()
            .chain((0..n).map(|_| rng.gen()))
            .collect();
        v.push((format!("random body {i}"), framed(&body)));
    }
    v
}

#[test]
// Long because it is one scenario: a job runs while every kind of bad
// frame arrives, and the job must still finish.
#[allow(clippy::too_many_lines)]
fn malformed_frames_and_the_fuzz_corpus_are_refused_while_a_job_runs() {
    let d = Daemon::start();
    let addr = d.1.clone();

    // A real job of two processes on the same GRM, alive throughout.
    let token = fm_grm::client::new_token();
    let (tx, events) = mpsc::channel();
    let launcher = LauncherLink::register(&addr, &token, 2, "bystander", move |e| {
        let _ = tx.send(e);
    })
    .expect("register");
    let hurt = Arc::new(AtomicBool::new(false));
    let members: Vec<Membership> = (0..2)
        .map(|r| {
            let (a, t, h) = (addr.clone(), token.clone(), hurt.clone());
            std::thread::spawn(move || {
                let j = proto::Join {
                    job: [0; 16],
                    nonce: [0; 32],
                    proof: [0; 64],
                    rank: Some(r),
                    host: "h".into(),
                    pid: std::process::id(),
                    fingerprint: 1,
                    handlers: vec![],
                    endpoints: vec![],
                };
                Membership::join(&a, &t, j, Duration::from_secs(10), move |_| {
                    h.store(true, Ordering::SeqCst)
                })
                .expect("join")
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut cases = malformed(&mut rng);
    let mut seeds = 0;
    for e in std::fs::read_dir(corpus_dir())
        .expect("the fuzz corpus is in the repository")
        .flatten()
    {
        let bytes = std::fs::read(e.path()).expect("corpus file");
        cases.push((
            format!("corpus {}", e.file_name().to_string_lossy()),
            framed(&bytes),
        ));
        seeds += 1;
    }
    assert!(seeds > 0, "empty corpus");

    let rss_before = d.rss_kib();
    let rejected_before = d.status().rejected_frames;
    let mut refused = 0u64;
    // Three passes: memory must not grow with the number of bad connections.
    for pass in 0..3 {
        for (name, bytes) in &cases {
            let decodes = bytes.len() >= 4
                && proto::read_frame(&mut &bytes[..], proto::MAX_FRAME)
                    .and_then(|f| Msg::decode(&f))
                    .is_ok();
            let reply = send_raw(&addr, bytes);
            if decodes {
                continue; // a well-formed message (a corpus seed): served as such
            }
            let complete_header = bytes.len() >= 4;
            match reply {
                Some(Msg::Refused { .. }) => refused += 1,
                // A connection that ends before its first frame is complete is closed without a word.
                None if !complete_header
                    || proto::read_frame(&mut &bytes[..], proto::MAX_FRAME).is_err() => {}
                other => panic!("pass {pass}, {name}: answered {other:?}"),
            }
        }
    }
    assert!(refused > 100, "only {refused} refusals");

    // Connections all closed; the bystander job intact.
    let deadline = Instant::now() + Duration::from_secs(5);
    let st = loop {
        let st = d.status();
        // 2 members + 1 launcher + this status query.
        if st.connections <= 4 || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.connections <= 4, "{st:?}");
    assert!(st.rejected_frames >= rejected_before + refused, "{st:?}");
    assert_eq!(st.members, 2, "{st:?}");
    assert!(
        !hurt.load(Ordering::SeqCst),
        "the running job was disturbed"
    );
    let rss_after = d.rss_kib();
    assert!(
        rss_after < rss_before + 16 * 1024,
        "the GRM grew from {rss_before} KiB to {rss_after} KiB"
    );

    // And the job still ends normally.
    drop(members);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Ended(r)) => {
                assert_eq!(r, "completed");
                break;
            }
            Ok(Event::PeerDied { .. }) => panic!("a member was declared dead"),
            Ok(_) => {}
            Err(e) => panic!("the job did not complete: {e}"),
        }
    }
    drop(launcher);
}

/// Writes the fuzzer's seed corpus: one file per example message, the
/// frame without its length prefix (what the fuzz target decodes).
#[test]
#[ignore = "run by hand to regenerate the seed corpus"]
fn write_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).expect("mkdir");
    for m in proto::examples() {
        std::fs::write(dir.join(format!("seed-{}", m.name())), &m.encode()[4..]).expect("write");
    }
}
