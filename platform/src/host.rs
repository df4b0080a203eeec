//! This process and its host: the host name, whether a pid lives, and the
//! process-level settings fm asks of the kernel (rustix, and libc for
//! `signal`, which rustix does not wrap).

use rustix::process::{Pid, Signal};

/// This machine's host name.
pub fn hostname() -> String {
    let u = rustix::system::uname();
    let name = u.nodename().to_string_lossy().into_owned();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

/// Whether a process with this pid exists (it may belong to another user).
pub fn pid_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Ask the kernel to kill this process when its parent dies (call in a
/// child between fork and exec: a raw system call, safe there).
pub fn die_with_parent() {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
}

/// Let any process of this user read our memory with process_vm_readv even
/// under Yama ptrace_scope=1 (what Open MPI's vader does for CMA); harmless
/// where Yama is absent.
pub fn allow_any_ptracer() {
    let _ = rustix::process::set_ptracer(rustix::process::PTracer::Any);
}

/// Let a closed standard output end this process quietly, as it ends a C
/// tool (`fm-info doctor | head -1`), instead of a panic at the next print.
/// For the tools; not for fmrun, which must outlive its output to stop its
/// ranks.
pub fn die_quietly_on_closed_pipe() {
    // SAFETY: restores SIGPIPE's default action; no handler of ours runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Raise this process's soft limit of open files to its hard limit; the
/// new soft limit (unchanged if it could not be raised).
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let (soft, hard) = (lim.current.unwrap_or(u64::MAX), lim.maximum);
    if hard.is_none_or(|h| h > soft) {
        let raised = Rlimit {
            current: hard,
            maximum: hard,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return hard.unwrap_or(u64::MAX);
        }
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_lives_and_pid_zero_does_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0) && !pid_alive(u32::MAX));
        assert!(!hostname().is_empty());
    }
}
