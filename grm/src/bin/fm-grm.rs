//! fm-grm: the global resource manager as a standalone daemon, for jobs
//! started by several `fmrun --grm ADDR` or across hosts.

use clap::Parser;
use fm_grm::{Grm, GrmOptions};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(version, about = "fm's global resource manager (daemon)")]
struct Cli {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: SocketAddr,
    /// Seconds of silence after which a process is declared dead.
    #[arg(long, default_value_t = 10)]
    heartbeat_timeout: u64,
    /// Print the address actually bound (useful with port 0) on stdout.
    #[arg(long)]
    print_addr: bool,
}

/// fm-grm(1) beyond its options.
const MAN_PAGE: fm_clidocs::Page = fm_clidocs::Page {
    examples: &[
        (
            "fm-grm --print-addr --listen 127.0.0.1:0",
            "a resource manager on a free loopback port, its address printed",
        ),
        (
            "fmrun --grm 127.0.0.1:7420 -n 4 ./my-program",
            "a job that uses it instead of fmrun's own",
        ),
    ],
    exit_status: &[
        ("0", "stopped"),
        ("1", "it cannot listen where it was told"),
        ("2", "a bad command line"),
    ],
    environment: &[(
        fm_platform::setting::LOG.var,
        "what it logs (tracing's filter syntax; default info)",
    )],
    see_also: &["fmrun(1)", "fm-info(1)"],
};

fn main() -> ExitCode {
    fm_clidocs::generate_if_asked(<Cli as clap::CommandFactory>::command, &MAN_PAGE);
    // fm::init_logging_or with "info": fm depends on this crate, not the
    // other way round.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            fm_platform::setting::LOG
                .env()
                .unwrap_or_else(|| "info".into()),
        ))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let cli = Cli::parse();
    let opts = GrmOptions {
        listen: cli.listen,
        heartbeat_timeout: Duration::from_secs(cli.heartbeat_timeout.max(2)),
        ..GrmOptions::default()
    };
    let grm = match Grm::start(opts) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("fm-grm: cannot listen on {}: {e}", cli.listen);
            return ExitCode::FAILURE;
        }
    };
    if cli.print_addr {
        println!("{}", grm.addr());
    }
    grm.serve_forever();
    ExitCode::SUCCESS
}
