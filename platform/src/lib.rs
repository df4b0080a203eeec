//! fm-platform: what fm needs of the operating system that is not a device
//! — the host and its processes (`host.rs`), CPUs (`cpu.rs`), memory
//! (`memory.rs`), network interfaces and IPv4 networks (`net.rs`), sleeping
//! until woken (`sleep.rs`), a system call counter (`syscalls.rs`) — the type of fm's table of settings
//! (`setting.rs`), and a hexadecimal codec for values carried in text (`hex.rs`). System calls go through rustix where it has them, through
//! libc where it does not (each file says which).

pub mod cpu;
pub mod hex;
pub mod host;
pub mod memory;
pub mod net;
pub mod setting;
pub mod sleep;
pub mod syscalls;

pub use cpu::{cpus_allowed, pin_to_cpu, CpuPair, RateWindow};
pub use host::{
    allow_any_ptracer, die_quietly_on_closed_pipe, die_with_parent, hostname, pid_alive,
    raise_open_files_limit,
};
pub use memory::{fallocate, process_read, process_write};
pub use net::{find_address, for_each_address, interface_mac, interface_mtu, Ipv4Net};
pub use setting::Setting;
pub use sleep::{futex_wait, futex_wake_all, wait_readable};
pub use syscalls::SyscallCounter;
