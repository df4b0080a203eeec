//! fmrun's command line and its handling of programs that are not fm jobs.

use std::process::{Command, Output};

fn fmrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fmrun"))
        .args(args)
        .env_remove("FM_LOG")
        .output()
        .expect("run fmrun")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn output_is_forwarded_line_by_line_with_a_rank_prefix() {
    let o = fmrun(&[
        "-n",
        "3",
        "sh",
        "-c",
        "echo \"out $FM_RANK of $FM_SIZE\"; echo err >&2; printf tail",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for r in 0..3 {
        assert!(out.contains(&format!("[{r}] out {r} of 3\n")), "{out}");
        assert!(out.contains(&format!("[{r}] tail\n")), "{out}");
        assert!(err.contains(&format!("[{r}] err\n")), "{err}");
    }
}

#[test]
fn the_first_failing_rank_gives_the_job_its_status() {
    let o = fmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $FM_RANK = 1 ]; then exit 5; fi; sleep 30",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("rank 1") && err.contains("status 5"), "{err}");
}

#[test]
fn bad_command_lines_are_clear_errors() {
    for (args, want) in [
        (&["-n", "0", "true"][..], "-n must be"),
        (
            &["-n", "2", "--net", "carrier-pigeon", "true"][..],
            "unknown device",
        ),
        (
            &["-n", "2", "--net", "infiniband", "true"][..],
            "unknown device \"infiniband\"",
        ),
        (
            &["-n", "4", "--hosts", "a:3,b:3", "true"][..],
            "places 6 processes but -n is 4",
        ),
        (&["-n", "2", "--hosts", ":2", "true"][..], "names no host"),
        (&["-n", "2", "--hosts", "a:x", "true"][..], "not a number"),
        (&["-n", "2", "/nonexistent/program"][..], "cannot start"),
        (
            &["-n", "2", "--grm", "127.0.0.1:1", "true"][..],
            "cannot reach the GRM",
        ),
    ] {
        let o = fmrun(args);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_timeout_stops_the_job() {
    let o = fmrun(&["-n", "2", "--timeout", "1", "sleep", "30"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn hosts_place_ranks_in_blocks_and_rsh_templates_start_them() {
    let show = "echo \"$FM_RANK $FM_HOST $VIA\"";
    let o = fmrun(&[
        "-n", "4", "--hosts", "a,b", "--rsh", "local", "sh", "-c", show,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in ["[0] 0 a ", "[1] 1 a ", "[2] 2 b ", "[3] 3 b "] {
        assert!(out.contains(line), "{out}");
    }
    // A template in front of `env FM_…=… PROGRAM`, as `ssh {host}` or `ip netns exec {host}` would be.
    let o = fmrun(&[
        "-n",
        "3",
        "--hosts",
        "x:1,y:2",
        "--rsh",
        "env VIA=via-{host}",
        "sh",
        "-c",
        show,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in ["[0] 0 x via-x", "[1] 1 y via-y", "[2] 2 y via-y"] {
        assert!(out.contains(line), "{out}");
    }
}
