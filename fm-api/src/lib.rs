//! # fm — Fast Messages over a composite of devices
//!
//! The FM 2.x programming model (HPVM): handlers registered by ID, messages
//! sent as streams of pieces (gather) and received in pieces inside the
//! handler (scatter), `extract` to run handlers, and credit-based flow control.
//!
//! ```no_run
//! use fm::Fm;
//! const PING: u16 = 1;
//! let mut fm = Fm::builder()
//!     .handler(PING, "ping", |m| {
//!         let data = m.receive_vec()?;
//!         println!("{} bytes from rank {}", data.len(), m.src());
//!         Ok(())
//!     })
//!     .from_env()?
//!     .build()?;
//! let next = (fm.rank() + 1) % fm.size() as u32;
//! fm.send(next, PING, b"hello")?;
//! while fm.stats().messages_received == 0 {
//!     fm.extract_wait(usize::MAX)?;
//! }
//! # Ok::<(), fm::FmError>(())
//! ```
//!
//! Guarantees: messages from one sender to one receiver are delivered exactly
//! once and in the order sent; a handler runs once per message and may start
//! before the whole message has arrived (each `receive` waits for the bytes it
//! asks for); bytes a handler does not read are discarded when it returns.
//! A sender out of credit keeps receiving — arriving packets are set aside and
//! their credits returned — so processes that send to each other head-to-head
//! never deadlock; the set-aside messages' handlers run at the next `extract`,
//! or, once the set-aside bytes reach `FM_STASH_BYTES`, inside a send that
//! waits outside any handler (so memory stays bounded). Handlers may send, to
//! any rank and before or after reading their message, but not extract; a
//! handler that returns with a message open has that message aborted and its
//! `extract` fails naming it. The rules that make this hold are in the
//! endpoint module's docs ("The credit rule", "The stash and its bound").
//!
//! `Fm` is `Send` and used from one thread at a time (it is `&mut self`
//! throughout, and takes no lock on its paths). Other threads send through
//! an [`FmSender`] ([`Endpoint::sender`]): their messages go out at the
//! owner's next `extract`, each thread's in its order.

mod accounts;
pub mod coll;
pub mod config;
pub mod config_file;
mod endpoint;
pub mod error;
mod extract;
mod incoming;
mod open;
mod path_choice;
mod sender;
pub mod settings;
pub mod wait;
pub mod window;
pub mod wire;
pub mod wireup;

pub use config::{Config, GrmJoin, Net, Want};
pub use wireup::Bootstrap;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeExample;
pub use endpoint::{Endpoint, FmStats};
pub use error::{ErrorKind, FmError, Result};
pub use extract::RESERVED_HANDLERS;
pub use fm_devices::{JobKey, Rank};
pub use incoming::Incoming;
pub use sender::{FmSender, OUTBOX_BYTES};
pub use window::Window;

use fm_devices::DeviceKind;
use std::ops::{Deref, DerefMut};

/// A message handler: runs on the destination for each message sent to its ID.
/// `Send`, so that an [`Fm`] can move to another thread: share a handler's
/// state with `Arc` and atomics or a `Mutex`, not `Rc` and `Cell`.
pub type Handler = Box<dyn FnMut(&mut Incoming<'_>) -> Result<()> + Send>;

/// Builds an [`Fm`]: handlers first, then the configuration.
pub struct FmBuilder {
    handlers: Vec<(u16, String, Handler)>,
    config: Option<Config>,
}

impl FmBuilder {
    /// Register `f` for handler ID `id` (below [`RESERVED_HANDLERS`]); `name`
    /// identifies it when the resource manager compares handler tables.
    pub fn handler<F>(mut self, id: u16, name: &str, f: F) -> Self
    where
        F: FnMut(&mut Incoming<'_>) -> Result<()> + Send + 'static,
    {
        self.handlers.push((id, name.to_string(), Box::new(f)));
        self
    }

    /// Use this configuration.
    pub fn config(mut self, c: Config) -> Self {
        self.config = Some(c);
        self
    }

    /// Take the configuration from the environment (`FM_RANK`, `FM_SIZE`, …).
    pub fn from_env(mut self) -> Result<Self> {
        self.config = Some(Config::from_env()?);
        Ok(self)
    }

    /// Open the devices, attach to the job and return the endpoint.
    pub fn build(self) -> Result<Fm> {
        let mut config = match self.config {
            Some(c) => c,
            None => Config::from_env()?,
        };
        let mut table: Vec<Option<Handler>> = Vec::new();
        let mut names: Vec<(u16, String)> = Vec::new();
        for (id, name, f) in self.handlers {
            if id >= RESERVED_HANDLERS {
                return Err(ErrorKind::Config(format!(
                    "handler ID {id:#x} ({name:?}) is reserved for fm (use IDs below {RESERVED_HANDLERS:#x})"
                )).into());
            }
            if let Some((_, first)) = names.iter().find(|(i, _)| *i == id) {
                return Err(ErrorKind::DuplicateHandler {
                    id,
                    first: first.clone(),
                    second: name,
                }
                .into());
            }
            if table.len() <= id as usize {
                table.resize_with(id as usize + 1, || None);
            }
            table[id as usize] = Some(f);
            names.push((id, name));
        }
        names.sort();
        let (dev, job, eth_endpoint) = open::open(&mut config, &names)?;
        if let wireup::Joined::Grm(m) = &job {
            m.ready(dev.table().runs());
        }
        wait::ring_at_job_end(dev.doorbell());
        tracing::debug!(
            rank = config.rank,
            size = config.size,
            "fm: endpoint open\n{}",
            dev.table()
        );
        let ep = Endpoint::new(dev, &config, table);
        let mut groups = coll::Groups::new(&ep)?;
        let all: Vec<Rank> = (0..ep.size() as Rank).collect();
        // The first group every rank makes: the same on all.
        let everyone = groups.group(ep.rank(), ep.size(), &all)?;
        Ok(Fm {
            ep,
            names,
            groups,
            everyone,
            config,
            eth_endpoint,
            job,
        })
    }
}

/// For programs and fm's tools: `tracing` output to stderr, filtered by
/// `FM_LOG` (default `warn`, e.g. `FM_LOG=fm_pacer=debug`), in colour only
/// on a terminal. Does nothing if a subscriber is already set.
pub fn init_logging() {
    init_logging_or("warn");
}

/// As [`init_logging`], with `default` as the filter when `FM_LOG` is unset.
pub fn init_logging_or(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            fm_platform::setting::LOG
                .env()
                .unwrap_or_else(|| default.into()),
        ))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// One FM process: its endpoint and its handler table. `Send`: it may move
/// to another thread (and be used from one thread at a time).
///
/// ```
/// fn is_send<T: Send>() {}
/// is_send::<fm::Fm>();
/// ```
pub struct Fm {
    ep: Endpoint,
    names: Vec<(u16, String)>,
    /// The groups this process made, and the whole job's for `barrier`.
    groups: coll::Groups,
    everyone: coll::Group,
    config: Config,
    /// Where this process's ethernet device listens, if it has one.
    eth_endpoint: Option<fm_devices::ethernet::EthernetEndpoint>,
    /// How this process is joined to its job (its membership at the
    /// resource manager, its PMI connection); dropped last, after the
    /// endpoint, so leaving the job is the last thing a process does.
    job: wireup::Joined,
}

impl Drop for Fm {
    /// Its counters go to the launcher (`fmrun --stats`), or to stderr
    /// under any other launcher with `FM_STATS=json`, before the job,
    /// dropped after this, is left.
    fn drop(&mut self) {
        match &self.job {
            wireup::Joined::Grm(m) => {
                if wait::job_end_reason().is_none() {
                    m.report_stats(self.counters_json());
                }
            }
            _ => {
                if settings::STATS.env().is_some_and(|v| v.trim() == "json") {
                    // One write: the lines of ranks sharing a stderr stay whole.
                    let line = format!("fm-stats: {}\n", self.counters_json());
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                }
            }
        }
    }
}

impl Deref for Fm {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.ep
    }
}

impl DerefMut for Fm {
    fn deref_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }
}

impl Fm {
    pub fn builder() -> FmBuilder {
        FmBuilder {
            handlers: Vec::new(),
            config: None,
        }
    }

    /// `Fm::builder().from_env()?.build()` with no handlers of its own.
    pub fn init() -> Result<Fm> {
        Fm::builder().from_env()?.build()
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where this process's ethernet device listens (address, epoch, MTU),
    /// when the job has ranks on other hosts.
    pub fn ethernet_endpoint(&self) -> Option<fm_devices::ethernet::EthernetEndpoint> {
        self.eth_endpoint.clone()
    }

    /// Every counter of this rank as one JSON object: FM's, each device's,
    /// and the reliable layer's of each network device, by name
    /// (`fmrun --stats` prints them at the end of a job).
    pub fn counters_json(&self) -> String {
        fn object<const N: usize>(fields: [(&str, u64); N]) -> String {
            let f: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", f.join(","))
        }
        let dev = self.ep.composite();
        let devices: Vec<String> = (dev.member_stats().iter())
            .map(|(name, s)| format!("\"{name}\":{}", object(s.fields())))
            .collect();
        let reliable: Vec<String> = [DeviceKind::Nic, DeviceKind::Ethernet]
            .into_iter()
            .filter_map(|k| {
                Some(format!(
                    "\"{k}\":{}",
                    object(dev.network_stats(k)?.fields())
                ))
            })
            .collect();
        format!(
            "{{\"rank\":{},\"fm\":{},\"devices\":{{{}}},\"reliable\":{{{}}}}}",
            self.ep.rank(),
            object(self.ep.stats().fields()),
            devices.join(","),
            reliable.join(",")
        )
    }

    /// (ID, name) of every registered handler, sorted by ID.
    pub fn handler_names(&self) -> &[(u16, String)] {
        &self.names
    }

    /// A fingerprint of the handler table (IDs and names), equal across ranks
    /// that registered the same handlers.
    pub fn handler_fingerprint(&self) -> u64 {
        open::fingerprint(&self.names)
    }

    /// Wait until every rank has entered the barrier (a dissemination
    /// barrier, in two levels across hosts: [`coll`]). Handlers run
    /// meanwhile; a handler's error does not stop the barrier: it is
    /// returned once every rank has entered.
    pub fn barrier(&mut self) -> Result<()> {
        self.everyone.barrier(&mut self.ep)
    }

    /// A new group of every rank of the job, to run collectives on
    /// ([`coll`]). Every rank makes its groups in the same order.
    pub fn world(&mut self) -> Result<coll::Group> {
        let all: Vec<Rank> = (0..self.ep.size() as Rank).collect();
        self.group(&all)
    }

    /// A new group of `members` (job ranks, numbered in this order within
    /// the group), which must include this rank; each of them makes it
    /// too, all making their groups in the same order.
    pub fn group(&mut self, members: &[Rank]) -> Result<coll::Group> {
        let (me, size) = (self.ep.rank(), self.ep.size());
        self.groups.group(me, size, members)
    }
}
