//! Where a process learns its job: its rank and the job's size, the host of
//! every rank, the job's secret (the key of its segments and packets), and
//! the device endpoints of the ranks on other hosts. One [`Bootstrap`]
//! source is chosen at init (`FM_BOOTSTRAP`, by default from what the
//! launcher set): fmrun's resource manager, a PMI launcher (MPICH's
//! `mpiexec`, `srun --mpi=pmi2`: `pmi.rs`), a PMIx launcher (`srun
//! --mpi=pmix`, Open MPI's `mpirun`: `pmix.rs`), or the configuration
//! itself. The launchers' key-value spaces are one trait (`space.rs`);
//! what a rank does with one is `launched.rs`.

mod launched;
pub mod pmi;
mod pmix;
mod space;

pub use launched::abort;
pub(crate) use launched::PmiJob;

use crate::config::GrmJoin;
use crate::error::{ErrorKind, Result};
use crate::settings;
use fm_grm::Membership;

/// Where the job's facts come from.
#[derive(Clone, Debug)]
pub enum Bootstrap {
    /// They are in the configuration: `FM_RANK`, `FM_SIZE`, `FM_JOB_KEY`
    /// and `FM_HOSTS`, a job of one, or a [`crate::Config`] built by hand.
    Given,
    /// fmrun's resource manager (`FM_GRM`): it checks the job's token and
    /// sends the node map once every rank joined.
    Grm(GrmJoin),
    /// The launcher's PMI server (`PMI_FD` or `PMI_PORT`), over this wire
    /// protocol.
    Pmi(pmi::Wire),
    /// The launcher's PMIx server, through OpenPMIx's client library, this
    /// file (`FM_PMIX_LIBRARY`).
    Pmix(String),
}

/// What `FM_BOOTSTRAP` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    Auto,
    Env,
    Grm,
    Pmi(pmi::Wire),
    Pmix,
}

/// `FM_BOOTSTRAP`, or what the launcher's variables say under `auto`.
pub(crate) fn asked() -> Result<Asked> {
    let asked = match settings::BOOTSTRAP.env() {
        None => Asked::Auto,
        Some(v) => match v.trim() {
            "" | "auto" => Asked::Auto,
            "env" => Asked::Env,
            "grm" => Asked::Grm,
            "pmi1" => Asked::Pmi(pmi::Wire::V1),
            "pmi2" => Asked::Pmi(pmi::Wire::V2),
            "pmix" => Asked::Pmix,
            _ => {
                return Err(ErrorKind::Env {
                    var: settings::BOOTSTRAP.var,
                    value: v.clone(),
                    reason: "known values: auto, grm, pmi1, pmi2, pmix, env".into(),
                }
                .into())
            }
        },
    };
    let set = |v: &str| std::env::var_os(v).is_some();
    Ok(match asked {
        Asked::Auto if settings::GRM.env().is_some() => Asked::Grm,
        // Slurm's pmi2 plugin names the job; hydra does not, and speaks both.
        Asked::Auto if set("PMI_FD") || set("PMI_PORT") => Asked::Pmi(match set("PMI_JOBID") {
            true => pmi::Wire::V2,
            false => pmi::Wire::V1,
        }),
        Asked::Auto if set("PMIX_NAMESPACE") => Asked::Pmix,
        Asked::Auto => Asked::Env,
        a => a,
    })
}

/// How a process is joined to its job once its devices are open; held by
/// [`crate::Fm`] and dropped last.
pub(crate) enum Joined {
    Given,
    Grm(Membership),
    Pmi(PmiJob),
}
