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
        m[format!("median_{unit}")] = self.s.median.into();
        m[format!("min_{unit}")] = self.s.min.into();
        m[format!("max_{unit}")] = self.s.max.into();
        m[format!("p99_{unit}")] = self.s.p99.into();
        if let Some(x) = self.mb_s {
            m["mb_s"] = x.into();
        }
        if let Some(x) = self.mmsg_s {
            m["mmsg_s"] = x.into();
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

    const CSV_HEADER: &'static str =
        "bench,device,layer,size,iters,unit,median,min,p99,max,mb_s,mmsg_s,syscalls";

    fn csv_row(&self) -> String {
        let opt = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.bench,
            self.device,
            self.layer,
            self.size,
            self.iters,
            self.unit,
            self.s.median,
            self.s.min,
            self.s.p99,
            self.s.max,
            opt(self.mb_s),
            opt(self.mmsg_s),
            self.syscalls.map_or(String::new(), |n| n.to_string())
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
    /// What the run was, said once before the first row.
    meta: Vec<(&'static str, serde_json::Value)>,
    /// The (bench, layer) of the table's header now.
    header: Option<(&'static str, &'static str)>,
}

impl Printer {
    pub fn new(format: Format, meta: Vec<(&'static str, serde_json::Value)>) -> Printer {
        Printer {
            format,
            meta,
            header: None,
        }
    }

    pub fn row(&mut self, r: &Sample) {
        use std::io::Write;
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
                out += Sample::CSV_HEADER;
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
