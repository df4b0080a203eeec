//! The knobs of fm's devices that the pacer tunes, each with its
//! micro-benchmark (the device's own data path, no peer needed).
//!
//! - `shmem.frame`: bytes per shared-memory frame, i.e. copied into the
//!   receiver's queue per step (the knob of HPVM 1.9's PCI benchmark);
//! - `ethernet.datagram@IFACE`: bytes per UDP datagram, i.e. per system call,
//!   up to what the interface carries unfragmented.
//!
//! The nic device's knobs (frames per TX kick, payload per frame) made no
//! measurable difference here beyond "the largest frame the MTU allows";
//! docs/PERFORMANCE.md has the numbers, so they are not paced.

use crate::{Choice, Knob, Pacer};
use fm_devices::{ethernet, shmem};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// How long each candidate's throughput is measured (after a third of
/// that to warm up), per pass.
pub const WINDOW: Duration = Duration::from_micros(1500);

/// Bytes per shared-memory frame, header included.
pub fn shmem_frame() -> Knob {
    Knob {
        key: "shmem.frame".into(),
        candidates: shmem::pace::FRAME_SIZES.to_vec(),
        default: u64::from(shmem::DEFAULT_PAYLOAD) + shmem::segment::FRAME_HEADER_BYTES as u64,
    }
}

/// Tune [`shmem_frame`] with segments in `dir`; the payload per frame is
/// the chosen size less the frame header ([`shmem::pace::payload_of_frame`]).
pub fn tune_shmem_frame(p: &Pacer, dir: &Path) -> Choice {
    p.tune(&shmem_frame(), |sizes| {
        let payloads: Vec<u32> = sizes
            .iter()
            .map(|&f| shmem::pace::payload_of_frame(f))
            .collect();
        shmem::pace::stream_rates(&payloads, dir, WINDOW)
    })
}

/// Bytes per datagram on the interface of `addr`: the candidates up to its
/// largest unfragmented datagram, which is also the default.
pub fn ethernet_datagram(addr: IpAddr) -> Knob {
    let max = ethernet::max_datagram(addr) as u64;
    let mut candidates: Vec<u64> = ethernet::DATAGRAM_SIZES
        .iter()
        .copied()
        .filter(|&s| s < max)
        .collect();
    candidates.push(max);
    let iface = ethernet::interface_of(addr).unwrap_or_else(|| addr.to_string());
    Knob {
        key: format!("ethernet.datagram@{iface}"),
        candidates,
        default: max,
    }
}

/// Tune [`ethernet_datagram`] with sockets of `socket_buffer` bytes.
pub fn tune_ethernet_datagram(p: &Pacer, addr: IpAddr, socket_buffer: usize) -> Choice {
    p.tune(&ethernet_datagram(addr), |sizes| {
        let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
        ethernet::stream_rates(addr, &sizes, socket_buffer, WINDOW)
    })
}
