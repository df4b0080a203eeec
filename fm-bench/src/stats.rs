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

    /// An OSU-style table.
    pub fn table(rows: &[Sample]) -> String {
        let r0 = &rows[0];
        let mut t = format!(
            "# fm-bench {} — device {}, layer {}\n",
            r0.bench, r0.device, r0.layer
        );
        let u = r0.unit;
        t += &format!(
            "{:>10} {:>12} {:>12} {:>12} {:>12} {:>11} {:>9} {:>10}\n",
            "size",
            format!("median {u}"),
            format!("min {u}"),
            format!("p99 {u}"),
            format!("max {u}"),
            "MB/s",
            "Mmsg/s",
            "iters"
        );
        for r in rows {
            let opt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
            t += &format!(
                "{:>10} {:>12.3} {:>12.3} {:>12.3} {:>12.3} {:>11} {:>9} {:>10}{}\n",
                r.size,
                r.s.median,
                r.s.min,
                r.s.p99,
                r.s.max,
                opt(r.mb_s, 1),
                opt(r.mmsg_s, 2),
                r.iters,
                match (r.layer != r0.layer, r.syscalls) {
                    (true, Some(n)) => format!("  ({} {}, {n} system calls)", r.device, r.layer),
                    (true, None) => format!("  ({})", r.layer),
                    (false, _) => String::new(),
                }
            );
        }
        t
    }
}
