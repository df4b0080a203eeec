//! fm-bench runs as a real job: standalone (its own two pinned ranks) and
//! under fmrun with more ranks than this machine has cores.

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_fm-bench");

/// The result rows (the run's metadata line, which comes first, checked
/// and left out).
fn json_rows(out: &[u8]) -> Vec<serde_json::Value> {
    let all: Vec<serde_json::Value> = String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.split_once('{').map(|(_, rest)| format!("{{{rest}")))
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    let meta = all.first().expect("a metadata line first");
    assert_eq!(meta["bench"], "meta", "{meta}");
    assert!(
        meta["cpus"].as_u64().is_some() && meta["timing"].is_string(),
        "{meta}"
    );
    all.into_iter().filter(|r| r["bench"] != "meta").collect()
}

fn check_pingpong_rows(rows: &[serde_json::Value], sizes: &[u64]) {
    assert_eq!(rows.len(), sizes.len(), "{rows:?}");
    for (row, &size) in rows.iter().zip(sizes) {
        assert_eq!(row["bench"], "pingpong");
        assert_eq!(row["device"], "shmem");
        assert_eq!(row["size"], size);
        let median = row["median_us"].as_f64().expect("median_us");
        let min = row["min_us"].as_f64().expect("min_us");
        let p99 = row["p99_us"].as_f64().expect("p99_us");
        assert!(min > 0.0 && min <= median && median <= p99, "{row}");
    }
}

/// Ping-pong at 8 B and 64 KiB, short, as JSON.
const PINGPONG: [&str; 8] = [
    "pingpong", "--sizes", "8,65536", "--iters", "2000", "--warmup", "200", "--json",
];

/// Run `cmd`, which must succeed, and check its ping-pong rows.
fn check_run(mut cmd: Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_pingpong_rows(&json_rows(&out.stdout), &[8, 65536]);
}

#[test]
fn standalone_pingpong_reports_json_rows() {
    let mut c = Command::new(BENCH);
    c.args(PINGPONG).env_remove("FM_RANK");
    check_run(c);
}

#[test]
fn eight_ranks_under_fmrun_on_this_machine() {
    let mut c = Command::new(fm_tests::workspace_bin(BENCH, "fmrun"));
    c.args(["-n", "8", BENCH])
        .args(PINGPONG)
        .args(["--device", "shmem"]);
    check_run(c);
}

/// Fail the test with fm-bench's error output unless it succeeded.
fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--csv`: a `#` line of metadata, the columns, one row per size, each
/// with every column.
#[test]
fn csv_rows_have_every_column() {
    let out = Command::new(BENCH)
        .args([
            "pingpong", "--sizes", "8,1024", "--iters", "400", "--warmup", "40", "--csv",
        ])
        .output()
        .expect("fm-bench");
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("# fm_bench: ") && lines[0].contains("timing: "),
        "{text}"
    );
    for key in [
        "commit: ",
        "host: ",
        "cpu: ",
        "date: 20",
        "placement_probe_us: ",
    ] {
        assert!(lines[0].contains(key), "no {key:?} in the metadata: {text}");
    }
    let header: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(header[..4], ["bench", "device", "layer", "size"], "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    for (row, size) in lines[2..].iter().zip(["8", "1024"]) {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells.len(), header.len(), "{row}");
        assert_eq!(
            (cells[0], cells[1], cells[3]),
            ("pingpong", "shmem", size),
            "{row}"
        );
        let median: f64 = cells[6].parse().expect("a median");
        assert!(median > 0.0, "{row}");
        // Rounded: four significant digits at most.
        for cell in &cells[6..10] {
            let digits = cell
                .chars()
                .filter(char::is_ascii_digit)
                .collect::<String>();
            let significant = digits.trim_start_matches('0').trim_end_matches('0');
            assert!(significant.len() <= 4, "{cell} in {row}");
        }
    }
}

/// `--sizes A:B`: every power of two from A to B, as OSU's benchmarks.
#[test]
fn a_size_range_gives_every_power_of_two() {
    let out = Command::new(BENCH)
        .args([
            "pingpong", "--sizes", "8,1k:8k", "--iters", "200", "--warmup", "20", "--json",
        ])
        .output()
        .expect("fm-bench");
    succeeded(&out);
    check_pingpong_rows(&json_rows(&out.stdout), &[8, 1024, 2048, 4096, 8192]);
    let bad = Command::new(BENCH)
        .args(["pingpong", "--sizes", "8k:1k"])
        .output()
        .expect("fm-bench");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad size range"));
}

/// `--plot FILE.svg`: the results against message size, axes labelled, a
/// point per size on a line named for the device and layer.
#[test]
fn plot_writes_an_svg_with_labelled_axes() {
    let dir = fm_tests::TempDir::new("bench-plot");
    let svg = dir.0.join("pingpong.svg");
    let out = Command::new(BENCH)
        .args([
            "pingpong",
            "--sizes",
            "8,1024,65536",
            "--iters",
            "300",
            "--warmup",
            "30",
        ])
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("fm-bench");
    succeeded(&out);
    let said = format!("fm-bench: plot written to {}", svg.display());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&said),
        "{out:?}"
    );
    let text = std::fs::read_to_string(&svg).expect("the plot");
    assert!(text.starts_with("<svg"), "not an SVG");
    for label in [
        "message size, bytes",
        "median one-way time, us",
        "shmem (fm)",
    ] {
        assert!(text.contains(label), "no {label:?} in the plot");
    }
    assert_eq!(text.matches("<circle").count(), 3, "a point per size");
}

/// `coll`: a row per collective and size on every rank of the job,
/// standalone (its own ranks) and under fmrun with 5 ranks; `--plot`
/// draws them.
#[test]
fn collectives_report_a_row_per_collective_and_size() {
    let plot = fm_tests::TempDir::new("bench-coll-plot");
    let svg = plot.0.join("coll.svg");
    let args = [
        "coll",
        "--ops",
        "barrier,allreduce,alltoall",
        "--sizes",
        "8,4k",
        "--iters",
        "20",
        "--json",
    ];
    let mut standalone = Command::new(BENCH);
    standalone
        .args(args)
        .args(["--ranks", "3", "--plot"])
        .arg(&svg)
        .env_remove("FM_RANK");
    let mut under_fmrun = Command::new(fm_tests::workspace_bin(BENCH, "fmrun"));
    under_fmrun
        .args(["-n", "5", "--oversubscribe", BENCH])
        .args(args);
    for (mut cmd, ranks) in [(standalone, 3), (under_fmrun, 5)] {
        let out = cmd.output().expect("fm-bench coll");
        succeeded(&out);
        let rows = json_rows(&out.stdout);
        let seen: Vec<(String, u64)> = (rows.iter())
            .map(|r| {
                (
                    r["bench"].as_str().unwrap_or("").to_string(),
                    r["size"].as_u64().unwrap_or(1),
                )
            })
            .collect();
        let want: Vec<(String, u64)> = [
            ("barrier", 0),
            ("allreduce", 8),
            ("allreduce", 4096),
            ("alltoall", 8),
            ("alltoall", 4096),
        ]
        .iter()
        .map(|(b, s)| (b.to_string(), *s))
        .collect();
        assert_eq!(seen, want, "{rows:?}");
        for r in &rows {
            assert!(
                r["device"]
                    .as_str()
                    .is_some_and(|d| d.starts_with(&format!("{ranks} ranks over "))),
                "{r}"
            );
            let (min, median, max) = (
                r["min_us"].as_f64(),
                r["median_us"].as_f64(),
                r["max_us"].as_f64(),
            );
            assert!(
                matches!((min, median, max), (Some(a), Some(m), Some(b)) if 0.0 < a && a <= m && m <= b),
                "{r}"
            );
        }
    }
    let svg = std::fs::read_to_string(&svg).expect("the plot");
    for text in ["time per call", "allreduce", "alltoall", "3 ranks"] {
        assert!(svg.contains(text), "no {text:?} in the plot");
    }
}

/// `put`, `get` and `atomic`: a row per operation and size, over shared
/// memory (standalone) and over the ethernet device (two ranks as hosts
/// of their own).
#[test]
fn one_sided_benchmarks_report_a_row_per_operation_and_size() {
    let rows_of = |args: &[&str]| {
        let out = Command::new(BENCH)
            .args(args)
            .args(["--iters", "200", "--warmup", "20", "--json"])
            .env_remove("FM_RANK")
            .output()
            .expect("fm-bench");
        succeeded(&out);
        let rows = json_rows(&out.stdout);
        for r in &rows {
            let median = r["median_us"].as_f64().expect("median_us");
            assert!(median > 0.0, "{r}");
        }
        (rows.iter())
            .map(|r| {
                (
                    r["bench"].as_str().unwrap_or("").to_string(),
                    r["size"].as_u64().unwrap_or(0),
                )
            })
            .collect::<Vec<_>>()
    };
    let named = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(b, s)| (b.to_string(), *s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows_of(&["put", "--sizes", "8,4k"]),
        named(&[("put", 8), ("put_bw", 8), ("put", 4096), ("put_bw", 4096)])
    );
    assert_eq!(
        rows_of(&["get", "--sizes", "8,64k", "--device", "ethernet"]),
        named(&[("get", 8), ("get", 65536)])
    );
    assert_eq!(
        rows_of(&["atomic"]),
        named(&[("fetch_add", 8), ("compare_swap", 8), ("swap", 8)])
    );
}

/// `--stall-limit` takes a positive number of seconds; anything else is
/// refused before any rank starts, naming the option.
#[test]
fn a_stall_limit_must_be_a_positive_number_of_seconds() {
    for bad in ["0", "-1", "abc", "nan", "inf"] {
        let out = Command::new(BENCH)
            .args(["pingpong", "--sizes", "8", &format!("--stall-limit={bad}")])
            .output()
            .expect("run fm-bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: accepted");
        assert!(err.contains("--stall-limit"), "{bad}: {err}");
    }
    let mut cmd = Command::new(BENCH);
    cmd.args(PINGPONG).args(["--stall-limit", "30"]);
    check_run(cmd);
}
