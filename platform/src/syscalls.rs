//! Counting system calls, for the benchmarks and tests that show a path
//! makes none. perf_event_open is in neither rustix nor nix: libc.

use std::os::fd::AsRawFd;

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
