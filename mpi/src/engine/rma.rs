//! One-sided communication's engine (MPI-4.0 chapter 12): windows as
//! their targets serve them and their origins count them.
//!
//! Every access (put, get, accumulate, get-accumulate, compare-and-swap)
//! is one FM message to the target's `mpi-rma` handler, which checks it
//! against the window's bounds and applies it as it arrives: a put's data
//! is received straight into the window, an accumulate is combined with
//! the window's elements. Accesses are applied one at a time in arrival
//! order by the target's own thread, so accumulates to one location are
//! atomic and ordered per origin, as MPI asks. The answer (`DONE`, with
//! the old data of a get or get-accumulate) is queued and sent by
//! progress, as handlers never wait for credit; a get's data is read from
//! the window when its answer is sent. An origin counts its accesses
//! without an answer per target: a flush, an unlock, a fence or the end
//! of an access epoch waits until that count is zero, which means every
//! access was applied at its target.
//!
//! Locks are granted by the target (`LOCK` → `GRANTED`, first come first
//! served); post/start/complete/wait is `POSTED` from the target and
//! `COMPLETE` from the origin. A window is named on the wire by the
//! context id of its own communicator, which every member has; a message
//! for a window this process has not made yet (a peer's `MPI_Win_lock`
//! right after its `MPI_Win_create` returned) is kept whole until it does.

use super::*;
use crate::coll::op::{combine, defined, Elem, Predefined};

/// The FM handler of one-sided messages.
pub(crate) const RMA: u16 = 8;

/// What a one-sided message is: accesses and control to a target, then
/// answers to an origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Put = 1,
    Get = 2,
    Accumulate = 3,
    /// Get-accumulate, and fetch-and-op: the old data back, then the
    /// operation applied (`MPI_NO_OP`: a get that is atomic).
    GetAccumulate = 4,
    /// Compare-and-swap: the data is the new value then the compared one.
    CompareSwap = 5,
    /// A lock (the op field: 1 exclusive, 0 shared).
    Lock = 6,
    Unlock = 7,
    /// The end of an access epoch of post/start/complete/wait.
    Complete = 8,
    /// An access's answer: its error class and any old data.
    Done = 9,
    Granted = 10,
    /// The target opened an exposure epoch to this origin (`MPI_Win_post`).
    Posted = 11,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        use Kind::*;
        [
            Put,
            Get,
            Accumulate,
            GetAccumulate,
            CompareSwap,
            Lock,
            Unlock,
            Complete,
            Done,
            Granted,
            Posted,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }
}

/// Bytes of messages kept for windows not made yet: a peer's window is
/// made at most a collective call later, so only a bug fills this.
const EARLY_LIMIT: usize = 64 << 20;

/// A map of this process's own small numbers (window ids, ranks,
/// operation numbers), hashed by one multiplication: SipHash, the
/// default, was a fifth of a small put's time.
type Map<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Mix>>;

#[derive(Default)]
struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Data up to this many bytes is copied behind an access's head and
/// sent as one piece (cheaper than a message of pieces).
const GATHERED: usize = 1024;

/// kind, window, the origin's number for the operation.
const HEAD: usize = 9;
/// disp, count, extent, op, element, number of blocks.
const ACCESS: usize = 8 + 8 + 8 + 4 + 4 + 4;

/// Where at the target an access goes: `count` copies of the target
/// datatype's `blocks`, `extent` apart, from displacement `disp` (in the
/// target's displacement units), and the operation on its elements.
pub struct Access<'a> {
    pub disp: i64,
    pub count: u64,
    pub extent: i64,
    pub blocks: &'a [(isize, usize)],
    /// `MPI_Op` handle (0 for put and get) and the target datatype's
    /// predefined element type.
    pub op: i32,
    pub elem: i32,
}

/// A target's lock on its window: held by one exclusive origin or by
/// shared ones, the others waiting first come first served.
#[derive(Default)]
struct Lock {
    exclusive: Option<Rank>,
    shared: usize,
    waiting: VecDeque<(Rank, bool)>,
}

impl Lock {
    fn free_for(&self, exclusive: bool) -> bool {
        self.exclusive.is_none() && (!exclusive || self.shared == 0)
    }

    fn take(&mut self, who: Rank, exclusive: bool) {
        match exclusive {
            true => self.exclusive = Some(who),
            false => self.shared += 1,
        }
    }
}

/// One window as this process sees it: its memory as a target, and as an
/// origin what it waits for.
pub struct Window {
    /// Where displacement 0 is, and the bytes from there the window has.
    base: usize,
    size: usize,
    disp_unit: usize,
    /// A dynamic window: displacements are addresses, which must lie in
    /// the regions attached (`MPI_Win_attach`), kept in address order.
    dynamic: bool,
    attached: Vec<(usize, usize)>,
    lock: Lock,
    /// Accesses to each target without an answer yet, and in all.
    outstanding: Map<Rank, usize>,
    total: usize,
    /// Answers not consumed yet: locks granted, epochs posted to this
    /// origin, access epochs completed at this target.
    granted: Map<Rank, usize>,
    posted: Map<Rank, usize>,
    completed: Map<Rank, usize>,
    /// The first error a target answered, reported at the next
    /// synchronisation.
    failed: Option<MpiError>,
}

/// An access waiting for its answer.
struct Pending {
    window: u32,
    to: Rank,
    /// A request to complete (`MPI_Rput`…).
    request: Option<u32>,
    /// Where the old data goes.
    result: Option<Unpack>,
}

/// What progress sends for the handlers, which never wait for credit.
enum Out {
    Control {
        to: Rank,
        kind: Kind,
        window: u32,
    },
    /// An access's answer: its error class and any old data.
    Done {
        to: Rank,
        window: u32,
        op: u32,
        class: c_int,
        data: Vec<u8>,
    },
    /// A get's answer, gathered from the window when it is sent (so that
    /// a flood of gets queues their addresses, not their data).
    Get {
        to: Rank,
        window: u32,
        op: u32,
        blocks: Vec<(usize, usize)>,
    },
}

/// The process's windows and what is under way on them. Handlers reach
/// it through the matching state: they apply accesses as they arrive.
#[derive(Default)]
pub(crate) struct Rma {
    windows: Map<u32, Window>,
    /// Messages for windows not made here yet, whole, in arrival order,
    /// and their bytes.
    early: Vec<(Rank, Vec<u8>)>,
    early_bytes: usize,
    /// Messages dropped because `early` was full: a window never made
    /// (a peer's bug), counted and said.
    pub(crate) dropped: u64,
    pending: Map<u32, Pending>,
    next: u32,
    outbox: VecDeque<Out>,
}

impl Rma {
    pub(crate) fn has_outbox(&self) -> bool {
        !self.outbox.is_empty()
    }
}

/// Where a one-sided message's bytes are read from: the arriving FM
/// message, or one kept because it came early.
trait Source {
    fn remaining(&self) -> usize;
    fn read(&mut self, buf: &mut [u8]) -> fm::Result<usize>;
    fn read_vec(&mut self) -> fm::Result<Vec<u8>>;
}

impl Source for Incoming<'_> {
    fn remaining(&self) -> usize {
        Incoming::remaining(self)
    }
    fn read(&mut self, buf: &mut [u8]) -> fm::Result<usize> {
        self.receive(buf)
    }
    fn read_vec(&mut self) -> fm::Result<Vec<u8>> {
        self.receive_vec()
    }
}

impl Source for &[u8] {
    fn remaining(&self) -> usize {
        self.len()
    }
    fn read(&mut self, buf: &mut [u8]) -> fm::Result<usize> {
        let n = buf.len().min(self.len());
        buf[..n].copy_from_slice(&self[..n]);
        *self = &self[n..];
        Ok(n)
    }
    fn read_vec(&mut self) -> fm::Result<Vec<u8>> {
        Ok(std::mem::take(self).to_vec())
    }
}

/// The handler: the message is served at once (an access applied, its
/// answer queued for progress to send).
pub(crate) fn on_rma(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let src = m.src();
    let mut h = [0u8; HEAD];
    if m.receive(&mut h)? < HEAD {
        tracing::warn!(
            src,
            "mpi: a one-sided message shorter than its head: dropped"
        );
        return Ok(());
    }
    let mut sh = lock(shared);
    if !sh.rma.windows.contains_key(&u32_at(&h, 1)) {
        let mut whole = h.to_vec();
        whole.extend(m.receive_vec()?);
        if sh.rma.early_bytes + whole.len() > EARLY_LIMIT {
            sh.rma.dropped += 1;
            tracing::warn!(
                src,
                dropped = sh.rma.dropped,
                "mpi: one-sided messages for windows this process never made fill {EARLY_LIMIT} bytes: dropped"
            );
            return Ok(());
        }
        sh.rma.early_bytes += whole.len();
        sh.rma.early.push((src, whole));
        return Ok(());
    }
    serve(&mut sh, src, &h, m)
}

fn head(kind: Kind, window: u32, op: u32) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[0] = kind as u8;
    h[1..5].copy_from_slice(&window.to_le_bytes());
    h[5..9].copy_from_slice(&op.to_le_bytes());
    h
}

fn i64_at(b: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]))
}

fn i32_at(b: &[u8], i: usize) -> i32 {
    u32_at(b, i) as i32
}

fn range_error(why: String) -> MpiError {
    MpiError {
        class: MPI_ERR_RMA_RANGE,
        message: why,
    }
}

impl Window {
    /// A window of `size` bytes at `base`; dynamic: of regions attached later.
    pub fn new(base: usize, size: usize, disp_unit: usize, dynamic: bool) -> Window {
        Window {
            base,
            size,
            disp_unit,
            dynamic,
            attached: Vec::new(),
            lock: Lock::default(),
            outstanding: Map::default(),
            total: 0,
            granted: Map::default(),
            posted: Map::default(),
            completed: Map::default(),
            failed: None,
        }
    }

    /// The answers of `kind` (granted, posted, complete) not consumed
    /// yet, by who sent them.
    fn answers(&mut self, kind: Kind) -> &mut Map<Rank, usize> {
        match kind {
            Kind::Granted => &mut self.granted,
            Kind::Posted => &mut self.posted,
            _ => &mut self.completed,
        }
    }

    /// Whether bytes `lo..hi` (addresses) lie in the window, or in
    /// attached regions that follow each other without a gap.
    fn holds(&self, lo: i128, hi: i128) -> bool {
        if !self.dynamic {
            let base = self.base as i128;
            return lo >= base && hi <= base + self.size as i128;
        }
        // `attached` is kept sorted by address.
        let mut covered = lo;
        for &(at, len) in &self.attached {
            let (at, end) = (at as i128, at as i128 + len as i128);
            if at <= covered && end > covered {
                covered = end;
            }
        }
        covered >= hi
    }

    /// The addresses of an access's blocks in order, all checked to lie
    /// inside the window, or why not.
    fn blocks(&self, a: &Access<'_>) -> Result<Vec<(usize, usize)>, MpiError> {
        // Bounded before the list is made: a count of copies of an
        // extent of 0 would otherwise be a list as long as the count.
        let per: u64 = a.blocks.iter().map(|b| b.1 as u64).sum();
        if (a.count.checked_mul(per)).is_none_or(|n| n > u32::MAX as u64) {
            return Err(range_error(format!(
                "{} copies of {per} bytes: more than one access moves",
                a.count
            )));
        }
        let origin = (a.disp as i128) * self.disp_unit as i128
            + match self.dynamic {
                false => self.base as i128,
                true => 0,
            };
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        if a.count > 0 {
            for &(off, len) in a.blocks {
                for i in [0, a.count as i128 - 1] {
                    let at = origin + i * a.extent as i128 + off as i128;
                    lo = lo.min(at);
                    hi = hi.max(at + len as i128);
                }
            }
        }
        if lo > hi {
            return Ok(Vec::new());
        }
        let outside = || {
            range_error(match self.dynamic {
                true => format!(
                    "bytes {lo:#x}..{hi:#x} are not all in regions attached to the dynamic window"
                ),
                false => format!(
                    "bytes {}..{} of a window of {} bytes",
                    lo - self.base as i128,
                    hi - self.base as i128,
                    self.size
                ),
            })
        };
        // The whole span inside: every block is. Otherwise only a dynamic
        // window's blocks may still be, each in some region (with gaps
        // between regions that no block touches).
        let spanned = self.holds(lo, hi);
        if !spanned && !self.dynamic {
            return Err(outside());
        }
        if let ([(off, len)], true) = (a.blocks, spanned) {
            if *len as i64 == a.extent {
                // Elements that follow each other without a gap: one block.
                let at = (origin + *off as i128) as usize;
                return Ok(vec![(at, *len * a.count as usize)]);
            }
        }
        // Blocks that follow each other are one.
        let mut out: Vec<(usize, usize)> = Vec::new();
        for i in 0..a.count as i128 {
            for &(off, len) in a.blocks {
                let at = origin + i * a.extent as i128 + off as i128;
                if !spanned && !self.holds(at, at + len as i128) {
                    return Err(outside());
                }
                match out.last_mut() {
                    Some((p, l)) if *p as i128 + *l as i128 == at => *l += len,
                    _ => out.push((at as usize, len)),
                }
            }
        }
        Ok(out)
    }
}

/// The window's bytes at `blocks`, one after another.
///
/// # Safety
/// The blocks lie in the window's memory ([`Window::blocks`]).
unsafe fn gather(blocks: &[(usize, usize)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(blocks.iter().map(|b| b.1).sum());
    for &(at, len) in blocks {
        v.extend_from_slice(std::slice::from_raw_parts(at as *const u8, len));
    }
    v
}

/// `data` written over the window's bytes at `blocks`.
///
/// # Safety
/// As [`gather`]; `data` is as long as the blocks.
unsafe fn scatter(blocks: &[(usize, usize)], data: &[u8]) {
    let mut i = 0;
    for &(at, len) in blocks {
        std::ptr::copy(data[i..i + len].as_ptr(), at as *mut u8, len);
        i += len;
    }
}

/// Serve one message for a window this process has (`head` read; the
/// rest in `m`).
fn serve(sh: &mut Matching, src: Rank, head: &[u8; HEAD], m: &mut impl Source) -> fm::Result<()> {
    let (Some(kind), window, op) = (Kind::of(head[0]), u32_at(head, 1), u32_at(head, 5)) else {
        tracing::warn!(src, "mpi: a one-sided message of no known kind: dropped");
        return Ok(());
    };
    let rma = &mut sh.rma;
    let Some(w) = rma.windows.get_mut(&window) else {
        return Ok(());
    };
    match kind {
        Kind::Done => answered(sh, src, op, m),
        Kind::Granted | Kind::Posted | Kind::Complete => {
            *w.answers(kind).entry(src).or_default() += 1;
            Ok(())
        }
        Kind::Lock => {
            lock_asked(w, &mut rma.outbox, window, src, op != 0);
            Ok(())
        }
        Kind::Unlock => {
            unlocked(w, &mut rma.outbox, window, src);
            Ok(())
        }
        _ => {
            let answer = match access(w, kind, m)? {
                Ok(Answer::Get(blocks)) => Out::Get {
                    to: src,
                    window,
                    op,
                    blocks,
                },
                Ok(Answer::Old(data)) => Out::Done {
                    to: src,
                    window,
                    op,
                    class: MPI_SUCCESS,
                    data,
                },
                Err(e) => {
                    tracing::warn!(src, why = %e.message, "mpi: a one-sided access refused");
                    m.read_vec()?;
                    Out::Done {
                        to: src,
                        window,
                        op,
                        class: e.class,
                        data: Vec::new(),
                    }
                }
            };
            rma.outbox.push_back(answer);
            Ok(())
        }
    }
}

/// A lock `src` asks for: granted at once if no one holds or waits for
/// it in a way that excludes it, else queued.
fn lock_asked(w: &mut Window, outbox: &mut VecDeque<Out>, window: u32, src: Rank, exclusive: bool) {
    if w.lock.waiting.is_empty() && w.lock.free_for(exclusive) {
        w.lock.take(src, exclusive);
        outbox.push_back(Out::Control {
            to: src,
            kind: Kind::Granted,
            window,
        });
    } else {
        w.lock.waiting.push_back((src, exclusive));
    }
}

/// `src` gave its lock up: those waiting are granted it in order, as far
/// as they may hold it together.
fn unlocked(w: &mut Window, outbox: &mut VecDeque<Out>, window: u32, src: Rank) {
    match w.lock.exclusive {
        Some(r) if r == src => w.lock.exclusive = None,
        _ if w.lock.shared > 0 => w.lock.shared -= 1,
        _ => tracing::warn!(src, "mpi: an unlock of a window not locked: ignored"),
    }
    while let Some(&(to, ex)) = w.lock.waiting.front() {
        if !w.lock.free_for(ex) {
            break;
        }
        w.lock.waiting.pop_front();
        w.lock.take(to, ex);
        outbox.push_back(Out::Control {
            to,
            kind: Kind::Granted,
            window,
        });
    }
}

/// What an access answers: data gathered when the answer is sent (a
/// get), or at once (old data of an accumulate; none for a put).
enum Answer {
    Get(Vec<(usize, usize)>),
    Old(Vec<u8>),
}

/// An access applied to window `w` as it arrives.
fn access(w: &Window, kind: Kind, m: &mut impl Source) -> fm::Result<MpiResult<Answer>> {
    let mut f = [0u8; ACCESS];
    let mut list = Vec::new();
    let n = match m.read(&mut f)? {
        ACCESS => u32_at(&f, 32) as usize,
        _ => return Ok(err(MPI_ERR_OTHER, "a one-sided access cut short")),
    };
    if n.checked_mul(16).is_none_or(|b| b > m.remaining()) {
        return Ok(err(MPI_ERR_OTHER, "a one-sided access cut short"));
    }
    list.resize(n * 16, 0);
    m.read(&mut list)?;
    let blocks: Vec<(isize, usize)> = (list.chunks_exact(16))
        .map(|c| (i64_at(c, 0) as isize, i64_at(c, 8) as usize))
        .collect();
    let a = Access {
        disp: i64_at(&f, 0),
        count: i64_at(&f, 8) as u64,
        extent: i64_at(&f, 16),
        blocks: &blocks,
        op: i32_at(&f, 24),
        elem: i32_at(&f, 28),
    };
    let blocks = match w.blocks(&a) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    let bytes: usize = blocks.iter().map(|b| b.1).sum();
    let data_len = match kind {
        Kind::Get => 0,
        Kind::CompareSwap => 2 * bytes,
        _ => bytes,
    };
    let no_op = Predefined::of(a.op) == Some(Predefined::NoOp);
    if m.remaining() != data_len && !(kind == Kind::GetAccumulate && no_op && m.remaining() == 0) {
        return Ok(err(
            MPI_ERR_TYPE,
            "the origin's data and the target's datatype differ in size",
        ));
    }
    // SAFETY (every block): checked to lie in the window's memory, which
    // the program gave this window until it is freed.
    match kind {
        Kind::Put => {
            for &(at, len) in &blocks {
                m.read(unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) })?;
            }
            Ok(Ok(Answer::Old(Vec::new())))
        }
        Kind::Get => Ok(Ok(Answer::Get(blocks))),
        Kind::Accumulate | Kind::GetAccumulate => accumulate(kind, &a, &blocks, m),
        Kind::CompareSwap => {
            let data = m.read_vec()?;
            let old = unsafe { gather(&blocks) };
            let (new, compare) = data.split_at(bytes);
            if old == compare {
                unsafe { scatter(&blocks, new) };
            }
            Ok(Ok(Answer::Old(old)))
        }
        _ => Ok(err(MPI_ERR_OTHER, "not an access")),
    }
}

/// An accumulate (or get-accumulate) applied to the window's `blocks`.
///
/// # Safety (inside)
/// The blocks were checked to lie in the window ([`Window::blocks`]).
fn accumulate(
    kind: Kind,
    a: &Access<'_>,
    blocks: &[(usize, usize)],
    m: &mut impl Source,
) -> fm::Result<MpiResult<Answer>> {
    let bytes: usize = blocks.iter().map(|b| b.1).sum();
    let (p, e) = match (Predefined::of(a.op), Elem::of(a.elem)) {
        (Some(p), Some(e)) if defined(p, e) && bytes.is_multiple_of(e.size()) => (p, e),
        _ => {
            return Ok(err(
                MPI_ERR_OP,
                "the operation is not defined on the target's datatype",
            ))
        }
    };
    let data = m.read_vec()?;
    let old = match kind {
        Kind::GetAccumulate => unsafe { gather(blocks) },
        _ => Vec::new(),
    };
    match (p, blocks) {
        (Predefined::NoOp, _) => {}
        // One block: combined where it lies.
        (_, &[(at, len)]) => combine(p, e, &data, unsafe {
            std::slice::from_raw_parts_mut(at as *mut u8, len)
        }),
        _ => {
            let mut new = unsafe { gather(blocks) };
            combine(p, e, &data, &mut new);
            unsafe { scatter(blocks, &new) };
        }
    }
    Ok(Ok(Answer::Old(old)))
}

/// An access's answer came: its old data into its result, its count down.
fn answered(sh: &mut Matching, from: Rank, op: u32, m: &mut impl Source) -> fm::Result<()> {
    let Some(p) = sh.rma.pending.remove(&op) else {
        tracing::warn!(from, "mpi: an answer to no one-sided access: dropped");
        return Ok(());
    };
    let mut c = [0u8; 4];
    let class = match m.read(&mut c)? {
        4 => i32::from_le_bytes(c),
        _ => MPI_ERR_OTHER,
    };
    let bytes = m.remaining();
    match &p.result {
        Some(u) if class == MPI_SUCCESS && bytes == u.count * u.layout.size => {
            match u.layout.contiguous_at() {
                // SAFETY (both): the caller's result buffer, the library's
                // until this access completes (now).
                Some(at) => {
                    let to = unsafe { std::slice::from_raw_parts_mut(u.buf.offset(at), bytes) };
                    m.read(to)?;
                }
                None => unsafe {
                    u.layout.unpack(&m.read_vec()?, u.buf, u.count);
                },
            }
        }
        _ => drop(m.read_vec()?),
    }
    if let Some(w) = sh.rma.windows.get_mut(&p.window) {
        if let Some(n) = w.outstanding.get_mut(&p.to) {
            *n = n.saturating_sub(1);
        }
        w.total = w.total.saturating_sub(1);
        if class != MPI_SUCCESS && w.failed.is_none() {
            w.failed = Some(MpiError {
                class,
                message: format!("the target (FM rank {}) refused a one-sided access", p.to),
            });
        }
    }
    if let Some(r) = p.request {
        sh.complete(
            r,
            MpiStatus::new(MPI_PROC_NULL, MPI_ANY_TAG, bytes, MPI_SUCCESS),
        );
    }
    Ok(())
}

impl Engine {
    /// Window `id` exists here now; messages that came for it early are
    /// served, in the order they came.
    pub fn add_window(&mut self, id: u32, w: Window) {
        let mut sh = self.matching();
        sh.rma.windows.insert(id, w);
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut sh.rma.early)
            .into_iter()
            .partition(|(_, b)| u32_at(b, 1) == id);
        sh.rma.early = later;
        sh.rma.early_bytes -= now.iter().map(|(_, b)| b.len()).sum::<usize>();
        for (src, msg) in now {
            let (h, mut rest) = msg.split_at(HEAD);
            let h: [u8; HEAD] = h.try_into().unwrap_or([0; HEAD]);
            let _ = serve(&mut sh, src, &h, &mut rest);
        }
    }

    pub fn remove_window(&mut self, id: u32) {
        self.matching().rma.windows.remove(&id);
    }

    /// `MPI_Win_attach`: `len` bytes at `at` join dynamic window `id`.
    pub fn attach(&mut self, id: u32, at: usize, len: usize) -> MpiResult<()> {
        let mut sh = self.matching();
        let w = window(&mut sh, id)?;
        let overlaps = |&(a, l): &(usize, usize)| at < a + l && a < at + len;
        if w.attached.iter().any(overlaps) {
            return err(
                MPI_ERR_RMA_ATTACH,
                "the region overlaps one already attached to the window",
            );
        }
        let i = w.attached.partition_point(|&(a, _)| a < at);
        w.attached.insert(i, (at, len));
        Ok(())
    }

    /// `MPI_Win_detach` of the region attached at `at`.
    pub fn detach(&mut self, id: u32, at: usize) -> MpiResult<()> {
        let mut sh = self.matching();
        let w = window(&mut sh, id)?;
        match w.attached.iter().position(|&(a, _)| a == at) {
            Some(i) => {
                w.attached.remove(i);
                Ok(())
            }
            None => err(
                MPI_ERR_RMA_ATTACH,
                "no region attached to the window starts at that address",
            ),
        }
    }

    /// Send access `kind` of `data` to `to` on window `id`. The old data,
    /// if any, is unpacked into `result` when the answer comes; with
    /// `request`, a request that completes then is returned.
    #[allow(clippy::too_many_arguments)]
    pub fn rma_access(
        &mut self,
        id: u32,
        to: Rank,
        kind: Kind,
        a: &Access<'_>,
        data: &[u8],
        result: Option<Unpack>,
        request: bool,
    ) -> MpiResult<Option<u32>> {
        let len = HEAD + ACCESS + a.blocks.len() * 16 + data.len();
        fits_one_message(len)?;
        let (op, request) = {
            let mut sh = self.matching();
            let request = request.then(|| sh.add(Request::new(matching::Op::Rma, false, None)));
            let w = window(&mut sh, id)?;
            *w.outstanding.entry(to).or_default() += 1;
            w.total += 1;
            let op = sh.rma.next;
            sh.rma.next = op.wrapping_add(1);
            let p = Pending {
                window: id,
                to,
                request,
                result,
            };
            sh.rma.pending.insert(op, p);
            (op, request)
        };
        // The head, the target's blocks and (if small) the data, gathered
        // to go as one piece.
        let b = &mut self.scratch;
        b.clear();
        b.extend_from_slice(&head(kind, id, op));
        b.extend_from_slice(&a.disp.to_le_bytes());
        b.extend_from_slice(&a.count.to_le_bytes());
        b.extend_from_slice(&a.extent.to_le_bytes());
        b.extend_from_slice(&a.op.to_le_bytes());
        b.extend_from_slice(&a.elem.to_le_bytes());
        b.extend_from_slice(&(a.blocks.len() as u32).to_le_bytes());
        for &(off, l) in a.blocks {
            b.extend_from_slice(&(off as i64).to_le_bytes());
            b.extend_from_slice(&(l as u64).to_le_bytes());
        }
        if data.len() <= GATHERED {
            b.extend_from_slice(data);
            self.fm.send(to, RMA, &self.scratch)?;
        } else {
            self.fm.begin_message(to, len, RMA)?;
            self.fm.send_piece(&self.scratch)?;
            self.fm.send_piece(data)?;
            self.fm.end_message()?;
        }
        Ok(request)
    }

    /// A control message (lock, unlock, complete, posted) on window `id`.
    pub fn rma_control(&mut self, id: u32, to: Rank, kind: Kind, flag: u32) -> MpiResult<()> {
        self.fm.send(to, RMA, &head(kind, id, flag))?;
        Ok(())
    }

    /// Wait until every access to `to` (all targets: `None`) on window
    /// `id` was answered; the first error a target answered, if any.
    pub fn rma_settle(&mut self, id: u32, to: Option<Rank>) -> MpiResult<()> {
        // Puts done as the origin's own stores into a mapped part
        // (`rma::direct`) are seen before whatever ends the epoch.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        window(&mut self.matching(), id)?;
        self.progress_until(|e| {
            let sh = e.matching();
            let w = sh.rma.windows.get(&id)?;
            let left = match to {
                Some(r) => w.outstanding.get(&r).copied().unwrap_or(0),
                None => w.total,
            };
            (left == 0).then_some(())
        })?;
        match window(&mut self.matching(), id)?.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Wait for one answer of `kind` (granted, posted, complete) from
    /// `from` on window `id`, and consume it; `wait: false` only looks.
    pub fn rma_take(&mut self, id: u32, from: Rank, kind: Kind, wait: bool) -> MpiResult<bool> {
        window(&mut self.matching(), id)?;
        let take = |e: &mut Engine| {
            let mut sh = e.matching();
            let w = sh.rma.windows.get_mut(&id)?;
            let n = w.answers(kind).get_mut(&from).filter(|n| **n > 0)?;
            *n -= 1;
            Some(())
        };
        if !wait {
            self.progress()?;
            return Ok(take(self).is_some());
        }
        self.progress_until(take)?;
        Ok(true)
    }

    /// Whether `from` has completed an epoch on window `id` not consumed yet.
    pub fn rma_has_completed(&self, id: u32, from: Rank) -> bool {
        (self.matching().rma.windows.get(&id))
            .and_then(|w| w.completed.get(&from))
            .is_some_and(|&n| n > 0)
    }

    /// Send the answers handlers queued.
    pub(crate) fn send_rma_answers(&mut self) -> MpiResult<()> {
        loop {
            let Some(out) = self.matching().rma.outbox.pop_front() else {
                return Ok(());
            };
            match out {
                Out::Control { to, kind, window } => self.rma_control(window, to, kind, 0)?,
                Out::Done {
                    to,
                    window,
                    op,
                    class,
                    data,
                } => {
                    let mut h = [0u8; HEAD + 4];
                    h[..HEAD].copy_from_slice(&head(Kind::Done, window, op));
                    h[HEAD..].copy_from_slice(&class.to_le_bytes());
                    if data.is_empty() {
                        self.fm.send(to, RMA, &h)?;
                    } else {
                        self.fm.begin_message(to, h.len() + data.len(), RMA)?;
                        self.fm.send_piece(&h)?;
                        self.fm.send_piece(&data)?;
                        self.fm.end_message()?;
                    }
                }
                Out::Get {
                    to,
                    window,
                    op,
                    blocks,
                } => {
                    if !self.matching().rma.windows.contains_key(&window) {
                        continue;
                    }
                    let bytes: usize = blocks.iter().map(|b| b.1).sum();
                    self.fm.begin_message(to, HEAD + 4 + bytes, RMA)?;
                    self.fm.send_piece(&head(Kind::Done, window, op))?;
                    self.fm.send_piece(&MPI_SUCCESS.to_le_bytes())?;
                    for &(at, len) in &blocks {
                        // SAFETY: checked to lie in the window when the get
                        // came; the window is still there.
                        self.fm.send_piece(unsafe {
                            std::slice::from_raw_parts(at as *const u8, len)
                        })?;
                    }
                    self.fm.end_message()?;
                }
            }
        }
    }
}

fn window(sh: &mut Matching, id: u32) -> MpiResult<&mut Window> {
    sh.rma.windows.get_mut(&id).ok_or_else(|| MpiError {
        class: MPI_ERR_WIN,
        message: "the window is gone".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every byte an access names, by brute force: (address, in order).
    fn bytes_named(w: &Window, a: &Access<'_>) -> Vec<i128> {
        let base = if w.dynamic { 0 } else { w.base as i128 };
        let origin = base + a.disp as i128 * w.disp_unit as i128;
        let mut out = Vec::new();
        for i in 0..a.count as i128 {
            for &(off, len) in a.blocks {
                let at = origin + i * a.extent as i128 + off as i128;
                out.extend(at..at + len as i128);
            }
        }
        out
    }

    fn inside(w: &Window, at: i128) -> bool {
        match w.dynamic {
            false => at >= w.base as i128 && at < (w.base + w.size) as i128,
            true => (w.attached.iter()).any(|&(a, l)| at >= a as i128 && at < (a + l) as i128),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// An access is taken exactly when every byte it names lies in
        /// the window (or in its attached regions), and then its blocks
        /// name those bytes in order: nothing outside is ever written.
        #[test]
        fn an_access_is_refused_unless_every_byte_lies_in_the_window(
            size in 0usize..64,
            unit in 1usize..5,
            disp in -16i64..48,
            count in 0u64..6,
            extent in -12i64..24,
            blocks in prop::collection::vec((-16isize..32, 1usize..9), 0..4),
            regions in prop::collection::vec((0usize..6, 1usize..40), 0..4),
            dynamic in any::<bool>(),
        ) {
            let base = 0x10_0000;
            let mut w = Window::new(base, size, unit, dynamic);
            if dynamic {
                w.disp_unit = 1;
                // Regions of a few slots, some following each other.
                let mut at = base;
                for (gap, len) in regions {
                    at += gap * 8;
                    w.attached.push((at, len));
                    at += len;
                }
            }
            let disp = if dynamic { disp + base as i64 } else { disp };
            let a = Access { disp, count, extent, blocks: &blocks, op: 0, elem: 0 };
            let named = bytes_named(&w, &a);
            let all_inside = named.iter().all(|&b| inside(&w, b));
            match w.blocks(&a) {
                Ok(list) => {
                    prop_assert!(all_inside, "taken: {list:?}");
                    let got: Vec<i128> = (list.iter())
                        .flat_map(|&(at, len)| at as i128..(at + len) as i128)
                        .collect();
                    prop_assert_eq!(got, named);
                }
                Err(e) => {
                    prop_assert!(!all_inside, "refused: {}", e.message);
                    prop_assert_eq!(e.class, MPI_ERR_RMA_RANGE);
                }
            }
        }
    }

    #[test]
    fn a_count_of_empty_steps_is_refused_before_its_list_is_made() {
        let w = Window::new(0x1000, 64, 1, false);
        let blocks = [(0isize, 1usize)];
        let a = Access {
            disp: 0,
            count: u64::MAX / 2,
            extent: 0,
            blocks: &blocks,
            op: 0,
            elem: 0,
        };
        assert_eq!(w.blocks(&a).unwrap_err().class, MPI_ERR_RMA_RANGE);
    }
}
