//! `fm-bench coll`: FM's collectives (`fm::coll`) by size, OSU-style:
//! every rank times a loop of calls after a barrier, and the rows give
//! the median, minimum, 99th percentile and maximum over the ranks of
//! each rank's average time per call.

use crate::stats::{Format, Printer, Sample, Summary};
use crate::{e, Res};
use fm::coll::{Group, Op};
use fm::Fm;
use std::time::Instant;

/// The collectives measured, in order.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Collective {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::Barrier => "barrier",
            Collective::Bcast => "bcast",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Allgather => "allgather",
            Collective::Alltoall => "alltoall",
        }
    }

    /// Whether a row's plot and header speak of a collective.
    pub fn named(bench: &str) -> bool {
        <Collective as clap::ValueEnum>::value_variants()
            .iter()
            .any(|c| c.name() == bench)
    }
}

#[derive(clap::Args, Clone)]
pub struct CollOpts {
    /// Collectives to measure, comma separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub ops: Vec<Collective>,
    /// Ranks to start when run standalone (under fmrun: the job's).
    #[arg(long, default_value_t = 4)]
    pub ranks: usize,
    /// Bytes per member (reductions: of f64 elements, at least one;
    /// gather, scatter, allgather, all-to-all: per block), as in
    /// `fm-bench pingpong --sizes`.
    #[arg(long, value_parser = crate::parse_sizes)]
    pub sizes: Option<crate::Sizes>,
    /// Timed calls per size (default depends on size).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Untimed calls first (default: a tenth of the timed ones).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// One JSON object per line instead of a table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Comma-separated values instead of a table.
    #[arg(long)]
    pub csv: bool,
    /// Also draw the results against size into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Do not pin the standalone rank processes to CPUs.
    #[arg(long)]
    pub no_pin: bool,
}

fn default_iters(size: usize) -> u64 {
    match size {
        0..=4096 => 2000,
        4097..=65536 => 500,
        _ => 50,
    }
}

/// Buffers for one size, reused by every call.
struct Buffers {
    bytes: Vec<u8>,
    all: Vec<u8>,
    /// An all-to-all's blocks to send (`all` receives).
    send: Vec<u8>,
    floats: Vec<f64>,
}

/// One call of `c` on `g`.
fn call(fm: &mut Fm, g: &mut Group, c: Collective, b: &mut Buffers) -> fm::Result<()> {
    match c {
        Collective::Barrier => g.barrier(fm),
        Collective::Bcast => g.broadcast(fm, 0, &mut b.bytes),
        Collective::Reduce => g.reduce(fm, 0, &mut b.floats, Op::Sum),
        Collective::Allreduce => g.allreduce(fm, &mut b.floats, Op::Sum),
        Collective::Gather => g.gather(fm, 0, &b.bytes, &mut b.all),
        Collective::Scatter => g.scatter(fm, 0, &b.all, &mut b.bytes),
        Collective::Allgather => g.allgather(fm, &b.bytes, &mut b.all),
        Collective::Alltoall => g.alltoall(fm, &b.send, &mut b.all),
    }
}

/// This rank's average µs per call of `c` with `size` bytes.
fn time(
    fm: &mut Fm,
    g: &mut Group,
    c: Collective,
    size: usize,
    o: &CollOpts,
) -> Res<(usize, u64, f64)> {
    let n = g.size();
    let floats = (size / 8).max(1);
    let mut b = Buffers {
        bytes: vec![1; size],
        all: vec![2; size * n],
        send: match c {
            Collective::Alltoall => vec![3; size * n],
            _ => Vec::new(),
        },
        floats: vec![1.0; floats],
    };
    let size = match c {
        Collective::Barrier => 0,
        Collective::Reduce | Collective::Allreduce => floats * 8,
        _ => size,
    };
    let iters = o.iters.unwrap_or(default_iters(size)).max(1);
    for _ in 0..o.warmup.unwrap_or(iters / 10) {
        call(fm, g, c, &mut b).map_err(e)?;
    }
    g.barrier(fm).map_err(e)?;
    let t = Instant::now();
    for _ in 0..iters {
        call(fm, g, c, &mut b).map_err(e)?;
    }
    Ok((size, iters, t.elapsed().as_secs_f64() * 1e6 / iters as f64))
}

/// Run the collectives; rank 0 prints a row per collective and size.
pub fn run(fm: &mut Fm, o: &CollOpts, meta: Vec<(&'static str, serde_json::Value)>) -> Res<()> {
    let mut g = fm.world().map_err(e)?;
    let format = match (o.json, o.csv) {
        (true, _) => Format::Json,
        (_, true) => Format::Csv,
        _ => Format::Table,
    };
    let mut printer = Printer::new(format, meta, o.plot.clone());
    let ops = match o.ops.is_empty() {
        true => <Collective as clap::ValueEnum>::value_variants().to_vec(),
        false => o.ops.clone(),
    };
    let sizes = (o.sizes.clone()).map_or_else(|| vec![8, 1024, 65536, 1 << 20], |s| s.0);
    let device = fm.composite().member_names().join("+");
    for c in ops {
        let sizes = match c {
            Collective::Barrier => vec![0],
            _ => sizes.clone(),
        };
        for &size in &sizes {
            let (size, iters, mine) = time(fm, &mut g, c, size, o)?;
            let mut each = vec![0.0; if g.me() == 0 { g.size() } else { 0 }];
            g.gather(fm, 0, &[mine], &mut each).map_err(e)?;
            if g.me() == 0 {
                let row = Sample::collective(
                    c.name(),
                    &device,
                    g.size(),
                    size,
                    iters,
                    &Summary::of(&each),
                );
                printer.row(&row);
            }
        }
    }
    printer.finish()
}
