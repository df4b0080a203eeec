//! A rank's destination device table as it reports it to its launcher
//! ([`crate::DeviceTable::runs`]: a line `FIRST LAST HOST DEVICE` per run of
//! consecutive ranks on one host through one device), and the two ways
//! `fmrun --show-table` prints it. The table's `Display` is [`in_full`] of
//! its own report, so the full form is written in one place.

/// One run of a rank's report of its table: ranks FIRST..=LAST, on HOST,
/// through DEVICE (`DeviceTable::runs`, a line `FIRST LAST HOST DEVICE`
/// each); a line that is not one is skipped.
pub fn report_runs(report: &str) -> impl Iterator<Item = (u32, u32, &str, &str)> {
    report.lines().filter_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w[..] {
            [a, b, host, dev] => Some((a.parse().ok()?, b.parse().ok()?, host, dev)),
            _ => None,
        }
    })
}

/// Rank `rank`'s table in full: a line per destination (rank, host, device).
pub fn in_full(rank: u32, report: &str) -> String {
    let mut t = format!("destination device table of rank {rank}\n");
    t.push_str(&format!("{:>6}  {:<24}  device\n", "rank", "host"));
    for (a, b, host, dev) in report_runs(report) {
        for r in a..=b {
            t.push_str(&format!("{r:>6}  {host:<24}  {dev}\n"));
        }
    }
    t
}

/// Rank `rank`'s table as one line of runs of ranks per device:
/// `device table of rank R: 0 self, 1-63 shmem, 64-255 nic`.
pub fn as_runs(rank: u32, report: &str) -> String {
    let mut runs: Vec<(u32, u32, &str)> = Vec::new();
    for (a, b, _, dev) in report_runs(report) {
        match runs.last_mut() {
            Some((_, last, d)) if *d == dev && *last + 1 == a => *last = b,
            _ => runs.push((a, b, dev)),
        }
    }
    let runs: Vec<String> = runs
        .iter()
        .map(|&(a, b, d)| match a == b {
            true => format!("{a} {d}"),
            false => format!("{a}-{b} {d}"),
        })
        .collect();
    format!("device table of rank {rank}: {}", runs.join(", "))
}
