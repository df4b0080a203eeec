//! fm-info on real segments: cleanup removes dead jobs' segments and only
//! those; the doctor sees a directory too small and stale segments.

use fm_devices::shmem::segment::{Geometry, Segment};
use fm_devices::JobKey;
use fm_tests::{TempDir, TinyTmpfs};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const GEOMETRY: Geometry = Geometry {
    procs: 2,
    queues: 2,
    frames: 64,
    slots: 64,
    payload: 4080,
};
/// Offset of the creator's pid in the segment header.
const CREATOR_PID_AT: u64 = 48;

fn fm_info(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fm-info"))
        .args(args)
        .output()
        .expect("run fm-info")
}

/// A segment whose creator is this (live) process, or a dead one.
fn segment(dir: &Path, key: u64, dead: bool) -> std::path::PathBuf {
    let p = dir.join(format!("fm-{}-h", JobKey(key)));
    drop(
        Segment::create_or_open(&p, JobKey(key), GEOMETRY, false, Duration::from_secs(1))
            .expect("create"),
    );
    if dead {
        let mut c = Command::new("true").spawn().expect("spawn");
        let pid = c.id();
        c.wait().expect("wait");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .expect("open");
        f.write_all_at(&pid.to_ne_bytes(), CREATOR_PID_AT)
            .expect("patch");
    }
    p
}

#[test]
fn cleanup_removes_dead_jobs_segments_only() {
    let dir = TempDir::new("cleanup");
    let live = segment(&dir.0, 0x1111, false);
    let dead = segment(&dir.0, 0x2222, true);
    let d = dir.0.to_str().expect("utf-8");
    let o = fm_info(&["cleanup", "--dir", d, "--dry-run"]);
    assert!(o.status.success());
    assert!(
        live.exists() && dead.exists(),
        "a dry run removed something"
    );
    let o = fm_info(&["cleanup", "--dir", d]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(!dead.exists(), "{out}");
    assert!(live.exists(), "a running job's segment was removed: {out}");
    assert!(
        out.contains("1 stale segment(s) removed") && out.contains("1 of running jobs left alone"),
        "{out}"
    );
}

/// A segment whose creator died between creating the file and writing
/// its header (all zeros, or empty) is recognised by its name: left alone
/// while it could still be in the making, removed once old; a file that
/// only looks like one (no key in its name, or another header) stays.
#[test]
fn cleanup_removes_a_zero_filled_leftover_once_it_is_old() {
    let dir = TempDir::new("cleanup-zero");
    let zero = dir.0.join(format!("fm-{}-h", JobKey(0x4444)));
    let empty = dir.0.join(format!("fm-{}-h", JobKey(0x5555)));
    let not_ours = dir.0.join("fm-notakey-h");
    let foreign = dir.0.join(format!("fm-{}-x", JobKey(0x6666)));
    std::fs::write(&zero, vec![0u8; 2 * 4096]).expect("write");
    std::fs::write(&empty, b"").expect("write");
    std::fs::write(&not_ours, vec![0u8; 4096]).expect("write");
    std::fs::write(&foreign, vec![7u8; 4096]).expect("write");
    let d = dir.0.to_str().expect("utf-8");
    let o = fm_info(&["cleanup", "--dir", d]);
    assert!(o.status.success());
    assert!(
        zero.exists() && empty.exists(),
        "removed while it could be in the making"
    );
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for p in [&zero, &empty, &not_ours, &foreign] {
        let f = std::fs::File::options().write(true).open(p).expect("open");
        f.set_modified(old).expect("age it");
    }
    let o = fm_info(&["cleanup", "--dir", d]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(!zero.exists() && !empty.exists(), "{out}");
    assert!(out.contains("never initialised"), "{out}");
    assert!(
        not_ours.exists() && foreign.exists(),
        "removed a file that is no segment: {out}"
    );
}

#[test]
fn doctor_names_stale_segments_and_the_fix() {
    let dir = TempDir::new("doctor");
    segment(&dir.0, 0x3333, true);
    let o = fm_info(&["doctor", "-n", "2", "--dir", dir.0.to_str().expect("utf-8")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("1 stale segment(s)") && out.contains("fix: fm-info cleanup --dir"),
        "{out}"
    );
    // The libraries of this build: the MPI library is beside it (the
    // workspace's tests build it); either way a line says.
    assert!(out.contains("ok    MPI library: "), "{out}");
    assert!(out.contains("C library: "), "{out}");
}

#[test]
fn doctor_fails_on_a_directory_too_small_for_the_job() {
    let Some(tiny) = TinyTmpfs::mount("doctor_fails_on_a_directory_too_small_for_the_job", "256k")
    else {
        return;
    };
    let o = fm_info(&[
        "doctor",
        "-n",
        "4",
        "--dir",
        tiny.0 .0.to_str().expect("utf-8"),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAIL") && out.contains("needs") && out.contains("FM_SHM_DIR"),
        "{out}"
    );
}

#[test]
fn devices_lists_every_device_with_option_bits() {
    let o = fm_info(&[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for d in ["self ", "shmem ", "null ", "ethernet ", "nic "] {
        assert!(out.contains(d), "{out}");
    }
    assert!(out.contains("reliable|ordered|receives"), "{out}");
}

/// `fm-info pacer` with its own cache and settings directories.
fn pacer(home: &TempDir, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fm-info"));
    c.arg("pacer")
        .args(args)
        .current_dir(&home.0)
        .env("XDG_CACHE_HOME", home.0.join("cache"))
        .env("XDG_CONFIG_HOME", home.0.join("config"))
        .env_remove("FM_CONFIG")
        .env_remove("FM_PACER");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run fm-info pacer");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{o}\n{e}");
    (o, e)
}

#[test]
fn pacer_measures_then_shows_the_cache_as_table_and_plot() {
    let home = TempDir::new("info-pacer");
    let (first, _) = pacer(&home, &["--svg", "pacer.svg"], &[]);
    assert!(first.contains("(FM_PACER: auto)"), "{first}");
    assert!(
        first.contains("shmem.frame: chosen") && first.contains("measured now"),
        "{first}"
    );
    assert!(first.contains("<- chosen"), "{first}");
    assert!(first.contains("ethernet.datagram@lo"), "{first}");
    let svg = std::fs::read_to_string(home.0.join("pacer.svg")).expect("the plot");
    assert!(svg.starts_with("<svg") && svg.contains("shmem.frame") && svg.contains("polyline"));
    // The second time it is the cache, with the same choice.
    let (second, _) = pacer(&home, &["--svg", "again.svg"], &[]);
    let chosen = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("shmem.frame: chosen"))
            .map(|l| l.split(" bytes").next().unwrap_or("").to_string())
    };
    assert!(second.contains("(cached;"), "{second}");
    assert_eq!(chosen(&first), chosen(&second));
    assert!(home.0.join("again.svg").exists());
    // --force measures again; FM_PACER=<size> shows the override.
    // Without --svg nothing is written.
    std::fs::remove_file(home.0.join("pacer.svg")).unwrap();
    let (forced, _) = pacer(&home, &["--force"], &[]);
    assert!(
        !home.0.join("pacer.svg").exists(),
        "a plot nobody asked for"
    );
    assert!(!forced.contains("(cached;"), "{forced}");
    let (fixed, _) = pacer(&home, &[], &[("FM_PACER", "8192")]);
    assert!(
        fixed.contains("shmem.frame: chosen 8192 bytes (FM_PACER=<size>"),
        "{fixed}"
    );
    // A corrupt cache: a warning, and measured again.
    std::fs::write(home.0.join("cache/fm/pacer.toml"), "not = [toml").unwrap();
    let (again, warn) = pacer(&home, &[], &[]);
    assert!(warn.contains("ignoring a corrupt cache"), "{warn}");
    assert!(again.contains("measured now"), "{again}");
}

/// `fm-info config` shows each setting's value and where it came from: the
/// environment over the settings file over the default; `--markdown` gives
/// exactly docs/CONFIG.md's rows.
#[test]
fn config_shows_values_and_their_sources() {
    let home = TempDir::new("fm-info-config");
    let file = home.0.join("fm.toml");
    std::fs::write(&file, "credits = 7\nstash_bytes = 1024\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fm-info"))
        .arg("config")
        .env("FM_CONFIG", &file)
        .env("FM_CREDITS", "3")
        .env_remove("FM_STASH_BYTES")
        .output()
        .expect("fm-info config");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |var: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(var))
            .unwrap_or_else(|| panic!("no {var} in\n{text}"))
            .to_string()
    };
    assert!(line("FM_CREDITS").contains(" 3  (environment)"), "{text}");
    let stash = line("FM_STASH_BYTES");
    assert!(
        stash.contains(" 1024  (") && stash.contains("fm.toml:2)"),
        "{stash}"
    );
    assert!(line("FM_PACER").contains("(default: `auto`)"), "{text}");
    let json = Command::new(env!("CARGO_BIN_EXE_fm-info"))
        .args(["config", "--json"])
        .env("FM_CONFIG", &file)
        .env("FM_CREDITS", "3")
        .env_remove("FM_STASH_BYTES")
        .output()
        .expect("fm-info config --json");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let credits = rows
        .iter()
        .find(|r| r["var"] == "FM_CREDITS")
        .expect("FM_CREDITS");
    assert_eq!(
        (&credits["value"], &credits["source"]),
        (&"3".into(), &"environment".into())
    );
    let stash = rows
        .iter()
        .find(|r| r["var"] == "FM_STASH_BYTES")
        .expect("FM_STASH_BYTES");
    assert_eq!(stash["value"], "1024");
    assert!(
        stash["source"]
            .as_str()
            .is_some_and(|s| s.ends_with("fm.toml:2")),
        "{stash}"
    );
    let md = Command::new(env!("CARGO_BIN_EXE_fm-info"))
        .args(["config", "--markdown"])
        .output()
        .expect("fm-info config --markdown");
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/CONFIG.md"))
            .unwrap();
    let rows: Vec<String> = String::from_utf8_lossy(&md.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(rows.len(), fm::settings::all().count());
    for r in rows {
        assert!(docs.lines().any(|l| l == r), "not in docs/CONFIG.md: {r}");
    }
}

/// A reader that stops early (`fm-info doctor | head -1`) ends fm-info
/// quietly, as it ends a C tool: no panic, no message.
#[test]
fn a_closed_pipe_ends_fm_info_quietly() {
    use std::io::BufRead;
    use std::process::Stdio;
    for args in [&["doctor"][..], &["devices"][..], &["config"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fm-info"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fm-info");
        let mut first = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut first).expect("a first line");
        drop(out);
        let o = child.wait_with_output().expect("fm-info ends");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_ne!(o.status.code(), Some(101), "{args:?}: {err}");
    }
}

/// `fm-info doctor` reads the settings as a rank would: a bad value in the
/// settings file fails the check naming file and line (every rank would
/// fail), and `--json` gives one object per check.
#[test]
fn doctor_checks_the_settings_file() {
    let home = TempDir::new("doctor-settings");
    let file = home.0.join("fm.toml");
    std::fs::write(&file, "pacer = \"off\"\ncredits = \"many\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fm-info"))
        .args(["doctor", "-n", "2", "--json"])
        .env("FM_CONFIG", &file)
        .env_remove("FM_CREDITS")
        .output()
        .expect("fm-info doctor");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let settings = rows
        .iter()
        .find(|r| {
            r["what"]
                .as_str()
                .is_some_and(|w| w.starts_with("settings"))
        })
        .expect("a settings check");
    assert_eq!(settings["check"], "FAIL", "{settings}");
    let what = settings["what"].as_str().unwrap_or_default();
    assert!(
        what.contains("fm.toml:2") && what.contains("credits"),
        "{what}"
    );
    assert!(settings["fix"].is_string());
}

/// `fm-info devices --json`: one object per device, self and shmem
/// among them with their option bits and MTU.
#[test]
fn devices_as_json() {
    let out = fm_info(&["devices", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    for name in ["self", "shmem", "null"] {
        let d = rows.iter().find(|r| r["device"] == name).expect(name);
        assert!(d["mtu"].is_u64() && d["options"].is_string(), "{d}");
    }
}
