//! What the reliable layer's two fault-model tests share: the messages two
//! ranks exchange, the check of each arrival, and the faults' strategy.
//! `reliable_model.rs` runs them through the driver on the wall clock,
//! `reliable_virtual.rs` through the protocol in virtual time.

use fm_devices::reliable::Faults;
use fm_devices::{Rank, RawRecv};
use proptest::prelude::*;
use std::time::Duration;

/// Message `i` from `src`: length from i, bytes from (src, i).
pub fn message(src: Rank, i: u32) -> Vec<u8> {
    let len = (i as usize * 37 + src as usize * 11) % 256;
    (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(31) ^ src << 7) as u8)
        .collect()
}

/// Whether `r`, received by rank `me`, is message `i` of rank `peer`.
pub fn check_arrival(me: Rank, peer: Rank, i: u32, r: &RawRecv) -> Result<(), String> {
    // SAFETY: a received packet is readable until released.
    let got = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
    let want = message(peer, i);
    if r.src != peer || got != want.as_slice() {
        return Err(format!(
            "rank {me} expected message {i} from {peer} ({} bytes), got {} bytes from {}",
            want.len(),
            got.len(),
            r.src
        ));
    }
    Ok(())
}

/// The shape of one exchange: each side's faults, the window, the receive
/// pool, how often the receivers release (every so many polls), and
/// whether the receiver keeps a reorder queue (trunking).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub faults: [Faults; 2],
    pub window: u32,
    pub pool: usize,
    pub release_every: u32,
    pub reorder: bool,
}

/// Any shape: small pools and windows bring in STOP and GO.
pub fn shape() -> impl Strategy<Value = Shape> {
    (
        faults(),
        faults(),
        1u32..24,
        2usize..40,
        1u32..6,
        any::<bool>(),
    )
        .prop_map(|(f0, f1, window, pool, release_every, reorder)| Shape {
            faults: [f0, f1],
            window,
            pool,
            release_every,
            reorder,
        })
}

/// Any mix of drops, duplicates, reordering, corruption and delays.
pub fn faults() -> impl Strategy<Value = Faults> {
    (
        0.0..0.3f64,
        0.0..0.2f64,
        0.0..0.3f64,
        0.0..0.1f64,
        0.0..0.1f64,
        any::<u64>(),
    )
        .prop_map(|(drop, dup, reorder, corrupt, delay, seed)| Faults {
            drop,
            dup,
            reorder,
            corrupt,
            delay,
            delay_for: Duration::from_micros(500),
            seed,
        })
}
