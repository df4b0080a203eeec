//! # fm-mpi — MPI on fm, with MPICH's ABI
//!
//! `libmpich.so.12`: a program built against MPICH (Debian's `libmpich-dev`,
//! Intel MPI, Cray MPICH share the ABI) loads this library instead of
//! MPICH's when it comes first on the library path, which is what `fmrun`
//! arranges; `MPI_Init` then joins the job as `Fm::init` does (GRM, node
//! map, handler check, device table), and point-to-point messages travel
//! as FM messages over the composite ([`engine`]).
//!
//! Every function is exported as `PMPI_x` and as `MPI_x` (which calls
//! `PMPI_x`), the profiling interface: a tool that defines `MPI_x` itself
//! reaches the library through `PMPI_x`. Calls are serialized by one lock
//! (`MPI_THREAD_SERIALIZED` is what `MPI_Init_thread` provides).
//!
//! Errors go to the communicator's error handler: `MPI_ERRORS_ARE_FATAL`
//! (the default) prints the rank, the function and the reason, and ends
//! the whole job; `MPI_ERRORS_RETURN` returns the error class. docs/MPI.md
//! lists what is supported.

// The C names are MPI's.
#![allow(non_snake_case)]

pub mod abi;
pub mod attr;
pub mod context;
pub mod datatype;
pub mod engine;

use abi::*;
use attr::{Attributes, Callback, CopyFn, DeleteFn};
use context::{split_tag, ContextIds};
use datatype::Layout;
use engine::{err, slice_or_empty, Comm, Engine, MpiError, MpiResult, Route, Unpack};
use std::ffi::{c_char, c_double, c_int, c_void};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// Everything MPI holds between calls.
struct Mpi {
    engine: Engine,
    /// Communicators by index: 0 is `MPI_COMM_WORLD`, 1 `MPI_COMM_SELF`,
    /// the rest made at run time (handle `COMM_DIRECT | index`).
    comms: Vec<Option<Comm>>,
    /// Derived datatypes by index (handle `TYPE_INDIRECT | index`).
    types: Vec<Option<Arc<Layout>>>,
    /// Groups made at run time by index (handle `GROUP_DIRECT | index`).
    groups: Vec<Option<std::sync::Arc<[fm::Rank]>>>,
    /// Persistent requests by index (handle `PERSISTENT_DIRECT | index`).
    persistent: Vec<Option<Persistent>>,
    /// The buffer `MPI_Buffer_attach` gave (address, bytes), if any.
    attached: Option<(usize, usize)>,
    /// Buffered sends on their way: the engine's request and a copy of the
    /// data, kept until the send completes.
    buffered: Vec<(u32, Vec<u8>)>,
    /// Keyvals and the attributes set under them.
    attrs: Attributes,
    /// The context ids this process's communicators use.
    contexts: ContextIds,
    /// `MPI_UNIVERSE_SIZE`'s value: the job's size.
    universe: c_int,
    /// The source a receive or probe from -1 means: `MPI_PROC_NULL`, or
    /// `MPI_ANY_SOURCE` for binaries that assume Open MPI's numbering
    /// (`FM_MPI_SOURCE_MINUS_ONE`).
    minus_one: c_int,
    t0: Instant,
}

/// A persistent request: its arguments, and the operation `MPI_Start`
/// began, while it runs.
struct Persistent {
    /// `Some(sync)` for a send, `None` for a receive.
    send: Option<bool>,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    active: Option<u32>,
}

// SAFETY: `buf` is the caller's buffer, used only under the library's
// lock while the request runs (MPI's rule for persistent requests).
unsafe impl Send for Persistent {}

enum Phase {
    Before,
    Running(Box<Mpi>),
    Finalized,
}

static MPI: Mutex<Phase> = Mutex::new(Phase::Before);

fn phase() -> std::sync::MutexGuard<'static, Phase> {
    MPI.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` on the running MPI, reporting an error as `func` to the error
/// handler of `comm` (or of `MPI_COMM_WORLD`).
fn call(func: &str, comm: Handle, f: impl FnOnce(&mut Mpi) -> MpiResult<()>) -> c_int {
    let mut g = phase();
    let Phase::Running(mpi) = &mut *g else {
        let why = match &*g {
            Phase::Before => "called before MPI_Init",
            _ => "called after MPI_Finalize",
        };
        fatal(None, func, why);
    };
    match f(mpi) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => {
            let handler = mpi
                .comm(comm)
                .or_else(|_| mpi.comm(MPI_COMM_WORLD))
                .map(|c| c.errhandler)
                .unwrap_or(MPI_ERRORS_ARE_FATAL);
            if handler == MPI_ERRORS_RETURN {
                e.class
            } else {
                let rank = mpi.comms[0].as_ref().map(|c| c.rank);
                fatal(rank, func, &e.message)
            }
        }
    }
}

/// `MPI_ERRORS_ARE_FATAL`: say who failed where and why, and end the job
/// (fmrun stops the other ranks when one exits with a failure).
fn fatal(rank: Option<c_int>, func: &str, why: &str) -> ! {
    match rank {
        Some(r) => eprintln!("fm MPI: rank {r}: {func}: {why}"),
        None => eprintln!("fm MPI: {func}: {why}"),
    }
    std::process::exit(1)
}

/// [`call`] `f`, then the attribute callbacks it returned, outside the
/// library's lock (they are the caller's code, and may call MPI): the
/// values copy callbacks gave, by keyval. An error of `f` or of a callback
/// is `func`'s, reported through `comm`'s error handler; its class comes
/// back as the error.
fn call_with_callbacks(
    func: &str,
    comm: Handle,
    f: impl FnOnce(&mut Mpi) -> MpiResult<Vec<Callback>>,
) -> Result<Vec<(c_int, usize)>, c_int> {
    let mut callbacks = Vec::new();
    let r = call(func, comm, |m| {
        callbacks = f(m)?;
        Ok(())
    });
    if r != MPI_SUCCESS {
        return Err(r);
    }
    let mut copied = Vec::new();
    for cb in callbacks {
        // SAFETY: the caller's callbacks, called as MPI says.
        match unsafe { cb.run() } {
            Ok(Some(v)) => copied.push((cb.keyval(), v)),
            Ok(None) => {}
            Err(e) => return Err(call(func, comm, |_| Err(e))),
        }
    }
    Ok(copied)
}

/// The predefined attributes' values (`MPI_Comm_get_attr` returns
/// pointers to them).
static TAG_UB: c_int = abi::TAG_UB;
static PROC_NULL: c_int = MPI_PROC_NULL;
static ANY_SOURCE: c_int = MPI_ANY_SOURCE;
static FALSE: c_int = 0;
static APPNUM: c_int = 0;
static LASTUSEDCODE: c_int = MPI_ERR_LASTCODE;

/// `MPI_CONGRUENT` is for communicators; for members alone: the same in
/// another order is `MPI_SIMILAR`, else `MPI_UNEQUAL`.
fn compare_members(a: &[fm::Rank], b: &[fm::Rank]) -> c_int {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    if x == y {
        MPI_SIMILAR
    } else {
        MPI_UNEQUAL
    }
}

/// `n` distinct ranks of a group of `members`, read from `ranks`.
///
/// # Safety
/// `ranks` holds `n` ints.
unsafe fn group_ranks(
    members: &[fm::Rank],
    n: c_int,
    ranks: *const c_int,
) -> MpiResult<Vec<usize>> {
    if n < 0 || (n > 0 && ranks.is_null()) {
        return err(MPI_ERR_ARG, format!("{n} ranks at {ranks:?}"));
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let r = *ranks.add(i);
        match usize::try_from(r) {
            Ok(r) if r < members.len() && !v.contains(&r) => v.push(r),
            _ => {
                return err(
                    MPI_ERR_RANK,
                    format!(
                        "rank {r} is not a rank of a group of {}, or is named twice",
                        members.len()
                    ),
                )
            }
        }
    }
    Ok(v)
}

/// `MPI_Comm_split`: every member of `comm` says its colour and key; those
/// of this one's colour, ordered by key then by rank in `comm`, make the
/// new communicator (`MPI_UNDEFINED`: none, `MPI_COMM_NULL`).
fn split(m: &mut Mpi, comm: Handle, color: c_int, key: c_int) -> MpiResult<Handle> {
    let (epoch, parent) = m.child_of(comm)?;
    // Everyone's (colour, key), over the parent's collective context.
    let mut all = vec![(0, 0); parent.ranks.len()];
    let me = parent.rank as usize;
    all[me] = (color, key);
    let mine: Vec<u8> = [color.to_le_bytes(), key.to_le_bytes()].concat();
    let tag = split_tag(epoch);
    let others = || (0..parent.ranks.len()).filter(|&r| r != me);
    let sends = (others())
        .map(|r| context::start_send(&mut m.engine, &parent, r, tag, &mine))
        .collect::<MpiResult<Vec<u32>>>()?;
    for r in others() {
        let b = context::receive(&mut m.engine, &parent, r, tag, 8)?;
        all[r] = (
            c_int::from_le_bytes([b[0], b[1], b[2], b[3]]),
            c_int::from_le_bytes([b[4], b[5], b[6], b[7]]),
        );
    }
    // `mine` lives until here, where its sends are done.
    for id in sends {
        m.engine.wait(id)?;
    }
    let context = m.new_context(&parent, epoch, color != MPI_UNDEFINED)?;
    if color == MPI_UNDEFINED {
        return Ok(MPI_COMM_NULL);
    }
    let mut chosen: Vec<(c_int, usize)> = (all.iter().enumerate())
        .filter(|(_, (c, _))| *c == color)
        .map(|(r, (_, k))| (*k, r))
        .collect();
    chosen.sort_unstable();
    let rank = chosen
        .iter()
        .position(|&(_, r)| r as c_int == parent.rank)
        .unwrap_or(0);
    let ranks: Vec<fm::Rank> = chosen.iter().map(|&(_, r)| parent.ranks[r]).collect();
    m.add_comm(Comm {
        context,
        ranks: ranks.into(),
        rank: rank as c_int,
        errhandler: parent.errhandler,
        barriers: 0,
        children: 0,
    })
}

impl Mpi {
    /// A communicator is being made from `comm`: the number of this child
    /// (every member counts them the same), and a copy of `comm`.
    fn child_of(&mut self, comm: Handle) -> MpiResult<(u32, Comm)> {
        let parent = self.comm_mut(comm)?;
        parent.children += 1;
        Ok((parent.children, parent.clone()))
    }

    /// Agree with the other members of `parent` on the context of its child
    /// number `epoch` ([`ContextIds::agree`]).
    fn new_context(&mut self, parent: &Comm, epoch: u32, join: bool) -> MpiResult<u32> {
        self.contexts.agree(&mut self.engine, parent, epoch, join)
    }

    /// Communicator `h` is gone, and its context id free again.
    fn remove_comm(&mut self, h: Handle) {
        let c = Self::index(h).and_then(|i| self.comms.get_mut(i)?.take());
        if let Some(c) = c {
            self.contexts.release(c.context);
        }
    }

    /// A communicator made at run time: its handle.
    fn add_comm(&mut self, c: Comm) -> MpiResult<Handle> {
        if self.comms.len() > HANDLE_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many communicators");
        }
        self.comms.push(Some(c));
        Ok(COMM_DIRECT | (self.comms.len() - 1) as Handle)
    }

    /// A group made at run time: its handle.
    fn add_group(&mut self, members: std::sync::Arc<[fm::Rank]>) -> MpiResult<Handle> {
        let i = match self.groups.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.groups.push(None);
                self.groups.len() - 1
            }
        };
        if i > HANDLE_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many groups");
        }
        self.groups[i] = Some(members);
        Ok(GROUP_DIRECT | i as Handle)
    }

    /// A group's members (FM ranks, in group order).
    fn group(&self, h: Handle) -> MpiResult<std::sync::Arc<[fm::Rank]>> {
        match h {
            MPI_GROUP_EMPTY => Ok(Vec::new().into()),
            h if h & !HANDLE_INDEX == GROUP_DIRECT => self
                .groups
                .get((h & HANDLE_INDEX) as usize)
                .and_then(Clone::clone)
                .ok_or_else(|| MpiError {
                    class: MPI_ERR_GROUP,
                    message: format!("{h:#x} is not a group"),
                }),
            h => err(MPI_ERR_GROUP, format!("{h:#x} is not a group")),
        }
    }

    fn index(handle: Handle) -> Option<usize> {
        match handle {
            MPI_COMM_WORLD => Some(0),
            MPI_COMM_SELF => Some(1),
            h if h & !HANDLE_INDEX == COMM_DIRECT => Some((h & HANDLE_INDEX) as usize),
            _ => None,
        }
    }

    fn comm(&self, handle: Handle) -> MpiResult<&Comm> {
        Self::index(handle)
            .and_then(|i| self.comms.get(i)?.as_ref())
            .ok_or_else(|| MpiError {
                class: MPI_ERR_COMM,
                message: format!("{handle:#x} is not a communicator"),
            })
    }

    fn comm_mut(&mut self, handle: Handle) -> MpiResult<&mut Comm> {
        Self::index(handle)
            .and_then(|i| self.comms.get_mut(i)?.as_mut())
            .ok_or_else(|| MpiError {
                class: MPI_ERR_COMM,
                message: format!("{handle:#x} is not a communicator"),
            })
    }

    /// Where a receive or probe from `source` with `tag` on communicator
    /// `handle` listens, all checked, and the source it means.
    fn recv_from(&self, handle: Handle, source: c_int, tag: c_int) -> MpiResult<(Route, c_int)> {
        let source = if source == MPI_PROC_NULL {
            self.minus_one
        } else {
            source
        };
        Ok((self.p2p(handle, source, true, tag)?, source))
    }

    /// Where a call naming `rank` (a destination, or with `any` a source,
    /// which may be `MPI_ANY_SOURCE`) and `tag` on communicator `handle`
    /// goes, all checked.
    #[inline(always)]
    fn p2p(&self, handle: Handle, rank: c_int, any: bool, tag: c_int) -> MpiResult<Route> {
        let c = self.comm(handle)?;
        let ok_rank = (0..c.size()).contains(&rank)
            || rank == MPI_PROC_NULL
            || (any && rank == MPI_ANY_SOURCE);
        if !ok_rank {
            return err(
                MPI_ERR_RANK,
                format!(
                    "rank {rank} is not in a communicator of {} processes",
                    c.size()
                ),
            );
        }
        if !((0..=TAG_UB).contains(&tag) || (any && tag == MPI_ANY_TAG)) {
            return err(MPI_ERR_TAG, format!("tag {tag} is outside 0..={TAG_UB}"));
        }
        Ok(Route {
            context: c.context,
            me: c.rank,
            to: (!any && rank != MPI_PROC_NULL).then(|| c.ranks[rank as usize]),
        })
    }
}

/// Bytes of `count` elements of `datatype`.
/// How `count` elements of a datatype travel.
enum Elements {
    /// As `bytes` plain bytes from the buffer's address plus `at`.
    Plain { at: isize, bytes: usize },
    /// Packed into a message and unpacked from one by their layout.
    Packed { layout: Arc<Layout>, bytes: usize },
}

impl Elements {
    fn bytes(&self) -> usize {
        match self {
            Elements::Plain { bytes, .. } | Elements::Packed { bytes, .. } => *bytes,
        }
    }
}

impl Mpi {
    /// How `count` elements of `datatype` travel; a derived type must be
    /// committed.
    fn elements(&self, count: c_int, datatype: Handle) -> MpiResult<Elements> {
        if count < 0 {
            return err(MPI_ERR_COUNT, format!("count {count} is negative"));
        }
        if let Some(size) = builtin_type_size(datatype) {
            return Ok(Elements::Plain {
                at: 0,
                bytes: count as usize * size,
            });
        }
        let layout = self.layout(datatype)?;
        if !layout.committed {
            return err(
                MPI_ERR_TYPE,
                format!("datatype {datatype:#x} is not committed (MPI_Type_commit)"),
            );
        }
        let bytes = data_bytes(count as usize, &layout)?;
        Ok(match layout.contiguous_at() {
            Some(at) => Elements::Plain { at, bytes },
            None => Elements::Packed { layout, bytes },
        })
    }

    /// A derived datatype's layout.
    fn derived(&self, h: Handle) -> MpiResult<Arc<Layout>> {
        (h & !HANDLE_INDEX == TYPE_INDIRECT)
            .then(|| {
                self.types
                    .get((h & HANDLE_INDEX) as usize)
                    .and_then(Clone::clone)
            })
            .flatten()
            .ok_or_else(|| MpiError {
                class: MPI_ERR_TYPE,
                message: format!("{h:#x} is not a datatype"),
            })
    }

    /// Any datatype's layout (for building others).
    fn layout(&self, h: Handle) -> MpiResult<Arc<Layout>> {
        if let Some((first, int_at)) = pair_type(h) {
            return Ok(Arc::new(Layout::pair(first, int_at)));
        }
        match builtin_type_size(h) {
            Some(size) => Ok(Arc::new(Layout::basic(size))),
            None => self.derived(h),
        }
    }

    /// A datatype made at run time: its handle.
    fn add_type(&mut self, l: Layout) -> MpiResult<Handle> {
        let i = match self.types.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.types.push(None);
                self.types.len() - 1
            }
        };
        if i > HANDLE_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many datatypes");
        }
        self.types[i] = Some(Arc::new(l));
        Ok(TYPE_INDIRECT | i as Handle)
    }
}

/// `MPI_Get_count` (whole elements of `datatype`) and, with `basic`,
/// `MPI_Get_elements` (its basic elements, also those of a partial
/// element) in the bytes `status` says arrived: `MPI_UNDEFINED` when they
/// end inside one.
///
/// # Safety
/// `status` and `count` are null or valid, as MPI's caller promises.
unsafe fn count_in_status(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
    basic: bool,
) -> c_int {
    let whole = |bytes: u64, size: usize| match size as u64 {
        0 => Some(0),
        size => bytes.is_multiple_of(size).then_some(bytes / size),
    };
    if status.is_null() || status as usize == STATUS_IGNORE || count.is_null() {
        return MPI_ERR_ARG;
    }
    let bytes = (*status).bytes();
    let n = match builtin_type_size(datatype) {
        Some(size) if !basic => whole(bytes, size),
        // Basic elements (pair types count two) are the layout's to say.
        _ => {
            let layout = match &*phase() {
                Phase::Running(m) => m.layout(datatype),
                _ => err(MPI_ERR_TYPE, "no datatype before MPI_Init"),
            };
            match layout {
                Ok(l) if basic => l.elements_in(bytes),
                Ok(l) => whole(bytes, l.size),
                Err(_) => return MPI_ERR_TYPE,
            }
        }
    };
    *count = n.map_or(MPI_UNDEFINED, |n| n.min(c_int::MAX as u64) as c_int);
    MPI_SUCCESS
}

/// Bytes of data in `count` elements of `layout`, if they fit an address.
fn data_bytes(count: usize, layout: &Layout) -> MpiResult<usize> {
    count
        .checked_mul(layout.size)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| MpiError {
            class: MPI_ERR_COUNT,
            message: format!(
                "{count} elements of {} bytes do not fit an address",
                layout.size
            ),
        })
}

fn check_buffer(buf: *const c_void, bytes: usize) -> MpiResult<()> {
    if buf.is_null() && bytes > 0 {
        return err(MPI_ERR_BUFFER, "a null buffer for a non-empty message");
    }
    Ok(())
}

fn request_handle(id: u32) -> Handle {
    REQUEST_DIRECT | id as Handle
}

fn request_id(h: Handle) -> MpiResult<u32> {
    if h & !HANDLE_INDEX == REQUEST_DIRECT {
        Ok((h & HANDLE_INDEX) as u32)
    } else {
        err(MPI_ERR_REQUEST, format!("{h:#x} is not a request"))
    }
}

/// What request handle `h` stands for now: the engine's request it runs
/// as, or `None` (`MPI_REQUEST_NULL`, or a persistent request not started).
fn resolve(m: &Mpi, h: Handle) -> MpiResult<Option<u32>> {
    match h {
        MPI_REQUEST_NULL => Ok(None),
        h if h & !HANDLE_INDEX == PERSISTENT_DIRECT => {
            match m.persistent.get((h & HANDLE_INDEX) as usize) {
                Some(Some(p)) => Ok(p.active),
                _ => err(MPI_ERR_REQUEST, format!("{h:#x} is not a request")),
            }
        }
        h => {
            let id = request_id(h)?;
            if m.engine.is_request(id) {
                Ok(Some(id))
            } else {
                err(MPI_ERR_REQUEST, format!("{h:#x} is not an active request"))
            }
        }
    }
}

/// A request completed: its handle becomes `MPI_REQUEST_NULL`, or, for a
/// persistent request, it stays and the request is inactive.
fn retire(m: &mut Mpi, h: &mut Handle) {
    if *h & !HANDLE_INDEX == PERSISTENT_DIRECT {
        if let Some(Some(p)) = m.persistent.get_mut((*h & HANDLE_INDEX) as usize) {
            p.active = None;
        }
    } else {
        *h = MPI_REQUEST_NULL;
    }
}

fn message_handle(id: u32) -> Handle {
    MESSAGE_DIRECT | id as Handle
}

/// A matched probe's message: `None` for `MPI_MESSAGE_NO_PROC`.
fn message_id(h: Handle) -> MpiResult<Option<u32>> {
    match h {
        MPI_MESSAGE_NO_PROC => Ok(None),
        h if h & !HANDLE_INDEX == MESSAGE_DIRECT => Ok(Some((h & HANDLE_INDEX) as u32)),
        h => err(
            MPI_ERR_REQUEST,
            format!("{h:#x} is not a message a matched probe returned"),
        ),
    }
}

/// `MPI_Waitsome` (`wait`) and `MPI_Testsome`: the requests of the array
/// that are complete (after waiting for one, for Waitsome), taken.
///
/// # Safety
/// As the two calls': the arrays hold `incount` entries.
unsafe fn some(
    m: &mut Mpi,
    wait: bool,
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let ids = request_ids(m, requests, incount)?;
    let outcount = arg(outcount, "the count out")?;
    if ids.iter().all(Option::is_none) {
        *outcount = MPI_UNDEFINED;
        return Ok(());
    }
    if wait {
        m.engine.wait_until_any(&ids)?;
    } else {
        m.engine.progress()?;
    }
    *outcount = take_completed(m, &ids, requests, indices, statuses)?;
    Ok(())
}

/// The completed requests among `ids`, taken: their indices into the
/// caller's array (written to `indices`), and statuses (to `statuses`
/// unless ignored); the handles are set to `MPI_REQUEST_NULL`.
///
/// # Safety
/// `requests`, `indices` and `statuses` hold as many as `ids`.
unsafe fn take_completed(
    m: &mut Mpi,
    ids: &[Option<u32>],
    requests: *mut Handle,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<c_int> {
    let mut n = 0;
    let mut failed = false;
    for (i, id) in ids.iter().enumerate() {
        let Some(s) = id.and_then(|id| m.engine.test(id)) else {
            continue;
        };
        retire(m, &mut *requests.add(i));
        if !indices.is_null() {
            *indices.add(n) = i as c_int;
        }
        if !statuses.is_null() && statuses as usize != STATUS_IGNORE {
            *statuses.add(n) = s;
        }
        failed |= s.error != MPI_SUCCESS;
        n += 1;
    }
    if failed {
        return err(MPI_ERR_IN_STATUS, "a request failed: see its status");
    }
    Ok(n as c_int)
}

/// An argument the call writes (or reads) through: null is `MPI_ERR_ARG`,
/// not a crash.
///
/// # Safety
/// `p` is null or points at a `T` that lives through the call.
unsafe fn arg<'a, T>(p: *mut T, what: &str) -> MpiResult<&'a mut T> {
    p.as_mut().ok_or_else(|| MpiError {
        class: MPI_ERR_ARG,
        message: format!("a null pointer for {what}"),
    })
}

/// A call that only answers `v` through `out` (any time, even before
/// `MPI_Init`): `MPI_ERR_ARG` for a null `out`.
///
/// # Safety
/// `out` is null or points at an int.
unsafe fn answer(out: *mut c_int, v: c_int) -> c_int {
    match out.as_mut() {
        Some(o) => {
            *o = v;
            MPI_SUCCESS
        }
        None => MPI_ERR_ARG,
    }
}

/// Write `s` to a status the caller gave, unless it is `MPI_STATUS_IGNORE`.
///
/// # Safety
/// `out` is null, `MPI_STATUS_IGNORE`, or points at an `MPI_Status`.
unsafe fn put_status(out: *mut MpiStatus, s: MpiStatus) {
    if !out.is_null() && out as usize != STATUS_IGNORE {
        *out = s;
    }
}

/// The receive's truncation, reported as the call's error.
fn status_result(s: &MpiStatus) -> MpiResult<()> {
    if s.error == MPI_ERR_TRUNCATE {
        return err(
            MPI_ERR_TRUNCATE,
            format!(
                "message truncated: the receive buffer held {} bytes of a longer message from rank {} (tag {})",
                s.bytes(),
                s.source,
                s.tag
            ),
        );
    }
    Ok(())
}

/// Copy `s` into the C string buffer `out` of at most `max` bytes (with its
/// NUL), and its length to `len`.
///
/// # Safety
/// `out` holds `max` bytes; `len` is null or points at an int.
unsafe fn put_string(s: &str, out: *mut c_char, max: usize, len: *mut c_int) {
    let n = s.len().min(max.saturating_sub(1));
    if !out.is_null() {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        *out.add(n) = 0;
    }
    if !len.is_null() {
        *len = n as c_int;
    }
}

/// Defines `PMPI_name` with the body, and `MPI_name` calling it.
macro_rules! mpi {
    ($(fn $name:ident / $pname:ident ($($a:ident : $t:ty),* $(,)?) $body:block)*) => {$(
        #[no_mangle]
        #[doc = concat!("`", stringify!($pname), "`.")]
        ///
        /// # Safety
        /// As MPI's: the pointers a C caller passes are valid.
        pub unsafe extern "C" fn $pname($($a: $t),*) -> c_int $body

        #[no_mangle]
        #[doc = concat!("`", stringify!($name), "`: calls `", stringify!($pname), "`.")]
        ///
        /// # Safety
        /// As MPI's: the pointers a C caller passes are valid.
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            $pname($($a),*)
        }
    )*};
}

mpi! {
fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) {
    init("MPI_Init")
}

fn MPI_Init_thread / PMPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) {
    let r = init("MPI_Init_thread");
    if !provided.is_null() {
        *provided = required.min(MPI_THREAD_SERIALIZED);
    }
    r
}

fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) {
    answer(flag, c_int::from(!matches!(*phase(), Phase::Before)))
}

fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) {
    answer(flag, c_int::from(matches!(*phase(), Phase::Finalized)))
}

fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) {
    answer(provided, MPI_THREAD_SERIALIZED)
}

fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) {
    answer(flag, 1)
}

fn MPI_Finalize / PMPI_Finalize() {
    // First, as MPI says, the attributes on MPI_COMM_SELF are deleted (the
    // last set first): libraries hang their clean-up there.
    let deleted = call_with_callbacks("MPI_Finalize", MPI_COMM_SELF, |m| {
        Ok(m.attrs.clear(MPI_COMM_SELF))
    });
    if let Err(class) = deleted {
        return class;
    }
    let mut g = phase();
    let Phase::Running(mpi) = &mut *g else {
        fatal(None, "MPI_Finalize", "called without MPI_Init, or twice");
    };
    // Sends still open are completed (their receivers may still want
    // them), then everyone meets, so nobody leaves while a peer needs it.
    let r = (|| {
        for id in mpi.engine.open_requests() {
            mpi.engine.wait(id)?;
        }
        let mut world = mpi.comm(MPI_COMM_WORLD)?.clone();
        mpi.engine.barrier(&mut world)
    })();
    if let Err(e) = r {
        let rank = mpi.comms[0].as_ref().map(|c| c.rank);
        fatal(rank, "MPI_Finalize", &e.message);
    }
    *g = Phase::Finalized;
    MPI_SUCCESS
}

fn MPI_Abort / PMPI_Abort(_comm: Handle, errorcode: c_int) {
    let rank = match &*phase() {
        Phase::Running(m) => m.comms[0].as_ref().map(|c| c.rank),
        _ => None,
    };
    match rank {
        Some(r) => eprintln!("fm MPI: rank {r} called MPI_Abort with error code {errorcode}"),
        None => eprintln!("fm MPI: MPI_Abort with error code {errorcode}"),
    }
    std::process::exit(if errorcode == 0 { 1 } else { errorcode })
}

fn MPI_Comm_rank / PMPI_Comm_rank(comm: Handle, rank: *mut c_int) {
    call("MPI_Comm_rank", comm, |m| {
        let r = m.comm(comm)?.rank;
        if !rank.is_null() {
            *rank = r;
        }
        Ok(())
    })
}

fn MPI_Comm_size / PMPI_Comm_size(comm: Handle, size: *mut c_int) {
    call("MPI_Comm_size", comm, |m| {
        let s = m.comm(comm)?.size();
        if !size.is_null() {
            *size = s;
        }
        Ok(())
    })
}

fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) {
    call("MPI_Comm_set_errhandler", comm, |m| {
        if errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN {
            return err(MPI_ERR_ARG, format!("{errhandler:#x} is not an error handler fm's MPI has"));
        }
        m.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) {
    call("MPI_Comm_get_errhandler", comm, |m| {
        let h = m.comm(comm)?.errhandler;
        if !errhandler.is_null() {
            *errhandler = h;
        }
        Ok(())
    })
}

fn MPI_Errhandler_set / PMPI_Errhandler_set(comm: Handle, errhandler: Handle) {
    PMPI_Comm_set_errhandler(comm, errhandler)
}

fn MPI_Comm_dup / PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) {
    // The attributes' copy callbacks run outside the lock; then the
    // duplicate gets what they gave (or, if one failed, is freed again).
    let mut new = MPI_COMM_NULL;
    let copied = call_with_callbacks("MPI_Comm_dup", comm, |m| {
        let out = arg(newcomm, "the new communicator")?;
        let (epoch, parent) = m.child_of(comm)?;
        let context = m.new_context(&parent, epoch, true)?;
        new = m.add_comm(Comm {
            context,
            barriers: 0,
            children: 0,
            ..parent
        })?;
        *out = new;
        Ok(m.attrs.copies(comm))
    });
    match copied {
        Ok(values) if values.is_empty() => MPI_SUCCESS,
        Ok(values) => call("MPI_Comm_dup", comm, |m| {
            m.attrs.set_copied(new, values);
            Ok(())
        }),
        Err(class) if new == MPI_COMM_NULL => class,
        Err(class) => {
            call("MPI_Comm_dup", comm, |m| {
                m.remove_comm(new);
                Ok(())
            });
            *newcomm = MPI_COMM_NULL;
            class
        }
    }
}

fn MPI_Comm_split / PMPI_Comm_split(comm: Handle, color: c_int, key: c_int, newcomm: *mut Handle) {
    call("MPI_Comm_split", comm, |m| {
        let newcomm = arg(newcomm, "the new communicator")?;
        if color < 0 && color != MPI_UNDEFINED {
            return err(MPI_ERR_ARG, format!("color {color} is negative"));
        }
        *newcomm = split(m, comm, color, key)?;
        Ok(())
    })
}

fn MPI_Comm_split_type / PMPI_Comm_split_type(comm: Handle, split_type: c_int, key: c_int, _info: Handle, newcomm: *mut Handle) {
    call("MPI_Comm_split_type", comm, |m| {
        let newcomm = arg(newcomm, "the new communicator")?;
        let color = match split_type {
            MPI_UNDEFINED => MPI_UNDEFINED,
            MPI_COMM_TYPE_SHARED => {
                // The ranks of one host share memory: colour by the first
                // rank of this one's host.
                let hosts = &m.engine.fm.config().hosts;
                let me = m.engine.fm.rank() as usize;
                match hosts.get(me) {
                    Some(h) => hosts.iter().position(|x| x == h).unwrap_or(me) as c_int,
                    None => me as c_int,
                }
            }
            t => return err(MPI_ERR_ARG, format!("split type {t} is not MPI_COMM_TYPE_SHARED")),
        };
        *newcomm = split(m, comm, color, key)?;
        Ok(())
    })
}

fn MPI_Comm_create / PMPI_Comm_create(comm: Handle, group: Handle, newcomm: *mut Handle) {
    call("MPI_Comm_create", comm, |m| {
        let newcomm = arg(newcomm, "the new communicator")?;
        let members = m.group(group)?;
        let (epoch, parent) = m.child_of(comm)?;
        if let Some(r) = members.iter().find(|r| !parent.ranks.contains(r)) {
            return err(MPI_ERR_GROUP, format!("the group holds process {r}, which is not in the communicator"));
        }
        let me = m.engine.fm.rank();
        let mine = members.iter().position(|&r| r == me);
        let context = m.new_context(&parent, epoch, mine.is_some())?;
        *newcomm = match mine {
            None => MPI_COMM_NULL,
            Some(rank) => m.add_comm(Comm {
                context,
                ranks: members,
                rank: rank as c_int,
                errhandler: parent.errhandler,
                barriers: 0,
                children: 0,
            })?,
        };
        Ok(())
    })
}

fn MPI_Comm_compare / PMPI_Comm_compare(comm1: Handle, comm2: Handle, result: *mut c_int) {
    call("MPI_Comm_compare", comm1, |m| {
        let result = arg(result, "the result")?;
        let (a, b) = (m.comm(comm1)?, m.comm(comm2)?);
        *result = if comm1 == comm2 {
            MPI_IDENT
        } else if a.ranks == b.ranks {
            MPI_CONGRUENT
        } else {
            compare_members(&a.ranks, &b.ranks)
        };
        Ok(())
    })
}

fn MPI_Comm_group / PMPI_Comm_group(comm: Handle, group: *mut Handle) {
    call("MPI_Comm_group", comm, |m| {
        let group = arg(group, "the group")?;
        let ranks = m.comm(comm)?.ranks.clone();
        *group = m.add_group(ranks)?;
        Ok(())
    })
}

fn MPI_Group_size / PMPI_Group_size(group: Handle, size: *mut c_int) {
    call("MPI_Group_size", MPI_COMM_WORLD, |m| {
        *arg(size, "the size")? = m.group(group)?.len() as c_int;
        Ok(())
    })
}

fn MPI_Group_rank / PMPI_Group_rank(group: Handle, rank: *mut c_int) {
    call("MPI_Group_rank", MPI_COMM_WORLD, |m| {
        let me = m.engine.fm.rank();
        let members = m.group(group)?;
        *arg(rank, "the rank")? = members.iter().position(|&r| r == me).map_or(MPI_UNDEFINED, |i| i as c_int);
        Ok(())
    })
}

fn MPI_Group_incl / PMPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) {
    call("MPI_Group_incl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let picked = group_ranks(&members, n, ranks)?;
        *newgroup = m.add_group(picked.iter().map(|&i| members[i]).collect())?;
        Ok(())
    })
}

fn MPI_Group_excl / PMPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) {
    call("MPI_Group_excl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let left_out = group_ranks(&members, n, ranks)?;
        let kept = (0..members.len()).filter(|i| !left_out.contains(i)).map(|i| members[i]).collect();
        *newgroup = m.add_group(kept)?;
        Ok(())
    })
}

fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(group1: Handle, n: c_int, ranks1: *const c_int, group2: Handle, ranks2: *mut c_int) {
    call("MPI_Group_translate_ranks", MPI_COMM_WORLD, |m| {
        let (g1, g2) = (m.group(group1)?, m.group(group2)?);
        if n < 0 || (n > 0 && (ranks1.is_null() || ranks2.is_null())) {
            return err(MPI_ERR_ARG, format!("{n} ranks at {ranks1:?} and {ranks2:?}"));
        }
        for i in 0..n as usize {
            let r = *ranks1.add(i);
            *ranks2.add(i) = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let p = usize::try_from(r).ok().and_then(|r| g1.get(r)).ok_or_else(|| MpiError {
                    class: MPI_ERR_RANK,
                    message: format!("rank {r} is not in a group of {}", g1.len()),
                })?;
                g2.iter().position(|x| x == p).map_or(MPI_UNDEFINED, |j| j as c_int)
            };
        }
        Ok(())
    })
}

fn MPI_Group_compare / PMPI_Group_compare(group1: Handle, group2: Handle, result: *mut c_int) {
    call("MPI_Group_compare", MPI_COMM_WORLD, |m| {
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        *arg(result, "the result")? = if a == b { MPI_IDENT } else { compare_members(&a, &b) };
        Ok(())
    })
}

fn MPI_Group_free / PMPI_Group_free(group: *mut Handle) {
    call("MPI_Group_free", MPI_COMM_WORLD, |m| {
        let group = arg(group, "the group")?;
        match *group {
            h if h & !HANDLE_INDEX == GROUP_DIRECT && m.groups.get((h & HANDLE_INDEX) as usize).is_some_and(Option::is_some) => {
                m.groups[(h & HANDLE_INDEX) as usize] = None;
                *group = MPI_GROUP_NULL;
                Ok(())
            }
            h => err(MPI_ERR_GROUP, format!("{h:#x} is not a group that can be freed")),
        }
    })
}

fn MPI_Comm_get_attr / PMPI_Comm_get_attr(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) {
    call("MPI_Comm_get_attr", comm, |m| {
        m.comm(comm)?;
        let flag = arg(flag, "the flag")?;
        let predefined: Option<*const c_int> = match keyval {
            MPI_TAG_UB => Some(&TAG_UB),
            MPI_HOST => Some(&PROC_NULL),
            MPI_IO => Some(&ANY_SOURCE),
            MPI_WTIME_IS_GLOBAL => Some(&FALSE),
            MPI_UNIVERSE_SIZE => Some(&m.universe),
            MPI_APPNUM => Some(&APPNUM),
            MPI_LASTUSEDCODE => Some(&LASTUSEDCODE),
            _ => None,
        };
        // The value is a pointer (MPI's C binding): to the predefined
        // attribute's int, or the one the caller set.
        let found = match predefined {
            Some(p) => Some(p as usize),
            None => m.attrs.get(comm, keyval)?,
        };
        *flag = c_int::from(found.is_some());
        if let Some(v) = found {
            *arg(value.cast::<usize>(), "the value")? = v;
        }
        Ok(())
    })
}

fn MPI_Attr_get / PMPI_Attr_get(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) {
    PMPI_Comm_get_attr(comm, keyval, value, flag)
}

fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) {
    call("MPI_Comm_create_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        *keyval = m.attrs.create_keyval(copy, delete, extra_state as usize)?;
        Ok(())
    })
}

fn MPI_Keyval_create / PMPI_Keyval_create(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) {
    PMPI_Comm_create_keyval(copy, delete, keyval, extra_state)
}

fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) {
    call("MPI_Comm_free_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        m.attrs.free_keyval(*keyval)?;
        *keyval = MPI_KEYVAL_INVALID;
        Ok(())
    })
}

fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) {
    PMPI_Comm_free_keyval(keyval)
}

fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: Handle, keyval: c_int, value: *mut c_void) {
    call_with_callbacks("MPI_Comm_set_attr", comm, |m| {
        m.comm(comm)?;
        Ok(m.attrs.set(comm, keyval, value as usize)?.into_iter().collect())
    })
    .map_or_else(|class| class, |_| MPI_SUCCESS)
}

fn MPI_Attr_put / PMPI_Attr_put(comm: Handle, keyval: c_int, value: *mut c_void) {
    PMPI_Comm_set_attr(comm, keyval, value)
}

fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: Handle, keyval: c_int) {
    call_with_callbacks("MPI_Comm_delete_attr", comm, |m| {
        m.comm(comm)?;
        Ok(m.attrs.delete(comm, keyval)?.into_iter().collect())
    })
    .map_or_else(|class| class, |_| MPI_SUCCESS)
}

fn MPI_Attr_delete / PMPI_Attr_delete(comm: Handle, keyval: c_int) {
    PMPI_Comm_delete_attr(comm, keyval)
}

fn MPI_Type_contiguous / PMPI_Type_contiguous(count: c_int, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_contiguous", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let l = Layout::hvector(nonneg(count, "count")?, 1, old.extent as i128, &old)?;
        *arg(newtype, "the new datatype")? = m.add_type(l)?;
        Ok(())
    })
}

fn MPI_Type_vector / PMPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_vector", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (n, b) = (nonneg(count, "count")?, nonneg(blocklength, "block length")?);
        let l = Layout::hvector(n, b, stride as i128 * old.extent as i128, &old)?;
        *arg(newtype, "the new datatype")? = m.add_type(l)?;
        Ok(())
    })
}

fn MPI_Type_create_hvector / PMPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: isize, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_create_hvector", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (n, b) = (nonneg(count, "count")?, nonneg(blocklength, "block length")?);
        *arg(newtype, "the new datatype")? = m.add_type(Layout::hvector(n, b, stride as i128, &old)?)?;
        Ok(())
    })
}

fn MPI_Type_indexed / PMPI_Type_indexed(count: c_int, blocklengths: *const c_int, displacements: *const c_int, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_indexed", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let blocks = block_list(count, blocklengths, |i| *displacements.add(i) as i128 * old.extent as i128, displacements.is_null())?;
        *arg(newtype, "the new datatype")? = m.add_type(Layout::hindexed(&blocks, &old)?)?;
        Ok(())
    })
}

fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(count: c_int, blocklengths: *const c_int, displacements: *const isize, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_create_hindexed", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let blocks = block_list(count, blocklengths, |i| *displacements.add(i) as i128, displacements.is_null())?;
        *arg(newtype, "the new datatype")? = m.add_type(Layout::hindexed(&blocks, &old)?)?;
        Ok(())
    })
}

fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(count: c_int, blocklength: c_int, displacements: *const c_int, oldtype: Handle, newtype: *mut Handle) {
    call("MPI_Type_create_indexed_block", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let b = nonneg(blocklength, "block length")?;
        let n = nonneg(count, "count")?;
        if n > 0 && displacements.is_null() {
            return err(MPI_ERR_ARG, "a null array of displacements");
        }
        let blocks: Vec<(usize, i128)> = (0..n).map(|i| (b, *displacements.add(i) as i128 * old.extent as i128)).collect();
        *arg(newtype, "the new datatype")? = m.add_type(Layout::hindexed(&blocks, &old)?)?;
        Ok(())
    })
}

fn MPI_Type_create_struct / PMPI_Type_create_struct(count: c_int, blocklengths: *const c_int, displacements: *const isize, types: *const Handle, newtype: *mut Handle) {
    call("MPI_Type_create_struct", MPI_COMM_WORLD, |m| {
        let n = nonneg(count, "count")?;
        if n > 0 && (blocklengths.is_null() || displacements.is_null() || types.is_null()) {
            return err(MPI_ERR_ARG, "a null array of block lengths, displacements or types");
        }
        let layouts = (0..n).map(|i| m.layout(*types.add(i))).collect::<MpiResult<Vec<_>>>()?;
        let mut blocks = Vec::with_capacity(n);
        for (i, l) in layouts.iter().enumerate() {
            blocks.push((nonneg(*blocklengths.add(i), "block length")?, *displacements.add(i) as i128, &**l));
        }
        *arg(newtype, "the new datatype")? = m.add_type(Layout::structure(&blocks)?)?;
        Ok(())
    })
}

fn MPI_Type_create_resized / PMPI_Type_create_resized(oldtype: Handle, lb: isize, extent: isize, newtype: *mut Handle) {
    call("MPI_Type_create_resized", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        *arg(newtype, "the new datatype")? = m.add_type(Layout::resized(&old, lb, extent))?;
        Ok(())
    })
}

fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut Handle) {
    call("MPI_Type_commit", MPI_COMM_WORLD, |m| {
        let h = *arg(datatype, "the datatype")?;
        if is_predefined_type(h) {
            return Ok(());
        }
        let l = m.derived(h)?;
        if !l.committed {
            let committed = Layout { committed: true, ..(*l).clone() };
            m.types[(h & HANDLE_INDEX) as usize] = Some(Arc::new(committed));
        }
        Ok(())
    })
}

fn MPI_Type_free / PMPI_Type_free(datatype: *mut Handle) {
    call("MPI_Type_free", MPI_COMM_WORLD, |m| {
        let datatype = arg(datatype, "the datatype")?;
        m.derived(*datatype)?;
        // Operations under way keep their layout (each holds a reference).
        m.types[(*datatype & HANDLE_INDEX) as usize] = None;
        *datatype = MPI_DATATYPE_NULL;
        Ok(())
    })
}

fn MPI_Type_size / PMPI_Type_size(datatype: Handle, size: *mut c_int) {
    call("MPI_Type_size", MPI_COMM_WORLD, |m| {
        let l = m.layout(datatype)?;
        *arg(size, "the size")? = c_int::try_from(l.size).unwrap_or(MPI_UNDEFINED);
        Ok(())
    })
}

fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: Handle, lb: *mut isize, extent: *mut isize) {
    call("MPI_Type_get_extent", MPI_COMM_WORLD, |m| {
        let l = m.layout(datatype)?;
        *arg(lb, "the lower bound")? = l.lb;
        *arg(extent, "the extent")? = l.extent;
        Ok(())
    })
}

fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(datatype: Handle, lb: *mut isize, extent: *mut isize) {
    call("MPI_Type_get_true_extent", MPI_COMM_WORLD, |m| {
        let l = m.layout(datatype)?;
        *arg(lb, "the lower bound")? = l.true_lb;
        *arg(extent, "the extent")? = l.true_ub - l.true_lb;
        Ok(())
    })
}

fn MPI_Pack / PMPI_Pack(inbuf: *const c_void, incount: c_int, datatype: Handle, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: Handle) {
    call("MPI_Pack", comm, |m| {
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(incount, "count")?;
        let bytes = data_bytes(n, &l)?;
        check_buffer(inbuf, bytes)?;
        let at = usize::try_from(*position).ok().filter(|&p| p + bytes <= outsize.max(0) as usize).ok_or_else(|| MpiError {
            class: MPI_ERR_TRUNCATE,
            message: format!("{bytes} bytes at position {} do not fit {outsize}", *position),
        })?;
        let mut data = Vec::with_capacity(bytes);
        l.pack(inbuf.cast(), n, &mut data);
        if bytes > 0 {
            std::ptr::copy_nonoverlapping(data.as_ptr(), outbuf.cast::<u8>().add(at), bytes);
        }
        *position += bytes as c_int;
        Ok(())
    })
}

fn MPI_Unpack / PMPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: Handle, comm: Handle) {
    call("MPI_Unpack", comm, |m| {
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(outcount, "count")?;
        let bytes = data_bytes(n, &l)?;
        check_buffer(outbuf, bytes)?;
        let at = usize::try_from(*position).ok().filter(|&p| p + bytes <= insize.max(0) as usize).ok_or_else(|| MpiError {
            class: MPI_ERR_TRUNCATE,
            message: format!("{bytes} bytes at position {} are not within {insize}", *position),
        })?;
        let data = slice_or_empty(inbuf.cast::<u8>().wrapping_add(at), bytes);
        l.unpack(data, outbuf.cast(), n);
        *position += bytes as c_int;
        Ok(())
    })
}

fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: Handle, comm: Handle, size: *mut c_int) {
    call("MPI_Pack_size", comm, |m| {
        let l = m.layout(datatype)?;
        let bytes = data_bytes(nonneg(incount, "count")?, &l)?;
        *arg(size, "the size")? = c_int::try_from(bytes).map_err(|_| MpiError {
            class: MPI_ERR_COUNT,
            message: format!("{bytes} bytes do not fit an int"),
        })?;
        Ok(())
    })
}

fn MPI_Get_address / PMPI_Get_address(location: *const c_void, address: *mut isize) {
    if address.is_null() {
        return MPI_ERR_ARG;
    }
    *address = location as isize;
    MPI_SUCCESS
}

fn MPI_Comm_free / PMPI_Comm_free(comm: *mut Handle) {
    let h = if comm.is_null() { MPI_COMM_NULL } else { *comm };
    let freeable = |m: &Mpi| match Mpi::index(h) {
        Some(i) if i >= 2 && m.comms.get(i).is_some_and(Option::is_some) => Ok(i),
        _ => err(MPI_ERR_COMM, format!("{h:#x} is not a communicator that can be freed")),
    };
    // The attributes go first, their delete callbacks outside the lock,
    // while the communicator is still there for them to look at.
    let deleted = call_with_callbacks("MPI_Comm_free", MPI_COMM_WORLD, |m| {
        freeable(m)?;
        Ok(m.attrs.clear(h))
    });
    if let Err(class) = deleted {
        return class;
    }
    call("MPI_Comm_free", MPI_COMM_WORLD, |m| {
        freeable(m)?;
        m.remove_comm(h);
        *comm = MPI_COMM_NULL;
        Ok(())
    })
}

fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) {
    let host = rustix_hostname();
    put_string(&host, name, MPI_MAX_PROCESSOR_NAME, resultlen);
    MPI_SUCCESS
}

fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) {
    if !version.is_null() {
        *version = MPI_VERSION;
    }
    if !subversion.is_null() {
        *subversion = MPI_SUBVERSION;
    }
    MPI_SUCCESS
}

fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) {
    let v = format!(
        "fm MPI {} (MPICH ABI, libmpich.so.12): point-to-point over fm's composite",
        env!("CARGO_PKG_VERSION")
    );
    put_string(&v, version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen);
    MPI_SUCCESS
}

fn MPI_Error_string / PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) {
    put_string(class_text(errorcode), string, MPI_MAX_ERROR_STRING, resultlen);
    MPI_SUCCESS
}

fn MPI_Error_class / PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) {
    if !errorclass.is_null() {
        *errorclass = errorcode;
    }
    MPI_SUCCESS
}

fn MPI_Send / PMPI_Send(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) {
    call("MPI_Send", comm, |m| send(m, buf, count, datatype, dest, tag, comm, false, None))
}

fn MPI_Rsend / PMPI_Rsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) {
    call("MPI_Rsend", comm, |m| send(m, buf, count, datatype, dest, tag, comm, false, None))
}

fn MPI_Ssend / PMPI_Ssend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) {
    call("MPI_Ssend", comm, |m| send(m, buf, count, datatype, dest, tag, comm, true, None))
}

fn MPI_Isend / PMPI_Isend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Isend", comm, |m| send(m, buf, count, datatype, dest, tag, comm, false, Some(request)))
}

fn MPI_Irsend / PMPI_Irsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Irsend", comm, |m| send(m, buf, count, datatype, dest, tag, comm, false, Some(request)))
}

fn MPI_Issend / PMPI_Issend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Issend", comm, |m| send(m, buf, count, datatype, dest, tag, comm, true, Some(request)))
}

fn MPI_Recv / PMPI_Recv(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) {
    call("MPI_Recv", comm, |m| {
        let id = recv(m, buf, count, datatype, source, tag, comm)?;
        let s = m.engine.wait(id)?;
        put_status(status, s);
        status_result(&s)
    })
}

fn MPI_Irecv / PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Irecv", comm, |m| {
        let request = arg(request, "the request")?;
        let id = recv(m, buf, count, datatype, source, tag, comm)?;
        *request = request_handle(id);
        Ok(())
    })
}

fn MPI_Sendrecv / PMPI_Sendrecv(
    sendbuf: *const c_void, sendcount: c_int, sendtype: Handle, dest: c_int, sendtag: c_int,
    recvbuf: *mut c_void, recvcount: c_int, recvtype: Handle, source: c_int, recvtag: c_int,
    comm: Handle, status: *mut MpiStatus,
) {
    call("MPI_Sendrecv", comm, |m| {
        let r = recv(m, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
        let mut sreq = MPI_REQUEST_NULL;
        send(m, sendbuf, sendcount, sendtype, dest, sendtag, comm, false, Some(&mut sreq))?;
        m.engine.wait(request_id(sreq)?)?;
        let s = m.engine.wait(r)?;
        put_status(status, s);
        status_result(&s)
    })
}

fn MPI_Wait / PMPI_Wait(request: *mut Handle, status: *mut MpiStatus) {
    call("MPI_Wait", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        let Some(id) = resolve(m, *request)? else {
            put_status(status, MpiStatus::empty());
            return Ok(());
        };
        let s = m.engine.wait(id)?;
        retire(m, request);
        put_status(status, s);
        status_result(&s)
    })
}

fn MPI_Test / PMPI_Test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) {
    call("MPI_Test", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        let flag = arg(flag, "the flag")?;
        let Some(id) = resolve(m, *request)? else {
            *flag = 1;
            put_status(status, MpiStatus::empty());
            return Ok(());
        };
        m.engine.progress()?;
        match m.engine.test(id) {
            Some(s) => {
                *flag = 1;
                retire(m, request);
                put_status(status, s);
                status_result(&s)
            }
            None => {
                *flag = 0;
                Ok(())
            }
        }
    })
}

fn MPI_Waitall / PMPI_Waitall(count: c_int, requests: *mut Handle, statuses: *mut MpiStatus) {
    call("MPI_Waitall", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let mut truncated = false;
        for (i, id) in ids.iter().enumerate() {
            let s = match id {
                None => MpiStatus::empty(),
                Some(id) => {
                    let s = m.engine.wait(*id)?;
                    retire(m, &mut *requests.add(i));
                    s
                }
            };
            truncated |= s.error != MPI_SUCCESS;
            if statuses as usize != STATUS_IGNORE && !statuses.is_null() {
                *statuses.add(i) = s;
            }
        }
        if truncated {
            return err(MPI_ERR_IN_STATUS, "a request failed: see its status");
        }
        Ok(())
    })
}

fn MPI_Waitany / PMPI_Waitany(count: c_int, requests: *mut Handle, index: *mut c_int, status: *mut MpiStatus) {
    call("MPI_Waitany", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let index = arg(index, "the index")?;
        match m.engine.wait_any(&ids)? {
            None => {
                *index = MPI_UNDEFINED;
                put_status(status, MpiStatus::empty());
                Ok(())
            }
            Some((i, s)) => {
                *index = i as c_int;
                retire(m, &mut *requests.add(i));
                put_status(status, s);
                status_result(&s)
            }
        }
    })
}

fn MPI_Testall / PMPI_Testall(count: c_int, requests: *mut Handle, flag: *mut c_int, statuses: *mut MpiStatus) {
    call("MPI_Testall", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let flag = arg(flag, "the flag")?;
        m.engine.progress()?;
        if !ids.iter().flatten().all(|&id| m.engine.is_done(id)) {
            *flag = 0;
            return Ok(());
        }
        *flag = 1;
        for (i, id) in ids.iter().enumerate() {
            let s = id.and_then(|id| m.engine.test(id)).unwrap_or_else(MpiStatus::empty);
            if id.is_some() {
                retire(m, &mut *requests.add(i));
            }
            if statuses as usize != STATUS_IGNORE && !statuses.is_null() {
                *statuses.add(i) = s;
            }
        }
        Ok(())
    })
}

fn MPI_Testany / PMPI_Testany(count: c_int, requests: *mut Handle, index: *mut c_int, flag: *mut c_int, status: *mut MpiStatus) {
    call("MPI_Testany", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let (index, flag) = (arg(index, "the index")?, arg(flag, "the flag")?);
        m.engine.progress()?;
        if ids.iter().all(Option::is_none) {
            *flag = 1;
            *index = MPI_UNDEFINED;
            put_status(status, MpiStatus::empty());
            return Ok(());
        }
        for (i, id) in ids.iter().enumerate() {
            if let Some(s) = id.and_then(|id| m.engine.test(id)) {
                *flag = 1;
                *index = i as c_int;
                retire(m, &mut *requests.add(i));
                put_status(status, s);
                return status_result(&s);
            }
        }
        *flag = 0;
        *index = MPI_UNDEFINED;
        Ok(())
    })
}

fn MPI_Waitsome / PMPI_Waitsome(incount: c_int, requests: *mut Handle, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MpiStatus) {
    call("MPI_Waitsome", MPI_COMM_WORLD, |m| some(m, true, incount, requests, outcount, indices, statuses))
}

fn MPI_Testsome / PMPI_Testsome(incount: c_int, requests: *mut Handle, outcount: *mut c_int, indices: *mut c_int, statuses: *mut MpiStatus) {
    call("MPI_Testsome", MPI_COMM_WORLD, |m| some(m, false, incount, requests, outcount, indices, statuses))
}

fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(
    buf: *mut c_void, count: c_int, datatype: Handle, dest: c_int, sendtag: c_int,
    source: c_int, recvtag: c_int, comm: Handle, status: *mut MpiStatus,
) {
    call("MPI_Sendrecv_replace", comm, |m| {
        let elements = m.elements(count, datatype)?;
        check_buffer(buf, elements.bytes())?;
        // The send starts first. A packed type's packs its elements into a
        // message of its own at once, so the receive may unpack straight
        // into them; plain bytes are sent from where they are, so the
        // message comes into a buffer of its own and replaces them (at
        // their offset) once both are done.
        let mut sreq = MPI_REQUEST_NULL;
        send(m, buf, count, datatype, dest, sendtag, comm, false, Some(&mut sreq))?;
        let (r, incoming) = match elements {
            Elements::Packed { .. } => (recv(m, buf, count, datatype, source, recvtag, comm)?, None),
            Elements::Plain { at, bytes } => {
                let (c, source) = m.recv_from(comm, source, recvtag)?;
                let mut v = vec![0u8; bytes];
                // SAFETY: `v` (its heap buffer) lives until the receive
                // is waited for, below.
                let r = m.engine.irecv(c.context, source, recvtag, v.as_mut_ptr(), bytes)?;
                (r, Some((at, v)))
            }
        };
        m.engine.wait(request_id(sreq)?)?;
        let s = m.engine.wait(r)?;
        if let Some((at, v)) = incoming {
            let n = (s.bytes() as usize).min(v.len());
            if n > 0 {
                // SAFETY: the caller's `count` elements, `v.len()` plain
                // bytes from `at` (MPI's rule for the buffer).
                std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>().offset(at), n);
            }
        }
        put_status(status, s);
        status_result(&s)
    })
}

fn MPI_Improbe / PMPI_Improbe(source: c_int, tag: c_int, comm: Handle, flag: *mut c_int, message: *mut Handle, status: *mut MpiStatus) {
    call("MPI_Improbe", comm, |m| {
        let (flag, message) = (arg(flag, "the flag")?, arg(message, "the message")?);
        let (c, source) = m.recv_from(comm, source, tag)?;
        if source == MPI_PROC_NULL {
            *flag = 1;
            *message = MPI_MESSAGE_NO_PROC;
            put_status(status, MpiStatus::empty());
            return Ok(());
        }
        match m.engine.improbe(c.context, source, tag)? {
            Some((id, s)) => {
                *flag = 1;
                *message = message_handle(id);
                put_status(status, s);
            }
            None => *flag = 0,
        }
        Ok(())
    })
}

fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, comm: Handle, message: *mut Handle, status: *mut MpiStatus) {
    call("MPI_Mprobe", comm, |m| {
        let message = arg(message, "the message")?;
        let (c, source) = m.recv_from(comm, source, tag)?;
        if source == MPI_PROC_NULL {
            *message = MPI_MESSAGE_NO_PROC;
            put_status(status, MpiStatus::empty());
            return Ok(());
        }
        let (id, s) = m.engine.mprobe(c.context, source, tag)?;
        *message = message_handle(id);
        put_status(status, s);
        Ok(())
    })
}

fn MPI_Imrecv / PMPI_Imrecv(buf: *mut c_void, count: c_int, datatype: Handle, message: *mut Handle, request: *mut Handle) {
    call("MPI_Imrecv", MPI_COMM_WORLD, |m| {
        let (message, request) = (arg(message, "the message")?, arg(request, "the request")?);
        let id = mrecv_start(m, buf, count, datatype, *message)?;
        *message = MPI_MESSAGE_NULL;
        *request = request_handle(id);
        Ok(())
    })
}

fn MPI_Mrecv / PMPI_Mrecv(buf: *mut c_void, count: c_int, datatype: Handle, message: *mut Handle, status: *mut MpiStatus) {
    call("MPI_Mrecv", MPI_COMM_WORLD, |m| {
        let message = arg(message, "the message")?;
        let id = mrecv_start(m, buf, count, datatype, *message)?;
        *message = MPI_MESSAGE_NULL;
        let s = m.engine.wait(id)?;
        put_status(status, s);
        status_result(&s)
    })
}

fn MPI_Buffer_attach / PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, |m| {
        if m.attached.is_some() {
            return err(MPI_ERR_BUFFER, "a buffer is attached already (MPI_Buffer_detach it first)");
        }
        if size < 0 || (buffer.is_null() && size > 0) {
            return err(MPI_ERR_BUFFER, format!("a buffer of {size} bytes at {buffer:?}"));
        }
        m.attached = Some((buffer as usize, size as usize));
        Ok(())
    })
}

fn MPI_Buffer_detach / PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) {
    call("MPI_Buffer_detach", MPI_COMM_WORLD, |m| {
        // Every buffered send completes first.
        while let Some((id, data)) = m.buffered.pop() {
            m.engine.wait(id)?;
            drop(data);
        }
        let (addr, bytes) = m.attached.take().unwrap_or((0, 0));
        if !buffer_addr.is_null() {
            *buffer_addr.cast::<*mut c_void>() = addr as *mut c_void;
        }
        if !size.is_null() {
            *size = bytes as c_int;
        }
        Ok(())
    })
}

fn MPI_Bsend / PMPI_Bsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle) {
    call("MPI_Bsend", comm, |m| bsend(m, buf, count, datatype, dest, tag, comm))
}

fn MPI_Ibsend / PMPI_Ibsend(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Ibsend", comm, |m| {
        let request = arg(request, "the request")?;
        bsend(m, buf, count, datatype, dest, tag, comm)?;
        // Buffered: complete as soon as the data is copied.
        *request = request_handle(m.engine.null_request());
        Ok(())
    })
}

fn MPI_Send_init / PMPI_Send_init(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Send_init", comm, |m| persistent(m, Some(false), buf.cast_mut(), count, datatype, dest, tag, comm, request))
}

fn MPI_Ssend_init / PMPI_Ssend_init(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Ssend_init", comm, |m| persistent(m, Some(true), buf.cast_mut(), count, datatype, dest, tag, comm, request))
}

fn MPI_Rsend_init / PMPI_Rsend_init(buf: *const c_void, count: c_int, datatype: Handle, dest: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Rsend_init", comm, |m| persistent(m, Some(false), buf.cast_mut(), count, datatype, dest, tag, comm, request))
}

fn MPI_Recv_init / PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: Handle, source: c_int, tag: c_int, comm: Handle, request: *mut Handle) {
    call("MPI_Recv_init", comm, |m| persistent(m, None, buf, count, datatype, source, tag, comm, request))
}

fn MPI_Start / PMPI_Start(request: *mut Handle) {
    call("MPI_Start", MPI_COMM_WORLD, |m| start(m, *arg(request, "the request")?))
}

fn MPI_Startall / PMPI_Startall(count: c_int, requests: *mut Handle) {
    call("MPI_Startall", MPI_COMM_WORLD, |m| {
        if count < 0 {
            return err(MPI_ERR_COUNT, format!("count {count} is negative"));
        }
        if count > 0 && requests.is_null() {
            return err(MPI_ERR_ARG, "a null array of requests");
        }
        (0..count as usize).try_for_each(|i| start(m, *requests.add(i)))
    })
}

fn MPI_Request_free / PMPI_Request_free(request: *mut Handle) {
    call("MPI_Request_free", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        if let Some(id) = resolve(m, *request)? {
            m.engine.free_request(id);
        }
        if *request & !HANDLE_INDEX == PERSISTENT_DIRECT {
            m.persistent[(*request & HANDLE_INDEX) as usize] = None;
        }
        *request = MPI_REQUEST_NULL;
        Ok(())
    })
}

fn MPI_Cancel / PMPI_Cancel(request: *mut Handle) {
    call("MPI_Cancel", MPI_COMM_WORLD, |m| {
        if let Some(id) = resolve(m, *arg(request, "the request")?)? {
            m.engine.cancel(id);
        }
        Ok(())
    })
}

fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) {
    if status.is_null() || status as usize == STATUS_IGNORE || flag.is_null() {
        return MPI_ERR_ARG;
    }
    *flag = c_int::from((*status).cancelled());
    MPI_SUCCESS
}

fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: Handle, flag: *mut c_int, status: *mut MpiStatus) {
    call("MPI_Iprobe", comm, |m| {
        let flag = arg(flag, "the flag")?;
        let (c, source) = m.recv_from(comm, source, tag)?;
        match m.engine.iprobe(c.context, source, tag)? {
            Some(s) => {
                *flag = 1;
                put_status(status, s);
            }
            None => *flag = 0,
        }
        Ok(())
    })
}

fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) {
    call("MPI_Probe", comm, |m| {
        let (c, source) = m.recv_from(comm, source, tag)?;
        let s = m.engine.probe(c.context, source, tag)?;
        put_status(status, s);
        Ok(())
    })
}

fn MPI_Get_count / PMPI_Get_count(status: *const MpiStatus, datatype: Handle, count: *mut c_int) {
    count_in_status(status, datatype, count, false)
}

fn MPI_Get_elements / PMPI_Get_elements(status: *const MpiStatus, datatype: Handle, count: *mut c_int) {
    count_in_status(status, datatype, count, true)
}

fn MPI_Barrier / PMPI_Barrier(comm: Handle) {
    call("MPI_Barrier", comm, |m| {
        let mut c = m.comm(comm)?.clone();
        m.engine.barrier(&mut c)?;
        *m.comm_mut(comm)? = c;
        Ok(())
    })
}
}

/// Defines `PMPI_name` and `MPI_name` for a function not implemented
/// yet: it reports `MPI_ERR_UNSUPPORTED_OPERATION` to the error handler of
/// `MPI_COMM_WORLD` (fatal by default, naming the function), rather than
/// leaving the symbol missing (a program built against MPICH would die at
/// its first call with the loader's "undefined symbol"). The arguments are
/// not read (the C caller cleans up its own arguments).
macro_rules! not_yet {
    ($($name:ident / $pname:ident),* $(,)?) => {$(
        #[no_mangle]
        #[doc = concat!("`", stringify!($pname), "`: not supported yet.")]
        pub extern "C" fn $pname() -> c_int {
            call(stringify!($name), MPI_COMM_WORLD, |_| {
                err(
                    MPI_ERR_UNSUPPORTED_OPERATION,
                    concat!(stringify!($name), " is not supported by fm's MPI yet: of the collectives only MPI_Barrier is (docs/MPI.md)"),
                )
            })
        }

        #[no_mangle]
        #[doc = concat!("`", stringify!($name), "`: not supported yet.")]
        pub extern "C" fn $name() -> c_int {
            $pname()
        }
    )*};
}

not_yet! {
    MPI_Bcast / PMPI_Bcast,
    MPI_Reduce / PMPI_Reduce,
    MPI_Allreduce / PMPI_Allreduce,
    MPI_Gather / PMPI_Gather,
    MPI_Gatherv / PMPI_Gatherv,
    MPI_Scatter / PMPI_Scatter,
    MPI_Scatterv / PMPI_Scatterv,
    MPI_Allgather / PMPI_Allgather,
    MPI_Allgatherv / PMPI_Allgatherv,
    MPI_Alltoall / PMPI_Alltoall,
    MPI_Alltoallv / PMPI_Alltoallv,
    MPI_Alltoallw / PMPI_Alltoallw,
    MPI_Reduce_scatter / PMPI_Reduce_scatter,
    MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block,
    MPI_Scan / PMPI_Scan,
    MPI_Exscan / PMPI_Exscan,
    MPI_Ibarrier / PMPI_Ibarrier,
    MPI_Ibcast / PMPI_Ibcast,
    MPI_Ireduce / PMPI_Ireduce,
    MPI_Iallreduce / PMPI_Iallreduce,
    MPI_Op_create / PMPI_Op_create,
    MPI_Op_free / PMPI_Op_free,
}

/// `MPI_Wtime`: seconds since `MPI_Init` (not synchronised across hosts:
/// `MPI_WTIME_IS_GLOBAL` is false).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    match &*phase() {
        Phase::Running(m) => m.t0.elapsed().as_secs_f64(),
        _ => 0.0,
    }
}

/// `MPI_Wtime`: calls `PMPI_Wtime`.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    PMPI_Wtime()
}

/// `MPI_Wtick`: the resolution of `MPI_Wtime`.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> c_double {
    1e-9
}

/// `MPI_Wtick`: calls `PMPI_Wtick`.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    PMPI_Wtick()
}

fn init(func: &str) -> c_int {
    let mut g = phase();
    if !matches!(*g, Phase::Before) {
        fatal(None, func, "MPI is already initialized (or finalized)");
    }
    let minus_one = match fm::settings::env_only::<MinusOne>(&fm::settings::MPI_SOURCE_MINUS_ONE) {
        Ok(v) => v.map_or(MPI_PROC_NULL, |v| v.0),
        Err(e) => fatal(None, func, &e.to_string()),
    };
    let engine = match Engine::start() {
        Ok(e) => e,
        Err(e) => fatal(None, func, &e.message),
    };
    let me = engine.fm.rank();
    let size = engine.fm.size();
    let world = Comm {
        context: 0,
        ranks: (0..size as fm::Rank).collect::<Vec<_>>().into(),
        rank: me as c_int,
        errhandler: MPI_ERRORS_ARE_FATAL,
        barriers: 0,
        children: 0,
    };
    let own = Comm {
        context: 1,
        ranks: vec![me].into(),
        rank: 0,
        errhandler: MPI_ERRORS_ARE_FATAL,
        barriers: 0,
        children: 0,
    };
    *g = Phase::Running(Box::new(Mpi {
        engine,
        comms: vec![Some(world), Some(own)],
        types: Vec::new(),
        groups: Vec::new(),
        persistent: Vec::new(),
        attached: None,
        buffered: Vec::new(),
        attrs: Attributes::default(),
        contexts: ContextIds::default(),
        universe: size as c_int,
        minus_one,
        t0: Instant::now(),
    }));
    MPI_SUCCESS
}

/// The engine's requests of an array of handles ([`resolve`]): `None` for
/// `MPI_REQUEST_NULL` and persistent requests not started.
///
/// # Safety
/// `requests` holds `count` handles.
unsafe fn request_ids(m: &Mpi, requests: *mut Handle, count: c_int) -> MpiResult<Vec<Option<u32>>> {
    if count < 0 {
        return err(MPI_ERR_COUNT, format!("count {count} is negative"));
    }
    if count > 0 && requests.is_null() {
        return err(MPI_ERR_ARG, "a null array of requests");
    }
    (0..count as usize)
        .map(|i| resolve(m, *requests.add(i)))
        .collect()
}

/// Every kind of send: checked, started, and waited for unless `request`
/// takes it.
#[allow(clippy::too_many_arguments)]
fn send(
    m: &mut Mpi,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    sync: bool,
    request: Option<*mut Handle>,
) -> MpiResult<()> {
    let c = m.p2p(comm, dest, false, tag)?;
    // A blocking standard send of a short message of a predefined type
    // goes straight to the engine, past the general steps below.
    if let (None, false, Some(size), Ok(n)) = (
        request,
        sync,
        builtin_type_size(datatype),
        usize::try_from(count),
    ) {
        if n * size <= engine::SHORT {
            check_buffer(buf, n * size)?;
            // SAFETY: the caller's buffer of `n * size` bytes (MPI's rule).
            return unsafe { m.engine.send(c, tag, buf.cast(), n * size) };
        }
    }
    let (at, bytes) = match m.elements(count, datatype)? {
        Elements::Plain { at, bytes } => (at, bytes),
        Elements::Packed { layout, bytes } => {
            check_buffer(buf, bytes)?;
            let mut data = Vec::with_capacity(bytes);
            // SAFETY: the caller's `count` elements (MPI's rule).
            unsafe { layout.pack(buf.cast(), count as usize, &mut data) };
            let id = m.engine.isend_owned(c, tag, data, sync)?;
            return match request {
                // SAFETY: the caller's request handle.
                Some(r) => unsafe {
                    *arg(r, "the request")? = request_handle(id);
                    Ok(())
                },
                None => m.engine.wait(id).map(drop),
            };
        }
    };
    check_buffer(buf, bytes)?;
    let buf = buf.cast::<u8>().wrapping_offset(at).cast::<c_void>();
    // SAFETY (all three): the caller's buffer of `bytes` bytes and request
    // handle (MPI's rule).
    match request {
        None if !sync => unsafe { m.engine.send(c, tag, buf.cast(), bytes) },
        None => {
            let id = unsafe { m.engine.isend(c, tag, buf.cast(), bytes, sync)? };
            m.engine.wait(id).map(drop)
        }
        Some(r) => unsafe {
            let r = arg(r, "the request")?;
            *r = request_handle(m.engine.isend(c, tag, buf.cast(), bytes, sync)?);
            Ok(())
        },
    }
}

/// A count or length that must not be negative.
fn nonneg(v: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(v).map_err(|_| MpiError {
        class: if what == "count" {
            MPI_ERR_COUNT
        } else {
            MPI_ERR_ARG
        },
        message: format!("{what} {v} is negative"),
    })
}

/// `count` blocks: lengths from `lengths`, byte offsets from `offset(i)`.
///
/// # Safety
/// `lengths` holds `count` ints, and `offset` reads `count` entries.
unsafe fn block_list(
    count: c_int,
    lengths: *const c_int,
    offset: impl Fn(usize) -> i128,
    offsets_null: bool,
) -> MpiResult<Vec<(usize, i128)>> {
    let n = nonneg(count, "count")?;
    if n > 0 && (lengths.is_null() || offsets_null) {
        return err(
            MPI_ERR_ARG,
            "a null array of block lengths or displacements",
        );
    }
    (0..n)
        .map(|i| Ok((nonneg(*lengths.add(i), "block length")?, offset(i))))
        .collect()
}

/// `MPI_BSEND_OVERHEAD` in MPICH's header: what each buffered message is
/// counted to take of the attached buffer beyond its data.
const BSEND_OVERHEAD: usize = 96;

/// A buffered send: the data is copied, the send started from the copy,
/// and the call returns. The copies in flight, each with
/// [`BSEND_OVERHEAD`], must fit the attached buffer's size.
fn bsend(
    m: &mut Mpi,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> MpiResult<()> {
    let c = m.p2p(comm, dest, false, tag)?;
    let elements = m.elements(count, datatype)?;
    let bytes = elements.bytes();
    check_buffer(buf, bytes)?;
    // Forget the copies whose sends are done.
    let engine = &mut m.engine;
    m.buffered.retain(|(id, _)| engine.test(*id).is_none());
    let in_use: usize = m
        .buffered
        .iter()
        .map(|(_, d)| d.len() + BSEND_OVERHEAD)
        .sum();
    let room = m.attached.map_or(0, |(_, size)| size);
    if in_use + bytes + BSEND_OVERHEAD > room {
        return err(
            MPI_ERR_BUFFER,
            format!(
                "the attached buffer ({room} bytes, {in_use} in use) cannot hold {bytes} more bytes and MPI_BSEND_OVERHEAD ({BSEND_OVERHEAD})"
            ),
        );
    }
    let copy = match elements {
        // SAFETY: the caller's buffer of `bytes` bytes (checked above).
        Elements::Plain { at, .. } => {
            unsafe { slice_or_empty(buf.cast::<u8>().offset(at), bytes) }.to_vec()
        }
        Elements::Packed { layout, .. } => {
            let mut data = Vec::with_capacity(bytes);
            // SAFETY: the caller's `count` elements.
            unsafe { layout.pack(buf.cast(), count as usize, &mut data) };
            data
        }
    };
    // SAFETY: the copy lives in `buffered` until the send completes.
    let id = unsafe { m.engine.isend(c, tag, copy.as_ptr(), bytes, false)? };
    m.buffered.push((id, copy));
    Ok(())
}

/// Make a persistent request (`send`: `Some(sync)`, or `None` for a
/// receive), checked now as the operation it starts will be.
#[allow(clippy::too_many_arguments)]
fn persistent(
    m: &mut Mpi,
    send: Option<bool>,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's request handle (null is refused).
    let request = unsafe { arg(request, "the request")? };
    m.p2p(comm, peer, send.is_none(), tag)?;
    check_buffer(buf, m.elements(count, datatype)?.bytes())?;
    let p = Persistent {
        send,
        buf,
        count,
        datatype,
        peer,
        tag,
        comm,
        active: None,
    };
    let i = match m.persistent.iter().position(Option::is_none) {
        Some(i) => {
            m.persistent[i] = Some(p);
            i
        }
        None => {
            m.persistent.push(Some(p));
            m.persistent.len() - 1
        }
    };
    if i > HANDLE_INDEX as usize {
        m.persistent[i] = None;
        return err(MPI_ERR_OTHER, "too many persistent requests");
    }
    *request = PERSISTENT_DIRECT | i as Handle;
    Ok(())
}

/// `MPI_Start`: begin the operation of persistent request `h`.
fn start(m: &mut Mpi, h: Handle) -> MpiResult<()> {
    let p = match m.persistent.get((h & HANDLE_INDEX) as usize) {
        Some(Some(p)) if h & !HANDLE_INDEX == PERSISTENT_DIRECT => p,
        _ => {
            return err(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent request"),
            )
        }
    };
    if p.active.is_some() {
        return err(MPI_ERR_REQUEST, "the persistent request is already active");
    }
    let (sync, buf, count, datatype, peer, tag, comm) =
        (p.send, p.buf, p.count, p.datatype, p.peer, p.tag, p.comm);
    let id = match sync {
        Some(sync) => {
            let mut r = MPI_REQUEST_NULL;
            send(m, buf, count, datatype, peer, tag, comm, sync, Some(&mut r))?;
            request_id(r)?
        }
        None => recv(m, buf, count, datatype, peer, tag, comm)?,
    };
    if let Some(Some(p)) = m.persistent.get_mut((h & HANDLE_INDEX) as usize) {
        p.active = Some(id);
    }
    Ok(())
}

/// Start receiving the message of a matched probe (`MPI_MESSAGE_NO_PROC`:
/// an empty receive, complete at once).
fn mrecv_start(
    m: &mut Mpi,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: Handle,
) -> MpiResult<u32> {
    let elements = m.elements(count, datatype)?;
    check_buffer(buf, elements.bytes())?;
    let id = match message_id(message)? {
        None => return Ok(m.engine.null_request()),
        Some(id) if m.engine.is_message(id) => id,
        Some(_) => {
            return err(
                MPI_ERR_REQUEST,
                format!("{message:#x} was received already"),
            )
        }
    };
    // SAFETY (both): the caller's buffer of `count` elements (MPI's rule).
    match elements {
        Elements::Plain { at, bytes } => unsafe {
            m.engine
                .imrecv(id, buf.cast::<u8>().wrapping_offset(at), bytes)
        },
        Elements::Packed { layout, .. } => unsafe {
            let unpack = Unpack {
                layout,
                buf: buf.cast(),
                count: count as usize,
            };
            m.engine.imrecv_unpacked(id, unpack)
        },
    }
}

fn recv(
    m: &mut Mpi,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
) -> MpiResult<u32> {
    let (c, source) = m.recv_from(comm, source, tag)?;
    match m.elements(count, datatype)? {
        Elements::Plain { at, bytes } => {
            check_buffer(buf, bytes)?;
            // SAFETY: the caller's buffer of `bytes` bytes (MPI's rule).
            unsafe {
                m.engine.irecv(
                    c.context,
                    source,
                    tag,
                    buf.cast::<u8>().wrapping_offset(at),
                    bytes,
                )
            }
        }
        Elements::Packed { layout, bytes } => {
            check_buffer(buf, bytes)?;
            let unpack = Unpack {
                layout,
                buf: buf.cast(),
                count: count as usize,
            };
            // SAFETY: the caller's `count` elements (MPI's rule).
            unsafe { m.engine.irecv_unpacked(c.context, source, tag, unpack) }
        }
    }
}

/// A value of `FM_MPI_SOURCE_MINUS_ONE`: the source -1 stands for.
struct MinusOne(c_int);

impl std::str::FromStr for MinusOne {
    type Err = String;
    fn from_str(s: &str) -> Result<MinusOne, String> {
        match s.trim() {
            "proc-null" => Ok(MinusOne(MPI_PROC_NULL)),
            "any-source" => Ok(MinusOne(MPI_ANY_SOURCE)),
            _ => Err("expected proc-null or any-source".into()),
        }
    }
}

fn rustix_hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: a buffer of its own length.
    let r = unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}
