//! The device contract (`fm_devices::Device`), checked the same way against
//! every device: self, shmem, ethernet (loopback UDP), nic (a veth pair in
//! a network namespace of the test's own; root), the composite, and null.
//! A reliable device must say what it is, refuse what it cannot carry with
//! the right error, deliver every size from 0 to its MTU exactly once, in
//! order and intact both ways, keep received packets intact while later
//! ones arrive, take a window of packets in flight, forget an aborted
//! buffer, and ignore a second release of a token.

use fm_composite::{Composite, Member};
use fm_devices::ethernet::{EthernetConfig, EthernetSocket};
use fm_devices::nic::{NicConfig, NicSocket};
use fm_devices::null::NullDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::ShmemDevice;
use fm_devices::{Device, DeviceError, DeviceKind, JobKey, Options, Rank, RawRecv};
use fm_tests::TempDir;
use std::time::{Duration, Instant};

/// Two endpoints of one device kind: `devs[i % devs.len()]` is rank
/// `ranks[i]`'s (self has one device for both).
struct Pair {
    /// The name the device gives itself.
    kind: &'static str,
    devs: Vec<Box<dyn Device>>,
    ranks: [Rank; 2],
}

impl Pair {
    fn dev(&mut self, side: usize) -> &mut dyn Device {
        let n = self.devs.len();
        &mut *self.devs[side % n]
    }
}

/// Packet `i` from `side`: its length from i, its bytes from (side, i).
fn packet(side: usize, i: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32).wrapping_mul(31) ^ i.wrapping_mul(7) ^ (side as u32) << 5)
        .map(|x| x as u8)
        .collect()
}

fn send(p: &mut Pair, side: usize, bytes: &[u8]) {
    let dest = p.ranks[1 - side];
    let until = Instant::now() + Duration::from_secs(20);
    let b = loop {
        match p.dev(side).raw_send_buffer(dest, bytes.len()) {
            Ok(b) => break b,
            // At most a window is in flight: acknowledgements free a slot.
            Err(DeviceError::NoBuffer { .. }) => {
                assert!(Instant::now() < until, "{}: no send buffer", p.kind);
            }
            Err(e) => panic!("{}: {e}", p.kind),
        }
    };
    assert!(b.cap >= bytes.len());
    // SAFETY: the slot has `cap` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), b.ptr, bytes.len()) };
    p.dev(side).raw_send(b, bytes.len());
}

/// The next packet at `side`, polled for up to 20 s.
fn receive(p: &mut Pair, side: usize) -> RawRecv {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = p.dev(side).raw_receive() {
            return r;
        }
        assert!(Instant::now() < until, "{}: nothing arrived", p.kind);
    }
}

/// Whether `r` is `want` from the other side; what differs, if not.
fn check(p: &Pair, side: usize, r: &RawRecv, want: &[u8]) -> Result<(), String> {
    // SAFETY: a received packet is readable until released.
    let got = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
    if r.src != p.ranks[1 - side] || got != want {
        return Err(format!(
            "{}: side {side} expected {} bytes from rank {}, got {} bytes from rank {}",
            p.kind,
            want.len(),
            p.ranks[1 - side],
            got.len(),
            r.src
        ));
    }
    Ok(())
}

fn receive_checked(p: &mut Pair, side: usize, want: &[u8]) {
    let r = receive(p, side);
    let verdict = check(p, side, &r, want);
    p.dev(side).raw_release(r.token);
    verdict.unwrap_or_else(|e| panic!("{e}"));
}

fn conformance(mut p: Pair) {
    let (mtu, window) = says_what_it_is(&mut p);
    refuses_what_it_cannot_carry(&mut p, mtu);
    every_size_both_ways(&mut p, mtu);
    a_window_in_flight_and_a_double_release(&mut p, mtu, window);
    an_aborted_buffer_is_forgotten(&mut p, mtu);
    nothing_more_arrives(&mut p);
}

/// Name, option bits, MTU, reach and window; the MTU and the window.
fn says_what_it_is(p: &mut Pair) -> (usize, u32) {
    let kind = p.kind;
    let info = p.dev(0).info();
    assert_eq!(info.name, kind);
    let reliable = Options::RELIABLE | Options::ORDERED | Options::RECEIVES;
    assert!(
        info.options.contains(reliable),
        "{kind}: {:?}",
        info.options
    );
    assert!(info.mtu >= 48, "{kind}: mtu {}", info.mtu);
    let (r0, r1) = (p.ranks[0], p.ranks[1]);
    assert!(
        p.dev(0).reaches(r1) && p.dev(1).reaches(r0),
        "{kind}: peers"
    );
    assert!(!p.dev(0).reaches(4096), "{kind}: a rank beyond the job");
    let window = p.dev(0).window(r1);
    assert!(window >= 1, "{kind}: window {window}");
    (info.mtu, window)
}

/// Over the MTU, or to no such rank: a clear error, nothing sent.
fn refuses_what_it_cannot_carry(p: &mut Pair, mtu: usize) {
    let (kind, r1) = (p.kind, p.ranks[1]);
    match p.dev(0).raw_send_buffer(r1, mtu + 1) {
        Err(DeviceError::TooLarge { len, .. }) => assert_eq!(len, mtu + 1),
        other => panic!("{kind}: one byte over the MTU gave {other:?}"),
    }
    assert!(
        p.dev(0).raw_send_buffer(4096, 8).is_err(),
        "{kind}: no such rank"
    );
}

/// Every size at every boundary, both ways, each answered before the next.
fn every_size_both_ways(p: &mut Pair, mtu: usize) {
    let sizes = [
        0,
        1,
        7,
        8,
        47,
        48,
        49,
        63,
        64,
        65,
        1000,
        mtu / 2,
        mtu - 1,
        mtu,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        for side in [0, 1] {
            let m = packet(side, i as u32, len);
            send(p, side, &m);
            receive_checked(p, 1 - side, &m);
        }
    }
}

/// `msgs` sent from side 0 in a row, all received at side 1 and held until
/// the last has arrived, then each checked (a held packet must not change
/// while later ones arrive) and released.
fn sent_in_a_row_and_held(p: &mut Pair, msgs: &[Vec<u8>]) {
    for m in msgs {
        send(p, 0, m);
    }
    let got: Vec<RawRecv> = msgs.iter().map(|_| receive(p, 1)).collect();
    for (r, m) in got.iter().zip(msgs) {
        check(p, 1, r, m).unwrap_or_else(|e| panic!("{}: a held packet changed: {e}", p.kind));
    }
    for r in got {
        p.dev(1).raw_release(r.token);
    }
}

/// A window of packets in flight, received in order and held together;
/// then a token released twice, which must change nothing: packets after
/// it (held together again) stay intact.
fn a_window_in_flight_and_a_double_release(p: &mut Pair, mtu: usize, window: u32) {
    let n = window.min(32) as usize;
    let msgs: Vec<Vec<u8>> = (0..n)
        .map(|i| packet(0, 100 + i as u32, (i * 97) % (mtu + 1)))
        .collect();
    sent_in_a_row_and_held(p, &msgs);
    let one = packet(0, 150, 64);
    send(p, 0, &one);
    let r = receive(p, 1);
    check(p, 1, &r, &one).unwrap_or_else(|e| panic!("{e}"));
    p.dev(1).raw_release(r.token);
    p.dev(1).raw_release(r.token);
    let after: Vec<Vec<u8>> = (0..n.min(4))
        .map(|i| packet(0, 160 + i as u32, 100 + i * 300 % mtu))
        .collect();
    sent_in_a_row_and_held(p, &after);
}

/// An aborted buffer is forgotten: the next packets are the ones that arrive.
fn an_aborted_buffer_is_forgotten(p: &mut Pair, mtu: usize) {
    let r1 = p.ranks[1];
    let b = p.dev(0).raw_send_buffer(r1, 16).expect("a buffer");
    p.dev(0).raw_abort(b);
    for i in 0..3 {
        let m = packet(0, 200 + i, 40 + i as usize * 500 % mtu);
        send(p, 0, &m);
        receive_checked(p, 1, &m);
    }
}

/// After all that, nothing more arrives on either side.
fn nothing_more_arrives(p: &mut Pair) {
    let until = Instant::now() + Duration::from_millis(50);
    while Instant::now() < until {
        for side in [0, 1] {
            if let Some(r) = p.dev(side).raw_receive() {
                panic!(
                    "{}: side {side} got an extra packet of {} bytes",
                    p.kind, r.len
                );
            }
        }
    }
}

/// The checker is not blind: a packet that differs from the one expected
/// is reported.
#[test]
fn the_check_fails_on_wrong_bytes() {
    let mut p = Pair {
        kind: DeviceKind::SelfLoop.name(),
        devs: vec![Box::new(SelfDevice::open(3))],
        ranks: [3, 3],
    };
    let m = packet(0, 1, 32);
    send(&mut p, 0, &m);
    let r = receive(&mut p, 1);
    let mut wrong = m.clone();
    wrong[31] ^= 1;
    assert!(check(&p, 1, &r, &wrong).is_err());
    assert!(check(&p, 1, &r, &m).is_ok());
}

#[test]
fn self_device() {
    conformance(Pair {
        kind: DeviceKind::SelfLoop.name(),
        devs: vec![Box::new(SelfDevice::open(5))],
        ranks: [5, 5],
    });
}

#[test]
fn shmem_device() {
    let dir = TempDir::new("conformance-shmem");
    let (d0, d1) = fm_tests::shmem_pair(&dir, 0xC0F1);
    conformance(Pair {
        kind: DeviceKind::Shmem.name(),
        devs: vec![Box::new(d0), Box::new(d1)],
        ranks: [0, 1],
    });
}

#[test]
fn ethernet_device() {
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let (a, b) = (
        EthernetSocket::bind(EthernetConfig::new(lo)).unwrap(),
        EthernetSocket::bind(EthernetConfig::new(lo)).unwrap(),
    );
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    let da = a.associate(JobKey(0xC0F2), 0, &[None, Some(eb)]).unwrap();
    let db = b.associate(JobKey(0xC0F2), 1, &[Some(ea), None]).unwrap();
    conformance(Pair {
        kind: DeviceKind::Ethernet.name(),
        devs: vec![Box::new(da), Box::new(db)],
        ranks: [0, 1],
    });
}

#[test]
fn nic_device() {
    if !fm_tests::is_root() {
        eprintln!("SKIPPED nic_device: needs root (a veth pair in a namespace, CAP_NET_RAW)");
        return;
    }
    // A thread of its own in a new network namespace: the veth pair lives
    // and dies with it, and the machine's interfaces are never touched.
    std::thread::spawn(|| {
        // SAFETY: moves only this thread into a new, empty network namespace.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
        for args in [
            "link add va type veth peer name vb",
            "addr add 198.18.249.1/24 dev va",
            "addr add 198.18.249.2/24 dev vb",
            "link set va up",
            "link set vb up",
        ] {
            let st = std::process::Command::new("ip")
                .args(args.split(' '))
                .status()
                .expect("ip");
            assert!(st.success(), "ip {args}");
        }
        let ca = NicConfig::new("va");
        let mut cb = ca.clone();
        cb.ifaces = vec!["vb".into()];
        let (a, b) = (NicSocket::open(ca).unwrap(), NicSocket::open(cb).unwrap());
        let (ea, eb) = (a.endpoint(), b.endpoint());
        let da = a
            .associate(JobKey(0xC0F3), 0, &[None, Some(eb)], &[])
            .unwrap();
        let db = b
            .associate(JobKey(0xC0F3), 1, &[Some(ea), None], &[])
            .unwrap();
        conformance(Pair {
            kind: DeviceKind::Nic.name(),
            devs: vec![Box::new(da), Box::new(db)],
            ranks: [0, 1],
        });
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

/// The composite is itself a device: two ranks of one host, each with
/// self, shmem and null, reach each other through shmem.
#[test]
fn composite_device() {
    let dir = TempDir::new("conformance-composite");
    let (d0, d1) = fm_tests::shmem_pair(&dir, 0xC0F4);
    let hosts = vec!["h".to_string(); 2];
    let mk = |rank: Rank, d: ShmemDevice| {
        let members = vec![
            Member::Null(NullDevice::open(hosts.clone())),
            Member::Shmem(d),
            Member::SelfLoop(SelfDevice::open(rank)),
        ];
        Composite::new(rank, hosts.clone(), members).expect("a table")
    };
    let (c0, c1) = (mk(0, d0), mk(1, d1));
    assert_eq!(c0.info_for(1).map(|i| i.name), Some("shmem"));
    conformance(Pair {
        kind: "composite",
        devs: vec![Box::new(c0), Box::new(c1)],
        ranks: [0, 1],
    });
}

/// Null reaches nobody: every send is "no route", naming the host.
#[test]
fn null_device() {
    let mut n = NullDevice::open(vec!["a".into(), "b".into()]);
    assert_eq!(n.info().name, DeviceKind::Null.name());
    assert!(!n.reaches(1));
    match n.raw_send_buffer(1, 8) {
        Err(e @ DeviceError::NoRoute { .. }) => assert!(e.to_string().contains("\"b\""), "{e}"),
        other => panic!("null sent: {other:?}"),
    }
    assert!(n.raw_receive().is_none());
    n.raw_release(0);
}
