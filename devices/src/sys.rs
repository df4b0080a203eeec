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

/// Number of CPUs this process may run on.
pub fn cpus_allowed() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
