//! Reduction operations: the caller's own, and reducing locally.

use crate::coll::op::{UserFn, UserOp};
use crate::*;
use fm_mpi_macros::mpi;

type UserFunction = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);
type UserFunctionLarge = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut Handle);

#[mpi]
fn PMPI_Op_create(user_fn: Option<UserFunction>, commute: c_int, op: *mut Handle) -> c_int {
    call("MPI_Op_create", MPI_COMM_WORLD, |m| {
        add_op(m, user_fn.map(UserFn::C), commute, op)
    })
}

#[mpi]
fn PMPI_Op_create_c(user_fn: Option<UserFunctionLarge>, commute: c_int, op: *mut Handle) -> c_int {
    call("MPI_Op_create_c", MPI_COMM_WORLD, |m| {
        add_op(m, user_fn.map(UserFn::Large), commute, op)
    })
}

unsafe fn add_op(m: &mut Mpi, f: Option<UserFn>, commute: c_int, op: *mut Handle) -> MpiResult<()> {
    let out = arg(op, "the operation")?;
    let Some(func) = f else {
        return err(MPI_ERR_ARG, "a null user function");
    };
    let op = UserOp {
        func,
        commute: commute != 0,
    };
    *out = place(&mut m.ops, op, OP_DIRECT, "operations")?;
    Ok(())
}

#[mpi]
fn PMPI_Op_free(op: *mut Handle) -> c_int {
    call("MPI_Op_free", MPI_COMM_WORLD, |m| {
        let op = arg(op, "the operation")?;
        if m.user_op(*op)?.is_none() {
            return err(
                MPI_ERR_OP,
                format!("{:#x} is not an operation MPI_Op_create made", *op),
            );
        }
        // Reductions under way keep a copy of what they use.
        m.ops[(*op & HANDLE_INDEX) as usize] = None;
        *op = MPI_OP_NULL;
        Ok(())
    })
}

#[mpi]
fn PMPI_Op_commutative(op: Handle, commute: *mut c_int) -> c_int {
    call("MPI_Op_commutative", MPI_COMM_WORLD, |m| {
        let out = arg(commute, "the flag")?;
        *out = match m.user_op(op)? {
            Some(u) => c_int::from(u.commute),
            None if coll::op::Predefined::of(op).is_some() => 1,
            None => return err(MPI_ERR_OP, format!("{op:#x} is not an operation")),
        };
        Ok(())
    })
}

#[mpi]
fn PMPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    op: Handle,
) -> c_int {
    call("MPI_Reduce_local", MPI_COMM_WORLD, |m| {
        let r = m.reduction(op, datatype)?;
        let inp = m.elements_at(inbuf, count, datatype)?;
        let inout = m.elements_at(inoutbuf, count, datatype)?;
        let a = inp.pack();
        let mut b = inout.pack();
        r.combine(&a, &mut b)?;
        inout.layout.unpack(&b, inout.buf, inout.count);
        Ok(())
    })
}
