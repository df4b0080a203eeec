//! PM/Composite (PMv2, thesis chapter 7): one device made of several.
//!
//! A *destination device table* maps every rank to the member device that
//! reaches it — self for this process, shmem for this host, a network for
//! other hosts, null where there is none — and one receive poll polls every
//! member that can receive, cheapest first (HPVM 1.9's unified polling: with
//! memory-notified devices each idle poll is one cached load, so no adaptive
//! scheme is needed). `Composite` is itself a [`Device`].

use fm_devices::null::NullDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::ShmemDevice;
use fm_devices::{Device, DeviceError, DeviceInfo, DeviceStats, Options, Rank, RawRecv, RawSend};
use std::fmt;

/// A member device. An enum, not `dyn`: dispatch is a jump table the
/// compiler can inline through.
pub enum Member {
    SelfLoop(SelfDevice),
    Shmem(ShmemDevice),
    Null(NullDevice),
}

macro_rules! each {
    ($m:expr, $d:ident => $e:expr) => {
        match $m {
            Member::SelfLoop($d) => $e,
            Member::Shmem($d) => $e,
            Member::Null($d) => $e,
        }
    };
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
    #[inline(always)]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        each!(self, d => d.raw_send_buffer(dest, len))
    }
    #[inline(always)]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        each!(self, d => d.raw_send(buf, len))
    }
    #[inline]
    fn raw_abort(&mut self, buf: RawSend) {
        each!(self, d => d.raw_abort(buf))
    }
    #[inline(always)]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        each!(self, d => d.raw_receive())
    }
    #[inline(always)]
    fn raw_release(&mut self, token: u64) {
        each!(self, d => d.raw_release(token))
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

/// Member tokens must fit below this bit; the member index sits above it.
const MEMBER_SHIFT: u32 = 56;

#[derive(Debug, thiserror::Error)]
pub enum CompositeError {
    #[error("rank {rank} on host {host:?} is reachable by no configured device ({tried})")]
    Unreachable {
        rank: Rank,
        host: String,
        tried: String,
    },
    #[error("the node map has {hosts} entries but the job has {size} ranks")]
    NodeMap { hosts: usize, size: usize },
}

pub struct Composite {
    rank: Rank,
    members: Vec<Member>,
    /// rank → member index.
    table: Vec<u8>,
    /// Members that can receive, cheapest first.
    poll_order: Vec<u8>,
    hosts: Vec<String>,
}

impl Composite {
    /// Build the table for `rank` given every rank's host. Choice per peer, as
    /// PM/Composite: same process → self; otherwise the first member (in the
    /// order given: put faster ones first) that reaches it. A rank that no
    /// member reaches is an error now, not at first send.
    pub fn new(
        rank: Rank,
        hosts: Vec<String>,
        members: Vec<Member>,
    ) -> Result<Self, CompositeError> {
        let mut table = Vec::with_capacity(hosts.len());
        for (r, host) in hosts.iter().enumerate() {
            let r = r as Rank;
            let pick = members.iter().position(|m| m.reaches(r)).or_else(|| {
                // Nobody reaches it: the null transport takes it and reports no route.
                members.iter().position(|m| matches!(m, Member::Null(_)))
            });
            match pick {
                Some(i) => table.push(i as u8),
                None => {
                    let tried: Vec<&str> = members.iter().map(|m| m.info().name).collect();
                    return Err(CompositeError::Unreachable {
                        rank: r,
                        host: host.clone(),
                        tried: tried.join(", "),
                    });
                }
            }
        }
        let mut poll_order: Vec<u8> = (0..members.len() as u8)
            .filter(|&i| {
                members[i as usize]
                    .info()
                    .options
                    .contains(Options::RECEIVES)
            })
            .collect();
        // Cheapest poll first: self is a local queue, shmem one cached load.
        poll_order.sort_by_key(|&i| match members[i as usize] {
            Member::SelfLoop(_) => 0,
            Member::Shmem(_) => 1,
            Member::Null(_) => 2,
        });
        Ok(Composite {
            rank,
            members,
            table,
            poll_order,
            hosts,
        })
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

    /// The member device that carries packets to `dest`.
    pub fn device_for(&self, dest: Rank) -> Option<&Member> {
        self.table
            .get(dest as usize)
            .map(|&i| &self.members[i as usize])
    }

    /// The member devices.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Mutable access to a member, for calling a device directly (benchmarks).
    pub fn members_mut(&mut self) -> &mut [Member] {
        &mut self.members
    }

    /// The destination device table, printable as Table 7.1 of the thesis.
    pub fn table(&self) -> DeviceTable<'_> {
        DeviceTable(self)
    }
}

/// Display of a composite's destination device table.
pub struct DeviceTable<'a>(&'a Composite);

impl fmt::Display for DeviceTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.0;
        writeln!(f, "destination device table of rank {}", c.rank)?;
        writeln!(f, "{:>6}  {:<24}  device", "rank", "host")?;
        for (r, &i) in c.table.iter().enumerate() {
            writeln!(
                f,
                "{:>6}  {:<24}  {}",
                r,
                c.hosts[r],
                c.members[i as usize].info().name
            )?;
        }
        Ok(())
    }
}

impl Device for Composite {
    fn info(&self) -> DeviceInfo {
        let mut options = Options::RECEIVES;
        let mut mtu = usize::MAX;
        for m in &self.members {
            let i = m.info();
            options = Options(options.0 | i.options.0);
            if i.mtu > 0 {
                mtu = mtu.min(i.mtu);
            }
        }
        DeviceInfo {
            name: "composite",
            options,
            mtu: if mtu == usize::MAX { 0 } else { mtu },
        }
    }

    fn reaches(&self, dest: Rank) -> bool {
        self.device_for(dest).is_some_and(|m| m.reaches(dest))
    }

    fn window(&self, dest: Rank) -> u32 {
        self.device_for(dest).map_or(0, |m| m.window(dest))
    }

    #[inline(always)]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        let Some(&i) = self.table.get(dest as usize) else {
            return Err(DeviceError::NotAPeer {
                device: "composite",
                dest,
            });
        };
        let mut buf = self.members[i as usize].raw_send_buffer(dest, len)?;
        debug_assert!(buf.token >> MEMBER_SHIFT == 0);
        buf.token |= (i as u64) << MEMBER_SHIFT;
        Ok(buf)
    }

    #[inline(always)]
    fn raw_send(&mut self, mut buf: RawSend, len: usize) {
        let i = (buf.token >> MEMBER_SHIFT) as usize;
        buf.token &= (1 << MEMBER_SHIFT) - 1;
        self.members[i].raw_send(buf, len)
    }

    fn raw_abort(&mut self, mut buf: RawSend) {
        let i = (buf.token >> MEMBER_SHIFT) as usize;
        buf.token &= (1 << MEMBER_SHIFT) - 1;
        self.members[i].raw_abort(buf)
    }

    #[inline(always)]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        for &i in &self.poll_order {
            if let Some(mut r) = self.members[i as usize].raw_receive() {
                debug_assert!(r.token >> MEMBER_SHIFT == 0);
                r.token |= (i as u64) << MEMBER_SHIFT;
                return Some(r);
            }
        }
        None
    }

    #[inline(always)]
    fn raw_release(&mut self, token: u64) {
        let i = (token >> MEMBER_SHIFT) as usize;
        self.members[i].raw_release(token & ((1 << MEMBER_SHIFT) - 1))
    }

    fn remote_read(&mut self, src: Rank, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        match self.table.get(src as usize) {
            Some(&i) => self.members[i as usize].remote_read(src, addr, buf),
            None => Err(DeviceError::NotAPeer {
                device: "composite",
                dest: src,
            }),
        }
    }

    fn remote_write(&mut self, dest: Rank, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        match self.table.get(dest as usize) {
            Some(&i) => self.members[i as usize].remote_write(dest, addr, data),
            None => Err(DeviceError::NotAPeer {
                device: "composite",
                dest,
            }),
        }
    }

    fn remote_memory_to(&self, peer: Rank) -> bool {
        self.device_for(peer)
            .is_some_and(|m| m.remote_memory_to(peer))
    }

    fn stats(&self) -> DeviceStats {
        let mut s = DeviceStats::default();
        for m in &self.members {
            let t = m.stats();
            s.packets_sent += t.packets_sent;
            s.packets_received += t.packets_received;
            s.bytes_sent += t.bytes_sent;
            s.bytes_received += t.bytes_received;
            s.dropped_malformed += t.dropped_malformed;
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
    fn unreachable_rank_is_an_error_at_build() {
        let hosts = vec!["a".to_string(), "b".to_string()];
        let err = Composite::new(0, hosts, vec![Member::SelfLoop(SelfDevice::open(0))])
            .err()
            .expect("unreachable");
        assert!(err.to_string().contains("rank 1"), "{err}");
    }
}
