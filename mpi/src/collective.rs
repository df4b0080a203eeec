//! What the collective bindings share: their arguments checked, and a
//! collective run (blocking) or started (non-blocking) on a communicator.

use crate::coll::op::{Reduction, UserOp};
use crate::coll::{Elements, Plan};
use crate::*;

impl Mpi {
    /// `count` elements of `datatype` at `buf`, checked: a committed
    /// type, a count and buffer that make sense.
    pub(crate) fn elements_at(
        &self,
        buf: *const c_void,
        count: c_int,
        datatype: Handle,
    ) -> MpiResult<Elements> {
        let count = nonneg(count, "count")?;
        let layout = self.layout(datatype)?;
        if !layout.committed {
            return err(
                MPI_ERR_TYPE,
                format!("datatype {datatype:#x} is not committed (MPI_Type_commit)"),
            );
        }
        check_buffer(buf, data_bytes(count, &layout)?)?;
        Ok(Elements {
            buf: buf as *mut u8,
            count,
            layout,
        })
    }

    /// The caller's operation made by `MPI_Op_create`, if `op` is one.
    pub(crate) fn user_op(&self, op: Handle) -> MpiResult<Option<UserOp>> {
        if op & !HANDLE_INDEX != OP_DIRECT {
            return Ok(None);
        }
        match self.ops.get((op & HANDLE_INDEX) as usize) {
            Some(Some(u)) => Ok(Some(*u)),
            _ => err(MPI_ERR_OP, format!("{op:#x} is not an operation")),
        }
    }

    /// Operation `op` on elements of `datatype`, checked.
    pub(crate) fn reduction(&self, op: Handle, datatype: Handle) -> MpiResult<Reduction> {
        Reduction::new(op, self.user_op(op)?, datatype, self.layout(datatype)?)
    }

    /// Run a collective on `comm` (`request`: start it, and return its
    /// request there). `build` checks the arguments and writes this
    /// member's plan; only then is the collective counted on `comm`.
    pub(crate) fn collective(
        &mut self,
        comm: Handle,
        request: Option<*mut Handle>,
        build: impl FnOnce(&Comm) -> MpiResult<Plan>,
    ) -> MpiResult<()> {
        let out = match request {
            // SAFETY: the caller's request handle (MPI's rule).
            Some(r) => Some(unsafe { arg(r, "the request")? }),
            None => None,
        };
        let plan = build(self.intracomm(comm, "a collective")?)?;
        let c = self.comm_mut(comm)?;
        let tag = c.collectives;
        c.collectives = c.collectives.wrapping_add(1);
        let schedule = plan.schedule(c.context, tag as c_int, c.ranks.clone());
        match out {
            None => self.engine.run(schedule),
            Some(out) => {
                *out = request_handle(self.engine.start_collective(schedule)?);
                Ok(())
            }
        }
    }
}

/// `n` ints from a C array, or `MPI_ERR_ARG` for a null one.
///
/// # Safety
/// `p` is null or holds `n` ints.
pub(crate) unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> MpiResult<&'a [c_int]> {
    if p.is_null() {
        if n == 0 {
            return Ok(&[]);
        }
        return err(MPI_ERR_ARG, format!("a null array of {what}"));
    }
    Ok(std::slice::from_raw_parts(p, n))
}

/// Elements for each member from per-member counts and displacements
/// (in elements of `datatype`), as the v-collectives take them.
///
/// # Safety
/// `counts` and `displs` hold `n` ints; `buf` is the caller's.
pub(crate) unsafe fn per_member(
    m: &Mpi,
    buf: *const c_void,
    counts: *const c_int,
    displs: *const c_int,
    datatype: Handle,
    n: usize,
) -> MpiResult<Vec<Elements>> {
    let (counts, displs) = (
        ints(counts, n, "counts")?,
        ints(displs, n, "displacements")?,
    );
    let base = m.elements_at(buf, 0, datatype)?;
    (0..n)
        .map(|i| {
            let e = base.at(displs[i] as isize, nonneg(counts[i], "count")?);
            check_buffer(buf, e.bytes())?;
            Ok(e)
        })
        .collect()
}

/// Elements for each member of the same count, one after another.
pub(crate) fn uniform(base: &Elements, n: usize) -> Vec<Elements> {
    (0..n)
        .map(|i| base.at((i * base.count) as isize, base.count))
        .collect()
}
