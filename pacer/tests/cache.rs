//! The pacer's cache and overrides, with a real file in a temporary directory.

use fm_pacer::{tune, Cache, Mode, Profile, Source, VERSION};
use fm_tests::TempDir;
use std::cell::Cell;

const CANDIDATES: [u64; 4] = [1, 4, 16, 64];

/// A knob whose throughput peaks at 16; counts the measurements.
fn measure(calls: &Cell<u32>) -> impl FnMut(u64) -> Option<f64> + '_ {
    move |s| {
        calls.set(calls.get() + 1);
        Some(match s {
            16 => 900.0,
            64 => 700.0,
            _ => 100.0 * s as f64,
        })
    }
}

/// Tune the `nic.tx_burst` knob (default 32) over `candidates`.
fn nic_tx(c: &Cache, mode: Mode, candidates: &[u64], calls: &Cell<u32>) -> fm_pacer::Choice {
    tune(
        Some(c),
        mode,
        "nic",
        "tx_burst",
        candidates,
        32,
        measure(calls),
    )
}

fn cache(dir: &TempDir) -> Cache {
    Cache {
        path: dir.0.join("sub").join("pacer.toml"),
    }
}

#[test]
fn a_measured_curve_is_cached_and_reused_without_measuring() {
    let dir = TempDir::new("pacer-cache");
    let c = cache(&dir);
    let calls = Cell::new(0);
    let first = nic_tx(&c, Mode::Auto, &CANDIDATES, &calls);
    assert_eq!((first.size, first.source), (16, Source::Measured));
    assert_eq!(calls.get(), 4);
    // The file round-trips to the same profile.
    let p = c.load();
    assert_eq!(p.version, VERSION);
    assert_eq!(p.curves.get("nic.tx_burst"), first.curve.as_ref());
    let t = std::time::Instant::now();
    let again = nic_tx(&c, Mode::Auto, &CANDIDATES, &calls);
    let took = t.elapsed();
    assert_eq!((again.size, again.source), (16, Source::Cached));
    assert_eq!(calls.get(), 4, "a cached choice is not measured again");
    eprintln!("cached choice in {took:?}");
    // Another knob goes into the same file, next to the first.
    tune(
        Some(&c),
        Mode::Auto,
        "shmem",
        "payload",
        &[1024, 4096],
        4096,
        |_| Some(1.0),
    );
    let p = c.load();
    assert!(p.curves.contains_key("nic.tx_burst") && p.curves.contains_key("shmem.payload"));
}

#[test]
fn force_measures_again_and_changed_candidates_do_too() {
    let dir = TempDir::new("pacer-force");
    let c = cache(&dir);
    let calls = Cell::new(0);
    nic_tx(&c, Mode::Auto, &CANDIDATES, &calls);
    let f = nic_tx(&c, Mode::Force, &CANDIDATES, &calls);
    assert_eq!((f.source, calls.get()), (Source::Measured, 8));
    let other = [1, 16];
    let o = nic_tx(&c, Mode::Auto, &other, &calls);
    assert_eq!((o.source, calls.get()), (Source::Measured, 10));
}

#[test]
fn a_corrupt_or_foreign_cache_is_ignored_and_measured_again() {
    let dir = TempDir::new("pacer-corrupt");
    let c = cache(&dir);
    std::fs::create_dir_all(c.path.parent().unwrap()).unwrap();
    let foreign_version = {
        let mut p = Profile::empty();
        p.version = VERSION + 1;
        toml::to_string(&p).unwrap()
    };
    let foreign_kernel = {
        let mut p = Profile::empty();
        p.kernel = "2.2.12 #1 SMP PM/Ethernet".into();
        toml::to_string(&p).unwrap()
    };
    for bad in [
        "this is not toml [[[".to_string(),
        "version = \"one\"".to_string(),
        foreign_version,
        foreign_kernel,
        String::from_utf8_lossy(&[0xff, 0xfe, 0x00, 0x41]).into_owned(),
    ] {
        std::fs::write(&c.path, &bad).unwrap();
        let calls = Cell::new(0);
        let r = nic_tx(&c, Mode::Auto, &CANDIDATES, &calls);
        assert_eq!(
            (r.size, r.source, calls.get()),
            (16, Source::Measured, 4),
            "{bad}"
        );
        // And the file is this host's again.
        assert_eq!(c.load().curves.len(), 1, "{bad}");
    }
}

#[test]
fn overrides_do_not_measure() {
    let dir = TempDir::new("pacer-override");
    let c = cache(&dir);
    let calls = Cell::new(0);
    let off = nic_tx(&c, Mode::Off, &CANDIDATES, &calls);
    assert_eq!((off.size, off.source), (32, Source::Default));
    let fixed = nic_tx(&c, Mode::Fixed(20), &CANDIDATES, &calls);
    assert_eq!((fixed.size, fixed.source), (16, Source::Override));
    let small = nic_tx(&c, Mode::Fixed(1), &[4, 8], &calls);
    assert_eq!(small.size, 4, "below every candidate: the smallest");
    assert_eq!(calls.get(), 0);
    assert!(!c.path.exists(), "overrides write no cache");
}

#[test]
fn the_default_location_follows_xdg_then_home() {
    // Read-only look at the rule; the environment is the test process's.
    let c = Cache::default_location().expect("HOME or XDG_CACHE_HOME is set");
    assert!(c.path.ends_with("fm/pacer.toml"), "{}", c.path.display());
}
