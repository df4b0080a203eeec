//! The nic device over a real veth pair (root only). Each test runs in a
//! thread that moves into a network namespace of its own, so the veth pair
//! lives and dies with it and the machine's interfaces are never touched.

use fm_devices::nic::{NicConfig, NicDevice, NicSocket};
use fm_devices::{Device, DeviceError, DeviceExt, JobKey};
use std::process::Command;

/// Run `f` in a fresh network namespace holding a veth pair `va`–`vb`
/// (MTU `mtu`, up, with IPv4 addresses on one /24); `None` when skipped.
fn in_veth_namespace<T: Send + 'static>(
    test: &str,
    mtu: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: needs root (CAP_NET_ADMIN and CAP_NET_RAW)");
        return None;
    }
    std::thread::spawn(move || {
        // SAFETY: moves only this thread into a new, empty network namespace.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
        let mtu = mtu.to_string();
        for args in [
            vec![
                "link", "add", "va", "mtu", &mtu, "type", "veth", "peer", "name", "vb", "mtu", &mtu,
            ],
            vec!["addr", "add", "198.18.250.1/24", "dev", "va"],
            vec!["addr", "add", "198.18.250.2/24", "dev", "vb"],
            vec!["link", "set", "va", "up"],
            vec!["link", "set", "vb", "up"],
        ] {
            let st = Command::new("ip").args(&args).status().expect("ip");
            assert!(st.success(), "ip {args:?}");
        }
        f()
    })
    .join()
    .map_or_else(|e| std::panic::resume_unwind(e), Some)
}

fn pair(mtu_cfg: Option<usize>) -> (NicDevice, NicDevice) {
    let mut ca = NicConfig::new("va");
    ca.mtu = mtu_cfg;
    let mut cb = ca.clone();
    cb.ifaces = vec!["vb".into()];
    let (a, b) = (NicSocket::open(ca).unwrap(), NicSocket::open(cb).unwrap());
    let (ea, eb) = (a.endpoint(), b.endpoint());
    assert_eq!(ea.network, "198.18.250.0/24");
    let da = a.associate(JobKey(7), 0, &[None, Some(eb)], &[]).unwrap();
    let db = b.associate(JobKey(7), 1, &[Some(ea), None], &[]).unwrap();
    (da, db)
}

fn send(d: &mut NicDevice, dest: u32, fill: u8, len: usize) {
    let mut buf = loop {
        match d.get_send_buffer(dest, len) {
            Ok(b) => break b,
            Err(DeviceError::NoBuffer { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    };
    buf.fill(fill);
    buf.send();
}

fn receive(d: &mut NicDevice, src: u32, fill: u8, len: usize) {
    let r = loop {
        if let Some(r) = d.receive() {
            break r;
        }
    };
    assert_eq!((r.len(), r.src()), (len, src));
    assert!(r.iter().all(|&x| x == fill));
}

#[test]
fn two_devices_exchange_over_a_veth_pair() {
    in_veth_namespace("two_devices_exchange_over_a_veth_pair", 1500, || {
        let (mut a, mut b) = pair(None);
        let mtu = a.info().mtu;
        assert_eq!(mtu, 1500 - fm_devices::reliable::header::HEADER);
        for i in 0..2000u32 {
            let len = (i as usize * 331) % (mtu + 1);
            send(&mut a, 1, i as u8, len);
            receive(&mut b, 0, i as u8, len);
            send(&mut b, 0, !(i as u8), len);
            receive(&mut a, 1, !(i as u8), len);
        }
        // A stream of full windows: bursts, one kick each.
        for i in 0..5000u32 {
            send(&mut a, 1, i as u8, mtu);
            while let Some(r) = b.receive() {
                drop(r);
            }
        }
        let st = a.reliable_stats();
        assert_eq!(st.invalid_drops(), 0, "{st:?}");
    });
}

#[test]
fn an_idle_poll_is_a_load_not_a_system_call() {
    in_veth_namespace("an_idle_poll_is_a_load_not_a_system_call", 1500, || {
        let (mut a, mut b) = pair(None);
        send(&mut a, 1, 1, 8);
        receive(&mut b, 0, 1, 8);
        // Let the delayed ACK go out, so the polls below are truly idle.
        std::thread::sleep(std::time::Duration::from_millis(5));
        for _ in 0..1000 {
            assert!(b.raw_receive().is_none() && a.raw_receive().is_none());
        }
        let Some(counter) = fm_platform::SyscallCounter::this_thread() else {
            eprintln!("SKIPPED the system call count: no raw_syscalls tracepoint here");
            return;
        };
        let before = counter.read();
        for _ in 0..1_000_000 {
            assert!(std::hint::black_box(&mut b).raw_receive().is_none());
        }
        let after = counter.read();
        // The second read is itself one system call.
        assert_eq!(
            after - before,
            1,
            "system calls during a million idle polls"
        );
    });
}
