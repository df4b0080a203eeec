//! The API's knobs: the job's variables (set by fmrun for each rank), FM's
//! own settings, and the knobs of every layer below gathered in [`SETTINGS`].

pub use fm_platform::setting::{Scope, Setting};

pub use crate::config::env_only;

pub const CONFIG: Setting = Setting {
    var: "FM_CONFIG",
    scope: Scope::Environment,
    default: r#"`$XDG_CONFIG_HOME/fm/fm.toml`, else `~/.config/fm/fm.toml` (no file: no settings)"#,
    doc: r#"the settings file. A file named here must exist."#,
};

pub const BOOTSTRAP: Setting = Setting {
    var: "FM_BOOTSTRAP",
    scope: Scope::Environment,
    default: r#"`auto`"#,
    doc: r#"where a process learns its rank, the job's size, every rank's host, the job's key and its peers' endpoints: `grm` (fmrun's resource manager, `FM_GRM`), `pmi1` or `pmi2` (a PMI launcher: MPICH's `mpiexec`, `srun --mpi=pmi2`; the connection is `PMI_FD` or `PMI_PORT`), `pmix` (a PMIx launcher: `srun --mpi=pmix`, Open MPI's `mpirun`; through OpenPMIx's client library, `FM_PMIX_LIBRARY`; hosts are the launcher's names, `FM_HOST` is not read), or `env` (`FM_RANK`, `FM_SIZE`, `FM_JOB_KEY`, `FM_HOSTS`, or a job of one). `auto` takes `grm` when `FM_GRM` is set, else `pmi2` when `PMI_FD` or `PMI_PORT` and `PMI_JOBID` are set (Slurm), `pmi1` when only the first are (hydra), `pmix` when `PMIX_NAMESPACE` is, else `env`. Under a PMI launcher each rank watches the others on its host: one that dies without leaving ends the job (docs/MPI.md, "Launchers")."#,
};

pub const PMIX_LIBRARY: Setting = Setting {
    var: "FM_PMIX_LIBRARY",
    scope: Scope::Environment,
    default: r#"`libpmix.so.2`"#,
    doc: r#"OpenPMIx's client library, loaded when a job starts through PMIx (`FM_BOOTSTRAP`): a name the dynamic loader looks up, or a path. fm does not link it: without it only a PMIx job fails, saying what is missing."#,
};

pub const STATS: Setting = Setting {
    var: "FM_STATS",
    scope: Scope::Environment,
    default: r#"off"#,
    doc: r#"`json`: when this process leaves a job that fmrun did not start (under a PMI launcher, or `FM_RANK`/`FM_SIZE`), it prints its counters — FM's, each device's, the reliable layer's — as one line `fm-stats: {...}` on stderr, the object `fmrun --stats=json` prints. Under fmrun use `--stats`."#,
};

pub const GRM: Setting = Setting {
    var: "FM_GRM",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"`host:port` of the resource manager. When set (fmrun sets it), the process joins its job there: the GRM checks the token and the handler table, and gives the rank (if `FM_RANK` is not set), the size, the job key and every rank's host; `FM_SIZE`, `FM_JOB_KEY` and `FM_HOSTS` are then not read. While the job runs, a heartbeat goes to the GRM every second; if a peer dies, every wait of this process fails with "the job has ended: rank R (pid P on H) …"."#,
};

pub const JOB_TOKEN: Setting = Setting {
    var: "FM_JOB_TOKEN",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"the job's secret token (128 random bits), required with `FM_GRM`. A token no job was registered under is refused at init with a clear error."#,
};

pub const RANK: Setting = Setting {
    var: "FM_RANK",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"this process's rank, 0 ≤ rank < `FM_SIZE`. Without `FM_RANK` and `FM_SIZE` the process is a job of one (rank 0 of 1). With `FM_GRM` and without `FM_RANK`, a task started by srun takes `SLURM_PROCID`."#,
};

pub const SIZE: Setting = Setting {
    var: "FM_SIZE",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"number of ranks in the job. Bounds: 1 to 65536."#,
};

pub const JOB_KEY: Setting = Setting {
    var: "FM_JOB_KEY",
    scope: Scope::Job,
    default: r#"random for a job of one"#,
    doc: r#"the job key, 16 hex digits: program ID (high 32 bits) and instance (low 32 bits). Every device checks it: a segment or packet of another job is refused. Required when `FM_SIZE` > 1."#,
};

pub const HOST: Setting = Setting {
    var: "FM_HOST",
    scope: Scope::Setting,
    default: r#"`SLURMD_NODENAME` in a Slurm task, else the host name"#,
    doc: r#"this process's host."#,
};

pub const LOCAL_RANK: Setting = Setting {
    var: "FM_LOCAL_RANK",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"set by fmrun for the program, not read by fm: this rank's number among the ranks of its host (0 to `FM_LOCAL_SIZE` − 1), for a program that picks a device or a CPU by it. fmrun also sets the names MPI programs look for: `MPI_LOCALRANKID` and `MPI_LOCALNRANKS` (MPICH), `OMPI_COMM_WORLD_LOCAL_RANK` and `OMPI_COMM_WORLD_LOCAL_SIZE` (Open MPI), `PMI_RANK` and `PMI_SIZE`."#,
};

pub const LOCAL_SIZE: Setting = Setting {
    var: "FM_LOCAL_SIZE",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"set by fmrun for the program, not read by fm: how many ranks of the job run on this rank's host."#,
};

pub const HOSTS: Setting = Setting {
    var: "FM_HOSTS",
    scope: Scope::Job,
    default: r#"every rank on `FM_HOST`"#,
    doc: r#"the host of each rank, comma separated, `FM_SIZE` entries. Ranks on this host use shared memory; others need a network device."#,
};

pub const NET: Setting = Setting {
    var: "FM_NET",
    scope: Scope::Setting,
    default: r#"`auto`"#,
    doc: r#"devices: `auto` (every device available: nic between hosts on one layer-2 network where it can open, ethernet otherwise), `null` (desktop only: a send to another host fails with "no route"), or a comma-separated list of `self`, `shmem`, `nic`, `ethernet`, `null`. A list with `nic` and without `ethernet` requires nic (a process that cannot open it fails); with both, ethernet is the fallback; with neither, hosts are joined by the NULL transport."#,
};

pub const ROUTES: Setting = Setting {
    var: "FM_ROUTES",
    scope: Scope::Job,
    default: r#"—"#,
    doc: r#"the device for each rank, in rank order, a run written once with its length: `self,shmem,nic*2,ethernet*4`. The destination device table is then exactly this (a device that is not open or does not reach its rank is an error at init naming the rank) instead of the fastest open device that reaches each rank. `fmrun --topology` sets it."#,
};

pub const CREDITS: Setting = Setting {
    var: "FM_CREDITS",
    scope: Scope::Setting,
    default: r#"the device's window (60 packets for shmem with few ranks)"#,
    doc: r#"upper bound on packets in flight to one destination. Lower it to test flow control; 1 works, handlers replying included (a handler's packet is released before it can wait: the credit rule in `fm-api/src/endpoint.rs`). Bounds: 1 to 65536."#,
};

pub const STASH_BYTES: Setting = Setting {
    var: "FM_STASH_BYTES",
    scope: Scope::Setting,
    default: r#"`16777216` (16 MiB)"#,
    doc: r#"bound on the bytes a sender out of credit copies aside. At the bound a send outside any handler runs the handlers of set-aside messages first, and new messages' credits are withheld until handled (never more than half a window's), so a rank streaming at a rank streaming back holds at most this plus half a window of messages per peer. A handler that waits withholds nothing (two handlers waiting on each other's credits would wait for ever): send bulk data from main code. `FmStats::stash_peak_bytes` shows what was reached."#,
};

pub const MPI_EAGER_LIMIT: Setting = Setting {
    var: "FM_MPI_EAGER_LIMIT",
    scope: Scope::Environment,
    default: r#"`65536` (64 KiB)"#,
    doc: r#"fm's MPI (`libmpich.so.12`, docs/MPI.md): messages of up to this many bytes are sent eagerly (kept by the receiver if no receive is posted yet); larger ones announce themselves and move once the receive is posted, straight into its buffer. Read by `MPI_Init`; not in the settings file."#,
};

pub const MPI_SET_ASIDE_LIMIT: Setting = Setting {
    var: "FM_MPI_SET_ASIDE_LIMIT",
    scope: Scope::Environment,
    default: r#"`67108864` (64 MiB)"#,
    doc: r#"fm's MPI: bytes of large blocking `MPI_Send`s a process may copy aside so that the send returns while its receiver is itself blocked sending to it (two ranks that both send before they receive); past it such a send waits for its receive, as MPI allows. `0`: never copy. Read by `MPI_Init`; not in the settings file."#,
};

pub const MPI_SOURCE_MINUS_ONE: Setting = Setting {
    var: "FM_MPI_SOURCE_MINUS_ONE",
    scope: Scope::Environment,
    default: r#"`proc-null`"#,
    doc: r#"fm's MPI: what a receive or probe from source -1 means. `proc-null`: `MPI_PROC_NULL`, as MPICH's ABI says (-1 is `MPI_PROC_NULL` there; `MPI_ANY_SOURCE` is -2). `any-source`: any source, for binaries that hard-code -1 as "any source" (Open MPI's numbering), such as Debian's NetPIPE `NPmpich2 -z`; a program that receives from `MPI_PROC_NULL` then waits for a real message instead. Read by `MPI_Init`; not in the settings file."#,
};

pub const COLL_HOSTS: Setting = Setting {
    var: "FM_COLL_HOSTS",
    scope: Scope::Environment,
    default: r#"`auto`"#,
    doc: r#"fm's collectives, in MPI and in FM programs (docs/MPI.md, "Collectives"): `auto`: on a communicator with members on several hosts and more than one on some, barrier, broadcast, reduce and allreduce (commutative operations) combine each host's members over shared memory first, and only one leader per host takes part in the stage between hosts. `off`: every member in one algorithm over the whole communicator. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_SHM_BYTES: Setting = Setting {
    var: "FM_COLL_SHM_BYTES",
    scope: Scope::Environment,
    default: r#"`4096`"#,
    doc: r#"fm's MPI collectives on a communicator of 2 to 64 members that all share this host: barrier, and broadcast, reduce, allreduce, gather and allgather(v) of up to this many bytes per member, blocking or not, go through the communicator's collective area in shared memory (each member writes its part once and the others read it where it lies: no message, no matching; docs/MPI.md, "Collectives"); larger ones, the other collectives, persistent ones and communicators spread over hosts go by messages. `0`: always by messages. At most 1048576. Read by `MPI_Init`; not in the settings file."#,
};

pub const COLL_EAGER_LIMIT: Setting = Setting {
    var: "FM_COLL_EAGER_LIMIT",
    scope: Scope::Environment,
    default: r#"`16384` (16 KiB) where each local rank has a CPU of its own, else `FM_MPI_EAGER_LIMIT`"#,
    doc: r#"fm's MPI collectives: their messages of up to this many bytes are sent eagerly, larger ones by rendezvous (straight into the receive each member posts). A member that runs ahead (the root of broadcasts in a loop) otherwise has its eager messages set aside and copied at the other end: 3 to 5 times slower at 32–64 KiB with a CPU per rank. Sharing CPUs, the rendezvous's round trip costs more than the copy. Read by `MPI_Init`; not in the settings file."#,
};

pub const COLL_BCAST: Setting = Setting {
    var: "FM_COLL_BCAST",
    scope: Scope::Environment,
    default: r#"`auto`"#,
    doc: r#"the collectives' broadcast algorithm (MPI and FM programs): `binomial` (a tree, ⌈log2 n⌉ rounds of the whole message), `scatter-allgather` (van de Geijn: about twice the message's time whatever n; needs 4 or more members), or `auto`: scatter-allgather from `FM_COLL_BCAST_LONG` bytes on. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_BCAST_LONG: Setting = Setting {
    var: "FM_COLL_BCAST_LONG",
    scope: Scope::Environment,
    default: r#"`131072` (128 KiB)"#,
    doc: r#"bytes from which `FM_COLL_BCAST=auto` broadcasts by scatter and allgather. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_ALLREDUCE: Setting = Setting {
    var: "FM_COLL_ALLREDUCE",
    scope: Scope::Environment,
    default: r#"`auto`"#,
    doc: r#"the collectives' allreduce algorithm (MPI and FM programs): `recursive-doubling` (log2 n exchanges of the whole vector), `rabenseifner` (a reduce-scatter by recursive halving, then an allgather: about twice the vector whatever n; commutative operations on at least an element per member, else recursive doubling), or `auto`: Rabenseifner from `FM_COLL_ALLREDUCE_LONG` bytes on. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_ALLREDUCE_LONG: Setting = Setting {
    var: "FM_COLL_ALLREDUCE_LONG",
    scope: Scope::Environment,
    default: r#"`8192` (8 KiB)"#,
    doc: r#"bytes from which `FM_COLL_ALLREDUCE=auto` uses Rabenseifner's algorithm. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_ALLGATHER: Setting = Setting {
    var: "FM_COLL_ALLGATHER",
    scope: Scope::Environment,
    default: r#"`auto`"#,
    doc: r#"the collectives' allgather algorithm (MPI and FM programs): `ring` (n − 1 steps, each block crossing each link once), `recursive-doubling` (log2 n rounds; a power-of-two number of members, else the ring), or `auto`: recursive doubling below `FM_COLL_ALLGATHER_SHORT` bytes of result. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const COLL_ALLGATHER_SHORT: Setting = Setting {
    var: "FM_COLL_ALLGATHER_SHORT",
    scope: Scope::Environment,
    default: r#"`524288` (512 KiB)"#,
    doc: r#"bytes of result below which `FM_COLL_ALLGATHER=auto` uses recursive doubling. Read by `MPI_Init` and by FM programs' `Fm::build` (their `fm::coll`); not in the settings file."#,
};

pub const WAIT_TIMEOUT: Setting = Setting {
    var: "FM_WAIT_TIMEOUT",
    scope: Scope::Setting,
    default: r#"none (wait for ever)"#,
    doc: r#"seconds any wait inside fm (credit, a single-copy completion, the rest of a message, `barrier`, `extract_wait`) may take before it fails with `ErrorKind::Timeout` naming what it waited for; `Fm::set_wait_timeout` sets it per endpoint. Bounds: 1 to 31536000."#,
};

pub const WAIT: Setting = Setting {
    var: "FM_WAIT",
    scope: Scope::Setting,
    default: r#"`auto`"#,
    doc: r#"how a rank waits (in `extract_wait`, for credit, in `barrier`, …): `spin` polls for ever (yielding when oversubscribed); `block` polls for the busy period `FM_WAIT_SPIN_US`, then sleeps until a device has something for it (a packet from any device, the end of the job, the wait's time limit) at no CPU cost; `auto` spins while each local rank has a CPU of its own (`FM_CPUS`) and blocks when the host is oversubscribed. A sender to a rank that may block pays a fence per packet."#,
};

pub const WAIT_SPIN_US: Setting = Setting {
    var: "FM_WAIT_SPIN_US",
    scope: Scope::Setting,
    default: r#"`50`"#,
    doc: r#"microseconds a blocking wait polls before it sleeps (0: sleep at once). Longer keeps replies that come within it at polling latency; shorter gives the CPU up sooner."#,
};

pub const CPUS: Setting = Setting {
    var: "FM_CPUS",
    scope: Scope::Setting,
    default: r#"the CPUs this process may use"#,
    doc: r#"CPUs the job has on this host. With more local ranks than CPUs the host is oversubscribed: waits yield after a short spin so a descheduled peer can run, and with `FM_WAIT=auto` they sleep after the busy period; otherwise they spin up to 50 µs first. Launchers that pin ranks to single CPUs set it (fmrun does). Bounds: 1 to 65536."#,
};

/// Every knob of this file, in documentation order.
pub const SETTINGS: &[Setting] = &[
    CONFIG,
    BOOTSTRAP,
    PMIX_LIBRARY,
    STATS,
    GRM,
    JOB_TOKEN,
    RANK,
    SIZE,
    JOB_KEY,
    HOST,
    LOCAL_RANK,
    LOCAL_SIZE,
    HOSTS,
    NET,
    ROUTES,
    CREDITS,
    STASH_BYTES,
    MPI_EAGER_LIMIT,
    MPI_SET_ASIDE_LIMIT,
    MPI_SOURCE_MINUS_ONE,
    COLL_HOSTS,
    COLL_SHM_BYTES,
    COLL_EAGER_LIMIT,
    COLL_BCAST,
    COLL_BCAST_LONG,
    COLL_ALLREDUCE,
    COLL_ALLREDUCE_LONG,
    COLL_ALLGATHER,
    COLL_ALLGATHER_SHORT,
    WAIT_TIMEOUT,
    WAIT,
    WAIT_SPIN_US,
    CPUS,
];

/// fm's whole table of settings: the API's and every layer's below it.
pub fn all() -> impl Iterator<Item = &'static Setting> + Clone {
    [
        SETTINGS,
        fm_platform::setting::SETTINGS,
        fm_pacer::SETTINGS,
        fm_devices::shmem::settings::SETTINGS,
        fm_devices::ethernet::settings::SETTINGS,
        fm_devices::reliable::settings::SETTINGS,
        fm_devices::nic::settings::SETTINGS,
    ]
    .into_iter()
    .flatten()
}

/// Prefixes of variables that belong to fm's tools and test programs, not
/// to ranks (`fm-bench`'s `FM_BENCH_*`, the test programs' `FM_TEST_*`);
/// a rank may see them and says nothing.
pub const TOOL_PREFIXES: &[&str] = &["FM_BENCH_", "FM_TEST_"];

/// What fm says of an `FM_*` variable that is no setting of it.
pub fn unknown_warning(var: &str) -> String {
    format!("{var} is not a setting of fm and is ignored (misspelt? `fm-info config` lists them)")
}

/// Say [`unknown_warning`] for each such variable of this process's
/// environment: through `tracing` where the program set up a subscriber,
/// else straight to stderr, so that every kind of program (Rust with or
/// without `init_logging`, C, MPI) shows it.
pub fn warn_unknown_in_env() {
    for var in unknown_in_env() {
        let text = unknown_warning(&var);
        match tracing::dispatcher::has_been_set() {
            true => tracing::warn!("fm: {text}"),
            false => eprintln!("fm: {text}"),
        }
    }
}

/// `FM_*` variables of this process's environment that no setting of
/// fm's table declares: most likely misspelt, and ignored.
pub fn unknown_in_env() -> Vec<String> {
    let mut unknown: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("FM_") && !TOOL_PREFIXES.iter().any(|p| k.starts_with(p)))
        .filter(|k| !all().any(|s| s.var == k))
        .collect();
    unknown.sort();
    unknown
}
