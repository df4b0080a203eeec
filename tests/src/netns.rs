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
    bridge: String,
    pub subnet: u8,
    pub hosts: Vec<NsHost>,
}

pub struct NsHost {
    /// The namespace's name (`ip netns exec NAME …`), also the host's name.
    pub name: String,
    pub addr: Ipv4Addr,
    /// The veth end in the root namespace (for `tc` on this host's link).
    pub root_if: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
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
        if !crate::is_root() {
            eprintln!("SKIPPED {test}: needs root for network namespaces");
            return None;
        }
        remove_stale();
        let pid = std::process::id();
        let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tag = format!("{:x}{seq}", pid % 0xfffff);
        // 198.18.S.0/24, S from the pid and a counter: tests running at once differ.
        let subnet = ((pid as usize * 7 + seq as usize) % 250 + 1) as u8;
        let mut c = Cluster {
            bridge: format!("fmb{tag}"),
            tag,
            subnet,
            hosts: Vec::new(),
        };
        match c.build(n, pid) {
            Ok(()) => Some(c),
            Err(e) => {
                eprintln!("SKIPPED {test}: cannot make network namespaces: {e}");
                None
            }
        }
    }

    fn build(&mut self, n: usize, pid: u32) -> Result<(), String> {
        let s = self.subnet;
        ip(&["link", "add", &self.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("198.18.{s}.1/24"),
            "dev",
            &self.bridge,
        ])?;
        ip(&["link", "set", &self.bridge, "up"])?;
        for i in 0..n {
            let name = format!("fmt-{pid}-{}-{i}", self.tag);
            let (a, b) = (
                format!("fmv{}a{i}", self.tag),
                format!("fmv{}b{i}", self.tag),
            );
            let addr = Ipv4Addr::new(198, 18, s, 10 + i as u8);
            ip(&["netns", "add", &name])?;
            self.hosts.push(NsHost {
                name: name.clone(),
                addr,
                root_if: a.clone(),
            });
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "master", &self.bridge])?;
            ip(&["link", "set", &a, "up"])?;
            ip(&["link", "set", &b, "netns", &name])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            ip(&["-n", &name, "addr", "add", &format!("{addr}/24"), "dev", &b])?;
            ip(&["-n", &name, "link", "set", &b, "up"])?;
        }
        Ok(())
    }

    /// The launcher's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.subnet, 1)
    }
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for Cluster {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.name]);
            let _ = ip(&["link", "del", &h.root_if]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
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
        if pid != 0 && !fm_devices::sys::pid_alive(pid) {
            let _ = ip(&["netns", "del", name]);
            if let Some(tag) = rest.split('-').nth(1) {
                let _ = ip(&["link", "del", &format!("fmb{tag}")]);
            }
        }
    }
}
