//! Collectives through a host's area ([`super`]): what each shape
//! of step writes and reads, over the caller's memory. fm's MPI and FM
//! programs' groups both run their small collectives on one host as
//! these: the caller names its buffers as [`Region`]s (fm's MPI packs
//! what is not one run of bytes first, and unpacks after).

use super::{Shape, Step, Steps, Watch};
use crate::Endpoint;
use fm_coll::Combine;
use std::sync::Arc;

/// `len` bytes of the caller's at `ptr`, which a collective reads or
/// writes while it runs.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Region {
    /// The region of `b`, which the collective only reads.
    pub fn of(b: &[u8]) -> Region {
        Region {
            ptr: b.as_ptr().cast_mut(),
            len: b.len(),
        }
    }

    pub fn of_mut(b: &mut [u8]) -> Region {
        Region {
            ptr: b.as_mut_ptr(),
            len: b.len(),
        }
    }

    /// # Safety
    /// The region is writable (and nothing else uses it) for `'a`.
    unsafe fn bytes_mut<'a>(self) -> &'a mut [u8] {
        match self.len {
            0 => &mut [],
            // SAFETY: forwarded to the caller.
            n => unsafe { std::slice::from_raw_parts_mut(self.ptr, n) },
        }
    }
}

/// What a step failed on.
#[derive(Debug)]
pub enum AreaError<E> {
    /// `member`'s part was `got` bytes (`None`: more than the area
    /// holds) where this member expected `want`: the members passed
    /// different lengths (or roots).
    Mismatch {
        member: usize,
        got: Option<usize>,
        want: usize,
    },
    /// This member's part is `len` bytes, more than the area's `room`:
    /// it passed more than the others.
    TooLong { len: usize, room: usize },
    /// The reduction's own error.
    Combine(E),
}

/// A collective, over the caller's regions. A member that keeps nothing
/// (a rooted collective's other members) passes empty lists.
pub enum Collective<R> {
    Barrier,
    /// The root's `data` into every other member's.
    Bcast {
        root: usize,
        data: Region,
    },
    /// Every member's `input` combined in member order into `result` at
    /// `root` (`None`: at every member). `input` may be `result` itself
    /// (it is read before the result forms).
    Reduce {
        root: Option<usize>,
        input: Region,
        result: Region,
        reduction: R,
    },
    /// Every member's `mine` into `all`, a block per member, at `root`
    /// (`None`: at every member). `mine` is `None` where this member's
    /// block is already in `all` (MPI's in-place).
    Gather {
        root: Option<usize>,
        mine: Option<Region>,
        all: Vec<Region>,
    },
    /// The root's blocks `all`, one per member, into each member's
    /// `mine` (`None` at the root: its block stays where it is).
    Scatter {
        root: usize,
        all: Vec<Region>,
        mine: Option<Region>,
    },
    /// Every member's block `send[j]` into member j's `recv[i]` (blocks
    /// of one length).
    Alltoall {
        send: Vec<Region>,
        recv: Vec<Region>,
    },
}

impl<R> Collective<R> {
    fn shape(&self) -> Shape {
        match self {
            Collective::Barrier => Shape::Barrier,
            Collective::Bcast { root, .. } | Collective::Scatter { root, .. } => {
                Shape::Bcast(*root)
            }
            Collective::Reduce { root, .. } | Collective::Gather { root, .. } => {
                Shape::Gather(*root)
            }
            Collective::Alltoall { .. } => Shape::Gather(None),
        }
    }
}

/// One collective through the area: the group's next step.
pub struct AreaOp<R> {
    step: Step,
    what: Collective<R>,
}

// SAFETY: the regions are the caller's, which it keeps for the
// collective and uses from one thread at a time (`AreaOp::new`).
unsafe impl<R: Send> Send for AreaOp<R> {}

impl<R: Combine> AreaOp<R> {
    /// Collective `what` as the next step of `steps`' group.
    ///
    /// # Safety
    /// Its regions stay valid, and used by nothing else, until the op is
    /// done or dropped.
    pub unsafe fn new(steps: &Arc<Steps>, what: Collective<R>) -> AreaOp<R> {
        AreaOp {
            step: Step::next(steps, what.shape()),
            what,
        }
    }

    /// What it waits for now, if it waits for other members.
    pub fn watch(&self) -> Option<Watch> {
        self.step.watch()
    }

    /// Go as far as possible without waiting; whether it is done. Once
    /// it returned an error it is done (the group's next step goes on).
    pub fn advance(&mut self, ep: &Endpoint) -> Result<bool, AreaError<R::Error>> {
        if !self.step.posted() {
            if !self.step.may_start() {
                return Ok(false);
            }
            let wrote = match self.step.writes() {
                true => self.write(),
                false => Ok(0),
            };
            // Posted even when the part did not fit (the readers are
            // told), so that nobody waits for ever.
            self.step.post(ep, wrote.as_ref().ok().copied());
            if let Err(e) = wrote {
                self.step.finish();
                return Err(e);
            }
        }
        if !self.step.ready() {
            return Ok(false);
        }
        let read = self.read();
        self.step.finish();
        read.map(|()| true)
    }

    fn me(&self) -> usize {
        self.step.area().me()
    }

    /// This member's part, into its slot: its bytes.
    fn write(&self) -> Result<usize, AreaError<R::Error>> {
        let one = std::slice::from_ref;
        let mine: &[Region] = match &self.what {
            Collective::Barrier => return Ok(0),
            Collective::Bcast { data, .. } => one(data),
            Collective::Reduce { input, .. } => one(input),
            Collective::Gather { mine: Some(m), .. } => one(m),
            Collective::Gather { all, .. } => one(&all[self.me()]),
            Collective::Scatter { all, .. } => all,
            Collective::Alltoall { send, .. } => send,
        };
        let room = self.step.area().slot_bytes();
        let len: usize = mine.iter().map(|r| r.len).sum();
        if len > room {
            return Err(AreaError::TooLong { len, room });
        }
        let mut at = self.step.slot();
        for r in mine {
            // SAFETY: the caller's region is readable (`new`); the
            // regions together fit the slot.
            unsafe { std::ptr::copy_nonoverlapping(r.ptr, at, r.len) };
            at = at.wrapping_add(r.len);
        }
        Ok(len)
    }

    /// `member`'s part, checked to be `want` bytes long.
    fn part(&self, member: usize, want: usize) -> Result<&[u8], AreaError<R::Error>> {
        match self.step.part(member) {
            Some(p) if p.len() == want => Ok(p),
            got => Err(AreaError::Mismatch {
                member,
                got: got.map(<[u8]>::len),
                want,
            }),
        }
    }

    /// This member's block of `member`'s part of a block per member.
    fn block(&self, member: usize, want: usize) -> Result<&[u8], AreaError<R::Error>> {
        let (n, me) = (self.step.area().ranks().len(), self.me());
        Ok(&self.part(member, n * want)?[me * want..(me + 1) * want])
    }

    /// What this member keeps from the others' parts.
    fn read(&self) -> Result<(), AreaError<R::Error>> {
        let me = self.me();
        let keeps = |root: &Option<usize>| root.is_none_or(|r| r == me);
        // SAFETY (every region below): the caller's, writable (`new`).
        match &self.what {
            Collective::Barrier => {}
            Collective::Bcast { root, data } => {
                if *root != me {
                    let p = self.part(*root, data.len)?;
                    unsafe { data.bytes_mut() }.copy_from_slice(p);
                }
            }
            Collective::Reduce {
                root,
                result,
                reduction,
                ..
            } if keeps(root) => {
                let n = self.step.area().ranks().len();
                let acc = unsafe { result.bytes_mut() };
                acc.copy_from_slice(self.part(n - 1, result.len)?);
                for m in (0..n - 1).rev() {
                    let p = self.part(m, result.len)?;
                    reduction.combine(p, acc).map_err(AreaError::Combine)?;
                }
            }
            Collective::Gather { root, mine, all } if keeps(root) => {
                for (m, block) in all.iter().enumerate() {
                    if m != me || mine.is_some() {
                        let p = self.part(m, block.len)?;
                        unsafe { block.bytes_mut() }.copy_from_slice(p);
                    }
                }
            }
            Collective::Reduce { .. } | Collective::Gather { .. } => {}
            Collective::Scatter { root, mine, .. } => {
                if let Some(r) = mine {
                    let p = self.block(*root, r.len)?;
                    unsafe { r.bytes_mut() }.copy_from_slice(p);
                }
            }
            Collective::Alltoall { recv, .. } => {
                for (m, r) in recv.iter().enumerate() {
                    let p = self.block(m, r.len)?;
                    unsafe { r.bytes_mut() }.copy_from_slice(p);
                }
            }
        }
        Ok(())
    }
}
