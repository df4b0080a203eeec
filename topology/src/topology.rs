//! The topology file (`fmrun --topology FILE.toml`): the clusters of a job,
//! their hosts, the networks each cluster has and the network that joins
//! the clusters — SCore's cluster of clusters on PMv2 (thesis §7.1–7.3,
//! Figure 7.2). From it each rank gets its destination device table:
//! itself through `self`, its host through `shmem`, its cluster through
//! the cluster's fastest network, other clusters through the joining
//! network. docs/TOPOLOGY.md has a commented example.

use crate::hosts::{check_name, HostEntry, Origin};
use fm::config_file::{line_of, toml_error};
use fm_devices::nic::settings as nic;
use fm_platform::Ipv4Net;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    join: Option<Spanned<String>>,
    #[serde(default)]
    network: BTreeMap<Spanned<String>, Spanned<NetworkSpec>>,
    #[serde(default)]
    cluster: Vec<Spanned<ClusterSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkSpec {
    device: Spanned<String>,
    interface: Option<Spanned<String>>,
    range: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterSpec {
    name: Spanned<String>,
    #[serde(default)]
    networks: Vec<Spanned<String>>,
    hosts: Vec<Spanned<HostSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostSpec {
    name: Spanned<String>,
    address: Option<Spanned<String>>,
    slots: Option<Spanned<u32>>,
    ranks: Option<Spanned<Vec<u32>>>,
}

/// What a network is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// The nic device on this interface of every host.
    Nic { interface: String },
    /// The ethernet device on each host's address in this range.
    Ethernet { range: Ipv4Net },
}

impl Link {
    /// The device's name, as `FM_NET` and `FM_ROUTES` write it.
    pub fn device(&self) -> &'static str {
        match self {
            Link::Nic { .. } => "nic",
            Link::Ethernet { .. } => "ethernet",
        }
    }
    /// Faster first: a cluster's hosts talk through its fastest network.
    fn speed_rank(&self) -> u8 {
        match self {
            Link::Nic { .. } => 0,
            Link::Ethernet { .. } => 1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Network {
    pub name: String,
    pub link: Link,
}

#[derive(Clone, Debug)]
pub struct Cluster {
    pub name: String,
    /// Indices into [`Topology::networks`].
    pub networks: Vec<usize>,
    line: usize,
}

/// A parsed, checked topology file.
#[derive(Clone, Debug)]
pub struct Topology {
    pub path: PathBuf,
    pub networks: Vec<Network>,
    pub clusters: Vec<Cluster>,
    /// The network between clusters.
    pub join: Option<usize>,
    /// Every host, in file order; each names its cluster.
    pub hosts: Vec<HostEntry>,
}

/// What one rank is told: its destination device table (`FM_ROUTES`) and
/// the settings that open those devices (`FM_NET`, `FM_NIC_IFACES`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlan {
    pub env: Vec<(&'static str, String)>,
}

impl RankPlan {
    /// `FM_ROUTES`.
    pub fn routes(&self) -> &str {
        self.env
            .iter()
            .find(|(k, _)| *k == fm::settings::ROUTES.var)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// A table as runs `(device, ranks)`.
type Runs = Vec<(&'static str, usize)>;
/// Settings for a rank.
type Env = Vec<(&'static str, String)>;

/// A host's runs of devices with rank `r` (in a `shmem` run) as `self`.
fn with_self(runs: &[(&'static str, usize)], r: usize) -> Vec<(&'static str, usize)> {
    let mut out = Vec::with_capacity(runs.len() + 2);
    let mut start = 0;
    for &(dev, k) in runs {
        if (start..start + k).contains(&r) {
            let before = r - start;
            out.extend([(dev, before), ("self", 1), (dev, k - before - 1)]);
        } else {
            out.push((dev, k));
        }
        start += k;
    }
    out.retain(|&(_, k)| k > 0);
    out
}

impl Topology {
    pub fn load(path: &Path) -> Result<Topology, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the topology: {e}", path.display()))?;
        Topology::parse(path, &text)
    }

    // Long because it checks one file section by section, each error
    // naming its line from the spans at hand; the sections share those
    // spans and the maps built so far.
    #[allow(clippy::too_many_lines)]
    pub fn parse(path: &Path, text: &str) -> Result<Topology, String> {
        let at = |offset: usize, what: String| Origin::at(path, line_of(text, offset)).error(what);
        let spec: FileSpec = toml::from_str(text).map_err(|e| {
            let (line, why) = toml_error(text, &e);
            Origin::at(path, line).error(why)
        })?;
        let mut networks: Vec<Network> = Vec::new();
        for (name, n) in spec.network {
            let (name, n) = (name.into_inner(), n.into_inner());
            check_word(&name).map_err(|e| at(n.device.span().start, format!("network {e}")))?;
            let link = match (n.device.get_ref().as_str(), n.interface, n.range) {
                ("nic", Some(i), None) => {
                    check_word(i.get_ref()).map_err(|e| at(i.span().start, format!("interface {e}")))?;
                    Link::Nic {
                        interface: i.into_inner(),
                    }
                }
                ("ethernet", None, Some(r)) => Link::Ethernet {
                    range: r
                        .get_ref()
                        .parse()
                        .map_err(|e| at(r.span().start, format!("network {name:?}: range {e}")))?,
                },
                ("nic", _, _) => {
                    return Err(at(
                        n.device.span().start,
                        format!("network {name:?}: a nic network names its interface (interface = \"eth1\") and no range"),
                    ))
                }
                ("ethernet", _, _) => {
                    return Err(at(
                        n.device.span().start,
                        format!("network {name:?}: an ethernet network names its address range (range = \"198.18.0.0/15\") and no interface"),
                    ))
                }
                (d, _, _) => {
                    return Err(at(
                        n.device.span().start,
                        format!("network {name:?}: unknown device {d:?} (known: nic, ethernet)"),
                    ))
                }
            };
            networks.push(Network { name, link });
        }
        let find = |name: &Spanned<String>, what: &str| {
            networks
                .iter()
                .position(|n| n.name == *name.get_ref())
                .ok_or_else(|| {
                    let known: Vec<&str> = networks.iter().map(|n| n.name.as_str()).collect();
                    at(
                        name.span().start,
                        format!(
                            "{what} names network {:?}, which no [network.{}] defines (defined: {})",
                            name.get_ref(),
                            name.get_ref(),
                            if known.is_empty() { "none".into() } else { known.join(", ") }
                        ),
                    )
                })
        };
        let join = spec.join.as_ref().map(|j| find(j, "join")).transpose()?;
        if spec.cluster.is_empty() {
            return Err(at(
                0,
                "no [[cluster]]: a topology has at least one cluster".into(),
            ));
        }
        let mut clusters: Vec<Cluster> = Vec::new();
        let mut hosts: Vec<HostEntry> = Vec::new();
        for c in spec.cluster {
            let line = line_of(text, c.span().start);
            let c = c.into_inner();
            let name = c.name.get_ref().clone();
            check_word(&name).map_err(|e| at(c.name.span().start, format!("cluster {e}")))?;
            if let Some(o) = clusters.iter().find(|o| o.name == name) {
                return Err(at(
                    c.name.span().start,
                    format!(
                        "cluster {name:?} is defined twice (first at line {})",
                        o.line
                    ),
                ));
            }
            let mut nets = Vec::new();
            for n in &c.networks {
                let i = find(n, &format!("cluster {name:?}"))?;
                if nets.contains(&i) {
                    return Err(at(
                        n.span().start,
                        format!("cluster {name:?} lists network {:?} twice", n.get_ref()),
                    ));
                }
                nets.push(i);
            }
            // A rank opens one device of each kind.
            let nics: Vec<&str> = nets
                .iter()
                .filter(|&&i| matches!(networks[i].link, Link::Nic { .. }))
                .map(|&i| networks[i].name.as_str())
                .collect();
            if nics.len() > 1 {
                return Err(at(
                    c.name.span().start,
                    format!(
                        "cluster {name:?} is on two nic networks ({}): a rank opens one nic device",
                        nics.join(", ")
                    ),
                ));
            }
            let eths: Vec<(&str, Ipv4Net)> = nets
                .iter()
                .filter_map(|&i| match networks[i].link {
                    Link::Ethernet { range } => Some((networks[i].name.as_str(), range)),
                    Link::Nic { .. } => None,
                })
                .collect();
            for (a, ra) in &eths {
                for (b, rb) in &eths {
                    if !ra.covers(rb) && !rb.covers(ra) {
                        return Err(at(
                            c.name.span().start,
                            format!("cluster {name:?} is on ethernet networks {a} ({ra}) and {b} ({rb}) that do not nest: a rank binds one address, which must be in both"),
                        ));
                    }
                }
            }
            if c.hosts.is_empty() {
                return Err(at(
                    c.name.span().start,
                    format!("cluster {name:?} has no hosts"),
                ));
            }
            let ci = clusters.len();
            for h in c.hosts {
                let hline = line_of(text, h.span().start);
                let h = h.into_inner();
                let hname = h.name.get_ref();
                check_name(hname).map_err(|e| at(h.name.span().start, e))?;
                if let Some(o) = hosts.iter().find(|o| o.name == *hname) {
                    return Err(at(
                        h.name.span().start,
                        format!(
                            "host {hname:?} is listed twice (first at line {})",
                            o.origin.line
                        ),
                    ));
                }
                let mut e = HostEntry::new(hname, Origin::at(path, hline));
                if let Some(a) = &h.address {
                    check_name(a.get_ref())
                        .map_err(|e| at(a.span().start, format!("address: {e}")))?;
                    e.target = a.get_ref().clone();
                }
                e.slots = h.slots.map(Spanned::into_inner);
                e.ranks = h.ranks.map(Spanned::into_inner).unwrap_or_default();
                e.cluster = Some(ci);
                hosts.push(e);
            }
            clusters.push(Cluster {
                name,
                networks: nets,
                line,
            });
        }
        Ok(Topology {
            path: path.to_path_buf(),
            networks,
            clusters,
            join,
            hosts,
        })
    }

    fn at(&self, line: usize, what: String) -> String {
        Origin::at(&self.path, line).error(what)
    }

    /// The network that carries traffic from cluster `a` to cluster `b`,
    /// or why none does.
    fn network_between(&self, a: usize, b: usize) -> Result<usize, (usize, String)> {
        let ca = &self.clusters[a];
        if a == b {
            return ca
                .networks
                .iter()
                .copied()
                .min_by_key(|&i| self.networks[i].link.speed_rank())
                .ok_or((
                    ca.line,
                    format!("cluster {:?} has no network between its hosts", ca.name),
                ));
        }
        let cb = &self.clusters[b];
        let Some(j) = self.join else {
            return Err((
                cb.line,
                format!(
                    "no network joins cluster {:?} to cluster {:?}: name one with join = \"…\"",
                    ca.name, cb.name
                ),
            ));
        };
        for c in [ca, cb] {
            if !c.networks.contains(&j) {
                return Err((
                    c.line,
                    format!(
                        "cluster {:?} is not on the joining network {:?}",
                        c.name, self.networks[j].name
                    ),
                ));
            }
        }
        Ok(j)
    }

    /// Each rank's plan, given the host of every rank (from [`crate::place`]
    /// over [`Topology::hosts`]). A pair of ranks that no network joins is
    /// an error naming both.
    pub fn plan(&self, placement: &[usize]) -> Result<Vec<RankPlan>, String> {
        let cluster_of = |h: usize| self.hosts[h].cluster.unwrap_or(0);
        // The first rank on each host, to name in errors.
        let mut first_on: BTreeMap<usize, usize> = BTreeMap::new();
        for (r, &h) in placement.iter().enumerate() {
            first_on.entry(h).or_insert(r);
        }
        let used: Vec<usize> = first_on.keys().copied().collect();
        // The network between each pair of used hosts' clusters.
        let nc = self.clusters.len();
        let mut between: Vec<Option<usize>> = vec![None; nc * nc];
        for &ha in &used {
            for &hb in &used {
                let (a, b) = (cluster_of(ha), cluster_of(hb));
                if ha == hb || between[a * nc + b].is_some() {
                    continue;
                }
                let net = self.network_between(a, b).map_err(|(line, why)| {
                    let (ra, rb) = (first_on[&ha], first_on[&hb]);
                    self.at(
                        line,
                        format!(
                            "rank {ra} (host {}, cluster {}) cannot reach rank {rb} (host {}, cluster {}): {why}",
                            self.hosts[ha].name,
                            self.clusters[a].name,
                            self.hosts[hb].name,
                            self.clusters[b].name
                        ),
                    )
                })?;
                between[a * nc + b] = Some(net);
            }
        }
        // One table per host, as runs of equal devices; its ranks differ
        // only in which entry is self. Kept as runs, not a device per rank:
        // a table per rank would be N² entries for a job of N ranks.
        let mut per_host: BTreeMap<usize, (Runs, Env)> = BTreeMap::new();
        for &h in &used {
            let a = cluster_of(h);
            let mut nets: Vec<usize> = Vec::new();
            let mut runs: Vec<(&'static str, usize)> = Vec::new();
            for &hb in placement {
                let dev = if hb == h {
                    "shmem"
                } else {
                    let n = between[a * nc + cluster_of(hb)].unwrap_or(0);
                    if !nets.contains(&n) {
                        nets.push(n);
                    }
                    self.networks[n].link.device()
                };
                match runs.last_mut() {
                    Some((d, k)) if *d == dev => *k += 1,
                    _ => runs.push((dev, 1)),
                }
            }
            per_host.insert(h, (runs, self.env_for(&nets)));
        }
        Ok(placement
            .iter()
            .enumerate()
            .map(|(r, h)| {
                let (runs, env) = &per_host[h];
                let mut env = env.clone();
                env.push((
                    fm::settings::ROUTES.var,
                    fm::config::encode_runs(&with_self(runs, r)),
                ));
                RankPlan { env }
            })
            .collect())
    }

    /// The settings that open the devices of these networks.
    fn env_for(&self, nets: &[usize]) -> Vec<(&'static str, String)> {
        let mut net = vec!["self", "shmem"];
        let mut env = Vec::new();
        let mut range: Option<Ipv4Net> = None;
        for &n in nets {
            match &self.networks[n].link {
                Link::Nic { interface } => {
                    env.push((nic::NIC_IFACES.var, interface.clone()));
                    env.push((nic::NIC_NETWORK.var, self.networks[n].name.clone()));
                    net.push("nic");
                }
                // Nested ranges (checked at parse): the narrowest holds the
                // one address that serves all of them.
                Link::Ethernet { range: r } => {
                    range = Some(match range {
                        Some(old) if old.prefix >= r.prefix => old,
                        _ => *r,
                    });
                }
            }
        }
        if let Some(r) = range {
            env.push((fm_devices::ethernet::settings::ETH_RANGE.var, r.to_string()));
            net.push("ethernet");
        }
        net.push("null");
        env.insert(0, (fm::settings::NET.var, net.join(",")));
        env
    }
}

/// Names of networks and clusters: letters, digits, `-`, `_`, `.`.
fn check_word(w: &str) -> Result<(), String> {
    if !w.is_empty()
        && w.len() <= 64
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        Ok(())
    } else {
        Err(format!("{w:?}: a name of letters, digits, '-', '_', '.'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device of each rank in an `FM_ROUTES` value, by name.
    fn route_names(routes: &str) -> Vec<&'static str> {
        let kinds = fm::config::parse_routes(routes).unwrap();
        kinds.iter().map(|k| k.name()).collect()
    }

    use crate::place;

    /// Figure 7.2 as the namespace test builds it.
    const TWO_CLUSTERS: &str = r#"
join = "wan"

[network.fast]
device = "nic"
interface = "fm0"

[network.lan]
device = "ethernet"
range = "198.18.2.0/24"

[network.wan]
device = "ethernet"
range = "198.18.0.0/15"

[[cluster]]
name = "smp"
networks = ["fast", "wan"]
hosts = [
  { name = "a0", address = "198.18.1.10", slots = 2 },
  { name = "a1", address = "198.18.1.11", slots = 2 },
]

[[cluster]]
name = "pcs"
networks = ["lan", "wan"]
hosts = [
  { name = "b0", slots = 2 },
  { name = "b1", slots = 2 },
]
"#;

    fn parse(text: &str) -> Result<Topology, String> {
        Topology::parse(Path::new("t.toml"), text)
    }

    fn plan(text: &str) -> Result<Vec<RankPlan>, String> {
        let t = parse(text)?;
        let p = place(&t.hosts, None)?;
        t.plan(&p)
    }

    fn env<'a>(p: &'a RankPlan, k: &str) -> Option<&'a str> {
        p.env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_toml_error_names_its_line_and_reason() {
        let e = Topology::parse(Path::new("t.toml"), "join = \"wan\"\n# a\x7fb\n")
            .expect_err("refused");
        assert_eq!(e, "t.toml:2: character '\\u{7f}' is not allowed here");
    }

    #[test]
    fn figure_7_2_gives_self_shmem_nic_and_ethernet() {
        let plans = plan(TWO_CLUSTERS).unwrap();
        assert_eq!(plans.len(), 8);
        assert_eq!(
            route_names(plans[0].routes()),
            ["self", "shmem", "nic", "nic", "ethernet", "ethernet", "ethernet", "ethernet"]
        );
        assert_eq!(
            env(&plans[0], "FM_ROUTES"),
            Some("self,shmem,nic*2,ethernet*4")
        );
        assert_eq!(
            env(&plans[0], "FM_NET"),
            Some("self,shmem,nic,ethernet,null")
        );
        assert_eq!(env(&plans[0], "FM_NIC_IFACES"), Some("fm0"));
        assert_eq!(env(&plans[0], "FM_ETH_RANGE"), Some("198.18.0.0/15"));
        assert_eq!(
            route_names(plans[5].routes()),
            [
                "ethernet", "ethernet", "ethernet", "ethernet", "shmem", "self", "ethernet",
                "ethernet"
            ]
        );
        // Inside pcs the lan; its address is also on the wan.
        assert_eq!(env(&plans[5], "FM_ETH_RANGE"), Some("198.18.2.0/24"));
        assert_eq!(env(&plans[5], "FM_NET"), Some("self,shmem,ethernet,null"));
        assert_eq!(env(&plans[5], "FM_NIC_IFACES"), None);
        let t = parse(TWO_CLUSTERS).unwrap();
        assert_eq!(t.hosts[0].target, "198.18.1.10");
        assert_eq!(t.hosts[2].target, "b0");
    }

    #[test]
    fn the_documented_example_is_table_7_1() {
        let text = include_str!("../../docs/examples/figure-7.2.toml");
        let plans = plan(text).unwrap();
        assert_eq!(plans.len(), 16);
        let mut want = vec!["self", "shmem"];
        want.extend(["nic"; 6]);
        want.extend(["ethernet"; 8]);
        assert_eq!(route_names(plans[0].routes()), want);
        assert_eq!(
            env(&plans[0], "FM_ROUTES"),
            Some("self,shmem,nic*6,ethernet*8")
        );
        assert_eq!(env(&plans[0], "FM_ETH_RANGE"), Some("10.0.0.0/8"));
        assert_eq!(env(&plans[9], "FM_ETH_RANGE"), Some("10.2.0.0/16"));
    }

    #[test]
    fn the_largest_job_plans_as_runs() {
        let text = "[network.lan]\ndevice = \"ethernet\"\nrange = \"10.0.0.0/8\"\n\
                    [[cluster]]\nname = \"big\"\nnetworks = [\"lan\"]\nhosts = [\n"
            .to_string()
            + &(0..256)
                .map(|i| format!("{{ name = \"h{i}\", slots = 256 }},\n"))
                .collect::<String>()
            + "]\n";
        let plans = plan(&text).unwrap();
        assert_eq!(plans.len(), 65536);
        assert_eq!(plans[65535].routes(), "ethernet*65280,shmem*255,self");
        assert_eq!(
            plans[300].routes(),
            "ethernet*256,shmem*44,self,shmem*211,ethernet*65024"
        );
    }

    #[test]
    fn one_host_needs_no_network() {
        let plans =
            plan("[[cluster]]\nname = \"x\"\nhosts = [{ name = \"h\", slots = 3 }]\n").unwrap();
        assert_eq!(plans[1].routes(), "shmem,self,shmem");
        assert_eq!(env(&plans[1], "FM_NET"), Some("self,shmem,null"));
    }

    #[test]
    fn bad_topologies_name_the_file_and_line() {
        let cases: &[(&str, &str)] = &[
            ("[[cluster]]\nname = \"x\"\nhost = []\n", "t.toml:3: unknown field `host`"),
            ("[[cluster]]\nname = \"x\"\n", "t.toml:1: missing field `hosts`"),
            ("join = \"wan\"\n[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\"}]\n", "t.toml:1: join names network \"wan\", which no [network.wan] defines"),
            ("[network.n]\ndevice = \"myrinet\"\ninterface = \"x\"\n[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\"}]\n", "t.toml:2: network \"n\": unknown device \"myrinet\""),
            ("[network.n]\ndevice = \"nic\"\n[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\"}]\n", "t.toml:2: network \"n\": a nic network names its interface"),
            ("[network.n]\ndevice = \"ethernet\"\nrange = \"198.18.0.1/15\"\n[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\"}]\n", "t.toml:3: network \"n\": range \"198.18.0.1/15\" has host bits set"),
            ("[[cluster]]\nname = \"x\"\nhosts = []\n", "t.toml:2: cluster \"x\" has no hosts"),
            ("[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\"}]\n[[cluster]]\nname = \"x\"\nhosts = [{name=\"b\"}]\n", "t.toml:5: cluster \"x\" is defined twice (first at line 1)"),
            ("[[cluster]]\nname = \"x\"\nhosts = [\n {name=\"a\"},\n {name=\"a\"},\n]\n", "t.toml:5: host \"a\" is listed twice (first at line 4)"),
            ("[[cluster]]\nname = \"x\"\nnetworks = [\"fast\"]\nhosts = [{name=\"a\"}]\n", "t.toml:3: cluster \"x\" names network \"fast\", which no [network.fast] defines (defined: none)"),
            ("[[cluster]]\nname = \"x\"\nhosts = [{name=\"a\", slots = -1}]\n", "t.toml:3:"),
            ("\n\nthis is not toml\n", "t.toml:3:"),
            ("", "t.toml:1: no [[cluster]]"),
        ];
        for (text, want) in cases {
            let e = plan(text).expect_err(text);
            assert!(e.starts_with(want), "{text:?}:\n got  {e}\n want {want}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn unreachable_pairs_and_duplicate_ranks_name_both() {
        // pcs is not on the wan.
        let t = TWO_CLUSTERS.replace("networks = [\"lan\", \"wan\"]", "networks = [\"lan\"]");
        let e = plan(&t).unwrap_err();
        assert!(
            e.starts_with("t.toml:24: rank 0 (host a0, cluster smp) cannot reach rank 4 (host b0, cluster pcs): cluster \"pcs\" is not on the joining network \"wan\""),
            "{e}"
        );
        let t = TWO_CLUSTERS.replace("join = \"wan\"", "");
        let e = plan(&t).unwrap_err();
        assert!(
            e.contains("no network joins cluster \"smp\" to cluster \"pcs\""),
            "{e}"
        );
        let e = plan("[[cluster]]\nname = \"x\"\nhosts = [{ name = \"a\", slots = 2 }, { name = \"b\", slots = 1 }]\n").unwrap_err();
        assert!(e.starts_with("t.toml:1: rank 0 (host a, cluster x) cannot reach rank 2 (host b, cluster x): cluster \"x\" has no network between its hosts"), "{e}");
        let t = TWO_CLUSTERS
            .replace("address = \"198.18.1.10\", slots = 2", "ranks = [0, 1]")
            .replace(
                "{ name = \"b0\", slots = 2 }",
                "{ name = \"b0\", ranks = [0, 5] }",
            );
        let e = plan(&t).unwrap_err();
        assert!(
            e.starts_with("t.toml:28: rank 0 is placed twice: on host \"a0\" and on host \"b0\""),
            "{e}"
        );
        // Ethernet ranges that do not nest, two nic networks.
        let t = TWO_CLUSTERS.replace("198.18.2.0/24", "10.1.0.0/16");
        assert!(plan(&t).unwrap_err().contains("do not nest"));
        let t = TWO_CLUSTERS
            .replace(
                "[network.lan]\ndevice = \"ethernet\"\nrange = \"198.18.2.0/24\"",
                "[network.lan]\ndevice = \"nic\"\ninterface = \"fm1\"",
            )
            .replace(
                "networks = [\"fast\", \"wan\"]",
                "networks = [\"fast\", \"lan\", \"wan\"]",
            );
        assert!(plan(&t)
            .unwrap_err()
            .contains("two nic networks (fast, lan)"));
    }
}
