//! The shmem device on its own, through the PM-level API.

use fm_devices::shmem::{ShmemConfig, ShmemDevice};
use fm_devices::{Device, DeviceExt, JobKey};
use fm_tests::TempDir;
use std::time::Duration;

/// Packets carried inline in the receive-queue slot and packets in frames,
/// interleaved over many laps of the rings, arrive complete and in order.
#[test]
fn inline_and_frame_packets_keep_order_over_many_laps() {
    let dir = TempDir::new("device");
    let mk = |r: u32| {
        let mut c = ShmemConfig::new(JobKey(0x77), r, vec![0, 1]);
        c.dir = dir.0.clone();
        c.attach_timeout = Duration::from_secs(10);
        c
    };
    let c1 = mk(1);
    let peer = std::thread::spawn(move || ShmemDevice::open(&c1).expect("open rank 1"));
    let mut d0 = ShmemDevice::open(&mk(0)).expect("open rank 0");
    let mut d1 = peer.join().expect("join");
    let (mut sent, mut got) = (0u32, 0u32);
    for round in 0..500u32 {
        for k in 0..40u32 {
            // 8 B and 48 B go inline, 49 B and 1000 B in frames.
            let len = [8, 48, 49, 1000][((round + k) % 4) as usize];
            let mut b = d0
                .get_send_buffer(1, len)
                .expect("a slot: 40 outstanding is within the window");
            b[..4].copy_from_slice(&sent.to_le_bytes());
            b[len - 1] = len as u8;
            b.send();
            sent += 1;
        }
        while let Some(r) = d1.receive() {
            assert_eq!(
                u32::from_le_bytes(r[..4].try_into().expect("4 bytes")),
                got,
                "order"
            );
            assert_eq!(r[r.len() - 1], r.len() as u8, "length");
            got += 1;
        }
        assert_eq!(got, sent, "round {round}: {:?}", d1.stats());
    }
    assert_eq!(d1.stats().dropped_malformed, 0);
}
