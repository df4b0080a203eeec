//! The ethernet device's knobs (with the reliable layer's, `reliable::knobs`).

use fm_platform::setting::{Scope, Setting};

pub const ETH_ADDR: Setting = Setting {
    var: "FM_ETH_ADDR",
    scope: Scope::Setting,
    default: r#"the local address that routes to the GRM"#,
    doc: r#"address(es) to bind and advertise in the node map, comma separated: one link each."#,
};

pub const ETH_RANGE: Setting = Setting {
    var: "FM_ETH_RANGE",
    scope: Scope::Setting,
    default: r#"—"#,
    doc: r#"an IPv4 network (`198.18.0.0/15`): bind this host's address in it. `fmrun --topology` sets it from the networks the rank's cluster uses."#,
};

pub const ETH_IFACES: Setting = Setting {
    var: "FM_ETH_IFACES",
    scope: Scope::Setting,
    default: r#"—"#,
    doc: r#"the same by interface name (`eth1,eth2`): each interface's IPv4 address. Two or more links = trunking (PM/Ethernet's Network Trunking, thesis chapter 6): packets to a peer go round-robin over the links both have (link i to the peer's link i, so each pair shares a network), the receiver keeps a per-peer reorder queue instead of answering a gap with LOSE, duplicates are discarded, and losses are found by the timer."#,
};

pub const ETH_MTU: Setting = Setting {
    var: "FM_ETH_MTU",
    scope: Scope::Setting,
    default: r#"the pacer's choice, at most the interface's MTU − 28 (65507 on loopback)"#,
    doc: r#"largest datagram, 64-byte header included. The job uses the smallest of its ranks' values. Setting it turns the pacer off for this knob."#,
};

/// Every knob of this file, in documentation order.
pub const SETTINGS: &[Setting] = &[ETH_ADDR, ETH_RANGE, ETH_IFACES, ETH_MTU];
