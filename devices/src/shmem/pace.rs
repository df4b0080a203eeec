//! The pacer's micro-benchmark for shmem (paper 000 §6): how fast the
//! device streams from one rank to another when every frame carries
//! `payload` bytes — the "bytes copied into device memory per step" knob.
//!
//! It runs the device itself, two ranks as two threads of this process on
//! two CPUs, with the segment geometry a two-rank job gets, copying each
//! packet in from a message and out into one as fm does. A bare queue
//! without the device's per-packet work picks frames far too small: the
//! device's cost per packet, not the copy, is what large frames save.

use super::{CmaMode, ShmemConfig, ShmemDevice};
use crate::{Device, DeviceError, DeviceExt, JobKey};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The message the sender streams from and the receiver copies into,
/// wrapping: as large as a typical large FM message.
const MESSAGE: usize = 1 << 20;

/// Frame sizes (header included) worth trying: 4 KiB to 64 KiB. 1 and
/// 2 KiB frames streamed 1.5–4× slower than 16 KiB ones in every curve
/// measured here (docs/PERFORMANCE.md), so they are not worth the time.
pub const FRAME_SIZES: [u64; 5] = [4096, 8192, 16384, 32768, 65536];

/// Payload of a frame of `frame_bytes` (header included).
pub fn payload_of_frame(frame_bytes: u64) -> u32 {
    (frame_bytes as usize - super::segment::FRAME_HEADER_BYTES) as u32
}

/// Frames per queue in the benchmark's segments: half a two-rank job's 64,
/// which halves the time to create them; the window (28 packets) still
/// keeps the stream pipelined.
const FRAMES: u32 = 32;

/// The receiver of [`stream_rates`]: what arrives from rank 1 on `dev`,
/// copied out to `dst`, until `clock` gives the rate (or the sender ended);
/// `received` counts the packets taken, for the sender's window.
fn receive_from_rank1(
    dev: &mut ShmemDevice,
    clock: &mut crate::sys::RateWindow,
    dst: &mut [u8],
    received: &AtomicU64,
    sender_ended: impl Fn() -> bool,
) -> Option<f64> {
    let (mut off, mut moved, mut polls) = (0usize, 0usize, 0u32);
    let mut taken = received.load(Ordering::Relaxed);
    loop {
        if let Some(r) = dev.receive() {
            let n = r.len().min(MESSAGE - off);
            dst[off..off + n].copy_from_slice(&r[..n]);
            off = if off + n == MESSAGE { 0 } else { off + n };
            moved += r.len();
            drop(r);
            taken += 1;
            received.store(taken, Ordering::Release);
        }
        polls = polls.wrapping_add(1);
        if polls % 8 != 0 {
            continue;
        }
        if let Some(rate) = clock.check(moved) {
            return rate;
        }
        if sender_ended() {
            return None;
        }
    }
}

/// The sender of [`stream_rates`]: messages of `src` to rank 0 through
/// device `phase` (of `payloads` bytes per packet), until `phase` names no
/// device. It keeps within each device's window as FM's credits do:
/// `received[i]` is what the receiver has taken from device i. (A sender
/// beyond the window overruns the receive queue: the device contract,
/// `Device::window`; the last packet's tail may be carried in a queue
/// slot, which no frame count bounds.)
fn stream_to_rank0(
    devs: &mut [ShmemDevice],
    payloads: &[u32],
    phase: &AtomicUsize,
    received: &[AtomicU64],
    src: &[u8],
) -> Result<(), DeviceError> {
    let mut off = 0;
    let mut sent = vec![0u64; devs.len()];
    loop {
        let i = phase.load(Ordering::Relaxed);
        let Some(dev) = devs.get_mut(i) else {
            return Ok(());
        };
        if sent[i] - received[i].load(Ordering::Acquire) >= dev.window(0) as u64 {
            std::hint::spin_loop();
            continue;
        }
        let n = (payloads[i] as usize).min(MESSAGE - off);
        match dev.get_send_buffer(0, n) {
            Ok(mut b) => {
                b.copy_from_slice(&src[off..off + n]);
                b.send();
                sent[i] += 1;
                off = if off + n == MESSAGE { 0 } else { off + n };
            }
            Err(DeviceError::NoBuffer { .. }) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

/// Streaming throughput in MB/s for each payload size in turn, with the
/// segments in `dir`, each measured for `window` after a warm-up of a third of
/// that; `None` for a size that could not be measured. Both threads open a
/// device per distinct size first and then run through all sizes, so no
/// measurement pays for creating a segment or waking a CPU.
pub fn stream_rates(payloads: &[u32], dir: &Path, window: Duration) -> Vec<Option<f64>> {
    let mut distinct: Vec<u32> = payloads.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let seed = crate::reliable::new_epoch() as u64;
    let config = |i: usize, rank| {
        let mut c = ShmemConfig::new(JobKey(seed << 32 | 0xfa_0000 | i as u64), rank, vec![0, 1]);
        c.settings.dir = dir.to_path_buf();
        // Named fm-KEY-pacer: the pacer's, not a job's.
        c.host = "pacer".into();
        c.settings.payload = Some(distinct[i]);
        c.settings.frames = Some(FRAMES);
        c.settings.cma = CmaMode::Off;
        c.settings.attach_timeout = Duration::from_secs(2);
        c
    };
    let open_all = |rank| -> Result<Vec<ShmemDevice>, DeviceError> {
        (0..distinct.len())
            .map(|i| ShmemDevice::open(&config(i, rank)))
            .collect()
    };
    const STOP: usize = usize::MAX;
    let phase = AtomicUsize::new(0);
    let received: Vec<AtomicU64> = distinct.iter().map(|_| AtomicU64::new(0)).collect();
    let src = vec![0x5au8; MESSAGE];
    let mut dst = vec![0u8; MESSAGE];
    let cpus = crate::sys::CpuPair::take();
    let rates = std::thread::scope(|s| {
        let sender = s.spawn(|| -> Result<(), DeviceError> {
            cpus.pin_other();
            stream_to_rank0(&mut open_all(1)?, &distinct, &phase, &received, &src)
        });
        let mut devs = match open_all(0) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("pacer: shmem cannot be measured: {e}");
                phase.store(STOP, Ordering::Relaxed);
                return vec![None; payloads.len()];
            }
        };
        // One window more on the first size: the other CPU wakes up.
        let order = std::iter::once((payloads[0], window))
            .chain(payloads.iter().map(|&p| (p, Duration::ZERO)));
        let mut rates: Vec<Option<f64>> = order
            .map(|(p, extra)| {
                let i = distinct.binary_search(&p).unwrap_or(0);
                phase.store(i, Ordering::Relaxed);
                let mut clock = crate::sys::RateWindow::new(window, extra);
                receive_from_rank1(&mut devs[i], &mut clock, &mut dst, &received[i], || {
                    sender.is_finished()
                })
            })
            .collect();
        rates.remove(0);
        phase.store(STOP, Ordering::Relaxed);
        if let Ok(Err(e)) = sender.join() {
            tracing::debug!("pacer: shmem cannot be measured: {e}");
            return vec![None; payloads.len()];
        }
        rates
    });
    std::hint::black_box(&dst);
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_candidate_moves_data_and_leaves_no_segment() {
        let dir = std::env::temp_dir().join(format!("fm-pace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let payloads: Vec<u32> = FRAME_SIZES.iter().map(|&f| payload_of_frame(f)).collect();
        let rates = stream_rates(&payloads, &dir, Duration::from_millis(2));
        let left = std::fs::read_dir(&dir).unwrap().count();
        std::fs::remove_dir_all(&dir).unwrap();
        for (p, r) in payloads.iter().zip(&rates) {
            // Any rate at all: how fast is the machine's business, not
            // this test's (under load it can be under 1 MB/s).
            assert!(r.is_some(), "{p}-byte payload moved nothing");
        }
        assert_eq!(left, 0, "segments left behind");
    }
}
