//! The reliable layer's counters.

/// Counters of the reliable layer, per device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReliableStats {
    pub data_sent: u64,
    pub data_accepted: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub loses_sent: u64,
    pub loses_received: u64,
    pub stops_sent: u64,
    pub stops_received: u64,
    pub gos_sent: u64,
    pub probes: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Out-of-order packets kept in the reorder queue (trunking).
    pub reordered: u64,
    pub pool_full: u64,
    pub dropped_malformed: u64,
    pub dropped_checksum: u64,
    pub dropped_foreign_job: u64,
    pub dropped_stale_epoch: u64,
    pub dropped_misdirected: u64,
    pub link_errors: u64,
    pub window_full: u64,
    pub unreachable: u64,
    /// Frames the kernel dropped before the link read them (ring full), where
    /// the link can tell; the protocol recovered each as a loss.
    pub kernel_drops: u64,
    /// Timeouts found spurious (F-RTO, RFC 5682): after a timeout only the
    /// oldest packet went again, and the next ACK covered packets sent
    /// before the timeout, so nothing had been lost (the peer or its ACK was
    /// late: descheduled, delayed). Each saved a go-back of the window.
    pub spurious_timeouts: u64,
}

impl ReliableStats {
    /// Datagrams dropped as invalid: malformed, bad checksum, another job,
    /// a stale epoch, misdirected.
    pub fn invalid_drops(&self) -> u64 {
        self.dropped_malformed
            + self.dropped_checksum
            + self.dropped_foreign_job
            + self.dropped_stale_epoch
            + self.dropped_misdirected
    }
}
