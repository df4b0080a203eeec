//! This host's network interfaces and IPv4 networks. rustix has neither
//! getifaddrs nor the interface ioctls: those go through libc.

/// Call `f(interface name, address, netmask)` for every address of this host.
pub fn for_each_address(mut f: impl FnMut(&str, std::net::IpAddr, Option<std::net::IpAddr>)) {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return;
    }
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names;
            // ifa_name is a NUL-terminated string.
            let (a, n, m) = unsafe {
                (
                    sockaddr_ip(ifa.ifa_addr),
                    std::ffi::CStr::from_ptr(ifa.ifa_name),
                    (!ifa.ifa_netmask.is_null())
                        .then(|| sockaddr_ip(ifa.ifa_netmask))
                        .flatten(),
                )
            };
            if let Some(a) = a {
                f(&n.to_string_lossy(), a, m);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
}

/// An IPv4 network, `198.18.1.0/24`: an address range of a topology file,
/// the network of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Net {
    /// The network address (host bits zero).
    pub base: std::net::Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    /// The network of `addr` with `mask`'s length.
    pub fn of(addr: std::net::Ipv4Addr, prefix: u8) -> Ipv4Net {
        let prefix = prefix.min(32);
        Ipv4Net {
            base: (u32::from(addr) & Ipv4Net::mask(prefix)).into(),
            prefix,
        }
    }

    fn mask(prefix: u8) -> u32 {
        u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0)
    }

    pub fn contains(&self, a: std::net::IpAddr) -> bool {
        match a {
            std::net::IpAddr::V4(a) => {
                u32::from(a) & Ipv4Net::mask(self.prefix) == u32::from(self.base)
            }
            std::net::IpAddr::V6(_) => false,
        }
    }

    /// Whether every address of `other` is in this network.
    pub fn covers(&self, other: &Ipv4Net) -> bool {
        self.prefix <= other.prefix && self.contains(other.base.into())
    }

    /// The first address of this host in the network, and its interface.
    pub fn local_address(&self) -> Option<(String, std::net::IpAddr)> {
        find_address(|name, a, _| self.contains(a).then(|| (name.to_string(), a)))
    }
}

impl std::str::FromStr for Ipv4Net {
    type Err = String;
    /// `a.b.c.d/n`; host bits must be zero.
    fn from_str(s: &str) -> Result<Ipv4Net, String> {
        let form = || format!("{s:?} is not an IPv4 network like 198.18.0.0/15");
        let (a, p) = s.trim().split_once('/').ok_or_else(form)?;
        let addr: std::net::Ipv4Addr = a.parse().map_err(|_| form())?;
        let prefix: u8 = p.parse().ok().filter(|&p| p <= 32).ok_or_else(form)?;
        let net = Ipv4Net::of(addr, prefix);
        if net.base != addr {
            return Err(format!("{s:?} has host bits set: the network is {net}"));
        }
        Ok(net)
    }
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// The first `f(interface name, address, netmask)` over this host's
/// addresses that is `Some`.
pub fn find_address<T>(
    mut f: impl FnMut(&str, std::net::IpAddr, Option<std::net::IpAddr>) -> Option<T>,
) -> Option<T> {
    let mut found = None;
    for_each_address(|name, a, m| {
        if found.is_none() {
            found = f(name, a, m);
        }
    });
    found
}

/// # Safety
/// `sa` must point to a valid sockaddr.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let s = &*(sa as *const libc::sockaddr_in);
            Some(std::net::IpAddr::from(
                u32::from_be(s.sin_addr.s_addr).to_be_bytes(),
            ))
        }
        libc::AF_INET6 => {
            let s = &*(sa as *const libc::sockaddr_in6);
            Some(std::net::IpAddr::from(s.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// An `ifreq` ioctl on interface `name`, through a throwaway socket in this
/// thread's network namespace (sysfs may show another namespace's).
fn interface_ioctl(name: &str, request: libc::Ioctl) -> Option<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return None;
    }
    // SAFETY: a zeroed ifreq is valid; the name is copied in NUL-terminated.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain syscalls on a socket we close before returning.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let rc = libc::ioctl(fd, request, &mut req);
        libc::close(fd);
        (rc == 0).then_some(req)
    }
}

/// The MTU of interface `name`.
pub fn interface_mtu(name: &str) -> Option<usize> {
    let r = interface_ioctl(name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU fills the ifru_mtu member.
    usize::try_from(unsafe { r.ifr_ifru.ifru_mtu }).ok()
}

/// The hardware (MAC) address of Ethernet interface `name`.
pub fn interface_mac(name: &str) -> Option<[u8; 6]> {
    let r = interface_ioctl(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR fills the ifru_hwaddr member.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::Ipv4Net;

    #[test]
    fn ipv4_networks_parse_contain_and_nest() {
        let wide: Ipv4Net = "198.18.0.0/15".parse().unwrap();
        let lan: Ipv4Net = "198.19.2.0/24".parse().unwrap();
        assert_eq!(wide.to_string(), "198.18.0.0/15");
        assert!(wide.contains("198.19.255.1".parse().unwrap()));
        assert!(!wide.contains("198.20.0.1".parse().unwrap()));
        assert!(!lan.contains("::1".parse().unwrap()));
        assert!(wide.covers(&lan) && !lan.covers(&wide));
        let all: Ipv4Net = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("10.1.2.3".parse().unwrap()) && all.covers(&wide));
        for bad in [
            "198.18.0.0",
            "198.18.0.1/15",
            "198.18.0.0/33",
            "x/8",
            "198.18.0.0/",
        ] {
            assert!(bad.parse::<Ipv4Net>().is_err(), "{bad}");
        }
    }
}
