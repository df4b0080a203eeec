//! Bad input from outside: foreign or corrupt segments, impossible frames,
//! messages for handlers nobody registered. Each is a clear error or a
//! counted drop — never a crash, a hang or a corrupted delivery.

use fm::{Config, Fm, JobKey};
use fm_devices::shmem::segment::{Geometry, Segment};
use fm_devices::shmem::{ShmemConfig, ShmemDevice};
use fm_devices::{Device, DeviceError, DeviceExt};
use fm_tests::{TempDir, TinyTmpfs};
use std::os::unix::fs::FileExt;
use std::time::Duration;

fn config(dir: &TempDir, key: u64, rank: u32, n: u32) -> ShmemConfig {
    let mut c = ShmemConfig::new(JobKey(key), rank, (0..n).collect());
    c.settings.dir = dir.0.clone();
    c.settings.attach_timeout = Duration::from_secs(10);
    c
}

/// Open ranks 0..n of one job in threads of this process.
fn open_all(dir: &TempDir, key: u64, n: u32) -> Vec<ShmemDevice> {
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let c = config(dir, key, r, n);
            std::thread::spawn(move || ShmemDevice::open(&c).expect("open"))
        })
        .collect();
    hs.into_iter().map(|h| h.join().expect("join")).collect()
}

fn open_err(c: &ShmemConfig) -> String {
    match ShmemDevice::open(c) {
        Ok(_) => panic!("opened a segment that should be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn segment_with_wrong_magic_is_refused() {
    let dir = TempDir::new("magic");
    let c = config(&dir, 0x11, 0, 2);
    write_private(&c.segment_path(), &vec![0xA5u8; 64 * 1024]);
    let e = open_err(&c);
    assert!(e.contains("wrong magic"), "{e}");
}

/// A file of this user, mode 600, as fm makes segments.
fn write_private(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create");
    f.write_all(bytes).expect("write");
}

/// What sits in a segment's place must be this user's private regular
/// file: a symbolic link (to a real segment, even), a file others may
/// open, and (as root) another user's file are refused with the reason,
/// before anything in them is read.
#[test]
fn a_symlink_another_users_file_or_an_open_mode_in_a_segments_place_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("owner");
    let c = config(&dir, 0x18, 0, 2);
    let real = dir.0.join("real");
    drop(
        Segment::create_or_open(
            &real,
            c.job_key,
            c.geometry(),
            false,
            Duration::from_secs(1),
        )
        .expect("create"),
    );
    std::os::unix::fs::symlink(&real, c.segment_path()).expect("symlink");
    let e = open_err(&c);
    assert!(e.contains("symbolic link"), "{e}");
    std::fs::remove_file(c.segment_path()).expect("unlink");
    std::fs::rename(&real, c.segment_path()).expect("rename");
    std::fs::set_permissions(c.segment_path(), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let e = open_err(&c);
    assert!(e.contains("mode 644"), "{e}");
    if fm_tests::is_root() {
        std::fs::set_permissions(c.segment_path(), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::os::unix::fs::chown(c.segment_path(), Some(65534), Some(65534)).expect("chown");
        let e = open_err(&c);
        assert!(e.contains("belongs to user 65534"), "{e}");
    } else {
        eprintln!("SKIPPED the other-owner case: needs root to make another user's file");
    }
}

/// Create the segment `c` would open, as another process (or job) would,
/// and return it with a writable handle on its file for corrupting it.
fn forge(c: &ShmemConfig, key: JobKey, g: Geometry) -> (Segment, std::fs::File) {
    let seg = Segment::create_or_open(&c.segment_path(), key, g, false, Duration::from_secs(1))
        .expect("create");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(c.segment_path())
        .expect("open");
    (seg, f)
}

#[test]
fn segment_with_other_layout_version_is_refused() {
    let dir = TempDir::new("version");
    let c = config(&dir, 0x12, 0, 2);
    let (_seg, f) = forge(&c, c.job_key, c.geometry());
    f.write_all_at(&99u32.to_le_bytes(), 8)
        .expect("write version");
    let e = open_err(&c);
    assert!(e.contains("layout version 99"), "{e}");
}

#[test]
fn segment_of_another_job_is_refused() {
    let dir = TempDir::new("job");
    let c = config(&dir, 0x13, 0, 2);
    let _forged = forge(&c, JobKey(0x99), c.geometry());
    let e = open_err(&c);
    assert!(e.contains("belongs to job 0000000000000099"), "{e}");
}

#[test]
fn segment_with_other_geometry_is_refused() {
    let dir = TempDir::new("geom");
    let c = config(&dir, 0x14, 0, 2);
    // Slots, which every rank computes alike (payload and frames are the
    // creator's to choose, unless set).
    let g = Geometry {
        slots: c.geometry().slots * 2,
        ..c.geometry()
    };
    let _forged = forge(&c, c.job_key, g);
    let e = open_err(&c);
    assert!(e.contains("geometry"), "{e}");
}

#[test]
fn the_creators_payload_is_adopted_unless_this_rank_set_its_own() {
    let dir = TempDir::new("adopt");
    let c = config(&dir, 0x17, 0, 2);
    let theirs = Geometry {
        payload: 2048 - 16,
        ..c.geometry()
    };
    let _forged = forge(&c, c.job_key, theirs);
    let t = Duration::from_secs(1);
    // FM_SHM_PAYLOAD unset: the pacer's choice of the creator wins.
    let adopted = Segment::create_or_open(&c.segment_path(), c.job_key, c.geometry(), true, t)
        .expect("adopting the creator's payload");
    assert_eq!(adopted.geometry, theirs);
    // FM_SHM_PAYLOAD set: a mismatch is an error naming the settings.
    let e = Segment::create_or_open(&c.segment_path(), c.job_key, c.geometry(), false, t)
        .err()
        .expect("a different explicit payload is refused")
        .to_string();
    assert!(e.contains("geometry") && e.contains("FM_SHM_"), "{e}");
}

#[test]
fn truncated_segment_is_refused() {
    let dir = TempDir::new("trunc");
    let c = config(&dir, 0x15, 0, 2);
    let (_seg, f) = forge(&c, c.job_key, c.geometry());
    f.set_len(8192).expect("truncate");
    let e = open_err(&c);
    assert!(e.contains("size 8192"), "{e}");
}

#[test]
fn missing_peer_times_out_with_a_clear_error_and_no_segment() {
    let dir = TempDir::new("alone");
    let mut c = config(&dir, 0x16, 0, 2);
    c.settings.attach_timeout = Duration::from_secs(1);
    let e = open_err(&c);
    assert!(e.contains("timed out") && e.contains("1 did"), "{e}");
    assert!(!c.segment_path().exists(), "segment left behind");
}

#[test]
fn frames_with_impossible_length_or_source_are_counted_drops() {
    let dir = TempDir::new("frame");
    let mut devs = open_all(&dir, 0x21, 3);
    let mut d1 = devs.remove(1);
    let mut d0 = devs.remove(0);
    let mtu = d0.info().mtu as u32;
    d0.debug_publish_raw(1, 0, mtu + 1).expect("publish");
    d0.debug_publish_raw(1, 0, u32::MAX).expect("publish");
    d0.debug_publish_raw(1, 77, 8).expect("publish");
    d0.debug_publish_raw(1, 1, 8).expect("publish"); // claims to come from the receiver itself
    d0.debug_publish_inline(1, 0, 49).expect("publish"); // longer than a slot can hold
    d0.debug_publish_inline(1, 9, 8).expect("publish"); // from nobody in this job
    let mut b = d0.get_send_buffer(1, 5).expect("buffer");
    b.copy_from_slice(b"hello");
    b.send();
    let r = d1.receive().expect("the good packet still arrives");
    assert_eq!((&r[..], r.src()), (&b"hello"[..], 0));
    drop(r);
    assert!(d1.receive().is_none());
    assert_eq!(d1.stats().dropped_malformed, 6);
}

#[test]
fn oversized_send_is_an_error_not_a_corruption() {
    let dir = TempDir::new("big");
    let mut devs = open_all(&dir, 0x22, 2);
    let mtu = devs[0].info().mtu;
    let e = devs[0]
        .get_send_buffer(1, mtu + 1)
        .err()
        .expect("too large");
    assert!(matches!(e, DeviceError::TooLarge { .. }), "{e}");
    let e = devs[0].get_send_buffer(5, 1).err().expect("not a peer");
    assert!(matches!(e, DeviceError::NotAPeer { dest: 5, .. }), "{e}");
}

#[test]
fn message_for_unregistered_handler_is_dropped_and_counted() {
    let dir = TempDir::new("handler");
    let key = JobKey(0x31);
    let mk = |rank: u32| {
        let mut c = Config::local(rank, 2, key);
        c.shm.dir = dir.0.clone();
        c
    };
    let c0 = mk(0);
    let sender = std::thread::spawn(move || {
        let mut fm = Fm::builder().config(c0).build().expect("rank 0");
        fm.send(1, 42, &[1u8; 100_000])
            .expect("send to unknown handler");
        fm.send(1, 1, b"after").expect("send");
        fm.barrier().expect("barrier");
    });
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g2 = got.clone();
    let mut fm = Fm::builder()
        .handler(1, "known", move |m| {
            g2.lock().unwrap().push(m.receive_vec()?);
            Ok(())
        })
        .config(mk(1))
        .build()
        .expect("rank 1");
    while got.lock().unwrap().is_empty() {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    fm.barrier().expect("barrier");
    sender.join().expect("sender");
    assert_eq!(got.lock().unwrap().as_slice(), &[b"after".to_vec()]);
    assert_eq!(fm.stats().dropped_unknown_handler, 1);
}

#[test]
fn full_segment_directory_is_a_clean_error_when_root() {
    let Some(tiny) = TinyTmpfs::mount("full_segment_directory_is_a_clean_error_when_root", "256k")
    else {
        return;
    };
    let dir = &tiny.0;
    let c = config(dir, 0x41, 0, 4);
    let e = open_err(&c);
    assert!(
        e.contains("cannot allocate") && e.contains("FM_SHM_DIR"),
        "{e}"
    );
    assert!(!c.segment_path().exists());
}

/// Every bounded numeric setting at its bounds and one beyond: inside is
/// taken, outside is a clear error naming the setting and its bounds (it
/// used to abort, wrap or be taken). An empty segment folder is refused.
#[test]
fn numeric_settings_at_their_bounds_and_one_beyond() {
    let prog = env!("CARGO_BIN_EXE_fm-testprog");
    let run = |var: &str, value: &str| {
        let mut c = std::process::Command::new(prog);
        c.arg("config").env_remove("FM_GRM").env_remove("FM_LOG");
        for v in ["FM_RANK", "FM_SIZE", "FM_JOB_KEY"] {
            c.env_remove(v);
        }
        if var == "FM_SIZE" {
            c.env("FM_RANK", "0").env("FM_JOB_KEY", "00000000000000ab");
        }
        let o = c.env(var, value).output().expect("fm-testprog");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let bounded: &[(&str, u64, u64)] = &[
        ("FM_ETH_WINDOW", 1, 4096),
        ("FM_ETH_POOL", 1, 65536),
        ("FM_ETH_RTO_US", 10, 10_000_000),
        ("FM_ETH_DEAD_AFTER", 1, 86_400),
        ("FM_CREDITS", 1, 65536),
        ("FM_CPUS", 1, 65536),
        ("FM_NIC_FRAMES", 1, 65536),
        ("FM_WAIT_TIMEOUT", 1, 31_536_000),
        ("FM_SIZE", 1, 65536),
    ];
    for &(var, lo, hi) in bounded {
        for v in [lo, hi] {
            let (ok, out) = run(var, &v.to_string());
            assert!(ok, "{var}={v} refused: {out}");
        }
        for v in [lo - 1, hi + 1, u32::MAX as u64, u64::MAX] {
            let (ok, out) = run(var, &v.to_string());
            assert!(!ok, "{var}={v} taken: {out}");
            assert!(
                out.contains(var) && out.contains(&format!("{lo} to {hi}")),
                "{var}={v}: {out}"
            );
        }
    }
    let (ok, out) = run("FM_SHM_DIR", "");
    assert!(!ok && out.contains("FM_SHM_DIR"), "{out}");
}
