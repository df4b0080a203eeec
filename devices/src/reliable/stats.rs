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
    /// Without a valid MAC under the job's key: forged, altered, or from
    /// a process that does not hold the job's token.
    pub dropped_unauthenticated: u64,
    /// From an address that is not the rank's it names.
    pub dropped_wrong_address: u64,
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
    /// LOSE, STOP or GO packets whose control number was not newer than
    /// the last acted on: replayed (or overtaken by a newer one), ignored.
    pub replayed_control: u64,
}

impl std::fmt::Display for ReliableStats {
    /// `data_sent 1200, data_accepted 1200, retransmits 2`: the counters
    /// that are not zero, by name ("all zero" when none is).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = self.fields();
        let shown: Vec<String> = (all.iter())
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        match shown.is_empty() {
            true => f.write_str("all zero"),
            false => f.write_str(&shown.join(", ")),
        }
    }
}

impl ReliableStats {
    /// Every counter by name, in the order `Display` shows them.
    pub fn fields(&self) -> [(&'static str, u64); 28] {
        [
            ("data_sent", self.data_sent),
            ("data_accepted", self.data_accepted),
            ("retransmits", self.retransmits),
            ("timeouts", self.timeouts),
            ("spurious_timeouts", self.spurious_timeouts),
            ("acks_sent", self.acks_sent),
            ("loses_sent", self.loses_sent),
            ("loses_received", self.loses_received),
            ("stops_sent", self.stops_sent),
            ("stops_received", self.stops_received),
            ("gos_sent", self.gos_sent),
            ("probes", self.probes),
            ("duplicates", self.duplicates),
            ("replayed_control", self.replayed_control),
            ("out_of_order", self.out_of_order),
            ("reordered", self.reordered),
            ("pool_full", self.pool_full),
            ("window_full", self.window_full),
            ("unreachable", self.unreachable),
            ("link_errors", self.link_errors),
            ("kernel_drops", self.kernel_drops),
            ("dropped_malformed", self.dropped_malformed),
            ("dropped_checksum", self.dropped_checksum),
            ("dropped_foreign_job", self.dropped_foreign_job),
            ("dropped_stale_epoch", self.dropped_stale_epoch),
            ("dropped_misdirected", self.dropped_misdirected),
            ("dropped_unauthenticated", self.dropped_unauthenticated),
            ("dropped_wrong_address", self.dropped_wrong_address),
        ]
    }

    /// Datagrams dropped as invalid: malformed, bad checksum, another job,
    /// a stale epoch, misdirected, unauthenticated, from the wrong address.
    pub fn invalid_drops(&self) -> u64 {
        self.dropped_unauthenticated
            + self.dropped_wrong_address
            + self.dropped_malformed
            + self.dropped_checksum
            + self.dropped_foreign_job
            + self.dropped_stale_epoch
            + self.dropped_misdirected
    }
}

#[cfg(test)]
mod tests {
    use super::ReliableStats;

    /// Every counter is shown. The literal names every field (no `..`), so
    /// a new counter does not compile here until it is added to `Display`.
    #[test]
    fn display_names_every_counter_that_is_not_zero() {
        let all = ReliableStats {
            data_sent: 1,
            data_accepted: 1,
            retransmits: 1,
            timeouts: 1,
            acks_sent: 1,
            loses_sent: 1,
            loses_received: 1,
            stops_sent: 1,
            stops_received: 1,
            gos_sent: 1,
            probes: 1,
            duplicates: 1,
            out_of_order: 1,
            reordered: 1,
            pool_full: 1,
            dropped_malformed: 1,
            dropped_checksum: 1,
            dropped_foreign_job: 1,
            dropped_stale_epoch: 1,
            dropped_misdirected: 1,
            dropped_unauthenticated: 1,
            dropped_wrong_address: 1,
            link_errors: 1,
            window_full: 1,
            unreachable: 1,
            kernel_drops: 1,
            spurious_timeouts: 1,
            replayed_control: 1,
        };
        let shown = all.to_string();
        assert_eq!(shown.matches(" 1").count(), 28, "{shown}");
        assert_eq!(ReliableStats::default().to_string(), "all zero");
        let some = ReliableStats {
            retransmits: 3,
            ..ReliableStats::default()
        };
        assert_eq!(some.to_string(), "retransmits 3");
    }
}
