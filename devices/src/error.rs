use crate::Rank;
use std::path::PathBuf;

/// Errors of the device layer. Each names the device and what was involved.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Back-pressure: no free slot right now. Retry after polling.
    #[error("{device}: no free send buffer towards rank {dest}")]
    NoBuffer { device: &'static str, dest: Rank },

    /// The destination cannot be reached by any configured network.
    #[error("no route to rank {dest} on host {host:?} ({device} transport: this job has no network between hosts)")]
    NoRoute {
        device: &'static str,
        dest: Rank,
        host: String,
    },

    /// The device does not carry packets to this rank.
    #[error("{device}: rank {dest} is not reachable through this device")]
    NotAPeer { device: &'static str, dest: Rank },

    /// The reliable layer got no acknowledgement for `secs` seconds.
    #[error("{device}: rank {dest} is unreachable: nothing acknowledged for {secs} s")]
    Unreachable {
        device: &'static str,
        dest: Rank,
        secs: u64,
    },

    #[error("{device}: packet of {len} bytes exceeds the MTU of {mtu} bytes")]
    TooLarge {
        device: &'static str,
        len: usize,
        mtu: usize,
    },

    #[error("{device}: {op} is not supported by this device")]
    Unsupported {
        device: &'static str,
        op: &'static str,
    },

    /// A shared segment that is not ours or not usable.
    #[error("shmem: segment {path}: {reason}")]
    BadSegment { path: PathBuf, reason: String },

    /// Not enough room for the segment (full /dev/shm): reported before any message.
    #[error("shmem: cannot allocate {bytes} bytes for segment {path}: {source}; free space in its directory or set FM_SHM_DIR")]
    NoSpace {
        path: PathBuf,
        bytes: u64,
        source: std::io::Error,
    },

    #[error("{device}: timed out after {secs} s waiting for {what}")]
    Timeout {
        device: &'static str,
        what: String,
        secs: u64,
    },

    #[error("{device}: {context}: {source}")]
    Io {
        device: &'static str,
        context: String,
        source: std::io::Error,
    },

    /// The process lacks a privilege the device needs (CAP_NET_RAW).
    #[error("{device}: not permitted: {reason}")]
    NotPermitted {
        device: &'static str,
        reason: String,
    },

    #[error("{device}: bad configuration: {reason}")]
    Config {
        device: &'static str,
        reason: String,
    },
}

impl DeviceError {
    /// For `map_err`: an I/O error of `device` while `context`.
    pub fn io(device: &'static str, context: String) -> impl FnOnce(std::io::Error) -> DeviceError {
        move |source| DeviceError::Io {
            device,
            context,
            source,
        }
    }
}
