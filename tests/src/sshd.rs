//! Real OpenSSH servers inside network-namespace hosts (root only), and the
//! client command that reaches them with a key made for the test: what
//! `fmrun --rsh` uses to start ranks on other hosts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

pub struct SshServers {
    dir: PathBuf,
    servers: Vec<Child>,
}

impl SshServers {
    /// An sshd in each namespace of `hosts` (namespace, address), its keys
    /// and configuration in `dir`; `None` (after saying why `test` is
    /// skipped) when OpenSSH is not installed.
    pub fn start(
        test: &str,
        dir: &Path,
        hosts: &[(&str, std::net::Ipv4Addr)],
    ) -> Option<SshServers> {
        if !Path::new(SSHD).exists() || Command::new("ssh").arg("-V").output().is_err() {
            eprintln!("SKIPPED {test}: OpenSSH (ssh, sshd) is not installed (apt-get install openssh-server)");
            return None;
        }
        match SshServers::launch(dir, hosts) {
            Ok(s) => Some(s),
            Err(e) => panic!("{test}: cannot start sshd: {e}"),
        }
    }

    fn launch(dir: &Path, hosts: &[(&str, std::net::Ipv4Addr)]) -> Result<SshServers, String> {
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").map_err(|e| format!("/run/sshd: {e}"))?;
        let key = |name: &str| {
            let p = dir.join(name);
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&p)
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(p)
            } else {
                Err(format!("ssh-keygen could not make {}", p.display()))
            }
        };
        let host_key = key("host_key")?;
        let client_key = key("client_key")?;
        let public = std::fs::read_to_string(client_key.with_extension("pub"))
            .map_err(|e| format!("client key: {e}"))?;
        let authorized = dir.join("authorized_keys");
        std::fs::write(&authorized, public).map_err(|e| format!("authorized_keys: {e}"))?;
        let mut s = SshServers {
            dir: dir.to_path_buf(),
            servers: Vec::new(),
        };
        for (ns, _) in hosts {
            let config = dir.join(format!("sshd-{ns}.conf"));
            std::fs::write(
                &config,
                format!(
                    "Port 22\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
                     PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                     PrintMotd no\nUseDNS no\n",
                    host_key.display(),
                    dir.join(format!("sshd-{ns}.pid")).display(),
                    authorized.display()
                ),
            )
            .map_err(|e| format!("sshd config: {e}"))?;
            let log = std::fs::File::create(dir.join(format!("sshd-{ns}.log")))
                .map_err(|e| format!("sshd log: {e}"))?;
            let child = Command::new("ip")
                .args(["netns", "exec", ns, SSHD, "-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("ip netns exec {ns} sshd: {e}"))?;
            s.servers.push(child);
        }
        // Up when each accepts connections.
        for (ns, addr) in hosts {
            let until = Instant::now() + Duration::from_secs(10);
            let at = std::net::SocketAddr::from((*addr, 22));
            while std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_err() {
                if Instant::now() > until {
                    let log = std::fs::read_to_string(dir.join(format!("sshd-{ns}.log")));
                    return Err(format!("sshd in {ns} does not answer on {at}: {log:?}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(s)
    }

    /// `fmrun --rsh` for these servers: OpenSSH as root with the test's key,
    /// no user configuration, no host-key prompts, never a password prompt.
    pub fn rsh(&self) -> String {
        format!(
            "ssh -F /dev/null -i {} -o BatchMode=yes -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=10 root@{{host}}",
            self.dir.join("client_key").display()
        )
    }
}

impl Drop for SshServers {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
