//! PM/Composite (PMv2, thesis chapter 7): one device made of several.
//!
//! A *destination device table* maps every rank to the member device that
//! reaches it — self for this process, shmem for this host, a network for
//! other hosts, null where there is none — and one receive poll polls every
//! member that can receive, cheapest first (HPVM 1.9's unified polling: with
//! memory-notified devices each idle poll is one cached load, so no adaptive
//! scheme is needed). `Composite` is itself a [`Device`].

pub mod table_report;

use fm_devices::doorbell::Doorbell;
use fm_devices::null::NullDevice;
use fm_devices::reliable::NetDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::ShmemDevice;
use fm_devices::{
    Device, DeviceError, DeviceInfo, DeviceKind, DeviceStats, Options, Rank, RawRecv, RawSend,
};
use std::fmt;
use std::sync::Arc;

/// A device of the composite. One enum, not `dyn`: dispatch is a jump
/// table the compiler can inline through. Self and shmem, which every
/// process has and which carry the hot paths, are fields of the composite
/// reached without a `match`; the others sit in a list.
// A process has a handful of members, and shmem's is the hot path: its
// size costs nothing, a box would cost an indirection on every packet.
#[allow(clippy::large_enum_variant)]
pub enum Member {
    SelfLoop(SelfDevice),
    Shmem(ShmemDevice),
    /// A network device between hosts (`Nic`, `Ethernet`): the reliable
    /// layer over a link.
    Net(DeviceKind, Box<NetDevice>),
    Null(NullDevice),
}

impl Member {
    pub fn kind(&self) -> DeviceKind {
        match self {
            Member::SelfLoop(_) => DeviceKind::SelfLoop,
            Member::Shmem(_) => DeviceKind::Shmem,
            Member::Net(k, _) => *k,
            Member::Null(_) => DeviceKind::Null,
        }
    }
}

/// Dispatch over a member. Self and shmem are fields of the composite,
/// never in its list of other members: their arms run out of line, so that
/// their (large, always inlined) bodies do not weigh on the composite's
/// poll loop over the others (measured: one cycle per idle poll).
macro_rules! each {
    ($m:expr, $d:ident => $e:expr) => {
        match $m {
            Member::Net(_, $d) => $e,
            Member::Null($d) => $e,
            Member::SelfLoop($d) => out_of_line(move || $e),
            Member::Shmem($d) => out_of_line(move || $e),
        }
    };
}

#[cold]
#[inline(never)]
fn out_of_line<T>(f: impl FnOnce() -> T) -> T {
    f()
}

impl Device for Member {
    #[inline]
    fn info(&self) -> DeviceInfo {
        each!(self, d => d.info())
    }
    #[inline]
    fn reaches(&self, dest: Rank) -> bool {
        each!(self, d => d.reaches(dest))
    }
    #[inline]
    fn window(&self, dest: Rank) -> u32 {
        each!(self, d => d.window(dest))
    }
    #[inline]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        each!(self, d => d.raw_send_buffer(dest, len))
    }
    #[inline]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        each!(self, d => d.raw_send(buf, len))
    }
    #[inline]
    fn raw_abort(&mut self, buf: RawSend) {
        each!(self, d => d.raw_abort(buf))
    }
    #[inline]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        each!(self, d => d.raw_receive())
    }
    #[inline]
    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        each!(self, d => d.raw_receive_arrived())
    }
    #[inline]
    fn raw_release(&mut self, token: u64) {
        each!(self, d => d.raw_release(token))
    }
    fn has_arrivals(&self) -> bool {
        each!(self, d => d.has_arrivals())
    }
    fn peer_failure(&self, dest: Rank) -> Option<DeviceError> {
        each!(self, d => d.peer_failure(dest))
    }
    fn failure(&self) -> Option<DeviceError> {
        each!(self, d => d.failure())
    }
    fn audit(&self) -> Option<DeviceError> {
        each!(self, d => d.audit())
    }
    fn attach_doorbell(&mut self, bell: &Arc<Doorbell>) {
        each!(self, d => d.attach_doorbell(bell))
    }
    fn remote_read(&mut self, src: Rank, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        each!(self, d => d.remote_read(src, addr, buf))
    }
    fn remote_write(&mut self, dest: Rank, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        each!(self, d => d.remote_write(dest, addr, data))
    }
    fn remote_memory_to(&self, peer: Rank) -> bool {
        each!(self, d => d.remote_memory_to(peer))
    }
    fn stats(&self) -> DeviceStats {
        each!(self, d => d.stats())
    }
}

/// Member tokens must fit below this bit; the route sits above it.
const ROUTE_SHIFT: u32 = 56;

#[derive(Debug, thiserror::Error)]
pub enum CompositeError {
    #[error("rank {rank} on host {host:?} is reachable by no configured device ({tried})")]
    Unreachable {
        rank: Rank,
        host: String,
        tried: String,
    },
    #[error("the composite was given two {0} devices")]
    Duplicate(DeviceKind),
    #[error("the node map has {hosts} entries but the job has {size} ranks")]
    NodeMap { hosts: usize, size: usize },
    #[error("the routes name {routes} devices but the job has {size} ranks")]
    RouteCount { routes: usize, size: usize },
    #[error("the topology sends rank {rank} (host {host:?}) through {device}, but {why}")]
    RouteUnusable {
        rank: Rank,
        host: String,
        device: DeviceKind,
        why: String,
    },
}

/// Where the table sends a destination. The devices every process has are
/// fields of the composite, reached without a `match`; the rest sit in a list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    SelfLoop,
    Shmem,
    Other(u8),
}

impl Route {
    /// Shared memory is tag 0, so its tokens pass through the composite untouched.
    #[inline(always)]
    fn tag(self) -> u64 {
        match self {
            Route::Shmem => 0,
            Route::SelfLoop => 1,
            Route::Other(i) => 2 + i as u64,
        }
    }
    /// A composite token's route, and the member's own token.
    #[inline(always)]
    fn split(token: u64) -> (Route, u64) {
        let route = match token >> ROUTE_SHIFT {
            0 => Route::Shmem,
            1 => Route::SelfLoop,
            t => Route::Other((t - 2) as u8),
        };
        (route, token & ((1 << ROUTE_SHIFT) - 1))
    }
}

pub struct Composite {
    rank: Rank,
    self_loop: SelfDevice,
    shmem: Option<ShmemDevice>,
    /// Other members (networks, null), fastest first.
    others: Vec<Member>,
    /// Indices into `others` of members that can receive.
    others_polled: Vec<u8>,
    /// rank → route.
    table: Vec<Route>,
    hosts: Vec<String>,
    /// This process's doorbell: shmem's word when there is shmem, else
    /// one of its own; handed to every member that rings it.
    bell: Arc<Doorbell>,
}

/// Dispatch a call to the device a route names.
macro_rules! route {
    ($c:expr, $r:expr, $d:ident => $e:expr) => {
        match $r {
            Route::SelfLoop => {
                let $d = &mut $c.self_loop;
                $e
            }
            Route::Shmem => match $c.shmem.as_mut() {
                Some($d) => $e,
                None => unreachable!("the table routes to shmem only when it is open"),
            },
            Route::Other(i) => {
                let $d = &mut $c.others[i as usize];
                $e
            }
        }
    };
}

impl Composite {
    /// Build the table for `rank` given every rank's host. Choice per peer, as
    /// PM/Composite: same process → self; otherwise the fastest member
    /// ([`DeviceKind`]'s order) that reaches it; a rank nobody reaches goes
    /// to the null transport if there is one (it reports "no route"), else
    /// it is an error now, not at first send.
    pub fn new(
        rank: Rank,
        hosts: Vec<String>,
        members: Vec<Member>,
    ) -> Result<Self, CompositeError> {
        let mut c = Composite::assemble(rank, hosts, members)?;
        c.table = (0..c.hosts.len() as Rank)
            .map(|r| c.fastest_route(r))
            .collect::<Result<_, _>>()?;
        Ok(c)
    }

    /// Build the table as a topology says: `routes[r]` is the device that
    /// carries packets to rank r. A device that is not open here or does
    /// not reach its rank is an error now, naming the rank.
    pub fn with_routes(
        rank: Rank,
        hosts: Vec<String>,
        members: Vec<Member>,
        routes: &[DeviceKind],
    ) -> Result<Self, CompositeError> {
        if routes.len() != hosts.len() {
            return Err(CompositeError::RouteCount {
                routes: routes.len(),
                size: hosts.len(),
            });
        }
        let mut c = Composite::assemble(rank, hosts, members)?;
        c.table = (0..c.hosts.len() as Rank)
            .map(|r| c.given_route(r, routes[r as usize]))
            .collect::<Result<_, _>>()?;
        Ok(c)
    }

    /// The members in place, fastest first; the table still empty. A self
    /// device is opened if none is given.
    fn assemble(
        rank: Rank,
        hosts: Vec<String>,
        mut members: Vec<Member>,
    ) -> Result<Self, CompositeError> {
        members.sort_by_key(Member::kind);
        if let Some(w) = members.windows(2).find(|w| w[0].kind() == w[1].kind()) {
            return Err(CompositeError::Duplicate(w[0].kind()));
        }
        let bell = (members.iter())
            .find_map(|m| match m {
                Member::Shmem(d) => Some(d.doorbell()),
                _ => None,
            })
            .unwrap_or_else(Doorbell::own);
        let mut c = Composite {
            rank,
            self_loop: SelfDevice::open(rank),
            shmem: None,
            others: Vec::new(),
            others_polled: Vec::new(),
            table: Vec::with_capacity(hosts.len()),
            hosts,
            bell,
        };
        for mut m in members {
            m.attach_doorbell(&c.bell);
            match m {
                Member::SelfLoop(d) => c.self_loop = d,
                Member::Shmem(d) => c.shmem = Some(d),
                other => c.others.push(other),
            }
        }
        c.others_polled = (0..c.others.len() as u8)
            .filter(|&i| (c.others[i as usize].info().options).contains(Options::RECEIVES))
            .collect();
        Ok(c)
    }

    /// This process's doorbell, to sleep on ([`Composite::has_arrivals`]
    /// is the re-check after arming it) and to ring from other threads.
    pub fn doorbell(&self) -> &Arc<Doorbell> {
        &self.bell
    }

    /// Every route, fastest first.
    fn routes(&self) -> impl Iterator<Item = Route> {
        let shmem = self.shmem.is_some().then_some(Route::Shmem);
        let others = (0..self.others.len() as u8).map(Route::Other);
        [Route::SelfLoop].into_iter().chain(shmem).chain(others)
    }

    fn route_reaches(&self, route: Route, r: Rank) -> bool {
        match route {
            Route::SelfLoop => self.self_loop.reaches(r),
            Route::Shmem => self.shmem.as_ref().is_some_and(|d| d.reaches(r)),
            Route::Other(i) => self.others[i as usize].reaches(r),
        }
    }

    fn kind_of(&self, route: Route) -> DeviceKind {
        match route {
            Route::SelfLoop => DeviceKind::SelfLoop,
            Route::Shmem => DeviceKind::Shmem,
            Route::Other(i) => self.others[i as usize].kind(),
        }
    }

    /// The fastest member that reaches `r`, else null ("no route").
    fn fastest_route(&self, r: Rank) -> Result<Route, CompositeError> {
        let mut routes = self.routes();
        (routes.find(|&route| self.route_reaches(route, r)))
            .or_else(|| self.routes().find(|&x| self.kind_of(x) == DeviceKind::Null))
            .ok_or_else(|| CompositeError::Unreachable {
                rank: r,
                host: self.hosts[r as usize].clone(),
                tried: self.member_names().join(", "),
            })
    }

    /// The member of kind `kind`, which must reach `r` (null always may).
    fn given_route(&self, r: Rank, kind: DeviceKind) -> Result<Route, CompositeError> {
        let unusable = |why: String| CompositeError::RouteUnusable {
            rank: r,
            host: self.hosts[r as usize].clone(),
            device: kind,
            why,
        };
        let me = self.rank;
        let Some(route) = self.routes().find(|&x| self.kind_of(x) == kind) else {
            let has = self.member_names().join(", ");
            return Err(unusable(format!(
                "rank {me} has no {kind} device (it has {has})"
            )));
        };
        if !self.route_reaches(route, r) && kind != DeviceKind::Null {
            return Err(unusable(format!(
                "rank {me}'s {kind} device does not reach it"
            )));
        }
        Ok(route)
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.table.len()
    }

    pub fn host_of(&self, rank: Rank) -> Option<&str> {
        self.hosts.get(rank as usize).map(|s| s.as_str())
    }

    /// The shared-memory device, where this process has local peers.
    pub fn shmem(&self) -> Option<&ShmemDevice> {
        self.shmem.as_ref()
    }

    /// Names of the member devices, in polling order.
    pub fn member_names(&self) -> Vec<&'static str> {
        let mut v = vec![self.self_loop.info().name];
        if let Some(s) = &self.shmem {
            v.push(s.info().name);
        }
        v.extend(self.others.iter().map(|m| m.info().name));
        v
    }

    /// Name, option bits and MTU of the device that carries packets to `dest`.
    pub fn info_for(&self, dest: Rank) -> Option<DeviceInfo> {
        Some(match *self.table.get(dest as usize)? {
            Route::SelfLoop => self.self_loop.info(),
            Route::Shmem => self.shmem.as_ref()?.info(),
            Route::Other(i) => self.others[i as usize].info(),
        })
    }

    /// Whether `dest` is routed to the null transport (no route).
    pub fn is_null_route(&self, dest: Rank) -> bool {
        matches!(self.table.get(dest as usize), Some(Route::Other(i)) if matches!(self.others[*i as usize], Member::Null(_)))
    }

    /// The member network device of kind `kind` (`Nic` or `Ethernet`):
    /// both run the reliable layer. For counters and benchmarks.
    pub fn network_mut(&mut self, kind: DeviceKind) -> Option<&mut NetDevice> {
        self.others.iter_mut().find_map(|m| match m {
            Member::Net(k, d) if *k == kind => Some(&mut **d),
            _ => None,
        })
    }

    /// Counters of the reliable layer of the member network of kind `kind`.
    pub fn network_stats(&self, kind: DeviceKind) -> Option<fm_devices::reliable::ReliableStats> {
        self.others.iter().find_map(|m| match m {
            Member::Net(k, d) if *k == kind => Some(d.reliable_stats()),
            _ => None,
        })
    }

    /// Each member's name and counters, in polling order.
    pub fn member_stats(&self) -> Vec<(&'static str, DeviceStats)> {
        let mut v = vec![(self.self_loop.info().name, self.self_loop.stats())];
        if let Some(s) = &self.shmem {
            v.push((s.info().name, s.stats()));
        }
        v.extend(self.others.iter().map(|m| (m.info().name, m.stats())));
        v
    }

    /// The shmem member, for calling it directly (benchmarks).
    pub fn shmem_mut(&mut self) -> Option<&mut ShmemDevice> {
        self.shmem.as_mut()
    }

    /// The destination device table, printable as Table 7.1 of the thesis.
    pub fn table(&self) -> DeviceTable<'_> {
        DeviceTable(self)
    }

    /// Unified polling: shared memory (one cached load per queue when idle),
    /// the self queue, then the other members that can receive — all of
    /// them, or (`arrived`) only what they already took in.
    #[inline(always)]
    fn poll(&mut self, arrived: bool) -> Option<RawRecv> {
        if let Some(s) = self.shmem.as_mut() {
            if let Some(r) = s.raw_receive() {
                // Route::Shmem's tag is 0: the token is already right.
                return Some(r);
            }
        }
        if let Some(mut r) = self.self_loop.raw_receive() {
            r.token |= Route::SelfLoop.tag() << ROUTE_SHIFT;
            return Some(r);
        }
        for &i in &self.others_polled {
            let d = &mut self.others[i as usize];
            let r = if arrived {
                d.raw_receive_arrived()
            } else {
                d.raw_receive()
            };
            if let Some(mut r) = r {
                r.token |= Route::Other(i).tag() << ROUTE_SHIFT;
                return Some(r);
            }
        }
        None
    }

    /// `raw_send` for every route but shared memory. Out of line and given
    /// the slot's fields, not the slot: a slot whose address reached an
    /// out-of-line call would be kept on the stack in every caller, and
    /// copying it there stalls the shared-memory path (store forwarding).
    #[inline(never)]
    fn send_elsewhere(&mut self, ptr: *mut u8, cap: usize, dest: Rank, token: u64, len: usize) {
        let (route, token) = Route::split(token);
        let buf = RawSend {
            ptr,
            cap,
            dest,
            token,
        };
        route!(self, route, d => d.raw_send(buf, len))
    }
}

/// Display of a composite's destination device table.
pub struct DeviceTable<'a>(&'a Composite);

impl fmt::Display for DeviceTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&table_report::in_full(self.0.rank, &self.runs()))
    }
}

impl DeviceTable<'_> {
    /// The table as runs of consecutive ranks on one host through one
    /// device, a line `FIRST LAST HOST DEVICE` each: what a rank reports to
    /// its launcher (`fmrun --show-table`), in lines per host and device
    /// rather than per rank, so a large job's reports stay small.
    pub fn runs(&self) -> String {
        let c = self.0;
        let mut out = String::new();
        let mut run: Option<(usize, usize, &str, &str)> = None;
        for r in 0..c.table.len() {
            let name = c.info_for(r as Rank).map_or("?", |i| i.name);
            let host = c.hosts[r].as_str();
            match &mut run {
                Some((_, last, h, d)) if *h == host && *d == name => *last = r,
                _ => {
                    if let Some((a, b, h, d)) = run {
                        out.push_str(&format!("{a} {b} {h} {d}\n"));
                    }
                    run = Some((r, r, host, name));
                }
            }
        }
        if let Some((a, b, h, d)) = run {
            out.push_str(&format!("{a} {b} {h} {d}\n"));
        }
        out
    }
}

impl Device for Composite {
    fn info(&self) -> DeviceInfo {
        let mut options = Options::RECEIVES;
        let mut mtu = usize::MAX;
        let mut add = |i: DeviceInfo| {
            options = Options(options.0 | i.options.0);
            if i.mtu > 0 {
                mtu = mtu.min(i.mtu);
            }
        };
        add(self.self_loop.info());
        if let Some(s) = &self.shmem {
            add(s.info());
        }
        for m in &self.others {
            add(m.info());
        }
        DeviceInfo {
            name: "composite",
            options,
            mtu: if mtu == usize::MAX { 0 } else { mtu },
        }
    }

    fn reaches(&self, dest: Rank) -> bool {
        match self.table.get(dest as usize) {
            Some(Route::SelfLoop) => self.self_loop.reaches(dest),
            Some(Route::Shmem) => self.shmem.as_ref().is_some_and(|s| s.reaches(dest)),
            Some(Route::Other(i)) => self.others[*i as usize].reaches(dest),
            None => false,
        }
    }

    fn window(&self, dest: Rank) -> u32 {
        match self.table.get(dest as usize) {
            Some(Route::SelfLoop) => self.self_loop.window(dest),
            Some(Route::Shmem) => self.shmem.as_ref().map_or(0, |s| s.window(dest)),
            Some(Route::Other(i)) => self.others[*i as usize].window(dest),
            None => 0,
        }
    }

    #[inline(always)]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        let Some(&route) = self.table.get(dest as usize) else {
            return Err(DeviceError::NotAPeer {
                device: "composite",
                dest,
            });
        };
        // Shared memory's tag is 0: its result passes through untouched.
        if let (Route::Shmem, Some(s)) = (route, self.shmem.as_mut()) {
            return s.raw_send_buffer(dest, len);
        }
        let mut buf = route!(self, route, d => d.raw_send_buffer(dest, len))?;
        debug_assert!(buf.token >> ROUTE_SHIFT == 0);
        buf.token |= route.tag() << ROUTE_SHIFT;
        Ok(buf)
    }

    #[inline(always)]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        if buf.token >> ROUTE_SHIFT == 0 {
            if let Some(s) = self.shmem.as_mut() {
                return s.raw_send(buf, len);
            }
        }
        let RawSend {
            ptr,
            cap,
            dest,
            token,
        } = buf;
        self.send_elsewhere(ptr, cap, dest, token, len)
    }

    fn raw_abort(&mut self, mut buf: RawSend) {
        let route;
        (route, buf.token) = Route::split(buf.token);
        route!(self, route, d => d.raw_abort(buf))
    }

    #[inline(always)]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        self.poll(false)
    }

    fn peer_failure(&self, dest: Rank) -> Option<DeviceError> {
        match *self.table.get(dest as usize)? {
            Route::Other(i) => self.others[i as usize].peer_failure(dest),
            _ => None,
        }
    }

    fn failure(&self) -> Option<DeviceError> {
        (self.shmem.as_ref().and_then(|d| d.failure()))
            .or_else(|| self.others.iter().find_map(|m| m.failure()))
    }

    fn audit(&self) -> Option<DeviceError> {
        (self.shmem.as_ref().and_then(|d| d.audit()))
            .or_else(|| self.others.iter().find_map(|m| m.audit()))
    }

    fn has_arrivals(&self) -> bool {
        self.self_loop.has_arrivals()
            || self.shmem.as_ref().is_some_and(|d| d.has_arrivals())
            || (self.others_polled.iter()).any(|&i| self.others[i as usize].has_arrivals())
    }

    #[inline(always)]
    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        self.poll(true)
    }

    #[inline(always)]
    fn raw_release(&mut self, token: u64) {
        let (route, token) = Route::split(token);
        route!(self, route, d => d.raw_release(token))
    }

    fn remote_read(&mut self, src: Rank, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        match self.table.get(src as usize).copied() {
            Some(route) => route!(self, route, d => d.remote_read(src, addr, buf)),
            None => Err(DeviceError::NotAPeer {
                device: "composite",
                dest: src,
            }),
        }
    }

    fn remote_write(&mut self, dest: Rank, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        match self.table.get(dest as usize).copied() {
            Some(route) => route!(self, route, d => d.remote_write(dest, addr, data)),
            None => Err(DeviceError::NotAPeer {
                device: "composite",
                dest,
            }),
        }
    }

    #[inline]
    fn remote_memory_to(&self, peer: Rank) -> bool {
        match self.table.get(peer as usize) {
            Some(Route::Shmem) => self
                .shmem
                .as_ref()
                .is_some_and(|s| s.remote_memory_to(peer)),
            Some(Route::Other(i)) => self.others[*i as usize].remote_memory_to(peer),
            _ => false,
        }
    }

    fn stats(&self) -> DeviceStats {
        let mut s = DeviceStats::default();
        for (_, t) in self.member_stats() {
            s.packets_sent += t.packets_sent;
            s.packets_received += t.packets_received;
            s.bytes_sent += t.bytes_sent;
            s.bytes_received += t.bytes_received;
            s.dropped_malformed += t.dropped_malformed;
            s.dropped_invalid += t.dropped_invalid;
            s.no_buffer += t.no_buffer;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fm_devices::DeviceExt;

    #[test]
    fn off_host_rank_goes_to_null_and_reports_no_route() {
        let hosts = vec!["a".to_string(), "b".to_string()];
        let mut c = Composite::new(
            0,
            hosts.clone(),
            vec![
                Member::SelfLoop(SelfDevice::open(0)),
                Member::Null(NullDevice::open(hosts)),
            ],
        )
        .unwrap();
        let err = c.get_send_buffer(1, 8).err().expect("no route");
        let msg = err.to_string();
        assert!(matches!(err, DeviceError::NoRoute { dest: 1, .. }), "{msg}");
        assert!(msg.contains("rank 1") && msg.contains("\"b\""), "{msg}");
        let t = c.table().to_string();
        assert!(t.contains("self") && t.contains("null"), "{t}");
        // Self still works through the composite.
        let mut b = c.get_send_buffer(0, 3).unwrap();
        b.copy_from_slice(b"abc");
        b.send();
        let r = c.receive().unwrap();
        assert_eq!((&r[..], r.src()), (&b"abc"[..], 0));
    }

    #[test]
    fn routes_name_the_device_per_rank_and_a_missing_one_is_an_error() {
        let hosts = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let members = || {
            vec![
                Member::SelfLoop(SelfDevice::open(0)),
                Member::Null(NullDevice::open(hosts.clone())),
            ]
        };
        let routes = |r: &[&str]| {
            r.iter()
                .map(|s| s.parse().unwrap())
                .collect::<Vec<DeviceKind>>()
        };
        let c = Composite::with_routes(
            0,
            hosts.clone(),
            members(),
            &routes(&["self", "null", "null"]),
        )
        .unwrap();
        assert!(c.is_null_route(1) && c.is_null_route(2));
        let err = Composite::with_routes(
            0,
            hosts.clone(),
            members(),
            &routes(&["self", "null", "nic"]),
        )
        .err()
        .expect("no nic here");
        let msg = err.to_string();
        assert!(
            msg.contains("rank 2") && msg.contains("nic") && msg.contains("\"c\""),
            "{msg}"
        );
        let err = Composite::with_routes(0, hosts.clone(), members(), &routes(&["self"]))
            .err()
            .expect("too few routes");
        assert!(
            matches!(err, CompositeError::RouteCount { routes: 1, size: 3 }),
            "{err}"
        );
    }

    #[test]
    fn unreachable_rank_is_an_error_at_build() {
        let hosts = vec!["a".to_string(), "b".to_string()];
        let err = Composite::new(0, hosts, vec![Member::SelfLoop(SelfDevice::open(0))])
            .err()
            .expect("unreachable");
        assert!(err.to_string().contains("rank 1"), "{err}");
    }
}
