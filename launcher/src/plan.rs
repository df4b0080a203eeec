//! Where each rank runs and what it is told: from `-n` alone (this host),
//! `--hosts`, `--hostfile` or `--topology` (other hosts, through the remote
//! shell), or a Slurm allocation (through srun).

use crate::{Cli, MapBy};
use fm_topology::{hosts, place, HostEntry, RankPlan, Topology};

/// How the ranks are started.
pub enum Mode {
    /// Every rank a child of fmrun on this host.
    Here,
    /// Each rank through the remote shell on its host (or here, `--rsh local`).
    Hosts,
    /// All ranks by one `srun` inside the Slurm allocation.
    Slurm,
}

/// One rank's place: its host, where to start it, and its settings.
pub struct Spot {
    /// Its host's name (`FM_HOST`).
    pub host: String,
    /// What `{host}` becomes in the remote shell command.
    pub target: String,
    /// Settings from the topology (`FM_NET`, `FM_ROUTES`, …).
    pub env: Vec<(&'static str, String)>,
}

pub struct Plan {
    pub n: u32,
    pub mode: Mode,
    /// One per rank (empty for `Here` and `Slurm`).
    pub spots: Vec<Spot>,
}

/// The plan the command line asks for.
pub fn make(cli: &Cli) -> Result<Plan, String> {
    let given = [
        cli.hosts.is_some(),
        cli.hostfile.is_some(),
        cli.topology.is_some(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err("give one of --hosts, --hostfile and --topology".into());
    }
    let net = fm::Net::parse(&cli.net).map_err(|e| format!("--net {}: {e}", cli.net))?;
    let entries: Option<(Vec<HostEntry>, Option<Topology>)> = if let Some(spec) = &cli.hosts {
        Some((hosts::parse_spec(spec)?, None))
    } else if let Some(path) = &cli.hostfile {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the host file: {e}", path.display()))?;
        Some((hosts::parse_file(path, &text)?, None))
    } else if let Some(path) = &cli.topology {
        if !matches!(cli.net.as_str(), "auto" | "null") {
            return Err(format!(
                "--net {} with --topology: the topology names the networks (--net null: none)",
                cli.net
            ));
        }
        let t = Topology::load(path)?;
        Some((t.hosts.clone(), Some(t)))
    } else {
        None
    };
    let Some((entries, topology)) = entries else {
        return slurm_or_here(cli);
    };
    let mut placement = place(&entries, cli.n)?;
    if cli.map_by == MapBy::Node {
        if entries.iter().any(|h| !h.ranks.is_empty()) {
            return Err("--map-by node: the host file places ranks by number (ranks=)".into());
        }
        placement = round_robin(&placement, entries.len());
    }
    let n = placement.len() as u32;
    let plans = match &topology {
        Some(t) => Some(t.plan(&placement)?),
        None => None,
    };
    let spots = placement
        .iter()
        .enumerate()
        .map(|(r, &h)| {
            let env = match &plans {
                Some(p) if net == fm::Net::NULL => without_networks(&p[r]),
                Some(p) => p[r].env.clone(),
                None => vec![(fm::settings::NET.var, cli.net.clone())],
            };
            Spot {
                host: entries[h].name.clone(),
                target: entries[h].target.clone(),
                env,
            }
        })
        .collect();
    Ok(Plan {
        n,
        mode: Mode::Hosts,
        spots,
    })
}

/// `--net null` over a topology: the same tables with the NULL transport
/// wherever a network would be (desktop-only development).
fn without_networks(plan: &RankPlan) -> Vec<(&'static str, String)> {
    let words: Vec<String> = plan
        .routes()
        .split(',')
        .map(|w| match w.split_once('*') {
            Some(("nic" | "ethernet", k)) => format!("null*{k}"),
            None if w == "nic" || w == "ethernet" => "null".into(),
            _ => w.to_string(),
        })
        .collect();
    vec![
        (fm::settings::NET.var, "null".into()),
        (fm::settings::ROUTES.var, words.join(",")),
    ]
}

/// No host list: inside a Slurm allocation through srun, else here.
fn slurm_or_here(cli: &Cli) -> Result<Plan, String> {
    let in_slurm = std::env::var_os("SLURM_JOB_ID").is_some() && !cli.no_srun;
    let n = match (cli.n, in_slurm) {
        (Some(n), _) => n,
        (None, true) => ["SLURM_NTASKS", "SLURM_NPROCS"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
            .ok_or(
                "-n is missing and the Slurm allocation does not say how many tasks (SLURM_NTASKS)",
            )?,
        (None, false) => return Err(
            "say how many processes: -n N (or give --hosts, --hostfile or --topology with slots)"
                .into(),
        ),
    };
    Ok(Plan {
        n,
        mode: if in_slurm { Mode::Slurm } else { Mode::Here },
        spots: Vec::new(),
    })
}

/// A block placement (rank → host, each host's ranks together) dealt to
/// the hosts in turn instead: rank 0 on the first host, rank 1 on the
/// second, …, each host keeping its count.
fn round_robin(block: &[usize], hosts: usize) -> Vec<usize> {
    let mut left = vec![0usize; hosts];
    for &h in block {
        left[h] += 1;
    }
    let mut out = Vec::with_capacity(block.len());
    while out.len() < block.len() {
        for (h, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                out.push(h);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::round_robin;

    #[test]
    fn round_robin_deals_ranks_to_hosts_in_turn_keeping_counts() {
        assert_eq!(round_robin(&[0, 0, 1, 1], 2), [0, 1, 0, 1]);
        assert_eq!(round_robin(&[0, 0, 0, 1], 2), [0, 1, 0, 0]);
        assert_eq!(round_robin(&[0, 1, 1, 2, 2, 2], 3), [0, 1, 2, 1, 2, 2]);
        assert_eq!(round_robin(&[], 2), Vec::<usize>::new());
    }
}
