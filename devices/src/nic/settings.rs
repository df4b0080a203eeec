//! The nic device's knobs (with the reliable layer's, `reliable::knobs`).

use fm_platform::setting::{Scope, Setting};

pub const NIC_IFACES: Setting = Setting {
    var: "FM_NIC_IFACES",
    scope: Scope::Setting,
    default: r#"the interface of the address that routes to the GRM (none when that is loopback)"#,
    doc: r#"interfaces, comma separated: one link each; two or more = trunking, as for ethernet (link i to the peer's link i, per-peer reorder queue)."#,
};

pub const NIC_NETWORK: Setting = Setting {
    var: "FM_NIC_NETWORK",
    scope: Scope::Setting,
    default: r#"the first interface's IPv4 network, e.g. `198.18.1.0/24`"#,
    doc: r#"the name of the layer-2 network: two ranks talk through nic when their networks are equal. Set it on interfaces without IPv4 addresses."#,
};

pub const NIC_ETHERTYPE: Setting = Setting {
    var: "FM_NIC_ETHERTYPE",
    scope: Scope::Setting,
    default: r#"`0x88b5`"#,
    doc: r#"EtherType of fm's frames (hex with `0x`, or decimal; ≥ 0x0600). Every rank of a job must use the same."#,
};

pub const NIC_MTU: Setting = Setting {
    var: "FM_NIC_MTU",
    scope: Scope::Setting,
    default: r#"the interface's MTU"#,
    doc: r#"largest frame payload, the reliable layer's 64-byte header included. The job uses the smallest of its ranks' values."#,
};

pub const NIC_FRAMES: Setting = Setting {
    var: "FM_NIC_FRAMES",
    scope: Scope::Setting,
    default: r#"1024 RX, 256 TX"#,
    doc: r#"frames in each ring (rounded up to whole ring blocks). Bounds: 1 to 65536."#,
};

/// Every knob of this file, in documentation order.
pub const SETTINGS: &[Setting] = &[NIC_IFACES, NIC_NETWORK, NIC_ETHERTYPE, NIC_MTU, NIC_FRAMES];
