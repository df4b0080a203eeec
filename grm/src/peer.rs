//! Who is on the other end of a connection: the user that owns a loopback
//! client's socket (asked of the kernel by the socket's two ends through
//! `sock_diag` netlink, else found in its table `/proc/net/tcp`: the TCP
//! equivalent of `SO_PEERCRED`), else its address. Limits and job
//! ownership are per [`Client`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};

/// Who a connection counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// A process of this host, by user id.
    User(u32),
    /// Another host, by address.
    Host(IpAddr),
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::User(u) => write!(f, "user {u}"),
            Client::Host(a) => write!(f, "host {a}"),
        }
    }
}

/// The client of `conn`. A loopback peer whose socket cannot be found
/// (it closed already) counts as its address.
pub fn client_of(conn: &TcpStream) -> Option<Client> {
    let peer = conn.peer_addr().ok()?;
    if peer.ip().is_loopback() {
        let ours = conn.local_addr().ok()?;
        if let Some(uid) = socket_owner(peer, ours) {
            return Some(Client::User(uid));
        }
    }
    Some(Client::Host(peer.ip()))
}

/// The user owning the TCP socket whose local end is `local` and remote
/// end `remote`: one exact lookup by the kernel where netlink's
/// `sock_diag` is allowed, else a scan of its table (which holds every TCP
/// socket of the host: a job of N local ranks made the GRM scan it N
/// times, O(N²), a sixth of a 256-rank job's start-up).
pub fn socket_owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    diag_owner(local, remote).or_else(|| table_owner(local, remote))
}

/// `SOCK_DIAG_BY_FAMILY` for the one TCP socket `local` → `remote`
/// (`inet_diag_req_v2` without `NLM_F_DUMP`: the kernel looks it up by
/// its ends, `linux/inet_diag.h`); its `inet_diag_msg`'s `idiag_uid`.
fn diag_owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const REQ_LEN: usize = 16 + 56;
    const UID_AT: usize = 16 + 4 + 48 + 12;
    let family = match local {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let mut req = [0u8; REQ_LEN];
    req[0..4].copy_from_slice(&(REQ_LEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    // inet_diag_req_v2: family, protocol, extensions, pad, states.
    req[16] = family as u8;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: ports and addresses in network order, no
    // interface, no cookie.
    req[24..26].copy_from_slice(&local.port().to_be_bytes());
    req[26..28].copy_from_slice(&remote.port().to_be_bytes());
    for (at, ip) in [(28, local.ip()), (44, remote.ip())] {
        match ip {
            IpAddr::V4(a) => req[at..at + 4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => req[at..at + 16].copy_from_slice(&a.octets()),
        }
    }
    req[64..72].copy_from_slice(&[0xff; 8]);
    // SAFETY: plain socket calls on a descriptor this function owns and
    // closes; the buffers outlive the calls and their lengths are theirs.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return None;
        }
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as u16;
        let sent = libc::sendto(
            fd,
            req.as_ptr().cast(),
            req.len(),
            0,
            std::ptr::addr_of!(kernel).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        );
        let mut reply = [0u8; 1024];
        let got = match sent == REQ_LEN as isize {
            true => libc::recv(fd, reply.as_mut_ptr().cast(), reply.len(), 0),
            false => -1,
        };
        libc::close(fd);
        let got = usize::try_from(got).ok()?;
        let kind = u16::from_ne_bytes(reply.get(4..6)?.try_into().ok()?);
        if kind != SOCK_DIAG_BY_FAMILY || got < UID_AT + 4 {
            return None; // NLMSG_ERROR: no such socket, or not allowed
        }
        Some(u32::from_ne_bytes(
            reply[UID_AT..UID_AT + 4].try_into().ok()?,
        ))
    }
}

/// The owner from the kernel's table of every TCP socket.
fn table_owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let table = if local.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).ok()?;
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (f.get(1)?, f.get(2)?, f.get(7)?);
        (parse_end(l)? == local && parse_end(r)? == remote).then(|| uid.parse().ok())?
    })
}

/// `0100007F:1F90` (the address as the kernel's words in host order, then
/// the port) → 127.0.0.1:8080.
fn parse_end(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(a.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_le_bytes(),
        )
    };
    let ip = match a.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn kernel_socket_ends_parse() {
        assert_eq!(
            parse_end("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_end("00000000000000000000000001000000:0016"),
            Some("[::1]:22".parse().unwrap())
        );
        for bad in ["", "0100007F", "XX00007F:0016", "0100007F:XYZW", "01:0016"] {
            assert_eq!(parse_end(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_loopback_client_is_its_user() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        assert_eq!(client_of(&s), Some(Client::User(me)));
    }

    /// Both ways of asking agree, on the client's socket and on ours, and
    /// neither finds a socket that does not exist. (Where a sandbox
    /// refuses netlink, fm falls back to the table; this test expects a
    /// host that allows it, as `ip netns` needs too.)
    #[test]
    fn netlink_and_the_table_name_the_same_owner() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let (a, b) = (c.local_addr().unwrap(), s.local_addr().unwrap());
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        for (local, remote) in [(a, b), (b, a)] {
            assert_eq!(table_owner(local, remote), Some(me));
            assert_eq!(diag_owner(local, remote), Some(me));
        }
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(diag_owner(nobody, b), None);
        assert_eq!(table_owner(nobody, b), None);
    }
}
