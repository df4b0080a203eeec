//! The fuzz targets of this crate (`topology/fuzz`), here so that
//! `cargo test` replays their corpora through the same code
//! (`tests/tests/fuzz_corpora.rs`).

use crate::hosts::{parse_file, parse_spec};
use crate::{place, Topology};
use std::path::Path;

/// Every error names its place: `hosts:LINE: …`, `--hosts: …`, `t.toml:LINE: …`.
fn located(e: &str, prefix: &str) {
    assert!(e.starts_with(prefix) && e.len() > prefix.len(), "{e}");
}

/// Any bytes as a host file and as a `--hosts` list; what is accepted is
/// placed for a job of 64 ranks and for as many as the slots say.
pub fn hostfile(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for parsed in [parse_file(Path::new("hosts"), &text), parse_spec(&text)] {
        match parsed {
            Ok(hosts) => {
                let _ = place(&hosts, Some(64));
                let _ = place(&hosts, None);
            }
            Err(e) => assert!(!e.trim().is_empty()),
        }
    }
    if let Err(e) = parse_file(Path::new("hosts"), &text) {
        located(&e, "hosts:");
    }
}

/// Any bytes as a topology file; a topology accepted is placed and planned.
pub fn topology_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Topology::parse(Path::new("t.toml"), &text) {
        Ok(t) => {
            if let Ok(p) = place(&t.hosts, None) {
                let _ = t.plan(&p);
            }
        }
        Err(e) => located(&e, "t.toml:"),
    }
}
