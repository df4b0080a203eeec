//! The reliable layer's knobs, shared by the ethernet and nic devices.

use fm_platform::setting::{Scope, Setting};

pub const ETH_WINDOW: Setting = Setting {
    var: "FM_ETH_WINDOW",
    scope: Scope::Setting,
    default: r#"64"#,
    doc: r#"packets a sender may have unacknowledged per peer (also FM's credit window towards that peer). Bounds: 1 to 4096."#,
};

pub const ETH_POOL: Setting = Setting {
    var: "FM_ETH_POOL",
    scope: Scope::Setting,
    default: r#"16 MiB worth of datagrams, 128 to 4096"#,
    doc: r#"receive pool, packets, shared by all senders; when full, senders get STOP and later GO. Bounds: 1 to 65536, and at most 1 GiB of datagrams (a larger pool is an error naming this setting when the device opens)."#,
};

pub const ETH_RTO_US: Setting = Setting {
    var: "FM_ETH_RTO_US",
    scope: Scope::Setting,
    default: r#"2000"#,
    doc: r#"smallest retransmission timeout, µs; above it the timeout follows the measured round trip (RFC 6298, Karn's rule) and doubles per timeout up to 100× this. Bounds: 10 to 10000000."#,
};

pub const ETH_DEAD_AFTER: Setting = Setting {
    var: "FM_ETH_DEAD_AFTER",
    scope: Scope::Setting,
    default: r#"10"#,
    doc: r#"seconds without any acknowledgement, with packets outstanding, after which a peer is unreachable: sends to it fail with "rank R is unreachable". Bounds: 1 to 86400."#,
};

pub const ETH_CHECKSUM: Setting = Setting {
    var: "FM_ETH_CHECKSUM",
    scope: Scope::Setting,
    default: r#"`header`"#,
    doc: r#"what the CRC-32C in every datagram covers: `header` (always checked: garbage, truncation and forged headers are dropped; payloads rely on UDP's own checksum, which the kernel computes and the NIC or kernel verifies on real links) or `full` (payloads too, for paths without a checksum; costs about 16 % of 1 MiB bandwidth on loopback). Fault injection with `corrupt` turns `full` on."#,
};

pub const ETH_AUTH: Setting = Setting {
    var: "FM_ETH_AUTH",
    scope: Scope::Setting,
    default: r#"`mac`"#,
    doc: r#"`mac`: every packet of ethernet and nic carries a 16-byte MAC (SipHash-2-4-128 for packets of up to 128 bytes, keyed BLAKE3 above) under a key each rank derives from the job's token, and packets without a valid one are dropped and counted (`dropped_unauthenticated`), as are packets from an address that is not the rank's they name (`dropped_wrong_address`); see docs/SECURITY.md. `none`: no MAC, for measuring its cost on a network you trust; every rank of a job must agree (fmrun passes `FM_*` variables to every rank)."#,
};

pub const FAULTS: Setting = Setting {
    var: "FM_FAULTS",
    scope: Scope::Setting,
    default: r#"none"#,
    doc: r#"fault injection on every network link of this process, for testing your own program: `drop=0.05,dup=0.01,reorder=0.02,corrupt=0.001,delay=0.01,delay_us=200,seed=7` (rates per datagram sent, each key optional). Corrupted datagrams are caught by the checksum and dropped; the counters show the recovery. `fm-bench --faults …` sets it for a benchmark."#,
};

/// Every knob of this file, in documentation order.
pub const SETTINGS: &[Setting] = &[
    ETH_WINDOW,
    ETH_POOL,
    ETH_RTO_US,
    ETH_DEAD_AFTER,
    ETH_CHECKSUM,
    ETH_AUTH,
    FAULTS,
];
