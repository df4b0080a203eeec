//! Hosts made of network namespaces, for multi-host tests on one machine.
//!
//! A [`Cluster`] is a bridge in the root namespace (the "switch", holding
//! address .1 for the launcher and its GRM) and one namespace per host, each
//! joined to the bridge by a veth pair, with an address in 198.18.0.0/15 —
//! the range set aside for benchmarking, so nothing real is touched. Dropping
//! the cluster removes all of it, also when a test fails; namespaces left by
//! a test process that was killed are removed by the next one.

use std::net::Ipv4Addr;
use std::process::Command;

pub struct Cluster {
    tag: String,
    /// One bridge per network.
    bridges: Vec<String>,
    /// Network k is 198.18.(subnet + k).0/24.
    pub subnet: u8,
    pub hosts: Vec<NsHost>,
}

pub struct NsHost {
    /// The namespace's name (`ip netns exec NAME …`), also the host's name.
    pub name: String,
    /// Its address on the first network.
    pub addr: Ipv4Addr,
    /// The veth end in the root namespace on the first network (for `tc`).
    pub root_if: String,
    /// The root-namespace ends on every network; inside the namespace the
    /// interfaces are called `fm0`, `fm1`, … (`FM_ETH_IFACES=fm0,fm1`).
    pub root_ifs: Vec<String>,
}

pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Cluster {
    /// `n` hosts, or `None` (after saying why `test` is skipped) when not
    /// root or namespaces cannot be made here.
    pub fn new(test: &str, n: usize) -> Option<Cluster> {
        Cluster::with_networks(test, n, 1)
    }

    /// `n` hosts, each on `nets` separate networks (for trunking).
    pub fn with_networks(test: &str, n: usize, nets: usize) -> Option<Cluster> {
        let (pid, tag, subnet) = claim(test)?;
        let mut c = Cluster {
            bridges: Vec::new(),
            tag,
            subnet,
            hosts: Vec::new(),
        };
        match c.build(n, nets.clamp(1, 4), pid) {
            Ok(()) => Some(c),
            Err(e) => {
                eprintln!("SKIPPED {test}: cannot make network namespaces: {e}");
                None
            }
        }
    }

    fn build(&mut self, n: usize, nets: usize, pid: u32) -> Result<(), String> {
        for k in 0..nets {
            let br = format!("fmb{}n{k}", self.tag);
            ip(&["link", "add", &br, "type", "bridge"])?;
            self.bridges.push(br.clone());
            let s = self.subnet + k as u8;
            ip(&["addr", "add", &format!("198.18.{s}.1/24"), "dev", &br])?;
            ip(&["link", "set", &br, "up"])?;
        }
        for i in 0..n {
            let name = format!("fmt-{pid}-{}-{i}", self.tag);
            ip(&["netns", "add", &name])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let mut root_ifs = Vec::new();
            for (k, br) in self.bridges.clone().iter().enumerate() {
                let (a, b) = (
                    format!("fmv{}a{i}n{k}", self.tag),
                    format!("fmv{}b{i}n{k}", self.tag),
                );
                let addr = Ipv4Addr::new(198, 18, self.subnet + k as u8, 10 + i as u8);
                ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
                root_ifs.push(a.clone());
                ip(&["link", "set", &a, "master", br])?;
                ip(&["link", "set", &a, "up"])?;
                ip(&["link", "set", &b, "netns", &name])?;
                let inside = format!("fm{k}");
                ip(&["-n", &name, "link", "set", &b, "name", &inside])?;
                ip(&[
                    "-n",
                    &name,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    &inside,
                ])?;
                ip(&["-n", &name, "link", "set", &inside, "up"])?;
            }
            self.hosts.push(NsHost {
                name,
                addr: Ipv4Addr::new(198, 18, self.subnet, 10 + i as u8),
                root_if: root_ifs[0].clone(),
                root_ifs,
            });
        }
        Ok(())
    }

    /// The launcher's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.subnet, 1)
    }

    /// `host:N,…` with `per_host` ranks on every host.
    pub fn hosts_spec(&self, per_host: usize) -> String {
        let h: Vec<String> = self
            .hosts
            .iter()
            .map(|h| format!("{}:{per_host}", h.name))
            .collect();
        h.join(",")
    }

    /// fmrun over `hosts` (`host:N,…`) through `ip netns exec`, devices
    /// `net` (`--net`), the embedded GRM on the bridge. `own_bin` locates
    /// the workspace's binaries (see [`crate::fmrun`]).
    pub fn fmrun(
        &self,
        own_bin: &str,
        dir: &crate::TempDir,
        hosts: &str,
        net: &str,
        program: &std::path::Path,
        args: &[&str],
    ) -> Command {
        let fmrun_args = self.fmrun_args(hosts, net);
        let fmrun_args: Vec<&str> = fmrun_args.iter().map(String::as_str).collect();
        crate::fmrun(own_bin, dir, &fmrun_args, program, args)
    }

    /// The arguments of [`Cluster::fmrun`]'s fmrun, for a test that adds
    /// its own.
    pub fn fmrun_args(&self, hosts: &str, net: &str) -> Vec<String> {
        let n: usize = hosts
            .split(',')
            .map(|h| {
                h.rsplit_once(':')
                    .map_or(1, |(_, k)| k.parse().unwrap_or(1))
            })
            .sum();
        let args = [
            "-n",
            &n.to_string(),
            "--hosts",
            hosts,
            "--net",
            net,
            "--rsh",
            "ip netns exec {host}",
            "--grm-listen",
            &format!("{}:0", self.gateway()),
            "--timeout",
            "240",
        ]
        .map(String::from);
        args.to_vec()
    }
}

/// For a test that makes namespaces: this process's ID, a tag for the names
/// of its namespaces and links, and the first of four /24 subnets
/// 198.18.S.0/24 … (from the pid and a counter: tests running at once
/// differ). `None`, after saying why `test` is skipped, when not root.
/// Removes what killed test processes left first.
pub(crate) fn claim(test: &str) -> Option<(u32, String, u8)> {
    if !crate::is_root() {
        eprintln!("SKIPPED {test}: needs root for network namespaces");
        return None;
    }
    remove_stale();
    let pid = std::process::id();
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let tag = format!("{:x}{seq}", pid % 0xfffff);
    let subnet = (((pid as usize * 7 + seq as usize) % 60) * 4 + 1) as u8;
    Some((pid, tag, subnet))
}

/// Devices of a job whose hosts talk through ethernet only.
pub const NET_ETHERNET: &str = "self,shmem,ethernet,null";
/// Devices of a job whose hosts talk through nic only.
pub const NET_NIC: &str = "self,shmem,nic,null";

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for Cluster {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.name]);
            for r in &h.root_ifs {
                let _ = ip(&["link", "del", r]);
            }
        }
        for b in &self.bridges {
            let _ = ip(&["link", "del", b]);
        }
    }
}

/// Namespaces `fmt-PID-…` of test processes that are gone, and their links.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("fmt-") else {
            continue;
        };
        let pid: u32 = rest
            .split('-')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if pid != 0 && !fm_platform::pid_alive(pid) {
            let _ = ip(&["netns", "del", name]);
            if let Some(tag) = rest.split('-').nth(1) {
                for k in 0..4 {
                    let _ = ip(&["link", "del", &format!("fmb{tag}n{k}")]);
                }
            }
        }
    }
}

/// Limit what leaves `dev` (a veth end in the root namespace) to `rate`
/// with a queue of `limit` bytes (`tc … tbf`; netem is not in every kernel).
/// False when tc cannot do it here.
pub fn rate_limit(dev: &str, rate: &str, limit: &str) -> bool {
    Command::new("tc")
        .args(["qdisc", "add", "dev", dev, "root", "tbf"])
        .args(["rate", rate, "burst", "64kb", "limit", limit])
        .status()
        .is_ok_and(|s| s.success())
}
