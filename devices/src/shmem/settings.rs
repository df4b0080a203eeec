//! The shmem device's knobs.

use fm_platform::setting::{Scope, Setting};

pub const SHM_DIR: Setting = Setting {
    var: "FM_SHM_DIR",
    scope: Scope::Setting,
    default: r#"`/dev/shm`"#,
    doc: r#"directory of the job's segment, `fm-<job key>-<host>`. The segment's storage is reserved at creation, so a full directory is a clear error before any message, never a SIGBUS. The name is removed as soon as all local ranks have attached, so nothing is left behind even after `kill -9`."#,
};

pub const SHM_QUEUES: Setting = Setting {
    var: "FM_SHM_QUEUES",
    scope: Scope::Setting,
    default: r#"N up to 8 local ranks, else 8"#,
    doc: r#"M, receive queues per process (1 ≤ M ≤ N). M = N: one queue per sender, no atomic read-modify-write on the send path, M polls per receive. M = 1: one poll, senders share the queue with fetch-and-increment."#,
};

pub const SHM_FRAMES: Setting = Setting {
    var: "FM_SHM_FRAMES",
    scope: Scope::Setting,
    default: r#"a receiver's budget (32 MiB ÷ N, within 256 KiB–4 MiB) over its M queues, at least 8, at most the slots"#,
    doc: r#"F, frames per queue (a power of two): a pool the queue's senders share, PM's buffers per channel, so a host's segment grows with its ranks, not their square (64 local ranks: 48 MiB; 256: 128 MiB). Each queue also has slots for its senders' credit windows, 64 bytes per packet; with fewer frames than slots a sender may find the pool empty, and waits (its receiver wakes it). Set larger than the slots, the slots and the credit windows grow to match."#,
};

pub const SHM_PAYLOAD: Setting = Setting {
    var: "FM_SHM_PAYLOAD",
    scope: Scope::Setting,
    default: r#"the pacer's frame size less its 16-byte header (16368 with `FM_PACER=off`), halved (to 4080 at least) until each queue's pool has 8 frames"#,
    doc: r#"bytes per frame; the shmem packet size. Large messages stream through frames while both processes copy; larger frames stream faster here, 4 KiB ones 1.5–4× slower than 16 KiB (docs/PERFORMANCE.md). Setting it turns the pacer off for this knob; every rank of the host must then use the same."#,
};

pub const SHM_INLINE: Setting = Setting {
    var: "FM_SHM_INLINE",
    scope: Scope::Setting,
    default: r#"`1`"#,
    doc: r#"packets of at most 48 bytes travel inside the 64-byte receive-queue slot instead of a frame (one cache line per message each way). `0` turns it off, for comparison."#,
};

pub const SHM_CMA: Setting = Setting {
    var: "FM_SHM_CMA",
    scope: Scope::Setting,
    default: r#"`auto`"#,
    doc: r#"single-copy large messages with `process_vm_readv/writev`: `auto` (probed per peer at open; where ptrace rules forbid it, a warning and the frame path) or `off`."#,
};

pub const SHM_CMA_THRESHOLD: Setting = Setting {
    var: "FM_SHM_CMA_THRESHOLD",
    scope: Scope::Setting,
    default: r#"8388608 (8 MiB)"#,
    doc: r#"pieces (`send_piece` calls) at least this long always go by single copy."#,
};

pub const SHM_CMA_ADAPT: Setting = Setting {
    var: "FM_SHM_CMA_ADAPT",
    scope: Scope::Setting,
    default: r#"65536"#,
    doc: r#"pieces from this long up to `FM_SHM_CMA_THRESHOLD` go through frames or by single copy, whichever this rank has measured faster towards that peer: the frames' copying time against single copy's time to the receiver's "done", per byte, the median of the last three of each; one piece in 64 (in 256 when one way is at least twice as fast) goes the other way to keep both current. Where the two ranks share a cache the frames win (about 2× here); where they sit on different core complexes or sockets the frames are 4–9× slower and single copy is chosen (docs/PERFORMANCE.md, "Far placement"). `off`: frames below the threshold. `FmStats::single_copy_pieces` counts what went by single copy."#,
};

pub const ATTACH_TIMEOUT: Setting = Setting {
    var: "FM_ATTACH_TIMEOUT",
    scope: Scope::Setting,
    default: r#"30"#,
    doc: r#"seconds to wait for the other local ranks to attach to the segment."#,
};

/// Every knob of this file, in documentation order.
pub const SETTINGS: &[Setting] = &[
    SHM_DIR,
    SHM_QUEUES,
    SHM_FRAMES,
    SHM_PAYLOAD,
    SHM_INLINE,
    SHM_CMA,
    SHM_CMA_THRESHOLD,
    SHM_CMA_ADAPT,
    ATTACH_TIMEOUT,
];
