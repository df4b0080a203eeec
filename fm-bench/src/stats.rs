//! Summaries of timing samples and their output as a table or JSON lines.

/// Median and spread of a set of samples.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub p99: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
                p99: f64::NAN,
            };
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Summary {
            median: at(0.5),
            min: v[0],
            max: v[v.len() - 1],
            p99: at(0.99),
        }
    }
}

/// One result row.
pub struct Sample {
    bench: &'static str,
    device: String,
    layer: &'static str,
    size: usize,
    iters: u64,
    /// Times in µs (for pollcost: ns, see `unit`).
    s: Summary,
    unit: &'static str,
    mb_s: Option<f64>,
    mmsg_s: Option<f64>,
    /// System calls made during the measurement (pollcost of nic).
    pub syscalls: Option<u64>,
}

impl Sample {
    /// A row with the fields every kind shares.
    fn row(
        bench: &'static str,
        device: &str,
        layer: &'static str,
        size: usize,
        iters: u64,
        s: Summary,
        unit: &'static str,
    ) -> Sample {
        Sample {
            bench,
            device: device.into(),
            layer,
            size,
            iters,
            s,
            unit,
            mb_s: None,
            mmsg_s: None,
            syscalls: None,
        }
    }

    /// One-way latency in µs.
    pub fn latency(
        bench: &'static str,
        device: &str,
        layer: &'static str,
        size: usize,
        iters: u64,
        s: &Summary,
    ) -> Sample {
        Sample {
            mb_s: Some(size as f64 / s.median),
            ..Sample::row(bench, device, layer, size, iters, *s, "us")
        }
    }

    /// A window of `window` messages took `s` µs.
    pub fn stream(
        bench: &'static str,
        device: &str,
        size: usize,
        iters: u64,
        window: u64,
        s: &Summary,
    ) -> Sample {
        let w = window as f64;
        let per_msg = Summary {
            median: s.median / w,
            min: s.min / w,
            max: s.max / w,
            p99: s.p99 / w,
        };
        Sample {
            mb_s: Some(size as f64 / per_msg.median),
            mmsg_s: Some(1.0 / per_msg.median),
            ..Sample::row(bench, device, "fm", size, iters, per_msg, "us")
        }
    }

    /// A collective of `ranks` members: the summary over the ranks of
    /// each one's average µs per call.
    pub fn collective(
        bench: &'static str,
        device: &str,
        ranks: usize,
        size: usize,
        iters: u64,
        s: &Summary,
    ) -> Sample {
        let device = format!("{ranks} ranks over {device}");
        Sample::row(bench, &device, "fm", size, iters, *s, "us")
    }

    /// A cost in ns.
    pub fn nanos(
        bench: &'static str,
        device: &str,
        layer: &'static str,
        iters: u64,
        s: &Summary,
    ) -> Sample {
        Sample::row(bench, device, layer, 0, iters, *s, "ns")
    }

    pub fn json(&self) -> String {
        let mut o = serde_json::json!({
            "bench": self.bench,
            "device": self.device,
            "layer": self.layer,
            "size": self.size,
            "iters": self.iters,
        });
        let (m, unit) = (&mut o, self.unit);
        m[format!("median_{unit}")] = round(self.s.median).into();
        m[format!("min_{unit}")] = round(self.s.min).into();
        m[format!("max_{unit}")] = round(self.s.max).into();
        m[format!("p99_{unit}")] = round(self.s.p99).into();
        if let Some(x) = self.mb_s {
            m["mb_s"] = round(x).into();
        }
        if let Some(x) = self.mmsg_s {
            m["mmsg_s"] = round(x).into();
        }
        if let Some(x) = self.syscalls {
            m["syscalls"] = x.into();
        }
        o.to_string()
    }

    /// The row in an OSU-style table under [`Sample::table_header`]'s
    /// columns; `first_layer` is the header's layer (a row of another layer
    /// says so).
    fn table_row(&self, first_layer: &str) -> String {
        let opt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        format!(
            "{:>10} {:>12.3} {:>12.3} {:>12.3} {:>12.3} {:>11} {:>9} {:>10}{}",
            self.size,
            self.s.median,
            self.s.min,
            self.s.p99,
            self.s.max,
            opt(self.mb_s, 1),
            opt(self.mmsg_s, 2),
            self.iters,
            match (self.layer != first_layer, self.syscalls) {
                (true, Some(n)) => format!("  ({} {}, {n} system calls)", self.device, self.layer),
                (true, None) => format!("  ({})", self.layer),
                (false, _) => String::new(),
            }
        )
    }

    fn table_header(&self) -> String {
        let u = self.unit;
        format!(
            "# fm-bench {} — device {}, layer {}\n{:>10} {:>12} {:>12} {:>12} {:>12} {:>11} {:>9} {:>10}",
            self.bench,
            self.device,
            self.layer,
            "size",
            format!("median {u}"),
            format!("min {u}"),
            format!("p99 {u}"),
            format!("max {u}"),
            "MB/s",
            "Mmsg/s",
            "iters"
        )
    }

    /// The columns; `syscalls` only for `pollcost`, the one benchmark that
    /// counts them.
    fn csv_header(&self) -> String {
        let base = "bench,device,layer,size,iters,unit,median,min,p99,max,mb_s,mmsg_s";
        match self.counts_syscalls() {
            true => format!("{base},syscalls"),
            false => base.to_string(),
        }
    }

    fn counts_syscalls(&self) -> bool {
        self.bench == "pollcost"
    }

    fn csv_row(&self) -> String {
        let opt = |x: Option<f64>| x.map_or(String::new(), |v| round(v).to_string());
        let syscalls = match self.counts_syscalls() {
            true => format!(
                ",{}",
                self.syscalls.map_or(String::new(), |n| n.to_string())
            ),
            false => String::new(),
        };
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}{}",
            self.bench,
            self.device,
            self.layer,
            self.size,
            self.iters,
            self.unit,
            round(self.s.median),
            round(self.s.min),
            round(self.s.p99),
            round(self.s.max),
            opt(self.mb_s),
            opt(self.mmsg_s),
            syscalls
        )
    }
}

/// How rows are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

/// Prints each row as its size finishes: first a line of metadata, then
/// (for a table or CSV) the columns.
pub struct Printer {
    format: Format,
    /// `--plot FILE.svg`: the rows' points, drawn at the end.
    plot: Option<(std::path::PathBuf, Vec<Point>, String, String)>,
    /// What the run was, said once before the first row.
    meta: Vec<(&'static str, serde_json::Value)>,
    /// The (bench, layer) of the table's header now.
    header: Option<(&'static str, &'static str)>,
}

impl Printer {
    pub fn new(
        format: Format,
        meta: Vec<(&'static str, serde_json::Value)>,
        plot: Option<std::path::PathBuf>,
    ) -> Printer {
        Printer {
            format,
            plot: plot.map(|p| (p, Vec::new(), String::new(), String::new())),
            meta,
            header: None,
        }
    }

    /// After the last row: draw the plot, if one was asked for.
    pub fn finish(&mut self) -> Result<(), String> {
        match self.plot.take() {
            // Only the rank that measured has rows (and draws).
            Some((path, points, title, y)) if !points.is_empty() => {
                plot(&path, &title, &y, &points)?;
                eprintln!("fm-bench: plot written to {}", path.display());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub fn row(&mut self, r: &Sample) {
        use std::io::Write;
        if let Some((_, points, title, y)) = &mut self.plot {
            if points.is_empty() {
                *title = r.plot_title();
                *y = r.y_label();
            }
            points.push(r.point());
        }
        let mut out = String::new();
        if !self.meta.is_empty() {
            let meta = std::mem::take(&mut self.meta);
            out += &match self.format {
                Format::Json => {
                    let mut o = serde_json::json!({ "bench": "meta" });
                    for (k, v) in meta {
                        o[k] = v;
                    }
                    format!("{o}\n")
                }
                _ => {
                    let text: Vec<String> = (meta.into_iter())
                        .map(|(k, v)| match v {
                            serde_json::Value::String(s) => format!("{k}: {s}"),
                            v => format!("{k}: {v}"),
                        })
                        .collect();
                    format!("# {}\n", text.join("; "))
                }
            };
            if self.format == Format::Csv {
                out += &r.csv_header();
                out.push('\n');
            }
        }
        match self.format {
            Format::Json => out += &r.json(),
            Format::Csv => out += &r.csv_row(),
            Format::Table => {
                // A header for each benchmark's rows.
                if self.header.map(|h| h.0) != Some(r.bench) {
                    out += &r.table_header();
                    out.push('\n');
                    self.header = Some((r.bench, r.layer));
                }
                out += &r.table_row(self.header.map_or(r.layer, |h| h.1));
            }
        }
        out.push('\n');
        let mut stdout = std::io::stdout().lock();
        let _ = stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush());
    }
}

/// One point of the plot: its line (device and layer), size and value.
pub struct Point {
    pub line: String,
    pub size: usize,
    pub value: f64,
}

impl Sample {
    /// The point this row adds to a plot of `what` (the first row's
    /// measure: latency, or bandwidth for streams).
    pub fn point(&self) -> Point {
        let collective = crate::coll::Collective::named(self.bench);
        Point {
            line: match collective {
                true => self.bench.to_string(),
                false => format!("{} ({})", self.device, self.layer),
            },
            size: self.size,
            value: match (self.bench, self.mb_s) {
                ("bw" | "rate", Some(mb_s)) => mb_s,
                _ => self.s.median,
            },
        }
    }

    /// The plot's title, from its first row.
    pub fn plot_title(&self) -> String {
        match crate::coll::Collective::named(self.bench) {
            true => format!("fm-bench coll — {}", self.device),
            false => format!("fm-bench {}", self.bench),
        }
    }

    /// What the plot's y axis shows for this kind of row.
    pub fn y_label(&self) -> String {
        match self.bench {
            "bw" | "rate" => "bandwidth, MB/s".into(),
            b if crate::coll::Collective::named(b) => {
                format!("time per call, {} (median over ranks)", self.unit)
            }
            _ => format!("median one-way time, {}", self.unit),
        }
    }
}

/// An SVG plot of `points` against message size (both axes logarithmic),
/// one line per device and layer, drawn with plotters.
pub fn plot(
    path: &std::path::Path,
    title: &str,
    y_label: &str,
    points: &[Point],
) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let xs = || points.iter().map(|p| p.size.max(1) as f64);
    let ys = || {
        points
            .iter()
            .map(|p| p.value)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let (Some(x0), Some(x1)) = (xs().reduce(f64::min), xs().reduce(f64::max)) else {
        return Err(format!("plot {}: no rows to plot", path.display()));
    };
    let (y0, y1) = (
        ys().reduce(f64::min).unwrap_or(1.0),
        ys().reduce(f64::max).unwrap_or(1.0),
    );
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (x0 * 0.8..x1 * 1.25).log_scale(),
            (y0 * 0.8..y1 * 1.25).log_scale(),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("message size, bytes")
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    let mut lines: Vec<&str> = points.iter().map(|p| p.line.as_str()).collect();
    lines.dedup();
    for (i, line) in lines.into_iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let series: Vec<(f64, f64)> = (points.iter())
            .filter(|p| p.line == line && p.value.is_finite() && p.value > 0.0)
            .map(|p| (p.size.max(1) as f64, p.value))
            .collect();
        chart
            .draw_series(LineSeries::new(series.clone(), colour.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(line)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart
            .draw_series(
                series
                    .into_iter()
                    .map(|p| Circle::new(p, 3, colour.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// `x` to 4 significant digits: what a measurement on a shared machine can
/// say (0.10940000000000001 is 0.1094).
pub fn round(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let digits = 4 - 1 - x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// Now, in UTC, as `2026-11-27T04:12:27Z`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{round, utc_now};

    #[test]
    fn numbers_are_rounded_to_four_significant_digits() {
        assert_eq!(round(0.10940000000000001).to_string(), "0.1094");
        assert_eq!(round(123456.7).to_string(), "123500");
        assert_eq!(round(-2.345678).to_string(), "-2.346");
        assert_eq!(round(0.0), 0.0);
    }

    #[test]
    fn the_date_is_an_iso_8601_utc_time() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(
            d.starts_with("20") && d.ends_with('Z') && &d[10..11] == "T",
            "{d}"
        );
    }
}
