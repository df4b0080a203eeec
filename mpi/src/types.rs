//! The datatypes made at run time, in a table of their own that is read
//! without the library's lock: a reduction function the program gave
//! runs while a collective holds that lock, and may ask about its
//! datatype (`MPI_Type_get_extent`, `MPI_Type_size`), as MPICH's tests
//! and real programs' functions do.

use crate::abi::*;
use crate::datatype::Layout;
use crate::engine::{MpiError, MpiResult};
use std::sync::{Arc, RwLock};

/// Layouts by index (handle `TYPE_INDIRECT | index`).
static TYPES: RwLock<Vec<Option<Arc<Layout>>>> = RwLock::new(Vec::new());

fn table() -> std::sync::RwLockReadGuard<'static, Vec<Option<Arc<Layout>>>> {
    TYPES.read().unwrap_or_else(|p| p.into_inner())
}

fn table_mut() -> std::sync::RwLockWriteGuard<'static, Vec<Option<Arc<Layout>>>> {
    TYPES.write().unwrap_or_else(|p| p.into_inner())
}

/// A derived datatype's layout.
pub(crate) fn derived(h: Handle) -> MpiResult<Arc<Layout>> {
    (h & !HANDLE_INDEX == TYPE_INDIRECT)
        .then(|| {
            table()
                .get((h & HANDLE_INDEX) as usize)
                .and_then(Clone::clone)
        })
        .flatten()
        .ok_or_else(|| MpiError {
            class: MPI_ERR_TYPE,
            message: format!("{h:#x} is not a datatype"),
        })
}

/// Any datatype's layout.
pub(crate) fn layout(h: Handle) -> MpiResult<Arc<Layout>> {
    if let Some((first, int_at)) = pair_type(h) {
        return Ok(Arc::new(Layout::pair(first, int_at).of_predefined(h)));
    }
    match builtin_type_size(h) {
        Some(size) => {
            let mut l = Layout::basic(size).of_predefined(h);
            // A complex number is aligned as its parts are, as in C.
            if let Some(crate::coll::op::Elem::Complex(_)) = crate::coll::op::Elem::of(h) {
                l.align = (size / 2).max(1);
            }
            Ok(Arc::new(l))
        }
        None => derived(h),
    }
}

/// A datatype made at run time: its handle.
pub(crate) fn add(l: Layout) -> MpiResult<Handle> {
    crate::state::place(&mut table_mut(), Arc::new(l), TYPE_INDIRECT, "datatypes")
}

/// Derived datatype `h` is now `l` (`None`: gone). Operations under way
/// keep the layout they hold.
pub(crate) fn replace(h: Handle, l: Option<Layout>) {
    if let Some(slot) = table_mut().get_mut((h & HANDLE_INDEX) as usize) {
        *slot = l.map(Arc::new);
    }
}
