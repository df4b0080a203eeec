//! A cluster of clusters made of network namespaces (root only): each
//! cluster a bridge with its hosts, the clusters joined by a router
//! namespace — the shape of the PMv2 thesis's Figure 7.2.
//!
//! Cluster k is 198.18.(S+k).0/24: the router is .1, hosts .10, .11, …
//! (default route through the router), and the root namespace — where the
//! launcher, its GRM and the ssh client run — holds .254 on every bridge,
//! so it reaches every host directly while hosts of different clusters
//! reach each other only through the router. Everything is removed on
//! drop, also when a test fails.

use crate::netns::{claim, ip};
use std::net::Ipv4Addr;
use std::process::Command;

pub struct Clusters {
    tag: String,
    bridges: Vec<String>,
    namespaces: Vec<String>,
    /// Cluster k's network is 198.18.(subnet + k).0/24.
    pub subnet: u8,
    /// Per cluster, its hosts.
    pub clusters: Vec<Vec<ClusterHost>>,
}

pub struct ClusterHost {
    /// The host's name in a topology: `a0`, `a1`, `b0`, …
    pub name: String,
    /// Its namespace (`ip netns exec NS …`).
    pub namespace: String,
    pub addr: Ipv4Addr,
}

impl Clusters {
    /// Clusters with `sizes[k]` hosts each, or `None` (after saying why
    /// `test` is skipped) when not root or namespaces cannot be made here.
    pub fn new(test: &str, sizes: &[usize]) -> Option<Clusters> {
        let (pid, tag, subnet) = claim(test)?;
        let mut c = Clusters {
            tag,
            bridges: Vec::new(),
            namespaces: Vec::new(),
            subnet,
            clusters: Vec::new(),
        };
        match c.build(sizes, pid) {
            Ok(()) => Some(c),
            Err(e) => {
                eprintln!("SKIPPED {test}: cannot make network namespaces: {e}");
                None
            }
        }
    }

    fn netns(&mut self, name: &str) -> Result<(), String> {
        ip(&["netns", "add", name])?;
        self.namespaces.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])
    }

    /// A veth from bridge `br` into namespace `ns`, called `inside` there,
    /// with address `addr/24`.
    fn attach(
        &self,
        br: &str,
        ns: &str,
        ends: (&str, &str),
        inside: &str,
        addr: Ipv4Addr,
    ) -> Result<(), String> {
        let (outer, inner) = ends;
        ip(&["link", "add", outer, "type", "veth", "peer", "name", inner])?;
        ip(&["link", "set", outer, "master", br])?;
        ip(&["link", "set", outer, "up"])?;
        ip(&["link", "set", inner, "netns", ns])?;
        ip(&["-n", ns, "link", "set", inner, "name", inside])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            inside,
        ])?;
        ip(&["-n", ns, "link", "set", inside, "up"])
    }

    fn build(&mut self, sizes: &[usize], pid: u32) -> Result<(), String> {
        let t = self.tag.clone();
        let router = format!("fmt-{pid}-{t}-r");
        self.netns(&router)?;
        for (k, &n) in sizes.iter().enumerate() {
            let s = self.subnet + k as u8;
            // Named as netns.rs names bridges, so a killed test's are found.
            let br = format!("fmb{t}n{k}");
            ip(&["link", "add", &br, "type", "bridge"])?;
            self.bridges.push(br.clone());
            ip(&["addr", "add", &format!("198.18.{s}.254/24"), "dev", &br])?;
            ip(&["link", "set", &br, "up"])?;
            let ends = (format!("fmv{t}r{k}"), format!("fmv{t}R{k}"));
            self.attach(
                &br,
                &router,
                (&ends.0, &ends.1),
                &format!("c{k}"),
                Ipv4Addr::new(198, 18, s, 1),
            )?;
            let mut hosts = Vec::new();
            for i in 0..n {
                let name = format!("{}{i}", (b'a' + k as u8) as char);
                let ns = format!("fmt-{pid}-{t}-{name}");
                self.netns(&ns)?;
                let addr = Ipv4Addr::new(198, 18, s, 10 + i as u8);
                let ends = (format!("fmv{t}h{k}{i}"), format!("fmv{t}H{k}{i}"));
                self.attach(&br, &ns, (&ends.0, &ends.1), "fm0", addr)?;
                ip(&[
                    "-n",
                    &ns,
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("198.18.{s}.1"),
                ])?;
                hosts.push(ClusterHost {
                    name,
                    namespace: ns,
                    addr,
                });
            }
            self.clusters.push(hosts);
        }
        let fwd = Command::new("ip")
            .args([
                "netns",
                "exec",
                &router,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])
            .status()
            .map_err(|e| format!("sysctl: {e}"))?;
        if !fwd.success() {
            return Err("cannot turn on forwarding in the router namespace".into());
        }
        Ok(())
    }

    /// Every host, cluster by cluster.
    pub fn hosts(&self) -> impl Iterator<Item = &ClusterHost> {
        self.clusters.iter().flatten()
    }

    /// Cluster k's network, `198.18.S.0/24`.
    pub fn network(&self, k: usize) -> String {
        format!("198.18.{}.0/24", self.subnet + k as u8)
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends and so their peers.
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        for b in &self.bridges {
            let _ = ip(&["link", "del", b]);
        }
    }
}
