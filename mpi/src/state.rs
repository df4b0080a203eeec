//! What MPI holds between calls, how every call reaches it (`call`: the
//! library's lock, then the communicator's error handler), and start-up.

use crate::*;

/// Everything MPI holds between calls.
pub(crate) struct Mpi {
    pub(crate) engine: Engine,
    /// Communicators by index: 0 is `MPI_COMM_WORLD`, 1 `MPI_COMM_SELF`,
    /// the rest made at run time (handle `COMM_DIRECT | index`).
    pub(crate) comms: Vec<Option<Comm>>,
    /// Groups made at run time by index (handle `GROUP_DIRECT | index`).
    pub(crate) groups: Vec<Option<std::sync::Arc<[fm::Rank]>>>,
    /// Persistent requests by index (handle `PERSISTENT_DIRECT | index`).
    pub(crate) persistent: Vec<Option<Persistent>>,
    /// The buffer `MPI_Buffer_attach` gave (address, bytes), if any.
    pub(crate) attached: Option<(usize, usize)>,
    /// Buffered sends on their way: the engine's request and a copy of the
    /// data, kept until the send completes.
    pub(crate) buffered: Vec<(u32, Vec<u8>)>,
    /// Keyvals and the attributes set under them.
    pub(crate) attrs: Attributes,
    /// Operations made by `MPI_Op_create` by index (handle `OP_DIRECT | index`).
    pub(crate) ops: Vec<Option<coll::op::UserOp>>,
    /// Names given to communicators and datatypes, by handle.
    pub(crate) names: std::collections::HashMap<Handle, String>,
    /// The program's error handlers, classes, codes and strings.
    pub(crate) errors: crate::errors::Errors,
    /// The process topologies communicators carry, by handle.
    pub(crate) topologies: std::collections::HashMap<Handle, Arc<crate::topo::Topology>>,
    /// Communicators whose `MPI_Comm_idup` is under way: the agreement
    /// that will give each its context (`engine::agreements`).
    pub(crate) unagreed: std::collections::HashMap<Handle, u64>,
    /// Generalized requests by the engine's request, and what is left to
    /// run of their functions once the lock is released (`generalized`).
    pub(crate) generalized: std::collections::HashMap<u32, crate::generalized::Generalized>,
    pub(crate) finishing: Vec<crate::generalized::Finish>,
    /// Where the World model (`MPI_Init` to `MPI_Finalize`) stands; the
    /// library runs while it does or any session is open (`session`).
    pub(crate) world: World,
    /// Sessions by index (handle `SESSION_DIRECT | index`).
    pub(crate) sessions: Vec<Option<crate::session::Session>>,
    /// `MPI_UNIVERSE_SIZE`'s value: the job's size.
    pub(crate) universe: c_int,
    /// The source a receive or probe from -1 means: `MPI_PROC_NULL`, or
    /// `MPI_ANY_SOURCE` for binaries that assume Open MPI's numbering
    /// (`FM_MPI_SOURCE_MINUS_ONE`).
    pub(crate) minus_one: c_int,
    /// Windows by index (handle `rma::WIN_DIRECT | index`).
    pub(crate) wins: Vec<Option<crate::rma::Win>>,
}

/// A persistent request: what `MPI_Start` begins, on which communicator,
/// and the operation it began, while that runs.
pub(crate) struct Persistent {
    pub(crate) op: Started,
    pub(crate) comm: Handle,
    pub(crate) active: Option<u32>,
}

/// What a persistent request starts.
pub(crate) enum Started {
    /// A send (`send`: its mode) or a receive (`None`).
    P2p {
        send: Option<crate::p2p::SendMode>,
        buf: *mut c_void,
        count: i64,
        datatype: Handle,
        peer: c_int,
        tag: c_int,
    },
    /// A collective (`MPI_Bcast_init`…): its plan, written again at each
    /// start (the buffers' contents change); its messages go on a context
    /// of its own (`slot`) with the start's number as the tag.
    Collective {
        build: crate::collective::Build,
        slot: u32,
        starts: u32,
    },
    /// A partitioned send or receive (`partitioned`).
    Partitioned(crate::partitioned::Partitioned),
}

// SAFETY: `buf` is the caller's buffer, used only under the library's
// lock while the request runs (MPI's rule for persistent requests).
unsafe impl Send for Started {}

pub(crate) enum Phase {
    Before,
    Running(Box<Mpi>),
    Finalized,
}

/// The World model's state (MPI-4.0 §11.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum World {
    /// No `MPI_Init` yet: sessions alone run the library.
    Unused,
    Initialized,
    /// `MPI_Finalize` ran while sessions stayed open.
    Finalized,
}

pub(crate) static MPI: Mutex<Phase> = Mutex::new(Phase::Before);

/// The library's lock, held: every use of what MPI holds goes through it.
pub(crate) struct Held {
    // Dropped first: the lock is given up before the thread stops
    // counting as inside (`threads`).
    guard: std::sync::MutexGuard<'static, Phase>,
    _inside: crate::threads::Inside,
}

impl std::ops::Deref for Held {
    type Target = Phase;
    fn deref(&self) -> &Phase {
        &self.guard
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Phase {
        &mut self.guard
    }
}

/// Take the library's lock. Under `MPI_THREAD_MULTIPLE` the thread counts
/// as inside MPI from before it waits for the lock until after it gave
/// the lock up, which ends a waiting thread's sleep in FM (`threads`).
pub(crate) fn phase() -> Held {
    let inside = crate::threads::enter();
    Held {
        guard: MPI.lock().unwrap_or_else(|p| p.into_inner()),
        _inside: inside,
    }
}

thread_local! {
    /// This thread holds the library's lock (inside [`call`]).
    static IN_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread holds the library's lock (inside [`call`]).
pub(crate) fn in_call() -> bool {
    IN_CALL.get()
}

/// A question about datatypes alone ([`types`]), which needs not the
/// library's lock: answered at once when this thread holds it (a
/// reduction function the program gave, run inside a collective, asks
/// about its datatype), else as any call. An error is then returned.
pub(crate) fn query(func: &str, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    if IN_CALL.get() {
        return f().map_or_else(|e| e.class, |()| MPI_SUCCESS);
    }
    call(func, MPI_COMM_WORLD, |_| f())
}

/// Run `f` on the running MPI, reporting an error as `func` to the error
/// handler of `comm` (or of `MPI_COMM_WORLD`).
pub(crate) fn call(func: &str, comm: Handle, f: impl FnOnce(&mut Mpi) -> MpiResult<()>) -> c_int {
    if IN_CALL.get() {
        // The lock is this thread's: waiting for it would never end.
        fatal(
            None,
            func,
            "called from inside a function the program gave MPI (a reduction operation) \
             while fm's MPI runs it; of MPI's calls such a function may make only \
             MPI_Type_size, MPI_Type_get_extent and MPI_Type_get_true_extent on fm so far",
        );
    }
    let mut g = phase();
    IN_CALL.set(true);
    let _out = OnReturn(|| IN_CALL.set(false));
    let Phase::Running(mpi) = &mut *g else {
        let why = match &*g {
            Phase::Before => "called before MPI_Init",
            _ => "called after MPI_Finalize",
        };
        fatal(None, func, why);
    };
    if !mpi.unagreed.is_empty() {
        mpi.install_agreed();
    }
    let e = match f(mpi) {
        Ok(()) => return MPI_SUCCESS,
        Err(e) => e,
    };
    // A session's calls report through its handler (`session`).
    let handler = (mpi.session(comm).map(|s| s.errhandler))
        .or_else(|_| mpi.win(comm).map(|w| w.errhandler))
        .or_else(|_| mpi.comm(comm).map(|c| c.errhandler))
        .or_else(|_| mpi.comm(MPI_COMM_WORLD).map(|c| c.errhandler))
        .unwrap_or(MPI_ERRORS_ARE_FATAL);
    match mpi.errors.handling(handler) {
        Handling::Return => e.class,
        Handling::Fatal => {
            let rank = mpi.comms[0].as_ref().map(|c| c.rank);
            fatal(rank, func, &e.message)
        }
        Handling::Call(handler) => {
            // The program's handler may call MPI: it runs outside the lock.
            drop(g);
            IN_CALL.set(false);
            let (mut comm, mut code) = (comm, e.class);
            // SAFETY: the program's function, with MPI's two arguments.
            unsafe { handler(&mut comm, &mut code) };
            e.class
        }
    }
}

/// Runs its function when dropped (whatever way the scope is left).
struct OnReturn<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnReturn<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// `MPI_ERRORS_ARE_FATAL`: say who failed where and why, and end the job
/// (fmrun stops the other ranks when one exits with a failure).
pub(crate) fn fatal(rank: Option<c_int>, func: &str, why: &str) -> ! {
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
pub(crate) fn call_with_callbacks(
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

impl Mpi {
    /// A communicator is being made from `comm`: the number of this child
    /// (every member counts them the same), and a copy of `comm`.
    pub(crate) fn child_of(&mut self, comm: Handle) -> MpiResult<(u32, Comm)> {
        self.intracomm(comm, "making a communicator")?;
        self.any_child_of(comm)
    }

    /// [`Mpi::child_of`] an intra- or intercommunicator.
    pub(crate) fn any_child_of(&mut self, comm: Handle) -> MpiResult<(u32, Comm)> {
        let parent = self.comm_mut(comm)?;
        parent.children += 1;
        Ok((parent.children, parent.clone()))
    }

    /// Agree with the other members of `parent` on the context of its child
    /// number `epoch` ([`context::agree`]).
    pub(crate) fn new_context(&mut self, parent: &Comm, epoch: u32, join: bool) -> MpiResult<u32> {
        self.holding_ids(|m| context::agree(&mut m.engine, parent, epoch, join))
    }

    /// Run `f` holding this process's free context ids (a blocking
    /// agreement: `context`'s module comment).
    pub(crate) fn holding_ids<T>(
        &mut self,
        f: impl FnOnce(&mut Mpi) -> MpiResult<T>,
    ) -> MpiResult<T> {
        self.engine.hold_ids()?;
        let r = f(self);
        self.engine.release_ids();
        r
    }

    /// Give the communicators whose `MPI_Comm_idup` ended their contexts
    /// (one freed meanwhile gives its id back).
    fn install_agreed(&mut self) {
        let ended: Vec<(Handle, MpiResult<u32>)> = self
            .unagreed
            .iter()
            .filter_map(|(&h, &id)| Some((h, self.engine.agreements.outcome(id)?)))
            .collect();
        for (h, outcome) in ended {
            self.unagreed.remove(&h);
            let Ok(id) = outcome else { continue };
            match self.slot(h) {
                Some(c) => c.context = id,
                None => self.engine.contexts.release(id),
            }
        }
    }

    /// Communicator `h` is gone, and its context id free again.
    pub(crate) fn remove_comm(&mut self, h: Handle) {
        let c = Self::index(h).and_then(|i| self.comms.get_mut(i)?.take());
        self.names.remove(&h);
        self.topologies.remove(&h);
        if let Some(c) = c {
            self.engine.contexts.release(c.context);
        }
    }

    /// Datatype `h` is gone (its attributes already deleted).
    pub(crate) fn remove_type(&mut self, h: Handle) {
        crate::types::replace(h, None);
        self.names.remove(&h);
    }

    /// A communicator made at run time: its handle.
    pub(crate) fn add_comm(&mut self, c: Comm) -> MpiResult<Handle> {
        if self.comms.len() > HANDLE_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many communicators");
        }
        self.comms.push(Some(c));
        Ok(COMM_DIRECT | (self.comms.len() - 1) as Handle)
    }

    /// A group made at run time: its handle (`MPI_GROUP_EMPTY` for one
    /// without members, as MPICH gives).
    pub(crate) fn add_group(&mut self, members: std::sync::Arc<[fm::Rank]>) -> MpiResult<Handle> {
        if members.is_empty() {
            return Ok(MPI_GROUP_EMPTY);
        }
        place(&mut self.groups, members, GROUP_DIRECT, "groups")
    }

    /// A group's members (FM ranks, in group order).
    pub(crate) fn group(&self, h: Handle) -> MpiResult<std::sync::Arc<[fm::Rank]>> {
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

    pub(crate) fn index(handle: Handle) -> Option<usize> {
        match handle {
            MPI_COMM_WORLD => Some(0),
            MPI_COMM_SELF => Some(1),
            h if h & !HANDLE_INDEX == COMM_DIRECT => Some((h & HANDLE_INDEX) as usize),
            _ => None,
        }
    }

    pub(crate) fn comm(&self, handle: Handle) -> MpiResult<&Comm> {
        let c = Self::index(handle)
            .and_then(|i| self.comms.get(i)?.as_ref())
            .ok_or_else(|| MpiError {
                class: MPI_ERR_COMM,
                message: format!("{handle:#x} is not a communicator"),
            })?;
        if c.context == context::UNAGREED {
            return err(
                MPI_ERR_COMM,
                format!("communicator {handle:#x} is used before its MPI_Comm_idup completed (or after it failed)"),
            );
        }
        Ok(c)
    }

    /// Communicator `handle`, which must be an intracommunicator (for
    /// what fm does not do on intercommunicators yet).
    pub(crate) fn intracomm(&self, handle: Handle, what: &str) -> MpiResult<&Comm> {
        let c = self.comm(handle)?;
        if c.remote.is_some() {
            return err(
                MPI_ERR_COMM,
                format!("{what} on an intercommunicator is not supported by fm's MPI yet"),
            );
        }
        Ok(c)
    }

    pub(crate) fn comm_mut(&mut self, handle: Handle) -> MpiResult<&mut Comm> {
        self.comm(handle)?;
        self.slot(handle).ok_or_else(|| MpiError {
            class: MPI_ERR_COMM,
            message: format!("{handle:#x} is not a communicator"),
        })
    }

    /// Communicator `handle`'s entry, agreed or not.
    fn slot(&mut self, handle: Handle) -> Option<&mut Comm> {
        Self::index(handle).and_then(|i| self.comms.get_mut(i)?.as_mut())
    }

    /// Where a receive or probe from `source` with `tag` on communicator
    /// `handle` listens, all checked, and the source it means.
    pub(crate) fn recv_from(
        &self,
        handle: Handle,
        source: c_int,
        tag: c_int,
    ) -> MpiResult<(Route, c_int)> {
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
    pub(crate) fn p2p(
        &self,
        handle: Handle,
        rank: c_int,
        any: bool,
        tag: c_int,
    ) -> MpiResult<Route> {
        let c = self.comm(handle)?;
        // An intercommunicator's ranks name its remote group.
        let peers = c.remote.as_ref().unwrap_or(&c.ranks);
        let ok_rank = (0..peers.len() as c_int).contains(&rank)
            || rank == MPI_PROC_NULL
            || (any && rank == MPI_ANY_SOURCE);
        if !ok_rank {
            return err(
                MPI_ERR_RANK,
                format!(
                    "rank {rank} is not in a communicator of {} processes",
                    peers.len()
                ),
            );
        }
        if !((0..=TAG_UB).contains(&tag) || (any && tag == MPI_ANY_TAG)) {
            return err(MPI_ERR_TAG, format!("tag {tag} is outside 0..={TAG_UB}"));
        }
        Ok(Route {
            context: c.context,
            me: c.rank,
            to: (!any && rank != MPI_PROC_NULL).then(|| peers[rank as usize]),
        })
    }
}

/// Put `item` in the first free slot of a handle table (a new one if
/// none is free): its handle, `kind | index`. Tables of objects made at
/// run time (groups, datatypes, info objects, operations, persistent
/// requests) reuse freed indices this one way.
pub(crate) fn place<T>(
    table: &mut Vec<Option<T>>,
    item: T,
    kind: Handle,
    what: &str,
) -> MpiResult<Handle> {
    let i = table
        .iter()
        .position(Option::is_none)
        .unwrap_or(table.len());
    if i > HANDLE_INDEX as usize {
        return err(MPI_ERR_OTHER, format!("too many {what}"));
    }
    if i == table.len() {
        table.push(None);
    }
    table[i] = Some(item);
    Ok(kind | i as Handle)
}

/// Bytes of `count` elements of `datatype`.
/// How `count` elements of a datatype travel.
pub(crate) enum Elements {
    /// As `bytes` plain bytes from the buffer's address plus `at`.
    Plain { at: isize, bytes: usize },
    /// Packed into a message and unpacked from one by their layout.
    Packed { layout: Arc<Layout>, bytes: usize },
}

impl Elements {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Elements::Plain { bytes, .. } | Elements::Packed { bytes, .. } => *bytes,
        }
    }
}

impl Mpi {
    /// How `count` elements of `datatype` travel; a derived type must be
    /// committed.
    pub(crate) fn elements(&self, count: i64, datatype: Handle) -> MpiResult<Elements> {
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
    pub(crate) fn derived(&self, h: Handle) -> MpiResult<Arc<Layout>> {
        types::derived(h)
    }

    /// Any datatype's layout (for building others).
    pub(crate) fn layout(&self, h: Handle) -> MpiResult<Arc<Layout>> {
        types::layout(h)
    }

    /// A datatype made at run time: its handle.
    pub(crate) fn add_type(&mut self, l: Layout) -> MpiResult<Handle> {
        types::add(l)
    }
}

/// `MPI_Init`: the World model begins, and with it the library unless a
/// session started it already.
pub(crate) fn init(func: &str) -> c_int {
    let mut g = phase();
    match &mut *g {
        Phase::Running(m) if m.world == World::Unused => {
            m.world = World::Initialized;
            return MPI_SUCCESS;
        }
        Phase::Before => {}
        _ => fatal(None, func, "MPI is already initialized (or finalized)"),
    }
    let mut m = join_job(func);
    m.world = World::Initialized;
    *g = Phase::Running(m);
    MPI_SUCCESS
}

/// The library joins the job (`MPI_Init`, or the first `MPI_Session_init`).
/// The start of `MPI_Wtime`'s clock: the first read, or the first
/// `MPI_Init` if that came first (the standard asks only for a fixed
/// point in the past, the same for the whole process).
pub(crate) fn clock_start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

pub(crate) fn join_job(func: &str) -> Box<Mpi> {
    crate::threads::initialising();
    clock_start();
    let minus_one = match fm::settings::env_only::<MinusOne>(&fm::settings::MPI_SOURCE_MINUS_ONE) {
        Ok(v) => v.map_or(MPI_PROC_NULL, |v| v.0),
        Err(e) => fatal(None, func, &e.to_string()),
    };
    let engine = match Engine::start() {
        Ok(e) => e,
        Err(e) => fatal(None, func, &e.message),
    };
    let _ = PROCESSOR_NAME.set(engine.fm.config().host.clone());
    let hosts: Vec<&str> = engine
        .fm
        .config()
        .hosts
        .iter()
        .map(String::as_str)
        .collect();
    match crate::coll::Tuning::from_env(&hosts) {
        Ok(t) => crate::coll::tuning::set(t),
        Err(e) => fatal(None, func, &e.to_string()),
    }
    let me = engine.fm.rank();
    let size = engine.fm.size();
    let world = Comm {
        context: 0,
        ranks: (0..size as fm::Rank).collect::<Vec<_>>().into(),
        rank: me as c_int,
        errhandler: MPI_ERRORS_ARE_FATAL,
        collectives: 0,
        children: 0,
        area: Default::default(),
        remote: None,
    };
    let own = Comm {
        context: 1,
        ranks: vec![me].into(),
        rank: 0,
        errhandler: MPI_ERRORS_ARE_FATAL,
        collectives: 0,
        children: 0,
        area: Default::default(),
        remote: None,
    };
    crate::info::infos().universe = Some(size as c_int);
    Box::new(Mpi {
        engine,
        comms: vec![Some(world), Some(own)],
        groups: Vec::new(),
        persistent: Vec::new(),
        attached: None,
        buffered: Vec::new(),
        attrs: Attributes::default(),
        ops: Vec::new(),
        names: std::collections::HashMap::new(),
        errors: Default::default(),
        topologies: std::collections::HashMap::new(),
        unagreed: Default::default(),
        generalized: Default::default(),
        finishing: Vec::new(),
        world: World::Unused,
        sessions: Vec::new(),
        universe: size as c_int,
        minus_one,
        wins: Vec::new(),
    })
}

/// A value of `FM_MPI_SOURCE_MINUS_ONE`: the source -1 stands for.
pub(crate) struct MinusOne(pub(crate) c_int);

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

/// The host fm places this process on (`FM_HOST`, a Slurm node's name,
/// or the machine's), set when the library joins the job: what
/// `MPI_Get_processor_name` answers, and the host `MPI_COMM_TYPE_SHARED`
/// splits by (a job's virtual hosts on one machine are hosts apart).
pub(crate) static PROCESSOR_NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// This process's host: [`PROCESSOR_NAME`], or before the library joins
/// the job the machine's name.
pub(crate) fn processor_name() -> String {
    match PROCESSOR_NAME.get() {
        Some(h) => h.clone(),
        None => machine_name(),
    }
}

fn machine_name() -> String {
    let mut b = [0u8; 256];
    // SAFETY: a buffer of its own length.
    let r = unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}
