//! A host's collective area: memory that the members of a group on one
//! host all map, through which a small collective moves without a
//! message (fm's MPI uses it for its small collectives on communicators
//! whose members share a host; docs/MPI.md, "Collectives").
//!
//! Each member has two *cells*, one for even steps and one for odd: a
//! cell is the step it was last posted for, the length of what the member
//! contributed to it, and that contribution (up to
//! [`HostArea::slot_bytes`]), one after another from a cache line's
//! start, so that a small contribution travels with its step in one line.
//! A collective is one step of a sequence that every member numbers alike
//! (1, 2, …): for step `s` a member writes what it contributes into its
//! cell `s % 2`, then [`HostArea::post`]s `s` there (a release store); a
//! member that needs another's contribution waits until that member's
//! cell says `s` ([`HostArea::posted`], an acquire load) and reads it.
//! Posting `s` also says that the member is done with step `s − 1`, so a
//! member reuses its cell of step `s − 2` for step `s` once every member
//! has posted `s − 1` ([`HostArea::all_posted`]): a member runs at most
//! one step ahead of the slowest, and no cell is overwritten while it is
//! read.
//!
//! The area is a file of the job's beside its segment
//! (`fm-<job key>-area-…`, named from the members and an ID that all of
//! them pass, so no message is needed to find it): every member creates
//! or opens it, sizes it, maps it and counts itself in; the last one
//! removes the name, and the memory goes with the last mapping. fmrun
//! and the GRM remove the files of a job that died before that.
//!
//! A member that waits for a posted word and may sleep (`FM_WAIT`)
//! sleeps on its doorbell like any wait in fm: [`HostArea::post`] rings
//! the other members', and the waiter looks at the words in its re-check
//! ([`crate::Endpoint::extract_wait_while`]).

use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Cells start on a boundary of two cache lines, so that the
/// adjacent-line prefetcher does not tie two members' cells together.
const LINE: usize = 128;
/// Bytes of a cell before its data: the step and the length.
const CELL_HEADER: usize = 16;

/// A collective area of a group's members on one host.
pub struct HostArea {
    map: memmap2::MmapMut,
    ranks: Box<[Rank]>,
    me: usize,
    slot_bytes: usize,
    /// Bytes from one slot to the next.
    stride: usize,
}

// SAFETY: the mapping is only read and written through atomics and raw
// pointers whose use the protocol above orders; the area itself holds
// nothing a thread owns.
unsafe impl Send for HostArea {}
unsafe impl Sync for HostArea {}

impl HostArea {
    /// Bytes from one cell to the next, for slots of `slot_bytes`.
    fn stride(slot_bytes: usize) -> usize {
        (CELL_HEADER + slot_bytes).next_multiple_of(LINE)
    }

    /// Bytes the area of `members` members with slots of `slot_bytes`
    /// takes: two cells each, then the count of members that opened it.
    pub fn bytes(members: usize, slot_bytes: usize) -> usize {
        2 * members * HostArea::stride(slot_bytes) + LINE
    }

    /// The members' job ranks, in group order.
    pub fn ranks(&self) -> &[Rank] {
        &self.ranks
    }

    /// This process's number among the members.
    pub fn me(&self) -> usize {
        self.me
    }

    /// How many bytes each cell holds.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at + 8 <= self.map.len() && at.is_multiple_of(8));
        // SAFETY: `at` is 8-byte aligned inside the mapping (page
        // aligned), which lives as long as `self`; the word is only ever
        // accessed atomically.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// Where `member`'s cell for `step` starts.
    #[inline]
    fn cell(&self, member: usize, step: u64) -> usize {
        (2 * member + (step & 1) as usize) * self.stride
    }

    /// Whether `member` has posted `step` (or a later one).
    #[inline]
    pub fn posted(&self, member: usize, step: u64) -> bool {
        // The cell of `step`'s parity holds `step` or, once the member
        // went on, `step + 2` (which it posts only after every member,
        // this one too, posted `step + 1`).
        self.word(self.cell(member, step)).load(Ordering::Acquire) >= step
    }

    /// Whether every member has posted `step` (or a later one).
    #[inline]
    pub fn all_posted(&self, step: u64) -> bool {
        (0..self.ranks.len()).all(|m| self.posted(m, step))
    }

    /// Say that this member is done with `step − 1` and wrote what it
    /// contributes to `step` (a release: what it wrote into its cell is
    /// visible to a member that sees the step), and wake the members that
    /// may sleep.
    pub fn post(&self, ep: &Endpoint, step: u64) {
        self.word(self.cell(self.me, step))
            .store(step, Ordering::Release);
        for (m, &r) in self.ranks.iter().enumerate() {
            if m != self.me {
                ep.wake(r);
            }
        }
    }

    /// Where `member`'s contribution to `step` lies: [`HostArea::slot_bytes`]
    /// bytes. This member writes its own before it posts the step, and
    /// reads another's once that member posted it.
    #[inline]
    pub fn slot(&self, member: usize, step: u64) -> *mut u8 {
        let at = self.cell(member, step) + CELL_HEADER;
        // SAFETY: the cell lies inside the mapping (`HostArea::bytes`).
        unsafe { self.map.as_ptr().add(at).cast_mut() }
    }

    /// The length word of `member`'s contribution to `step`: what it says
    /// it contributed (written before the post, like the data).
    #[inline]
    pub fn slot_len(&self, member: usize, step: u64) -> &AtomicU64 {
        self.word(self.cell(member, step) + 8)
    }
}

/// A deterministic hash of the members (FNV-1a): part of the area's name,
/// so that two groups with the same first member and ID do not meet.
fn members_hash(ranks: &[Rank]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in ranks {
        for b in r.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn area_error(why: String) -> FmError {
    ErrorKind::Group(format!("a collective area: {why}")).into()
}

impl Endpoint {
    /// The collective area of `members` (job ranks, all on this host, this
    /// process among them) with slots of `slot_bytes`. Every member calls
    /// it with the same members in the same order, the same `id` (which
    /// tells apart the areas of groups with the same members, as long as
    /// both live) and the same `slot_bytes`; no message is exchanged.
    pub fn host_area(&self, members: &[Rank], id: u64, slot_bytes: usize) -> Result<HostArea> {
        let me = (members.iter())
            .position(|&r| r == self.rank())
            .ok_or_else(|| area_error(format!("rank {} is not a member", self.rank())))?;
        let dev = self.composite();
        let here = dev.host_of(self.rank());
        if let Some(&r) = members.iter().find(|&&r| dev.host_of(r) != here) {
            return Err(area_error(format!("member rank {r} is on another host")));
        }
        let Some(shm) = dev.shmem() else {
            return Err(area_error("no shared memory device on this host".into()));
        };
        let name = format!(
            "{}{}-{id:x}-{:x}",
            fm_devices::shmem::segment::AREA_FILES,
            members[0],
            members_hash(members)
        );
        let path = shm.job_file(&name);
        let len = HostArea::bytes(members.len(), slot_bytes);
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        // Every member sizes the file (a mapping past its end would fault),
        // each to the same length: whichever comes first, the others
        // change nothing.
        let map = opened
            .and_then(|f| f.set_len(len as u64).map(|()| f))
            // SAFETY: the job's file of this area, which every member
            // sizes alike and nothing truncates.
            .and_then(|f| unsafe { memmap2::MmapMut::map_mut(&f) })
            .map_err(|e| area_error(format!("{}: {e}", path.display())))?;
        let area = HostArea {
            map,
            ranks: members.into(),
            me,
            slot_bytes,
            stride: HostArea::stride(slot_bytes),
        };
        // Count in; the last member removes the name.
        let joined = area.word(len - LINE);
        if joined.fetch_add(1, Ordering::AcqRel) + 1 == members.len() as u64 {
            let _ = std::fs::remove_file(&path);
        }
        Ok(area)
    }

    /// Wake `rank`'s waits if it may sleep and shares this host: for a
    /// process that changed memory both map that `rank`'s wait looks at
    /// ([`Endpoint::extract_wait_while`]).
    pub fn wake(&self, rank: Rank) {
        if let Some(shm) = self.composite().shmem() {
            shm.wake(rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lists_hash_apart() {
        assert_ne!(members_hash(&[0, 1, 2]), members_hash(&[0, 1]));
        assert_ne!(members_hash(&[0, 1, 2]), members_hash(&[0, 2, 1]));
        assert_eq!(members_hash(&[3, 4]), members_hash(&[3, 4]));
    }

    #[test]
    fn cells_lie_apart_inside_the_area() {
        for (n, slot) in [(2, 8), (5, 100), (3, 4096)] {
            let stride = HostArea::stride(slot);
            assert!(stride >= CELL_HEADER + slot && stride.is_multiple_of(LINE));
            // The last cell ends before the count of members.
            assert!(2 * n * stride <= HostArea::bytes(n, slot) - LINE);
        }
    }
}
