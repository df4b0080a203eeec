//! The pacer in real jobs: one rank per host measures and caches, later
//! jobs take the cache, and FM_PACER and the settings file override it.
//! Each test has its own cache and settings directories.

use fm_tests::{fmrun, succeed, TempDir};
use std::process::Command;

const PROG: &str = env!("CARGO_BIN_EXE_fm-testprog");
const OWN: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// A 2-rank all-to-all with checksums under fmrun, the pacer's and the
/// shmem device's decisions logged; `home` holds the cache and settings.
fn job(dir: &TempDir, home: &TempDir, env: &[(&str, &str)]) -> Command {
    let mut c = fmrun(
        OWN,
        dir,
        &["-n", "2"],
        std::path::Path::new(PROG),
        &["alltoall", "200", "100000", "7"],
    );
    c.env("XDG_CACHE_HOME", home.0.join("cache"))
        .env("XDG_CONFIG_HOME", home.0.join("config"))
        .env_remove("FM_CONFIG")
        .env_remove("FM_PACER")
        .env("FM_LOG", "warn,fm_pacer=debug,fm_devices::shmem=debug");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn count(text: &str, what: &str) -> usize {
    text.lines().filter(|l| l.contains(what)).count()
}

/// The payload per frame of the job's segment, from the shmem device's log
/// (not of the pacer's own segments, `fm-KEY-pacer`).
fn payloads(err: &str) -> Vec<u32> {
    err.lines()
        .filter(|l| l.contains("shmem segment mapped") && !l.contains("-pacer "))
        .filter_map(|l| {
            let at = l.find("payload: ")? + "payload: ".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn one_rank_measures_the_next_job_takes_the_cache() {
    let (dir, home) = (
        TempDir::for_segments("pacer-job"),
        TempDir::new("pacer-home"),
    );
    let (_, err) = succeed(&mut job(&dir, &home, &[]));
    // Exactly one rank measured the shmem frame size; the other took its curve.
    let shmem = |e: &str, what: &str| {
        e.lines()
            .filter(|l| l.contains(what) && l.contains("knob=shmem.frame"))
            .count()
    };
    assert_eq!(shmem(&err, "pacer: measured"), 1, "{err}");
    assert_eq!(shmem(&err, "pacer: cached curve"), 1, "{err}");
    let cache = home.0.join("cache/fm/pacer.toml");
    let text = std::fs::read_to_string(&cache).expect("the cache was written");
    assert!(text.contains("[curves.\"shmem.frame\"]"), "{text}");
    // Both ranks' segment has the chosen payload.
    let p = payloads(&err);
    assert_eq!(p.len(), 2, "{err}");
    assert_eq!(p[0], p[1]);
    // The next job measures nothing.
    let (_, err2) = succeed(&mut job(&dir, &home, &[]));
    assert_eq!(count(&err2, "pacer: measured"), 0, "{err2}");
    assert_eq!(payloads(&err2), p, "{err2}");
    // FM_PACER=force measures again, once for the job.
    let (_, err3) = succeed(&mut job(&dir, &home, &[("FM_PACER", "force")]));
    assert_eq!(shmem(&err3, "pacer: measured"), 1, "{err3}");
    assert_eq!(shmem(&err3, "pacer: cached curve"), 1, "{err3}");
    assert_eq!(dir.segments(), Vec::<String>::new());
}

#[test]
fn fm_pacer_off_and_a_size_override_the_measurement() {
    let (dir, home) = (
        TempDir::for_segments("pacer-env"),
        TempDir::new("pacer-env-home"),
    );
    let (_, err) = succeed(&mut job(&dir, &home, &[("FM_PACER", "4096")]));
    assert_eq!(payloads(&err), [4096 - 16, 4096 - 16], "{err}");
    assert_eq!(count(&err, "pacer: measured"), 0, "{err}");
    let (_, err) = succeed(&mut job(&dir, &home, &[("FM_PACER", "off")]));
    assert_eq!(payloads(&err), [16384 - 16, 16384 - 16], "{err}");
    assert!(
        !home.0.join("cache/fm/pacer.toml").exists(),
        "overrides write no cache"
    );
    // FM_SHM_PAYLOAD wins over the pacer.
    let (_, err) = succeed(&mut job(&dir, &home, &[("FM_SHM_PAYLOAD", "3000")]));
    assert_eq!(payloads(&err), [3000, 3000], "{err}");
    // A bad value is one clear error.
    let out = job(&dir, &home, &[("FM_PACER", "fast")])
        .output()
        .expect("run");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        e.contains("FM_PACER") && e.contains("known values are auto, off, force"),
        "{e}"
    );
}

#[test]
fn the_settings_file_sets_the_pacer_and_the_environment_wins() {
    let (dir, home) = (
        TempDir::for_segments("pacer-file"),
        TempDir::new("pacer-file-home"),
    );
    let file = home.0.join("config/fm/fm.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "# fm settings\npacer = 8192\n").unwrap();
    let (_, err) = succeed(&mut job(&dir, &home, &[]));
    assert_eq!(payloads(&err), [8192 - 16, 8192 - 16], "{err}");
    let (_, err) = succeed(&mut job(&dir, &home, &[("FM_PACER", "off")]));
    assert_eq!(payloads(&err), [16384 - 16, 16384 - 16], "{err}");
    // FM_CONFIG names another file.
    let other = home.0.join("other.toml");
    std::fs::write(&other, "pacer = \"off\"\nshm_payload = 2000\n").unwrap();
    let other_s = other.to_string_lossy().into_owned();
    let (_, err) = succeed(&mut job(&dir, &home, &[("FM_CONFIG", &other_s)]));
    assert_eq!(payloads(&err), [2000, 2000], "{err}");
    // Bad files: one error line with the file and line, the job fails.
    for (text, want) in [
        (
            "pacer = \"off\"\npacer_mode = 1\n",
            ":2: unknown key \"pacer_mode\"",
        ),
        (
            "\npacer = \"sometimes\"\n",
            ":2: pacer = \"sometimes\": \"sometimes\": known values are auto",
        ),
        ("shm_payload = \"big\"\n", ":1: shm_payload = \"big\""),
        ("pacer = [\n", ":2: invalid array"),
    ] {
        std::fs::write(&other, text).unwrap();
        let out = job(&dir, &home, &[("FM_CONFIG", &other_s)])
            .output()
            .expect("run");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(e.contains(&format!("{other_s}{want}")), "{text:?}: {e}");
    }
    // FM_CONFIG naming a missing file is an error too.
    let missing = home.0.join("missing.toml").to_string_lossy().into_owned();
    let out = job(&dir, &home, &[("FM_CONFIG", &missing)])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml: cannot read"));
    assert_eq!(dir.segments(), Vec::<String>::new());
}

#[test]
fn a_corrupt_or_foreign_cache_is_ignored_with_a_warning_and_measured_again() {
    let (dir, home) = (
        TempDir::for_segments("pacer-bad"),
        TempDir::new("pacer-bad-home"),
    );
    let cache = home.0.join("cache/fm/pacer.toml");
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    for (text, warning) in [
        (
            "[curves.\"shmem.frame\"\nchosen = 4096\n",
            "pacer: ignoring a corrupt cache",
        ),
        (
            "version = 99\nhost = \"elsewhere\"\nkernel = \"2.2.12\"\n",
            "pacer: the cache is for version 99 on \"elsewhere\"",
        ),
    ] {
        std::fs::write(&cache, text).unwrap();
        let (_, err) = succeed(&mut job(&dir, &home, &[]));
        assert!(
            err.contains(warning) && err.contains("measuring again"),
            "{err}"
        );
        assert!(count(&err, "pacer: measured") >= 1, "{err}");
        let now = std::fs::read_to_string(&cache).unwrap();
        assert!(
            now.contains("version = 1") && now.contains("shmem.frame"),
            "{now}"
        );
    }
}
