//! Thin, safe wrappers over the few system calls the devices need.

use std::io;
use std::os::fd::AsRawFd;

/// Reserve `len` bytes of real storage for `file` so that a full tmpfs is an
/// error now rather than a SIGBUS at first touch.
pub fn fallocate(file: &std::fs::File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on an fd we own.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// One copy from another process's memory (cross-memory attach).
pub fn process_read(pid: u32, remote_addr: u64, buf: &mut [u8]) -> io::Result<()> {
    let local = buf.as_mut_ptr();
    cross_memory(local, remote_addr, buf.len(), |l, r| {
        // SAFETY: the local iovec covers memory we own; the kernel checks the remote one.
        unsafe { libc::process_vm_readv(pid as libc::pid_t, l, 1, r, 1, 0) }
    })
}

/// One copy into another process's memory.
pub fn process_write(pid: u32, remote_addr: u64, data: &[u8]) -> io::Result<()> {
    let local = data.as_ptr() as *mut u8;
    cross_memory(local, remote_addr, data.len(), |l, r| {
        // SAFETY: the local iovec covers memory we own (only read from); the kernel checks the remote one.
        unsafe { libc::process_vm_writev(pid as libc::pid_t, l, 1, r, 1, 0) }
    })
}

/// Run one process_vm_* call repeatedly until `len` bytes have moved
/// (the kernel may stop short at a page boundary).
fn cross_memory(
    local: *mut u8,
    remote_addr: u64,
    len: usize,
    call: impl Fn(*const libc::iovec, *const libc::iovec) -> isize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            // SAFETY: done < len, inside the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote_addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let n = call(&l, &r);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        done += n as usize;
    }
    Ok(())
}

/// Let any process of this user read our memory with process_vm_readv even
/// under Yama ptrace_scope=1 (what Open MPI's vader does for CMA).
pub fn allow_any_ptracer() {
    // SAFETY: prctl with integer arguments; harmless where Yama is absent.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
}

/// Ask the kernel to kill this process when its parent dies (call in a
/// child between fork and exec).
pub fn die_with_parent() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
}

/// Whether a process with this pid exists (it may belong to another user).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and its length are valid.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The clock of one throughput measurement of the pacer's
/// micro-benchmarks: a warm-up, then a window over which the bytes moved
/// are counted.
pub struct RateWindow {
    begin: std::time::Instant,
    warm_up: std::time::Duration,
    window: std::time::Duration,
    start: Option<(std::time::Instant, usize)>,
}

impl RateWindow {
    /// A window of `window` after a warm-up of a third of that plus `extra`.
    pub fn new(window: std::time::Duration, extra: std::time::Duration) -> RateWindow {
        RateWindow {
            begin: std::time::Instant::now(),
            warm_up: window / 3 + extra,
            window,
            start: None,
        }
    }

    /// With `moved` bytes so far: `None` while measuring, then the MB/s
    /// (`Some(None)` when nothing moved during the window).
    pub fn check(&mut self, moved: usize) -> Option<Option<f64>> {
        let now = std::time::Instant::now();
        match self.start {
            None if now - self.begin >= self.warm_up => self.start = Some((now, moved)),
            Some((t0, m0)) if now - t0 >= self.window => {
                let mb_s = (moved - m0) as f64 / (now - t0).as_secs_f64() / 1e6;
                return Some(Some(mb_s).filter(|r| *r > 0.0));
            }
            _ => {}
        }
        None
    }
}

/// Two CPUs for a two-thread micro-benchmark (the pacer's), whatever CPU
/// fmrun pinned this process to: the calling thread stays on its CPU and
/// the other thread calls [`CpuPair::pin_other`]. The caller's affinity
/// comes back when the pair is dropped.
pub struct CpuPair {
    saved: Option<libc::cpu_set_t>,
    here: usize,
    online: usize,
}

impl CpuPair {
    pub fn take() -> CpuPair {
        // SAFETY: plain libc calls on the calling thread's own affinity.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let saved = (libc::sched_getaffinity(0, size, &mut set) == 0).then_some(set);
            let here = libc::sched_getcpu().max(0) as usize;
            let online = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
            if saved.is_some() {
                let _ = pin_to_cpu(here);
            }
            CpuPair {
                saved,
                here,
                online,
            }
        }
    }

    /// Pin the calling (other) thread to the next CPU after the caller's
    /// that it may use (a cgroup's cpuset may exclude some); stay put where
    /// there is none.
    pub fn pin_other(&self) {
        if self.saved.is_some() {
            let _ = (1..self.online).any(|i| pin_to_cpu((self.here + i) % self.online).is_ok());
        }
    }
}

impl Drop for CpuPair {
    fn drop(&mut self) {
        if let Some(set) = &self.saved {
            // SAFETY: restoring the affinity read in `take`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        }
    }
}

/// Number of CPUs this process may run on.
pub fn cpus_allowed() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

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

/// Counts the system calls of the calling thread (the kernel's
/// `raw_syscalls:sys_enter` tracepoint through perf_event_open; needs
/// root or a permissive perf_event_paranoid). For benchmarks and tests that
/// show a path makes none.
pub struct SyscallCounter {
    fd: std::os::fd::OwnedFd,
}

/// `struct perf_event_attr`, its first (version 0) 64 bytes.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

impl SyscallCounter {
    /// The tracepoint's ID from tracefs (not mounted inside `ip netns
    /// exec`, which remounts /sys: see [`SyscallCounter::with_tracepoint`]).
    pub fn this_thread() -> Option<SyscallCounter> {
        let id: u64 = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .find_map(|d| {
                std::fs::read_to_string(format!("{d}/events/raw_syscalls/sys_enter/id")).ok()
            })?
            .trim()
            .parse()
            .ok()?;
        SyscallCounter::with_tracepoint(id)
    }

    /// With the ID of `raw_syscalls:sys_enter` read elsewhere.
    pub fn with_tracepoint(id: u64) -> Option<SyscallCounter> {
        use std::os::fd::FromRawFd;
        let attr = PerfEventAttr {
            kind: 2, // PERF_TYPE_TRACEPOINT
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: id,
            sample_period: 0,
            flags: 0, // enabled, user and kernel
            ..PerfEventAttr::default()
        };
        // SAFETY: perf_event_open with a valid attr: this thread, any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                8u64, // PERF_FLAG_FD_CLOEXEC
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh fd we own.
        Some(SyscallCounter {
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) },
        })
    }

    /// System calls this thread has entered since the counter opened
    /// (this read included).
    pub fn read(&self) -> u64 {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        v
    }
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
