//! The shmem device on its own, through the PM-level API.

use fm_devices::shmem::ShmemDevice;
use fm_devices::{Device, DeviceExt};
use fm_tests::TempDir;

/// Ranks 0 and 1 of job `key` on shared memory in this process (the
/// segment in a directory of the test's own).
fn pair(key: u64) -> (TempDir, ShmemDevice, ShmemDevice) {
    let dir = TempDir::new("device");
    let (d0, d1) = fm_tests::shmem_pair(&dir, key);
    (dir, d0, d1)
}

/// Packets carried inline in the receive-queue slot and packets in frames,
/// interleaved over many laps of the rings, arrive complete and in order.
#[test]
fn inline_and_frame_packets_keep_order_over_many_laps() {
    let (_dir, mut d0, mut d1) = pair(0x77);
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

/// A received inline packet stays intact while its receiver holds it and
/// goes on receiving and releasing many laps of later packets (a handler
/// that replies before reading its message): the device copies an inline
/// packet out of its slot when it is polled, because the slot itself is
/// reused a lap later.
#[test]
fn a_held_inline_packet_survives_laps_of_later_packets() {
    let (_dir, mut d0, mut d1) = pair(0x78);
    let send = |d: &mut ShmemDevice, byte: u8| {
        let mut b = d.get_send_buffer(1, 24).expect("a slot within the window");
        b.fill(byte);
        b.send();
    };
    send(&mut d0, 0xEA);
    let held = d1.raw_receive().expect("the first packet");
    let frames = d1.geometry().frames as usize;
    let window = d1.window(0) as usize - 1; // one credit is held
    let mut got = 0;
    while got < 10 * frames {
        for _ in 0..window {
            send(&mut d0, 0xBD);
        }
        while let Some(r) = d1.receive() {
            assert!(r.iter().all(|&b| b == 0xBD), "a later packet");
            got += 1;
        }
    }
    // SAFETY: a received packet stays valid until its token is released.
    let bytes = unsafe { std::slice::from_raw_parts(held.ptr, held.len) };
    assert_eq!(bytes, &[0xEA; 24][..], "the held packet was overwritten");
    d1.raw_release(held.token);
    // A second release of the same token is ignored, not a double free.
    d1.raw_release(held.token);
    send(&mut d0, 0x11);
    send(&mut d0, 0x22);
    let a = d1.receive().expect("packet").to_vec();
    let b = d1.receive().expect("packet").to_vec();
    assert_eq!((a[0], b[0]), (0x11, 0x22));
}

/// A PM-level receiver that holds every inline packet it can is told "no
/// packet" (back-pressure, as frames give it) rather than handed one whose
/// memory is reused; releasing one lets the next through.
#[test]
fn holding_too_many_inline_packets_is_back_pressure() {
    let (_dir, mut d0, mut d1) = pair(0x79);
    let frames = fm_devices::shmem::HELD_INLINE;
    let (mut held, mut seq) = (Vec::new(), 0u32);
    // Hold every packet; the sender sends half a ring at a time (it would
    // run out of credit long before, but a PM-level sender has no credits).
    while held.len() < frames {
        for _ in 0..frames / 2 {
            let mut b = d0.get_send_buffer(1, 8).expect("inline stage");
            b[..4].copy_from_slice(&seq.to_le_bytes());
            b.send();
            seq += 1;
        }
        while let Some(r) = d1.raw_receive() {
            held.push(r);
        }
    }
    assert_eq!(held.len(), frames, "every entry held");
    let mut b = d0.get_send_buffer(1, 8).expect("inline stage");
    b[..4].copy_from_slice(&seq.to_le_bytes());
    b.send();
    assert!(
        d1.raw_receive().is_none(),
        "back-pressure, not a reused entry"
    );
    for (i, r) in held.iter().enumerate() {
        // SAFETY: still held.
        let b = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
        assert_eq!(u32::from_le_bytes(b[..4].try_into().expect("4")), i as u32);
    }
    d1.raw_release(held[0].token);
    let next = d1.raw_receive().expect("one more after a release");
    // SAFETY: just received.
    let b = unsafe { std::slice::from_raw_parts(next.ptr, next.len) };
    assert_eq!(
        u32::from_le_bytes(b[..4].try_into().expect("4")),
        frames as u32
    );
}
