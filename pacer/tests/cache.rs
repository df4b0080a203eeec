//! The pacer's cache and overrides, with a real file in a temporary directory.

use fm_pacer::{Cache, Knob, Mode, Pacer, Profile, Source, VERSION};
use fm_tests::TempDir;
use std::cell::Cell;

const CANDIDATES: [u64; 4] = [1, 4, 16, 64];

/// A measurement that rates each size with `f`.
fn each(mut f: impl FnMut(u64) -> Option<f64>) -> impl FnOnce(&[u64]) -> Vec<Option<f64>> {
    move |sizes| sizes.iter().map(|&s| f(s)).collect()
}

/// A knob whose throughput peaks at 16; counts the measurements.
fn measure(calls: &Cell<u32>) -> impl FnOnce(&[u64]) -> Vec<Option<f64>> + '_ {
    each(move |s| {
        calls.set(calls.get() + 1);
        Some(match s {
            16 => 900.0,
            64 => 700.0,
            _ => 100.0 * s as f64,
        })
    })
}

fn knob(key: &str, candidates: &[u64], default: u64) -> Knob {
    Knob {
        key: key.into(),
        candidates: candidates.to_vec(),
        default,
    }
}

/// Tune a `ethernet.datagram` knob (default 32) over `candidates`.
fn eth(c: &Cache, mode: Mode, candidates: &[u64], calls: &Cell<u32>) -> fm_pacer::Choice {
    Pacer::new(mode, Some(c.clone()))
        .tune(&knob("ethernet.datagram", candidates, 32), measure(calls))
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
    let first = eth(&c, Mode::Auto, &CANDIDATES, &calls);
    assert_eq!((first.size, first.source), (16, Source::Measured));
    assert_eq!(calls.get(), 4 * fm_pacer::PASSES as u32);
    // The file round-trips to the same profile.
    let p = c.load();
    assert_eq!(p.version, VERSION);
    assert_eq!(p.curves.get("ethernet.datagram"), first.curve.as_ref());
    let t = std::time::Instant::now();
    let again = eth(&c, Mode::Auto, &CANDIDATES, &calls);
    let took = t.elapsed();
    assert_eq!((again.size, again.source), (16, Source::Cached));
    assert_eq!(calls.get(), 8, "a cached choice is not measured again");
    eprintln!("cached choice in {took:?}");
    // Another knob goes into the same file, next to the first.
    Pacer::new(Mode::Auto, Some(c.clone())).tune(
        &knob("shmem.frame", &[1024, 4096], 4096),
        each(|_| Some(1.0)),
    );
    let p = c.load();
    assert!(p.curves.contains_key("ethernet.datagram") && p.curves.contains_key("shmem.frame"));
}

#[test]
fn force_measures_again_and_changed_candidates_do_too() {
    let dir = TempDir::new("pacer-force");
    let c = cache(&dir);
    let calls = Cell::new(0);
    eth(&c, Mode::Auto, &CANDIDATES, &calls);
    let f = eth(&c, Mode::Force, &CANDIDATES, &calls);
    assert_eq!((f.source, calls.get()), (Source::Measured, 16));
    let other = [1, 16];
    let o = eth(&c, Mode::Auto, &other, &calls);
    assert_eq!((o.source, calls.get()), (Source::Measured, 20));
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
        let r = eth(&c, Mode::Auto, &CANDIDATES, &calls);
        assert_eq!(
            (r.size, r.source, calls.get()),
            (16, Source::Measured, 8),
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
    let off = eth(&c, Mode::Off, &CANDIDATES, &calls);
    assert_eq!((off.size, off.source), (32, Source::Default));
    let fixed = eth(&c, Mode::Fixed(20), &CANDIDATES, &calls);
    assert_eq!((fixed.size, fixed.source), (16, Source::Override));
    let small = eth(&c, Mode::Fixed(1), &[4, 8], &calls);
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

#[test]
fn one_candidate_is_not_measured() {
    let dir = TempDir::new("pacer-one");
    let c = cache(&dir);
    let calls = Cell::new(0);
    let r = eth(&c, Mode::Force, &[1472], &calls);
    assert_eq!((r.size, r.source, calls.get()), (1472, Source::Default, 0));
}

#[test]
fn ranks_of_one_job_measure_once_even_when_forced() {
    // Two "ranks" at once (threads: flock locks are per open file, so they
    // exclude each other like processes): the one that takes the lock
    // measures; the other waits and takes its curve, also under force.
    let dir = TempDir::new("pacer-lock");
    let c = cache(&dir);
    let calls = std::sync::atomic::AtomicU32::new(0);
    let choices: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut p = Pacer::new(Mode::Force, Some(c.clone()));
                    p.job = Some("00000000000000a1".into());
                    p.tune(
                        &knob("shmem.frame", &CANDIDATES, 16),
                        each(|s| {
                            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            Some(s as f64)
                        }),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let measured = choices
        .iter()
        .filter(|c| c.source == Source::Measured)
        .count();
    assert_eq!(measured, 1, "{choices:?}");
    assert_eq!(calls.into_inner(), 4 * fm_pacer::PASSES as u32);
    assert!(choices.iter().all(|c| c.size == 64));
    // A later job under force measures again.
    let mut p = Pacer::new(Mode::Force, Some(c.clone()));
    p.job = Some("00000000000000a2".into());
    let again = p.tune(
        &knob("shmem.frame", &CANDIDATES, 16),
        each(|s| Some(s as f64)),
    );
    assert_eq!(again.source, Source::Measured);
}
