//! Who is on the other end of a connection: the user that owns a loopback
//! client's socket (from the kernel's socket table, `/proc/net/tcp`, the
//! TCP equivalent of `SO_PEERCRED`), else its address. Limits and job
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
/// end `remote`, from the kernel's table.
pub fn socket_owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
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
}
