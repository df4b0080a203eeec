//! Lossy datagram links under the reliable layer: the trait, an in-memory
//! network (tests), and the fault-injecting decorator (`FM_FAULTS`).

use crate::Rank;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A datagram link: best effort, any loss, duplication or reordering allowed.
pub trait Link: Send {
    /// Send one datagram to `dest`. An error is a local failure (the reliable
    /// layer counts it and retransmits later), not a lost packet.
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()>;
    /// The next arrived datagram, copied into `buf`: its length, or `None`.
    fn recv(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// Time passes (for links that hold packets back); called on every poll.
    fn tick(&mut self) {}
    /// The end of a burst of sends: links that queue frames hand them to the
    /// hardware now (one kick per burst).
    fn flush(&mut self) {}
    /// For memory-notified links: the word that the next arrival sets, so an
    /// idle poll is one load without the device's lock.
    fn arrival_probe(&self) -> Option<ArrivalProbe> {
        None
    }
    /// Frames the kernel dropped before we could read them (ring or socket
    /// buffer full), where the link can tell.
    fn kernel_drops(&mut self) -> u64 {
        0
    }
    /// The descriptors that become readable when a datagram arrives, for a
    /// background thread to wait on while the process sleeps; valid as
    /// long as the link. Empty for links without any (the thread then
    /// looks every tick).
    fn wait_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }
    /// Did the datagram that `recv` returned last come from `claimed`'s
    /// address on the link it arrived on? Links that cannot tell say yes.
    fn came_from(&self, _claimed: Rank) -> bool {
        true
    }
}

/// Where a memory-notified link's next arrival will show: per ring, a
/// pointer to the status word of the frame to be read next, which the
/// kernel sets (under `mask`) when a frame is there.
#[derive(Clone)]
pub struct ArrivalProbe {
    pub(crate) words: Arc<[AtomicPtr<AtomicU32>]>,
    pub(crate) mask: u32,
}

impl ArrivalProbe {
    /// `words[i]` is kept pointing at ring i's next status word by the link.
    pub fn new(words: Arc<[AtomicPtr<AtomicU32>]>, mask: u32) -> ArrivalProbe {
        ArrivalProbe { words, mask }
    }

    /// Something has arrived (or may have: a stale pointer reads as "yes"
    /// or is caught by the next full poll).
    #[inline(always)]
    pub fn arrived(&self) -> bool {
        self.words.iter().any(|w| {
            let p = w.load(Ordering::Relaxed);
            // SAFETY: the pointers point into ring mappings that live as
            // long as the link, which outlives every probe's use (the
            // device holding the probe owns the link).
            !p.is_null() && unsafe { (*p).load(Ordering::Acquire) } & self.mask != 0
        })
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        (**self).send(dest, datagram)
    }
    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        (**self).recv(buf)
    }
    fn tick(&mut self) {
        (**self).tick()
    }
    fn flush(&mut self) {
        (**self).flush()
    }
    fn arrival_probe(&self) -> Option<ArrivalProbe> {
        (**self).arrival_probe()
    }
    fn kernel_drops(&mut self) -> u64 {
        (**self).kernel_drops()
    }
    fn wait_fds(&self) -> Vec<RawFd> {
        (**self).wait_fds()
    }
    fn came_from(&self, claimed: Rank) -> bool {
        (**self).came_from(claimed)
    }
}

/// The links of a trunk (thesis chapter 6): packets to a peer go round-robin
/// over the links both sides have, link i of ours to link i of the peer
/// (same network); receiving reads the links in turn. `A` is a peer's
/// address on one link.
pub struct Trunk<A> {
    /// Each peer's address per link (empty: not a peer).
    peers: Vec<Vec<A>>,
    links: usize,
    next_path: Vec<usize>,
    next_recv: usize,
}

impl<A> Trunk<A> {
    pub fn new(peers: Vec<Vec<A>>, links: usize) -> Trunk<A> {
        Trunk {
            next_path: vec![0; peers.len()],
            peers,
            links,
            next_recv: 0,
        }
    }

    /// The link for the next packet to `dest`, and `dest`'s address on it.
    pub fn route(&mut self, dest: Rank) -> io::Result<(usize, &A)> {
        let d = dest as usize;
        let paths = self.peers.get(d).map_or(0, |p| p.len().min(self.links));
        if paths == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not a peer"));
        }
        let i = self.next_path[d] % paths;
        self.next_path[d] = self.next_path[d].wrapping_add(1);
        Ok((i, &self.peers[d][i]))
    }

    /// Is `addr` `rank`'s address on link `link`?
    pub fn is_address_of(&self, rank: Rank, link: usize, addr: &A) -> bool
    where
        A: PartialEq,
    {
        (self.peers.get(rank as usize)).is_some_and(|p| p.get(link) == Some(addr))
    }

    /// `read(i)` on each link in turn, from the one after the link that
    /// last had something: the first (link, length) found.
    pub fn recv(&mut self, mut read: impl FnMut(usize) -> Option<usize>) -> Option<(usize, usize)> {
        let n = self.links;
        for k in 0..n {
            let i = (self.next_recv + k) % n;
            if let Some(len) = read(i) {
                self.next_recv = (i + 1) % n;
                return Some((i, len));
            }
        }
        None
    }
}

/// An in-memory network of `n` endpoints: queues of datagrams, lossless.
#[derive(Clone)]
pub struct MemNet {
    queues: Arc<Vec<Mutex<VecDeque<Vec<u8>>>>>,
}

impl MemNet {
    pub fn new(n: usize) -> MemNet {
        MemNet {
            queues: Arc::new((0..n).map(|_| Mutex::new(VecDeque::new())).collect()),
        }
    }

    /// The link of endpoint `rank`.
    pub fn link(&self, rank: Rank) -> MemLink {
        MemLink {
            net: self.clone(),
            me: rank,
        }
    }
}

pub struct MemLink {
    net: MemNet,
    me: Rank,
}

impl Link for MemLink {
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        let q = self
            .net
            .queues
            .get(dest as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such endpoint"))?;
        q.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(datagram.to_vec());
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        let d = self.net.queues[self.me as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()?;
        let n = d.len().min(buf.len());
        buf[..n].copy_from_slice(&d[..n]);
        Some(n)
    }
}

/// Rates of each fault, per datagram sent, and the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    pub drop: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub delay: f64,
    /// How long a delayed datagram is held.
    pub delay_for: Duration,
    pub seed: u64,
}

impl Faults {
    /// `drop=0.05,dup=0.01,reorder=0.02,corrupt=0.001,delay=0.01,delay_us=200,seed=7`;
    /// every key optional, rates in 0..=1.
    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults {
            delay_for: Duration::from_micros(200),
            seed: 1,
            ..Faults::default()
        };
        for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("{kv:?} is not key=value"))?;
            let rate = || -> Result<f64, String> {
                let r: f64 = v
                    .parse()
                    .map_err(|_| format!("{k}={v:?} is not a number"))?;
                if (0.0..=1.0).contains(&r) {
                    Ok(r)
                } else {
                    Err(format!("{k}={v} is not a rate between 0 and 1"))
                }
            };
            match k {
                "drop" => f.drop = rate()?,
                "dup" => f.dup = rate()?,
                "reorder" => f.reorder = rate()?,
                "corrupt" => f.corrupt = rate()?,
                "delay" => f.delay = rate()?,
                "delay_us" => {
                    f.delay_for = Duration::from_micros(
                        v.parse().map_err(|_| format!("delay_us={v:?} is not a number"))?,
                    )
                }
                "seed" => f.seed = v.parse().map_err(|_| format!("seed={v:?} is not a number"))?,
                _ => {
                    return Err(format!(
                        "unknown fault {k:?} (known: drop, dup, reorder, corrupt, delay, delay_us, seed)"
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// A link that breaks the packets given to it, at the configured rates.
pub struct FaultyLink<L> {
    inner: L,
    f: Faults,
    rng: u64,
    /// A datagram held back to be sent after the next one (reordering), or
    /// after `delay_for` if no other comes.
    held: Option<(Instant, Rank, Vec<u8>)>,
    delayed: VecDeque<(Instant, Rank, Vec<u8>)>,
    pub stats: FaultStats,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub delayed: u64,
}

impl<L: Link> FaultyLink<L> {
    pub fn new(inner: L, f: Faults) -> Self {
        FaultyLink {
            inner,
            rng: f.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            f,
            held: None,
            delayed: VecDeque::new(),
            stats: FaultStats::default(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (x as f64) < p * (1u64 << 53) as f64
    }
}

impl<L: Link> Link for FaultyLink<L> {
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        if self.chance(self.f.drop) {
            self.stats.dropped += 1;
            return Ok(());
        }
        let mut d = datagram.to_vec();
        if !d.is_empty() && self.chance(self.f.corrupt) {
            let at = (self.rng as usize) % d.len();
            d[at] ^= 1 << (self.rng >> 61);
            self.stats.corrupted += 1;
        }
        let copies = if self.chance(self.f.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.chance(self.f.delay) {
                self.stats.delayed += 1;
                self.delayed
                    .push_back((Instant::now() + self.f.delay_for, dest, d.clone()));
            } else if self.held.is_none() && self.chance(self.f.reorder) {
                self.stats.reordered += 1;
                self.held = Some((Instant::now(), dest, d.clone()));
            } else {
                self.inner.send(dest, &d)?;
                if let Some((_, hd, h)) = self.held.take() {
                    self.inner.send(hd, &h)?;
                }
            }
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.inner.recv(buf)
    }

    fn tick(&mut self) {
        let now = Instant::now();
        while self.delayed.front().is_some_and(|(t, _, _)| *t <= now) {
            if let Some((_, dest, d)) = self.delayed.pop_front() {
                let _ = self.inner.send(dest, &d);
            }
        }
        // A held packet does not wait for ever when traffic stops.
        if self
            .held
            .as_ref()
            .is_some_and(|(t, _, _)| now.duration_since(*t) >= self.f.delay_for)
        {
            if let Some((_, hd, h)) = self.held.take() {
                let _ = self.inner.send(hd, &h);
            }
        }
        self.inner.tick();
    }

    fn flush(&mut self) {
        self.inner.flush()
    }
    fn arrival_probe(&self) -> Option<ArrivalProbe> {
        self.inner.arrival_probe()
    }
    fn kernel_drops(&mut self) -> u64 {
        self.inner.kernel_drops()
    }
    fn wait_fds(&self) -> Vec<RawFd> {
        self.inner.wait_fds()
    }
    fn came_from(&self, claimed: Rank) -> bool {
        self.inner.came_from(claimed)
    }
}
