//! The GRM wire protocol, version 4.
//!
//! Every message is one frame:
//!
//! ```text
//! u32  length of what follows (little-endian), 3 ..= MAX_FRAME
//! u16  protocol version (VERSION)
//! u8   message type
//! ...  body: integers little-endian; strings u16 length + UTF-8 (≤ MAX_STR);
//!      byte strings u32 length; lists u32 count; options a u8 0/1 then the value;
//!      ids, nonces, keys, proofs and signatures their fixed number of bytes
//! ```
//!
//! The GRM speaks first: a `Challenge` on every connection. Jobs are named
//! by an id, registered and joined by a signature of their token (`auth`),
//! never by the token.
//!
//! The length is checked before anything is allocated, every count against
//! the bytes that remain, and a frame with bytes left over is refused: a
//! decoder fed any bytes returns a message or a [`ProtoError`], never panics.

use crate::auth::{JobId, Proof, Signature};
use std::collections::HashMap;
use std::io::{self, Read, Write};

pub const VERSION: u16 = 4;
/// Largest frame the GRM accepts from a client (a Join, a rank's table).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame a client accepts from the GRM: a Welcome's node map of
/// [`MAX_JOB`] ranks, with a few devices each, fits.
pub const MAX_GRM_FRAME: usize = 64 << 20;
/// Largest string field.
pub const MAX_STR: usize = 4096;
/// Largest job the GRM accepts.
pub const MAX_JOB: u32 = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooLong(usize),
    #[error("frame of {0} bytes is too short to hold a version and a type")]
    TooShort(usize),
    #[error("protocol version {0} is not spoken here (this GRM speaks version {VERSION})")]
    Version(u16),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("frame ends inside field {0}")]
    Truncated(&'static str),
    #[error("field {0} is not valid UTF-8")]
    Utf8(&'static str),
    #[error("field {what} is {len} long, over the limit of {limit}")]
    Limit {
        what: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("{0} bytes left over after the message")]
    Trailing(usize),
    #[error("field {0} holds an impossible value")]
    Value(&'static str),
}

/// One device endpoint of a process: the device's name and its address
/// (shmem: the segment directory; a network device: where it listens).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEndpoint {
    pub device: String,
    pub address: Vec<u8>,
}

/// A process asks to join a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// The job (`auth::job_id` of its token).
    pub job: JobId,
    /// The joiner's nonce, which the Welcome's proof answers.
    pub nonce: Proof,
    /// The token's signature over the GRM's challenge and this Join
    /// ([`Join::signed_bytes`]).
    pub proof: Signature,
    /// The rank it wants, or `None` to be given one.
    pub rank: Option<u32>,
    pub host: String,
    pub pid: u32,
    /// FNV-1a of the handler table; `handlers` names the entries.
    pub fingerprint: u64,
    pub handlers: Vec<(u16, String)>,
    pub endpoints: Vec<DeviceEndpoint>,
}

/// A host agent joins its host's processes to a job at once: one
/// signature, one connection and one heartbeat for the host, however many
/// ranks it holds (docs/SCALE.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostJoin {
    pub job: JobId,
    /// The agent's nonce, which the HostWelcome's proof answers.
    pub nonce: Proof,
    /// The token's signature over the GRM's challenge and this HostJoin
    /// ([`HostJoin::signed_bytes`]).
    pub proof: Signature,
    pub host: String,
    /// Where the agent takes a node map relayed from another agent.
    pub relay: String,
    /// The handler table, the same for every process of the host.
    pub fingerprint: u64,
    pub handlers: Vec<(u16, String)>,
    pub members: Vec<HostMember>,
}

/// One process a host agent joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMember {
    /// The rank it wants, or `None` to be given one.
    pub rank: Option<u32>,
    pub pid: u32,
    pub endpoints: Vec<DeviceEndpoint>,
}

/// The GRM's answer to a host agent at the fence. The node map comes with
/// it for the first [`RELAY_FANOUT`] hosts only; every other host's agent
/// gets the same bytes from the agent that lists it in `relay_to`, and
/// takes them once their digest is `map_digest`, which the proof covers
/// ([`relay_children`]). So the GRM writes the map a fixed number of times,
/// whatever the number of hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostWelcome {
    pub job_key: u64,
    pub heartbeat_ms: u32,
    /// The rank of each of the HostJoin's members, in its order.
    pub ranks: Vec<u32>,
    /// The relay addresses of the agents this one passes the map on to.
    pub relay_to: Vec<String>,
    pub map_digest: [u8; 32],
    /// Proof of the job's welcome key over the agent's nonce and the fields
    /// above ([`host_welcome_signed`]).
    pub proof: Proof,
    /// The encoded node map, or empty: it comes from another agent.
    pub map: Vec<u8>,
}

/// How many hosts get the node map from the GRM itself, and how many each
/// agent passes it on to: 1,000 hosts are reached in three hops.
pub const RELAY_FANOUT: usize = 16;

/// The hosts that host `i` of `hosts` passes the node map on to, in a
/// tree of [`RELAY_FANOUT`] roots (hosts `0..RELAY_FANOUT`, which get it
/// from the GRM) where host `i` passes it to hosts
/// `RELAY_FANOUT * (i + 1) ..` the next `RELAY_FANOUT`: every host but the
/// roots has exactly one parent, `i / RELAY_FANOUT - 1`.
pub fn relay_children(i: usize, hosts: usize) -> std::ops::Range<usize> {
    let first = RELAY_FANOUT.saturating_mul(i + 1).min(hosts);
    first..first.saturating_add(RELAY_FANOUT).min(hosts)
}

/// What a HostWelcome's proof covers: its fields but the map, and the
/// map's digest.
pub fn host_welcome_signed(w: &HostWelcome) -> Vec<u8> {
    let mut b = Writer(Vec::with_capacity(64 + 4 * w.ranks.len()));
    b.u64(w.job_key);
    b.u32(w.heartbeat_ms);
    b.u32(w.ranks.len() as u32);
    w.ranks.iter().for_each(|r| b.u32(*r));
    b.u32(w.relay_to.len() as u32);
    w.relay_to.iter().for_each(|a| b.str(a));
    b.fixed(&w.map_digest);
    b.0
}

/// A HostWelcome frame up to the node map, whose `map_len` bytes (shared
/// by every frame that carries the map) complete it; `w.map` is ignored.
pub fn host_welcome_head(w: &HostWelcome, map_len: usize) -> Vec<u8> {
    let mut b = Writer(Vec::with_capacity(96 + 4 * w.ranks.len()));
    b.u32(0);
    b.u16(VERSION);
    b.u8(HOST_WELCOME);
    b.u64(w.job_key);
    b.u32(w.heartbeat_ms);
    b.u32(w.ranks.len() as u32);
    w.ranks.iter().for_each(|r| b.u32(*r));
    b.u32(w.relay_to.len() as u32);
    w.relay_to.iter().for_each(|a| b.str(a));
    b.fixed(&w.map_digest);
    b.fixed(&w.proof);
    b.u32(map_len as u32);
    let len = (b.0.len() - 4 + map_len) as u32;
    b.0[..4].copy_from_slice(&len.to_le_bytes());
    b.0
}

const HOST_WELCOME: u8 = 20;

/// One process in the node map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    /// Context number per device on this host (0, 1, … in rank order).
    /// Not sent: it follows from the hosts and endpoints of the ranks
    /// before (see [`encode_node_map`]).
    pub contexts: Vec<(String, u32)>,
    pub endpoints: Vec<DeviceEndpoint>,
}

/// The GRM's answer once every process of the job joined (the fence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub job_key: u64,
    pub rank: u32,
    /// The GRM's heartbeat timeout (see `Msg::Registered`).
    pub heartbeat_ms: u32,
    /// Every process of the job, by rank.
    pub nodes: Vec<Node>,
    /// Proof of the job's verifier over the joiner's nonce and this
    /// Welcome ([`Welcome::signed_bytes`]).
    pub proof: Proof,
}

/// What a Welcome's proof covers: its own fields and the digest of its
/// node map's encoding ([`map_digest`]), so the GRM hashes the map once for
/// all the job's processes, not once per process.
pub fn welcome_signed(
    job_key: u64,
    rank: u32,
    heartbeat_ms: u32,
    map_digest: &[u8; 32],
) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(52));
    w.u64(job_key);
    w.u32(rank);
    w.u32(heartbeat_ms);
    w.fixed(map_digest);
    w.0
}

/// The digest of an encoded node map that a Welcome's proof covers.
pub fn map_digest(map: &[u8]) -> [u8; 32] {
    *blake3::hash(map).as_bytes()
}

/// A Welcome frame up to its node map, whose encoding ([`encode_node_map`],
/// `map_len` bytes) completes it: the GRM encodes the map once and sends
/// the same bytes after each process's own head.
pub fn welcome_head(
    job_key: u64,
    rank: u32,
    heartbeat_ms: u32,
    proof: &Proof,
    map_len: usize,
) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(WELCOME_HEAD));
    w.u32((WELCOME_HEAD - 4 + map_len) as u32);
    w.u16(VERSION);
    w.u8(4);
    w.u64(job_key);
    w.u32(rank);
    w.u32(heartbeat_ms);
    w.fixed(proof);
    w.0
}

/// Bytes of a Welcome before its node map.
const WELCOME_HEAD: usize = 4 + 2 + 1 + 8 + 4 + 4 + 32;

/// A Welcome's own fields, before its node map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WelcomeHead {
    pub job_key: u64,
    pub rank: u32,
    pub heartbeat_ms: u32,
    pub proof: Proof,
}

/// The head of a Welcome frame ([`welcome_head`]'s bytes, length prefix
/// included), without decoding the node map that follows it.
pub fn decode_welcome_head(frame: &[u8]) -> Result<WelcomeHead, ProtoError> {
    let mut r = Reader(frame.get(4..).ok_or(ProtoError::Truncated("length"))?);
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(ProtoError::Version(version));
    }
    match r.u8("type")? {
        4 => r.welcome_head(),
        t => Err(ProtoError::UnknownType(t)),
    }
}

/// The node map on the wire: each host name, device name and endpoint
/// address once, then per rank (in rank order) its host, pid and
/// endpoints as indices into those tables:
///
/// ```text
/// u32 hosts,     each a string
/// u32 devices,   each a string
/// u32 addresses, each a byte string
/// u32 ranks,     each: u32 host, u32 pid, u8 endpoints, each u16 device + u32 address
/// ```
///
/// About 25 bytes per rank with one network endpoint (its address is its
/// own) where it was ~80; a host's shared-memory folder is sent once.
/// Context numbers are not sent: the decoder counts them per host and
/// device in rank order, as the GRM does.
pub fn encode_node_map(nodes: &[Node]) -> Vec<u8> {
    fn intern<'a, T: ?Sized + std::hash::Hash + Eq>(
        table: &mut Vec<&'a T>,
        index: &mut HashMap<&'a T, u32>,
        v: &'a T,
    ) -> u32 {
        *index.entry(v).or_insert_with(|| {
            table.push(v);
            table.len() as u32 - 1
        })
    }
    let (mut hosts, mut host_ix) = (Vec::new(), HashMap::new());
    let (mut devices, mut device_ix) = (Vec::new(), HashMap::new());
    let (mut addrs, mut addr_ix) = (Vec::new(), HashMap::new());
    let mut ranks = Writer(Vec::with_capacity(nodes.len() * 16));
    for n in nodes {
        ranks.u32(intern(&mut hosts, &mut host_ix, n.host.as_str()));
        ranks.u32(n.pid);
        ranks.u8(n.endpoints.len().min(u8::MAX as usize) as u8);
        for e in n.endpoints.iter().take(u8::MAX as usize) {
            ranks.u16(intern(&mut devices, &mut device_ix, e.device.as_str()) as u16);
            ranks.u32(intern(&mut addrs, &mut addr_ix, e.address.as_slice()));
        }
    }
    let mut w = Writer(Vec::with_capacity(ranks.0.len() + 64));
    w.u32(hosts.len() as u32);
    hosts.iter().for_each(|h| w.str(h));
    w.u32(devices.len() as u32);
    devices.iter().for_each(|d| w.str(d));
    w.u32(addrs.len() as u32);
    addrs.iter().for_each(|a| w.bytes(a));
    w.u32(nodes.len() as u32);
    w.fixed(&ranks.0);
    w.0
}

impl Join {
    /// What the signature covers: the whole message with the signature zero.
    pub fn signed_bytes(&self) -> Vec<u8> {
        Msg::Join(Join {
            proof: [0; 64],
            ..self.clone()
        })
        .encode()
    }
}

impl HostJoin {
    /// What the signature covers: the whole message with the signature zero.
    pub fn signed_bytes(&self) -> Vec<u8> {
        Msg::HostJoin(HostJoin {
            proof: [0; 64],
            ..self.clone()
        })
        .encode()
    }
}

/// What a Register's signature covers: the whole message with the
/// signature zero.
pub fn register_signed_bytes(
    job: &JobId,
    verifier: &Proof,
    welcome_key: &Proof,
    size: u32,
    program: &str,
) -> Vec<u8> {
    Msg::Register {
        job: *job,
        verifier: *verifier,
        welcome_key: *welcome_key,
        size,
        program: program.to_string(),
        proof: [0; 64],
    }
    .encode()
}

impl Welcome {
    /// What the proof covers ([`welcome_signed`]).
    pub fn signed_bytes(&self) -> Vec<u8> {
        welcome_signed(
            self.job_key,
            self.rank,
            self.heartbeat_ms,
            &map_digest(&encode_node_map(&self.nodes)),
        )
    }
}

/// What the GRM knows, for `fm-info` and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrmStatus {
    pub jobs: u32,
    pub members: u32,
    pub connections: u32,
    pub rejected_frames: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Launcher → GRM: create a job of `size` processes; the connection then
    /// carries the job's events to the launcher.
    Register {
        job: JobId,
        /// The public key the job's Joins are checked with
        /// (`auth::verifier` of the token).
        verifier: Proof,
        /// The key of the Welcomes' proofs (`auth::welcome_key`).
        welcome_key: Proof,
        size: u32,
        program: String,
        /// The token's signature over the GRM's challenge and this
        /// Register ([`register_signed_bytes`]).
        proof: Signature,
    },
    /// GRM → launcher.
    Registered {
        job_key: u64,
        /// The GRM's heartbeat timeout: it says something at least every
        /// second, and a launcher that hears nothing for this long has lost it.
        heartbeat_ms: u32,
    },
    /// Process → GRM.
    Join(Join),
    /// GRM → process, after the fence.
    Welcome(Welcome),
    /// Process → GRM: devices open; its destination device table as text.
    Ready {
        table: String,
    },
    /// GRM → launcher: a process is ready.
    RankReady {
        rank: u32,
        /// Its own pid (on its host), which a launcher that started it
        /// through a remote shell does not know.
        pid: u32,
        table: String,
    },
    /// Either way: still alive.
    Heartbeat,
    /// Process → GRM: finished cleanly; the end of its connection is not a death.
    Leave,
    /// GRM → launcher while the job starts.
    Progress {
        joined: u32,
        size: u32,
    },
    /// GRM → processes and launcher: a process of the job died; the job ends.
    PeerDied {
        rank: u32,
        host: String,
        pid: u32,
        reason: String,
    },
    /// GRM → processes and launcher: the job is over.
    JobEnded {
        reason: String,
    },
    /// GRM → anyone: request refused; the connection closes.
    Refused {
        reason: String,
    },
    /// Process → GRM: it cannot go on (its devices failed to open, it
    /// panicked); the job ends with this reason.
    Abort {
        reason: String,
    },
    /// Anyone → GRM.
    Status,
    StatusReply(GrmStatus),
    /// GRM → anyone, first on every connection: the nonce a Join's proof covers.
    Challenge {
        nonce: Proof,
    },
    /// Process → GRM, before it leaves: its counters, as a JSON object.
    Stats {
        json: String,
    },
    /// GRM → launcher: a process's counters.
    RankStats {
        rank: u32,
        json: String,
    },
    /// Host agent → GRM, first on its connection.
    HostJoin(HostJoin),
    /// GRM → host agent, after the fence.
    HostWelcome(HostWelcome),
    /// Host agent → host agent: the node map, passed on as the sender's
    /// HostWelcome says; the receiver takes it if its digest is its own
    /// HostWelcome's `map_digest`.
    NodeMap {
        map: Vec<u8>,
    },
    /// Host agent → GRM: what one of its ranks says (`Ready`, `Stats`,
    /// `Leave` or `Abort`; an agent reports a rank's death as its Abort).
    ForRank {
        rank: u32,
        msg: Box<Msg>,
    },
}

impl Msg {
    fn type_code(&self) -> u8 {
        match self {
            Msg::Register { .. } => 1,
            Msg::Registered { .. } => 2,
            Msg::Join(_) => 3,
            Msg::Welcome(_) => 4,
            Msg::Ready { .. } => 5,
            Msg::RankReady { .. } => 6,
            Msg::Heartbeat => 7,
            Msg::Leave => 8,
            Msg::Progress { .. } => 9,
            Msg::PeerDied { .. } => 10,
            Msg::JobEnded { .. } => 11,
            Msg::Refused { .. } => 12,
            Msg::Status => 13,
            Msg::StatusReply(_) => 14,
            Msg::Abort { .. } => 15,
            Msg::Challenge { .. } => 16,
            Msg::Stats { .. } => 17,
            Msg::RankStats { .. } => 18,
            Msg::HostJoin(_) => 19,
            Msg::HostWelcome(_) => HOST_WELCOME,
            Msg::ForRank { .. } => 21,
            Msg::NodeMap { .. } => 22,
        }
    }

    /// The name of the message type, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Register { .. } => "Register",
            Msg::Registered { .. } => "Registered",
            Msg::Join(_) => "Join",
            Msg::Welcome(_) => "Welcome",
            Msg::Ready { .. } => "Ready",
            Msg::RankReady { .. } => "RankReady",
            Msg::Heartbeat => "Heartbeat",
            Msg::Leave => "Leave",
            Msg::Progress { .. } => "Progress",
            Msg::PeerDied { .. } => "PeerDied",
            Msg::JobEnded { .. } => "JobEnded",
            Msg::Refused { .. } => "Refused",
            Msg::Status => "Status",
            Msg::StatusReply(_) => "StatusReply",
            Msg::Abort { .. } => "Abort",
            Msg::Challenge { .. } => "Challenge",
            Msg::Stats { .. } => "Stats",
            Msg::RankStats { .. } => "RankStats",
            Msg::HostJoin(_) => "HostJoin",
            Msg::HostWelcome(_) => "HostWelcome",
            Msg::ForRank { .. } => "ForRank",
            Msg::NodeMap { .. } => "NodeMap",
        }
    }

    /// The whole frame, length prefix included.
    // Long for the reason `decode` is: the wire format written out, one
    // arm per message kind, in the layout's order.
    #[allow(clippy::too_many_lines)]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(64));
        w.u32(0);
        w.u16(VERSION);
        w.u8(self.type_code());
        match self {
            Msg::Register {
                job,
                verifier,
                welcome_key,
                size,
                program,
                proof,
            } => {
                w.fixed(job);
                w.fixed(verifier);
                w.fixed(welcome_key);
                w.u32(*size);
                w.str(program);
                w.fixed(proof);
            }
            Msg::Registered {
                job_key,
                heartbeat_ms,
            } => {
                w.u64(*job_key);
                w.u32(*heartbeat_ms);
            }
            Msg::Join(j) => {
                w.fixed(&j.job);
                w.fixed(&j.nonce);
                w.fixed(&j.proof);
                w.opt_u32(j.rank);
                w.str(&j.host);
                w.u32(j.pid);
                w.u64(j.fingerprint);
                w.handlers(&j.handlers);
                w.endpoints(&j.endpoints);
            }
            Msg::Welcome(wl) => {
                w.u64(wl.job_key);
                w.u32(wl.rank);
                w.u32(wl.heartbeat_ms);
                w.fixed(&wl.proof);
                w.fixed(&encode_node_map(&wl.nodes));
            }
            Msg::Ready { table } => w.long_str(table),
            Msg::RankReady { rank, pid, table } => {
                w.u32(*rank);
                w.u32(*pid);
                w.long_str(table);
            }
            Msg::Heartbeat | Msg::Leave | Msg::Status => {}
            Msg::Progress { joined, size } => {
                w.u32(*joined);
                w.u32(*size);
            }
            Msg::PeerDied {
                rank,
                host,
                pid,
                reason,
            } => {
                w.u32(*rank);
                w.str(host);
                w.u32(*pid);
                w.str(reason);
            }
            Msg::JobEnded { reason } | Msg::Refused { reason } | Msg::Abort { reason } => {
                w.str(reason)
            }
            Msg::Challenge { nonce } => w.fixed(nonce),
            Msg::Stats { json } => w.long_str(json),
            Msg::RankStats { rank, json } => {
                w.u32(*rank);
                w.long_str(json);
            }
            Msg::HostJoin(j) => {
                w.fixed(&j.job);
                w.fixed(&j.nonce);
                w.fixed(&j.proof);
                w.str(&j.host);
                w.str(&j.relay);
                w.u64(j.fingerprint);
                w.handlers(&j.handlers);
                w.u32(j.members.len() as u32);
                for m in &j.members {
                    w.opt_u32(m.rank);
                    w.u32(m.pid);
                    w.endpoints(&m.endpoints);
                }
            }
            Msg::HostWelcome(hw) => {
                // The head's own prefix and type are this frame's.
                w.fixed(&host_welcome_head(hw, hw.map.len())[7..]);
                w.fixed(&hw.map);
            }
            Msg::ForRank { rank, msg } => {
                w.u32(*rank);
                w.bytes(&msg.encode()[4..]);
            }
            Msg::NodeMap { map } => w.bytes(map),
            Msg::StatusReply(s) => {
                w.u32(s.jobs);
                w.u32(s.members);
                w.u32(s.connections);
                w.u64(s.rejected_frames);
            }
        }
        let len = (w.0.len() - 4) as u32;
        w.0[..4].copy_from_slice(&len.to_le_bytes());
        w.0
    }

    /// Decode one frame's contents (what follows the length prefix).
    // Long because it is the wire format read aloud: one arm per message
    // kind, each field checked where it is read; split, the checks would
    // drift from the layout they guard.
    #[allow(clippy::too_many_lines)]
    pub fn decode(frame: &[u8]) -> Result<Msg, ProtoError> {
        // The reader chose the limit ([`read_frame`]); this is the largest.
        if frame.len() > MAX_GRM_FRAME {
            return Err(ProtoError::TooLong(frame.len()));
        }
        if frame.len() < 3 {
            return Err(ProtoError::TooShort(frame.len()));
        }
        let mut r = Reader(frame);
        let version = r.u16("version")?;
        if version != VERSION {
            return Err(ProtoError::Version(version));
        }
        let msg = match r.u8("type")? {
            1 => Msg::Register {
                job: r.fixed("job")?,
                verifier: r.fixed("verifier")?,
                welcome_key: r.fixed("welcome_key")?,
                size: r.u32("size")?,
                program: r.str("program")?,
                proof: r.fixed("proof")?,
            },
            2 => Msg::Registered {
                job_key: r.u64("job_key")?,
                heartbeat_ms: r.u32("heartbeat_ms")?,
            },
            3 => {
                let job = r.fixed("job")?;
                let nonce = r.fixed("nonce")?;
                let proof = r.fixed("proof")?;
                let rank = r.opt_u32("rank")?;
                let host = r.str("host")?;
                let pid = r.u32("pid")?;
                let fingerprint = r.u64("fingerprint")?;
                let handlers = r.handlers()?;
                let endpoints = r.endpoints()?;
                Msg::Join(Join {
                    job,
                    nonce,
                    proof,
                    rank,
                    host,
                    pid,
                    fingerprint,
                    handlers,
                    endpoints,
                })
            }
            4 => {
                let h = r.welcome_head()?;
                Msg::Welcome(Welcome {
                    job_key: h.job_key,
                    rank: h.rank,
                    heartbeat_ms: h.heartbeat_ms,
                    proof: h.proof,
                    nodes: r.node_map()?,
                })
            }
            5 => Msg::Ready {
                table: r.long_str("table")?,
            },
            6 => Msg::RankReady {
                rank: r.u32("rank")?,
                pid: r.u32("pid")?,
                table: r.long_str("table")?,
            },
            7 => Msg::Heartbeat,
            8 => Msg::Leave,
            9 => Msg::Progress {
                joined: r.u32("joined")?,
                size: r.u32("size")?,
            },
            10 => Msg::PeerDied {
                rank: r.u32("rank")?,
                host: r.str("host")?,
                pid: r.u32("pid")?,
                reason: r.str("reason")?,
            },
            11 => Msg::JobEnded {
                reason: r.str("reason")?,
            },
            12 => Msg::Refused {
                reason: r.str("reason")?,
            },
            13 => Msg::Status,
            14 => Msg::StatusReply(GrmStatus {
                jobs: r.u32("jobs")?,
                members: r.u32("members")?,
                connections: r.u32("connections")?,
                rejected_frames: r.u64("rejected_frames")?,
            }),
            15 => Msg::Abort {
                reason: r.str("reason")?,
            },
            16 => Msg::Challenge {
                nonce: r.fixed("nonce")?,
            },
            17 => Msg::Stats {
                json: r.long_str("json")?,
            },
            18 => Msg::RankStats {
                rank: r.u32("rank")?,
                json: r.long_str("json")?,
            },
            19 => {
                let job = r.fixed("job")?;
                let nonce = r.fixed("nonce")?;
                let proof = r.fixed("proof")?;
                let host = r.str("host")?;
                let relay = r.str("relay")?;
                let fingerprint = r.u64("fingerprint")?;
                let handlers = r.handlers()?;
                let n = r.count("members", 9)?;
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    members.push(HostMember {
                        rank: r.opt_u32("member rank")?,
                        pid: r.u32("member pid")?,
                        endpoints: r.endpoints()?,
                    });
                }
                Msg::HostJoin(HostJoin {
                    job,
                    nonce,
                    proof,
                    host,
                    relay,
                    fingerprint,
                    handlers,
                    members,
                })
            }
            HOST_WELCOME => {
                let job_key = r.u64("job_key")?;
                let heartbeat_ms = r.u32("heartbeat_ms")?;
                let n = r.count("ranks", 4)?;
                let ranks = (0..n).map(|_| r.u32("rank")).collect::<Result<_, _>>()?;
                let n = r.count("relay_to", 2)?;
                let relay_to = (0..n)
                    .map(|_| r.str("relay address"))
                    .collect::<Result<_, _>>()?;
                Msg::HostWelcome(HostWelcome {
                    job_key,
                    heartbeat_ms,
                    ranks,
                    relay_to,
                    map_digest: r.fixed("map_digest")?,
                    proof: r.fixed("proof")?,
                    map: r.bytes("map")?,
                })
            }
            22 => Msg::NodeMap {
                map: r.bytes("map")?,
            },
            21 => {
                let rank = r.u32("rank")?;
                let inner = r.take_bytes("rank's message")?;
                // Looked at before it is decoded: a rank's message nested
                // a million deep must not recurse a million deep.
                if inner.get(2) == Some(&21) {
                    return Err(ProtoError::Value("rank's message"));
                }
                let inner = Msg::decode(inner)?;
                if !matches!(
                    inner,
                    Msg::Ready { .. } | Msg::Stats { .. } | Msg::Leave | Msg::Abort { .. }
                ) {
                    return Err(ProtoError::Value("rank's message"));
                }
                Msg::ForRank {
                    rank,
                    msg: Box::new(inner),
                }
            }
            t => return Err(ProtoError::UnknownType(t)),
        };
        if !r.0.is_empty() {
            return Err(ProtoError::Trailing(r.0.len()));
        }
        Ok(msg)
    }
}

/// The length a frame's 4-byte prefix claims, checked against `limit`
/// before anything is allocated for it.
pub fn frame_len(prefix: [u8; 4], limit: usize) -> Result<usize, ProtoError> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len > limit {
        return Err(ProtoError::TooLong(len));
    }
    if len < 3 {
        return Err(ProtoError::TooShort(len));
    }
    Ok(len)
}

/// Read one frame's contents, of at most `limit` bytes: the length is
/// checked before the body is read.
pub fn read_frame(r: &mut impl Read, limit: usize) -> Result<Vec<u8>, ProtoError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let mut body = vec![0u8; frame_len(len, limit)?];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Read and decode one message sent to the GRM ([`MAX_FRAME`]).
pub fn read_msg(r: &mut impl Read) -> Result<Msg, ProtoError> {
    Msg::decode(&read_frame(r, MAX_FRAME)?)
}

/// Read and decode one message sent by the GRM ([`MAX_GRM_FRAME`]).
pub fn read_grm_msg(r: &mut impl Read) -> Result<Msg, ProtoError> {
    Msg::decode(&read_frame(r, MAX_GRM_FRAME)?)
}

/// Encode and write one message.
pub fn write_msg(w: &mut impl Write, m: &Msg) -> io::Result<()> {
    w.write_all(&m.encode())?;
    w.flush()
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Strings longer than the limit are cut (at a character boundary).
    fn str(&mut self, s: &str) {
        let mut end = s.len().min(MAX_STR);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
    }
    fn fixed(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn long_str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u32(v);
            }
        }
    }
    fn handlers(&mut self, h: &[(u16, String)]) {
        self.u32(h.len() as u32);
        for (id, name) in h {
            self.u16(*id);
            self.str(name);
        }
    }
    fn endpoints(&mut self, e: &[DeviceEndpoint]) {
        self.u32(e.len() as u32);
        for d in e {
            self.str(&d.device);
            self.bytes(&d.address);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], ProtoError> {
        if self.0.len() < n {
            return Err(ProtoError::Truncated(what));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(self.u32(what)? as u64 | (self.u32(what)? as u64) << 32)
    }
    fn str(&mut self, what: &'static str) -> Result<String, ProtoError> {
        let n = self.u16(what)? as usize;
        if n > MAX_STR {
            return Err(ProtoError::Limit {
                what,
                len: n,
                limit: MAX_STR,
            });
        }
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Utf8(what))
    }
    fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, ProtoError> {
        Ok(self.take_bytes(what)?.to_vec())
    }
    /// A byte string, borrowed.
    fn take_bytes(&mut self, what: &'static str) -> Result<&[u8], ProtoError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    fn handlers(&mut self) -> Result<Vec<(u16, String)>, ProtoError> {
        let n = self.count("handlers", 3)?;
        let mut handlers = Vec::with_capacity(n);
        for _ in 0..n {
            handlers.push((self.u16("handler id")?, self.str("handler name")?));
        }
        Ok(handlers)
    }
    fn long_str(&mut self, what: &'static str) -> Result<String, ProtoError> {
        String::from_utf8(self.bytes(what)?).map_err(|_| ProtoError::Utf8(what))
    }
    fn opt_u32(&mut self, what: &'static str) -> Result<Option<u32>, ProtoError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.u32(what)?)),
            _ => Err(ProtoError::Value(what)),
        }
    }
    /// A list count, checked against the bytes left (each entry takes at
    /// least `min_entry` bytes), so a forged count cannot make us allocate.
    fn count(&mut self, what: &'static str, min_entry: usize) -> Result<usize, ProtoError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_entry) > self.0.len() {
            return Err(ProtoError::Truncated(what));
        }
        Ok(n)
    }
    fn welcome_head(&mut self) -> Result<WelcomeHead, ProtoError> {
        Ok(WelcomeHead {
            job_key: self.u64("job_key")?,
            rank: self.u32("rank")?,
            heartbeat_ms: self.u32("heartbeat_ms")?,
            proof: self.fixed("proof")?,
        })
    }

    /// A node map as [`encode_node_map`] writes it; every index checked.
    fn node_map(&mut self) -> Result<Vec<Node>, ProtoError> {
        let n = self.count("hosts", 2)?;
        let hosts = (0..n)
            .map(|_| self.str("host"))
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.count("devices", 2)?;
        let devices = (0..n)
            .map(|_| self.str("device"))
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.count("addresses", 4)?;
        let addrs = (0..n)
            .map(|_| self.bytes("address"))
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.count("nodes", 9)?;
        if n > MAX_JOB as usize {
            return Err(ProtoError::Value("nodes"));
        }
        let mut contexts: HashMap<(u32, u16), u32> = HashMap::new();
        let mut nodes = Vec::with_capacity(n);
        for rank in 0..n as u32 {
            let host = self.u32("node host")?;
            let name = hosts
                .get(host as usize)
                .ok_or(ProtoError::Value("node host"))?;
            let pid = self.u32("node pid")?;
            let ne = self.u8("endpoints")?;
            let mut node = Node {
                rank,
                host: name.clone(),
                pid,
                contexts: Vec::with_capacity(ne.into()),
                endpoints: Vec::with_capacity(ne.into()),
            };
            for _ in 0..ne {
                let d = self.u16("endpoint device")?;
                let device = devices
                    .get(d as usize)
                    .ok_or(ProtoError::Value("endpoint device"))?;
                let a = self.u32("endpoint address")?;
                let address = addrs
                    .get(a as usize)
                    .ok_or(ProtoError::Value("endpoint address"))?;
                let c = contexts.entry((host, d)).or_insert(0);
                node.contexts.push((device.clone(), *c));
                *c += 1;
                node.endpoints.push(DeviceEndpoint {
                    device: device.clone(),
                    address: address.clone(),
                });
            }
            nodes.push(node);
        }
        Ok(nodes)
    }

    fn endpoints(&mut self) -> Result<Vec<DeviceEndpoint>, ProtoError> {
        let n = self.count("endpoints", 6)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(DeviceEndpoint {
                device: self.str("endpoint device")?,
                address: self.bytes("endpoint address")?,
            });
        }
        Ok(v)
    }
}

/// One message of every type, with fields at their edges: for tests and
/// the fuzzer's seed corpus.
#[doc(hidden)]
pub fn examples() -> Vec<Msg> {
    vec![
        Msg::Register {
            job: [1; 16],
            verifier: [2; 32],
            welcome_key: [8; 32],
            size: 4,
            program: "ring".into(),
            proof: [9; 64],
        },
        Msg::Registered {
            job_key: u64::MAX,
            heartbeat_ms: 10_000,
        },
        Msg::Join(Join {
            job: [3; 16],
            nonce: [4; 32],
            proof: [5; 64],
            rank: Some(3),
            host: "h".into(),
            pid: 42,
            fingerprint: 7,
            handlers: vec![(1, "ping".into()), (2, "pong".into())],
            endpoints: vec![DeviceEndpoint {
                device: "shmem".into(),
                address: b"/dev/shm".to_vec(),
            }],
        }),
        example_welcome(),
        Msg::Ready {
            table: "x\n".repeat(5000),
        },
        Msg::RankReady {
            rank: 2,
            pid: 77,
            table: "t".into(),
        },
        Msg::Heartbeat,
        Msg::Leave,
        Msg::Progress { joined: 1, size: 2 },
        Msg::PeerDied {
            rank: 1,
            host: "h".into(),
            pid: 5,
            reason: "gone".into(),
        },
        Msg::JobEnded { reason: "r".into() },
        Msg::Refused {
            reason: "no".into(),
        },
        Msg::Abort {
            reason: "panicked".into(),
        },
        Msg::Status,
        Msg::Challenge { nonce: [7; 32] },
        Msg::Stats {
            json: "{\"fm\":{}}".into(),
        },
        Msg::RankStats {
            rank: 3,
            json: "{}".into(),
        },
        Msg::StatusReply(GrmStatus {
            jobs: 1,
            members: 2,
            connections: 3,
            rejected_frames: 4,
        }),
    ]
    .into_iter()
    .chain(host_examples())
    .collect()
}

/// The host agents' messages, for [`examples`].
fn host_examples() -> Vec<Msg> {
    vec![
        Msg::HostJoin(HostJoin {
            job: [3; 16],
            nonce: [4; 32],
            proof: [5; 64],
            host: "h".into(),
            relay: "198.18.0.1:7000".into(),
            fingerprint: 7,
            handlers: vec![(1, "ping".into())],
            members: vec![
                HostMember {
                    rank: Some(0),
                    pid: 42,
                    endpoints: vec![DeviceEndpoint {
                        device: "shmem".into(),
                        address: b"/dev/shm".to_vec(),
                    }],
                },
                HostMember {
                    rank: None,
                    pid: 43,
                    endpoints: vec![],
                },
            ],
        }),
        Msg::HostWelcome(HostWelcome {
            job_key: 9,
            heartbeat_ms: 2500,
            ranks: vec![0, 5],
            relay_to: vec!["198.18.0.2:7000".into(), "g:1".into()],
            map_digest: [3; 32],
            proof: [6; 32],
            map: vec![0; 16],
        }),
        Msg::ForRank {
            rank: 5,
            msg: Box::new(Msg::Ready { table: "t".into() }),
        },
        Msg::ForRank {
            rank: 0,
            msg: Box::new(Msg::Leave),
        },
        Msg::NodeMap { map: vec![1; 40] },
    ]
}

/// A Welcome of three ranks on two hosts, two sharing a folder.
fn example_welcome() -> Msg {
    Msg::Welcome(Welcome {
        job_key: 9,
        rank: 1,
        heartbeat_ms: 2500,
        nodes: vec![
            Node {
                rank: 0,
                host: "h".into(),
                pid: 1,
                contexts: vec![("shmem".into(), 0), ("ethernet".into(), 0)],
                endpoints: vec![
                    DeviceEndpoint {
                        device: "shmem".into(),
                        address: b"/dev/shm".to_vec(),
                    },
                    DeviceEndpoint {
                        device: "ethernet".into(),
                        address: vec![198, 18, 0, 1, 0xc3, 0x50],
                    },
                ],
            },
            Node {
                rank: 1,
                host: "h".into(),
                pid: 2,
                contexts: vec![("shmem".into(), 1)],
                endpoints: vec![DeviceEndpoint {
                    device: "shmem".into(),
                    address: b"/dev/shm".to_vec(),
                }],
            },
            Node {
                rank: 2,
                host: "g".into(),
                pid: 1,
                contexts: vec![],
                endpoints: vec![],
            },
        ],
        proof: [6; 32],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        for m in examples() {
            let f = m.encode();
            let got = read_msg(&mut &f[..]).unwrap();
            assert_eq!(got, m);
        }
    }

    #[test]
    fn a_welcome_head_reads_back_alone_and_as_part_of_the_frame() {
        let Msg::Welcome(w) = example_welcome() else {
            panic!("not a Welcome");
        };
        let map = encode_node_map(&w.nodes);
        let mut frame = welcome_head(w.job_key, w.rank, w.heartbeat_ms, &w.proof, map.len());
        let h = decode_welcome_head(&frame).expect("the head");
        assert_eq!(
            (h.job_key, h.rank, h.heartbeat_ms, h.proof),
            (w.job_key, w.rank, w.heartbeat_ms, w.proof)
        );
        frame.extend_from_slice(&map);
        assert_eq!(frame, Msg::Welcome(w).encode());
        assert!(decode_welcome_head(&Msg::Heartbeat.encode()).is_err());
    }

    #[test]
    fn a_host_welcome_head_and_its_map_are_the_whole_frame() {
        let Some(Msg::HostWelcome(w)) = examples()
            .into_iter()
            .find(|m| matches!(m, Msg::HostWelcome(_)))
        else {
            panic!("no HostWelcome example");
        };
        let mut frame = host_welcome_head(&w, w.map.len());
        frame.extend_from_slice(&w.map);
        assert_eq!(frame, Msg::HostWelcome(w).encode());
    }

    #[test]
    fn a_rank_message_holds_only_what_a_rank_says() {
        let nested = Msg::ForRank {
            rank: 1,
            msg: Box::new(Msg::ForRank {
                rank: 2,
                msg: Box::new(Msg::Leave),
            }),
        };
        let not_a_rank = Msg::ForRank {
            rank: 1,
            msg: Box::new(Msg::Status),
        };
        // 90,000 deep (a 1 MiB frame), written outside in as bytes: the
        // message itself would recurse to be encoded. Each level is 11
        // bytes before the one it holds.
        let leave = Msg::Leave.encode()[4..].to_vec();
        let levels = 90_000;
        let mut deep = Vec::with_capacity(11 * levels + leave.len());
        for inside in (0..levels).rev() {
            deep.extend_from_slice(&VERSION.to_le_bytes());
            deep.push(21);
            deep.extend_from_slice(&0u32.to_le_bytes());
            deep.extend_from_slice(&((11 * inside + leave.len()) as u32).to_le_bytes());
        }
        deep.extend_from_slice(&leave);
        assert!(Msg::decode(&deep).is_err());
        for m in [nested, not_a_rank] {
            assert!(matches!(
                Msg::decode(&m.encode()[4..]),
                Err(ProtoError::Value("rank's message"))
            ));
        }
    }

    /// Every host gets the map once: from the GRM (the roots) or from
    /// exactly one other host, whose own index is smaller (so the relays
    /// form a tree, not a cycle), in few hops.
    #[test]
    fn the_relay_tree_reaches_every_host_once() {
        for hosts in (0..300).chain([1000, 4096, 65_536]) {
            let mut parent = vec![None; hosts];
            for i in 0..hosts {
                for c in relay_children(i, hosts) {
                    assert!(c > i && c >= RELAY_FANOUT, "{hosts}: {i} → {c}");
                    assert_eq!(parent[c].replace(i), None, "{hosts}: {c} twice");
                }
            }
            let mut deepest = 0;
            for (i, p) in parent.iter().enumerate() {
                assert_eq!(p.is_none(), i < RELAY_FANOUT, "{hosts}: host {i}");
                let (mut hops, mut at) = (1, i);
                while let Some(p) = parent[at] {
                    hops += 1;
                    at = p;
                }
                deepest = deepest.max(hops);
            }
            if hosts == 1000 {
                assert_eq!(deepest, 3);
            }
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for m in examples() {
            let f = m.encode();
            for cut in 0..f.len() - 4 {
                assert!(
                    Msg::decode(&f[4..4 + cut]).is_err(),
                    "{} cut at {cut}",
                    m.name()
                );
            }
            let mut long = f[4..].to_vec();
            long.push(0);
            assert!(matches!(Msg::decode(&long), Err(ProtoError::Trailing(1))));
        }
    }

    #[test]
    fn forged_lengths_and_versions_are_refused() {
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..], MAX_FRAME),
            Err(ProtoError::TooLong(_))
        ));
        let mut f = Msg::Heartbeat.encode();
        f[4] = 9;
        assert!(matches!(Msg::decode(&f[4..]), Err(ProtoError::Version(9))));
        let mut f = Msg::Heartbeat.encode();
        f[6] = 200;
        assert!(matches!(
            Msg::decode(&f[4..]),
            Err(ProtoError::UnknownType(200))
        ));
        // A Welcome claiming four billion nodes in a few bytes.
        let mut f = Msg::Welcome(Welcome {
            job_key: 1,
            rank: 0,
            heartbeat_ms: 1000,
            nodes: vec![],
            proof: [0; 32],
        })
        .encode();
        let at = f.len() - 4;
        f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Msg::decode(&f[4..]),
            Err(ProtoError::Truncated("nodes"))
        ));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let frames: Vec<Vec<u8>> = examples()
            .iter()
            .map(|m| m.encode()[4..].to_vec())
            .collect();
        for i in 0..200_000 {
            let mut f = frames[i % frames.len()].clone();
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..f.len());
                f[at] = rng.gen();
            }
            let _ = Msg::decode(&f);
        }
    }
}
