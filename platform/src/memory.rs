//! Memory: storage reserved up front for a shared segment, and copies to
//! and from another process's memory (cross-memory attach). rustix has no
//! process_vm_readv/writev: those go through libc.

use std::io;

/// Reserve `len` bytes of real storage for `file` so that a full tmpfs is an
/// error now rather than a SIGBUS at first touch.
pub fn fallocate(file: &std::fs::File, len: u64) -> io::Result<()> {
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len)
        .map_err(io::Error::from)
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
