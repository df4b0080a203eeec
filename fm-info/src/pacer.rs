//! `fm-info pacer`: each knob's measured curve (from the cache, measured
//! now if there is none, or again with `--force`) as a table and an SVG plot.

use fm_pacer::{knobs, Choice, Knob, Mode, Pacer, Source};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

pub fn run(force: bool, svg: Option<&Path>) -> ExitCode {
    let mode = match fm::config::pacer_mode() {
        Ok(m) if force => match m {
            Mode::Off | Mode::Fixed(_) => m,
            _ => Mode::Force,
        },
        Ok(m) => m,
        Err(e) => {
            eprintln!("fm-info: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cache = fm_pacer::Cache::default_location();
    let pacer = Pacer::new(mode, cache.clone());
    match &cache {
        Some(c) => println!("pacer cache: {} (FM_PACER: {mode})", c.path.display()),
        None => println!("pacer cache: none (neither XDG_CACHE_HOME nor HOME is set)"),
    }
    let t = std::time::Instant::now();
    let mut tuned: Vec<(Knob, Choice)> = Vec::new();
    let shmem = knobs::shmem_frame();
    tuned.push((shmem, knobs::tune_shmem_frame(&pacer, &crate::shm_dir())));
    let mut addrs = vec![std::net::IpAddr::from([127, 0, 0, 1])];
    fm_platform::for_each_address(|_, a, _| {
        if a.is_ipv4() && !a.is_loopback() && !addrs.contains(&a) {
            addrs.push(a);
        }
    });
    for a in addrs {
        let k = knobs::ethernet_datagram(a);
        if tuned.iter().any(|(t, _)| t.key == k.key) {
            continue;
        }
        let c = knobs::tune_ethernet_datagram(&pacer, a, 4 << 20);
        tuned.push((k, c));
    }
    let took = t.elapsed();
    for (k, c) in &tuned {
        print_curve(k, c);
    }
    println!("\nall knobs in {:.1} ms", took.as_secs_f64() * 1e3);
    let Some(svg) = svg else {
        return ExitCode::SUCCESS;
    };
    match std::fs::write(svg, plot(&tuned)) {
        Ok(()) => println!("\nplot: {}", svg.display()),
        Err(e) => {
            eprintln!("fm-info: cannot write {}: {e}", svg.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn print_curve(k: &Knob, c: &Choice) {
    let how = match c.source {
        Source::Default if k.candidates.len() == 1 => "the only candidate",
        Source::Default => "default (FM_PACER=off or nothing measurable)",
        Source::Override => "FM_PACER=<size>",
        Source::Cached => "cached",
        Source::Measured => "measured now",
    };
    println!(
        "\n{}: chosen {} bytes ({how}; default {})",
        k.key, c.size, k.default
    );
    let Some(curve) = &c.curve else { return };
    let top = curve.points.iter().map(|p| p.1).fold(0.0, f64::max);
    println!("  {:>8}  {:>9}", "bytes", "MB/s");
    for &(s, r) in &curve.points {
        let bar = "#".repeat(((r / top) * 40.0).round() as usize);
        let mark = if s == c.size { " <- chosen" } else { "" };
        println!("  {s:>8}  {r:>9.0}  {bar:<40}{mark}");
    }
}

/// One panel per knob with a curve: MB/s against size (log scale), the
/// chosen size marked.
fn plot(tuned: &[(Knob, Choice)]) -> String {
    let panels: Vec<_> = tuned
        .iter()
        .filter_map(|(k, c)| c.curve.as_ref().map(|cv| (k, c, cv)))
        .collect();
    let (w, h, pad) = (520.0, 260.0, 50.0);
    let total_h = h * panels.len().max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" font-family="sans-serif" font-size="11">"#
    );
    if panels.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="10" y="20">no measured curve (FM_PACER=off or a fixed size)</text>"#
        );
    }
    for (i, (k, c, cv)) in panels.iter().enumerate() {
        let y0 = i as f64 * h;
        let (x_lo, x_hi) = cv.points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            let x = (p.0 as f64).log2();
            (lo.min(x), hi.max(x))
        });
        let top = cv.points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let px = |size: u64| {
            let span = (x_hi - x_lo).max(1.0);
            pad + ((size as f64).log2() - x_lo) / span * (w - 2.0 * pad)
        };
        let py = |mb: f64| y0 + h - pad + -(mb / top) * (h - 2.0 * pad);
        let _ = writeln!(
            s,
            r#"<text x="{pad}" y="{}" font-size="13">{} — chosen {} bytes</text>"#,
            y0 + 20.0,
            k.key,
            c.size
        );
        let _ = writeln!(
            s,
            r#"<line x1="{pad}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/><line x1="{pad}" y1="{t}" x2="{pad}" y2="{b}" stroke="black"/>"#,
            b = y0 + h - pad,
            r = w - pad,
            t = y0 + pad
        );
        let _ = writeln!(
            s,
            r#"<text x="4" y="{}">{:.0}</text><text x="4" y="{}">MB/s</text>"#,
            y0 + pad,
            top,
            y0 + h / 2.0
        );
        let pts: Vec<String> = cv
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="steelblue" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for &(size, mb) in &cv.points {
            let chosen = size == c.size;
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="{}" fill="{}"/><text x="{:.1}" y="{}" text-anchor="middle">{size}</text>"#,
                px(size),
                py(mb),
                if chosen { 5 } else { 3 },
                if chosen { "crimson" } else { "steelblue" },
                px(size),
                y0 + h - pad + 15.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
