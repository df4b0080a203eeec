//! Start-up, shutdown, versions and the clock.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    init("MPI_Init")
}

#[mpi]
fn PMPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let r = init("MPI_Init_thread");
    if r != MPI_SUCCESS {
        return r;
    }
    call("MPI_Init_thread", MPI_COMM_WORLD, |m| {
        let level = crate::threads::provide(m, required);
        if !provided.is_null() {
            *provided = level;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Initialized(flag: *mut c_int) -> c_int {
    // The World model's (MPI-4.0 §11.2.1): a session alone is not MPI_Init.
    let initialized = match &*phase() {
        Phase::Before => false,
        Phase::Running(m) => m.world != World::Unused,
        Phase::Finalized => true,
    };
    answer(flag, c_int::from(initialized))
}

#[mpi]
fn PMPI_Finalized(flag: *mut c_int) -> c_int {
    let finalized = match &*phase() {
        Phase::Running(m) => m.world == World::Finalized,
        p => matches!(p, Phase::Finalized),
    };
    answer(flag, c_int::from(finalized))
}

#[mpi]
fn PMPI_Query_thread(provided: *mut c_int) -> c_int {
    answer(provided, crate::threads::level())
}

#[mpi]
fn PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
    answer(flag, c_int::from(crate::threads::is_main()))
}

#[mpi]
fn PMPI_Finalize() -> c_int {
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
    if mpi.world != World::Initialized {
        fatal(None, "MPI_Finalize", "called without MPI_Init, or twice");
    }
    // Open sessions keep the library: only the World model ends.
    mpi.world = World::Finalized;
    if mpi.in_use() {
        return MPI_SUCCESS;
    }
    if let Err(e) = mpi.leave() {
        let rank = mpi.comms[0].as_ref().map(|c| c.rank);
        fatal(rank, "MPI_Finalize", &e.message);
    }
    *g = Phase::Finalized;
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Abort(_comm: Handle, errorcode: c_int) -> c_int {
    let rank = match &*phase() {
        Phase::Running(m) => m.comms[0].as_ref().map(|c| c.rank),
        _ => None,
    };
    match rank {
        Some(r) => eprintln!("fm MPI: rank {r} called MPI_Abort with error code {errorcode}"),
        None => eprintln!("fm MPI: MPI_Abort with error code {errorcode}"),
    }
    // Under a PMI launcher the launcher ends the job and reports the code;
    // fmrun sees this exit.
    fm::wireup::abort(errorcode, "MPI_Abort");
    std::process::exit(if errorcode == 0 { 1 } else { errorcode })
}

#[mpi]
fn PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    put_string(&processor_name(), name, MPI_MAX_PROCESSOR_NAME, resultlen);
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    if !version.is_null() {
        *version = MPI_VERSION;
    }
    if !subversion.is_null() {
        *subversion = MPI_SUBVERSION;
    }
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) -> c_int {
    let v = format!(
        "fm MPI {} (MPICH ABI, libmpich.so.12): point-to-point over fm's composite",
        env!("CARGO_PKG_VERSION")
    );
    put_string(&v, version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen);
    MPI_SUCCESS
}

/// `MPI_Wtime`: seconds since `MPI_Init` (not synchronised across hosts:
/// `MPI_WTIME_IS_GLOBAL` is false).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    // Without the library's lock: a clock read must not wait for another
    // thread's call (MPI_THREAD_MULTIPLE), nor count as one.
    crate::state::clock_start().elapsed().as_secs_f64()
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
