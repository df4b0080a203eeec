//! A simulated start-up: one GRM and N members in this process, each
//! member a thread joining over loopback TCP as a rank does (challenge,
//! signed Join, heartbeats, the Welcome with the node map), 64 ranks to a
//! "host", one ethernet endpoint each. Prints how long until every member
//! has its Welcome, the Welcome's size, the bytes the GRM sent in
//! Welcomes, and this process's peak memory (docs/SCALE.md).
//!
//! Usage: cargo run --release -p fm-grm --example startup_sim -- N...
//! Each member costs threads here (its reader, its heartbeat) and in the
//! GRM (a reader and a writer per connection): the sizes that fit are
//! bounded by the threads this host allows, which is the point.

use fm_grm::client::{new_token, LauncherLink, Membership};
use fm_grm::proto::{DeviceEndpoint, Join};
use fm_grm::server::{Grm, GrmOptions};
use std::time::{Duration, Instant};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn run(n: u32) -> Result<(), String> {
    let g = Grm::start(GrmOptions {
        max_connections: 2 * n + 64,
        max_per_client: 2 * n + 64,
        heartbeat_timeout: Duration::from_secs(120),
        ..GrmOptions::default()
    })
    .map_err(|e| format!("GRM: {e}"))?;
    let addr = g.addr().to_string();
    let token = new_token();
    let _launcher = LauncherLink::register(&addr, &token, n, "startup_sim", |_| {})
        .map_err(|e| format!("register: {e}"))?;
    let t0 = Instant::now();
    let members: Vec<_> = (0..n)
        .map(|r| {
            let (addr, token) = (addr.clone(), token.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let join = Join {
                        job: [0; 16],
                        nonce: [0; 32],
                        proof: [0; 32],
                        rank: Some(r),
                        host: format!("host{:04}", r / 64),
                        pid: 100_000 + r,
                        fingerprint: 42,
                        handlers: vec![(1, "data".into())],
                        endpoints: vec![DeviceEndpoint {
                            device: "ethernet".into(),
                            // An IPv4 address and a port, as ethernet's.
                            address: vec![198, 18, (r >> 14) as u8, (r >> 6) as u8, 0xc3, r as u8],
                        }],
                    };
                    Membership::join(&addr, &token, join, Duration::from_secs(600), |_| {})
                })
                .map_err(|e| format!("thread for rank {r}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut welcome_bytes = 0;
    let mut kept = Vec::with_capacity(n as usize);
    for m in members {
        let m = m
            .join()
            .map_err(|_| "a member panicked".to_string())?
            .map_err(|e| format!("join: {e}"))?;
        welcome_bytes = fm_grm::proto::Msg::Welcome(m.welcome.clone())
            .encode()
            .len();
        kept.push(m);
    }
    let took = t0.elapsed();
    println!(
        "{n} members: all welcomed in {:.2} s; a Welcome {} KiB, {} MiB of Welcomes in all; peak memory {:.0} MiB",
        took.as_secs_f64(),
        welcome_bytes >> 10,
        (welcome_bytes as u64 * n as u64) >> 20,
        peak_rss_mib()
    );
    for m in &kept {
        m.leave();
    }
    Ok(())
}

fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    for n in if sizes.is_empty() {
        vec![256, 1024]
    } else {
        sizes
    } {
        if let Err(e) = run(n) {
            eprintln!("{n} members: {e}");
            std::process::exit(1);
        }
    }
}
