//! The PM device contract (PMv2, thesis chapter 7) and fm's plugin devices.
//!
//! Every device implements [`Device`]: open (the device's own constructor),
//! option bits ([`DeviceInfo`]), a communication context isolated by a
//! [`JobKey`], get-send-buffer / send / receive / release, and — where the
//! option bits say so — remote read/write. Nothing here knows about FM
//! messages; `fm-composite` and `fm` sit on top.
//!
//! Two levels of the same calls are offered:
//! * the safe PM API of [`DeviceExt`]: [`DeviceExt::get_send_buffer`] returns a
//!   [`SendBuffer`] guard that borrows the device mutably (one outstanding send
//!   buffer per context, enforced by the borrow checker), and
//!   [`DeviceExt::receive`] returns a [`RecvBuffer`] guard whose `Drop`
//!   releases the slot;
//! * the raw calls of [`Device`] (`raw_*`), which hand out pointers into device
//!   memory plus a token. Upper layers that must hold a received packet while
//!   they send (an FM handler that replies) use these; the pointers stay valid
//!   until the token is released or sent.

pub mod doorbell;
pub mod error;
pub mod ethernet;
pub mod nic;
pub mod null;
pub mod reliable;
pub mod selfloop;
pub mod shmem;
use fm_platform as sys;

pub use error::DeviceError;

use std::fmt;
use std::ops::{Deref, DerefMut};

/// A process's rank in its job: 0..size.
pub type Rank = u32;

/// The job key that every device checks: program ID (high 32 bits) and
/// instance (low 32 bits), handed out by the resource manager. Packets,
/// segments and contexts of another job carry another key and are refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct JobKey(pub u64);

impl JobKey {
    pub fn new(program_id: u32, instance: u32) -> Self {
        JobKey(((program_id as u64) << 32) | instance as u64)
    }
    pub fn program_id(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn instance(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Capability bits of a device (PMv2's "get option bits").
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Options(pub u32);

impl Options {
    /// `pmWrite`: one-sided write into a peer's memory.
    pub const REMOTE_WRITE: Options = Options(1 << 0);
    /// `pmRead`: one-sided read of a peer's memory.
    pub const REMOTE_READ: Options = Options(1 << 1);
    /// Packets are never lost.
    pub const RELIABLE: Options = Options(1 << 2);
    /// Packets from one source arrive in the order sent.
    pub const ORDERED: Options = Options(1 << 3);
    /// Opening needs privileges (CAP_NET_RAW, …).
    pub const NEEDS_PRIVILEGES: Options = Options(1 << 4);
    /// The device can deliver packets (null cannot; composite skips it when polling).
    pub const RECEIVES: Options = Options(1 << 5);

    pub fn contains(self, o: Options) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for Options {
    type Output = Options;
    fn bitor(self, o: Options) -> Options {
        Options(self.0 | o.0)
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Options::REMOTE_WRITE, "remote-write"),
            (Options::REMOTE_READ, "remote-read"),
            (Options::RELIABLE, "reliable"),
            (Options::ORDERED, "ordered"),
            (Options::NEEDS_PRIVILEGES, "needs-privileges"),
            (Options::RECEIVES, "receives"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(o, _)| self.contains(*o))
            .map(|(_, n)| *n)
            .collect();
        write!(f, "{}", set.join("|"))
    }
}

/// The kinds of device fm has, fastest first: the order in which the
/// composite prefers them when several reach a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKind {
    SelfLoop,
    Shmem,
    Nic,
    Ethernet,
    Null,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 5] = [
        DeviceKind::SelfLoop,
        DeviceKind::Shmem,
        DeviceKind::Nic,
        DeviceKind::Ethernet,
        DeviceKind::Null,
    ];

    /// The name in device tables, `FM_NET` and `FM_ROUTES`.
    pub const fn name(self) -> &'static str {
        match self {
            DeviceKind::SelfLoop => "self",
            DeviceKind::Shmem => "shmem",
            DeviceKind::Nic => "nic",
            DeviceKind::Ethernet => "ethernet",
            DeviceKind::Null => "null",
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<DeviceKind, String> {
        (DeviceKind::ALL.into_iter().find(|k| k.name() == s)).ok_or_else(|| {
            format!("unknown device {s:?} (known: self, shmem, nic, ethernet, null)")
        })
    }
}

/// What a device is and can do.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: &'static str,
    pub options: Options,
    /// Largest packet payload, in bytes.
    pub mtu: usize,
}

/// A send slot handed out by [`Device::raw_send_buffer`]: `cap` writable bytes
/// at `ptr`, valid until passed to `raw_send` or `raw_abort`.
#[derive(Debug)]
pub struct RawSend {
    pub ptr: *mut u8,
    pub cap: usize,
    pub dest: Rank,
    pub token: u64,
}

// SAFETY: the pointer is only read or written through `unsafe` code that
// holds the device it came from; moving the token to another thread (with
// its device, as an endpoint moves) changes nothing about that.
unsafe impl Send for RawSend {}

/// An arrived packet from [`Device::raw_receive`]: `len` bytes at `ptr`, valid
/// until `token` is passed to `raw_release`.
#[derive(Debug, Clone, Copy)]
pub struct RawRecv {
    pub src: Rank,
    pub ptr: *const u8,
    pub len: usize,
    pub token: u64,
}

// SAFETY: as for `RawSend`.
unsafe impl Send for RawRecv {}

/// The PM device contract.
///
/// Back-pressure is never a hang: when no slot is free, `raw_send_buffer`
/// returns [`DeviceError::NoBuffer`]. Packets from one source to one
/// destination are delivered in FIFO order by every device.
pub trait Device {
    /// Name, option bits, MTU.
    fn info(&self) -> DeviceInfo;

    /// Whether this device can carry packets to `dest`.
    fn reaches(&self, dest: Rank) -> bool;

    /// Packets a sender may have outstanding towards `dest` without
    /// overrunning its receive resources (flow-control window), not counting
    /// the control reserve ([`CONTROL_RESERVE`]).
    fn window(&self, dest: Rank) -> u32;

    /// A writable slot of at least `len` bytes (≤ MTU) for `dest`.
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError>;

    /// Hand a filled slot to the device: the first `len` bytes are the packet.
    fn raw_send(&mut self, buf: RawSend, len: usize);

    /// Give back a slot that will not be sent.
    fn raw_abort(&mut self, buf: RawSend);

    /// The next arrived packet, if any.
    fn raw_receive(&mut self) -> Option<RawRecv>;

    /// A packet an earlier poll already took in, without polling again where
    /// a poll costs a system call (the reliable devices); devices whose poll
    /// is a memory read just poll. `extract` uses it after its first packet,
    /// so an empty `recv` is not on the path from one message to the next.
    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        self.raw_receive()
    }

    /// Release a received packet's slot.
    fn raw_release(&mut self, token: u64);

    /// Whether a packet may be waiting, without taking it: the look a
    /// waiter takes after arming its doorbell (`doorbell.rs`), so it must
    /// see every packet published before the publisher's ring. `true`
    /// when unsure (the waiter then polls instead of sleeping).
    fn has_arrivals(&self) -> bool {
        true
    }

    /// A failure that ends every send to `dest` through this device (the
    /// peer is unreachable), asked by a sender that has no credit towards
    /// `dest` and so would not otherwise ask the device: the wait ends
    /// with it instead of lasting for ever.
    fn peer_failure(&self, dest: Rank) -> Option<DeviceError> {
        let _ = dest;
        None
    }

    /// A failure of the device itself that no retry mends (its shared
    /// memory is corrupted): every wait on it should end with it.
    fn failure(&self) -> Option<DeviceError> {
        None
    }

    /// Look for damage no packet shows, such as a queue's control word bent
    /// by a stray write, which would only stall: called by a wait that has
    /// found nothing for a second, and then about once a second. Some:
    /// the device cannot go on (as [`Device::failure`]).
    fn audit(&self) -> Option<DeviceError> {
        self.failure()
    }

    /// The process's doorbell, for devices that must ring it from outside
    /// the application's calls (a background thread).
    fn attach_doorbell(&mut self, bell: &std::sync::Arc<doorbell::Doorbell>) {
        let _ = bell;
    }

    /// `pmRead`: copy `buf.len()` bytes at `remote_addr` in `src`'s address space into `buf`.
    fn remote_read(
        &mut self,
        src: Rank,
        remote_addr: u64,
        buf: &mut [u8],
    ) -> Result<(), DeviceError> {
        let _ = (src, remote_addr, buf);
        Err(DeviceError::Unsupported {
            device: self.info().name,
            op: "remote read",
        })
    }

    /// `pmWrite`: copy `data` to `remote_addr` in `dest`'s address space.
    fn remote_write(
        &mut self,
        dest: Rank,
        remote_addr: u64,
        data: &[u8],
    ) -> Result<(), DeviceError> {
        let _ = (dest, remote_addr, data);
        Err(DeviceError::Unsupported {
            device: self.info().name,
            op: "remote write",
        })
    }

    /// Whether remote read/write to `peer` works right now (probed at open).
    fn remote_memory_to(&self, peer: Rank) -> bool {
        let _ = peer;
        false
    }

    /// Counters of this device.
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}

/// Packets per (sender, receiver) pair that every device keeps aside for
/// control traffic (credit returns, completions), outside the flow-control
/// window. The upper layer guarantees it never has more than this many
/// control packets in flight to one peer, so control packets need no credit
/// and credit returns can never deadlock (the Split-C/AM rule: replies
/// consume no credit).
pub const CONTROL_RESERVE: u32 = 4;

/// Counters every device keeps.
#[derive(Clone, Debug, Default)]
pub struct DeviceStats {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Packets dropped because they could not be valid (bad length, bad
    /// index, bad source, bad checksum).
    pub dropped_malformed: u64,
    /// Well-formed packets refused: another job's, an earlier process's,
    /// meant for another rank, without the job's MAC, from the wrong
    /// address (the reliable layer's counters say which).
    pub dropped_invalid: u64,
    /// `raw_send_buffer` found no free slot.
    pub no_buffer: u64,
}

impl DeviceStats {
    /// Every counter by name.
    pub fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("packets_sent", self.packets_sent),
            ("packets_received", self.packets_received),
            ("bytes_sent", self.bytes_sent),
            ("bytes_received", self.bytes_received),
            ("dropped_malformed", self.dropped_malformed),
            ("dropped_invalid", self.dropped_invalid),
            ("no_buffer", self.no_buffer),
        ]
    }
}

/// The safe PM-level API, for every device.
pub trait DeviceExt: Device + Sized {
    /// PMv2 `pmGetSendBuffer`: a slot of `len` bytes for `dest`, filled in place.
    fn get_send_buffer(
        &mut self,
        dest: Rank,
        len: usize,
    ) -> Result<SendBuffer<'_, Self>, DeviceError> {
        let raw = self.raw_send_buffer(dest, len)?;
        Ok(SendBuffer {
            dev: self,
            raw: Some(raw),
            len,
        })
    }

    /// PMv2 `pmReceive`: the next packet, read in place; dropping the guard releases it.
    fn receive(&mut self) -> Option<RecvBuffer<'_, Self>> {
        let raw = self.raw_receive()?;
        Some(RecvBuffer { dev: self, raw })
    }
}

impl<D: Device> DeviceExt for D {}

/// A slot being filled; [`SendBuffer::send`] hands it to the device, dropping it unsent gives it back.
pub struct SendBuffer<'d, D: Device> {
    dev: &'d mut D,
    raw: Option<RawSend>,
    len: usize,
}

impl<D: Device> SendBuffer<'_, D> {
    /// PMv2 `pmSend`.
    pub fn send(mut self) {
        if let Some(raw) = self.raw.take() {
            self.dev.raw_send(raw, self.len);
        }
    }
    /// Shorten the packet before sending.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl<D: Device> Deref for SendBuffer<'_, D> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let raw = self.raw.as_ref().expect("slot present until sent");
        // SAFETY: the device guarantees `cap >= len` writable bytes until send/abort.
        unsafe { std::slice::from_raw_parts(raw.ptr, self.len) }
    }
}

impl<D: Device> DerefMut for SendBuffer<'_, D> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let raw = self.raw.as_ref().expect("slot present until sent");
        // SAFETY: as above; the &mut borrow of the device makes this the only user.
        unsafe { std::slice::from_raw_parts_mut(raw.ptr, self.len) }
    }
}

impl<D: Device> Drop for SendBuffer<'_, D> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.dev.raw_abort(raw);
        }
    }
}

/// An arrived packet, read in place; `Drop` is PMv2's release.
pub struct RecvBuffer<'d, D: Device> {
    dev: &'d mut D,
    raw: RawRecv,
}

impl<D: Device> RecvBuffer<'_, D> {
    pub fn src(&self) -> Rank {
        self.raw.src
    }
}

impl<D: Device> Deref for RecvBuffer<'_, D> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: valid until release, which happens in our Drop.
        unsafe { std::slice::from_raw_parts(self.raw.ptr, self.raw.len) }
    }
}

impl<D: Device> Drop for RecvBuffer<'_, D> {
    fn drop(&mut self) {
        self.dev.raw_release(self.raw.token);
    }
}
