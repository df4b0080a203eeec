//! The datatypes made at run time, in a table of their own that is read
//! without the library's lock: a reduction function the program gave
//! runs while a collective holds that lock, and may ask about its
//! datatype (`MPI_Type_get_extent`, `MPI_Type_size`), as MPICH's tests
//! and real programs' functions do.

use crate::abi::*;
use crate::datatype::{External, Layout};
use crate::engine::{MpiError, MpiResult};
use std::ffi::c_int;
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

/// Any datatype's layout. A predefined type's is made once and shared
/// (one slot per low byte of its handle): made afresh, it was an
/// allocation and a free in every call naming it.
pub(crate) fn layout(h: Handle) -> MpiResult<Arc<Layout>> {
    static PREDEFINED: [std::sync::OnceLock<(Handle, Arc<Layout>)>; 256] =
        [const { std::sync::OnceLock::new() }; 256];
    let slot = &PREDEFINED[(h & 0xff) as usize];
    if let Some((made_for, l)) = slot.get() {
        if *made_for == h {
            return Ok(l.clone());
        }
    }
    let l = predefined_layout(h);
    match l {
        Some(l) => {
            let _ = slot.set((h, l.clone()));
            Ok(l)
        }
        None => derived(h),
    }
}

/// A predefined datatype's layout, made (`None`: `h` is not one).
fn predefined_layout(h: Handle) -> Option<Arc<Layout>> {
    if let Some((first, int_at)) = pair_type(h) {
        return Some(Arc::new(Layout::pair(first, int_at).of_predefined(h)));
    }
    let size = builtin_type_size(h)?;
    let mut l = Layout::basic(size).of_predefined(h);
    // A complex number is aligned as its parts are, as in C.
    if let Some(crate::coll::op::Elem::Complex(_)) = crate::coll::op::Elem::of(h) {
        l.align = (size / 2).max(1);
    }
    if let Some((basic, _)) = l.elements.first_mut() {
        basic.external = external_of(h, size);
    }
    Some(Arc::new(l))
}

/// How external32 writes predefined type `h` of `size` bytes (MPI-4.0
/// Table 14.2): `long` in 4 bytes and `wchar_t` in 2, `long double` as
/// binary128, a complex number's parts each, the rest big-endian as they
/// are.
fn external_of(h: Handle, size: usize) -> External {
    use crate::coll::op::{Elem, Float};
    match h as u32 {
        0x4c00_0807 => External::Int {
            size: 4,
            signed: true,
        }, // MPI_LONG
        0x4c00_0808 => External::Int {
            size: 4,
            signed: false,
        }, // MPI_UNSIGNED_LONG
        0x4c00_040e => External::Int {
            size: 2,
            signed: false,
        }, // MPI_WCHAR
        _ => match Elem::of(h) {
            Some(Elem::F80 | Elem::Complex(Float::F80)) => External::Quad,
            Some(Elem::Complex(_)) => External::Swapped { unit: size / 2 },
            _ => External::Swapped { unit: size.max(1) },
        },
    }
}

/// A datatype made at run time: its handle.
pub(crate) fn add(l: Layout) -> MpiResult<Handle> {
    crate::state::place(&mut table_mut(), Arc::new(l), TYPE_INDIRECT, "datatypes")
}

/// How a derived datatype was made, as `MPI_Type_get_envelope` and
/// `MPI_Type_get_contents` give it back: the combiner and the arguments
/// of its constructor. The datatypes it was made from are kept as they
/// were (a derived one's layout and recipe), so the answer holds after
/// the program frees them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Recipe {
    pub(crate) combiner: c_int,
    pub(crate) ints: Vec<c_int>,
    pub(crate) addresses: Vec<isize>,
    /// What a `_c` constructor was given as `MPI_Count`s.
    pub(crate) large: Vec<i64>,
    pub(crate) types: Vec<Made>,
}

/// A datatype a recipe names: a predefined one by its handle, a derived
/// one by what it was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Made {
    Named(Handle),
    Derived(Arc<Layout>, Option<Arc<Recipe>>),
}

impl Made {
    /// Datatype `h` as a recipe keeps it.
    pub(crate) fn of(h: Handle) -> MpiResult<Made> {
        match derived(h) {
            Ok(l) => Ok(Made::Derived(l, recipe(h))),
            Err(_) if matches!(h, LB_MARKER | UB_MARKER) => Ok(Made::Named(h)),
            Err(_) => layout(h).map(|_| Made::Named(h)),
        }
    }
}

/// Recipes of the derived datatypes, by index (as `TYPES`).
static RECIPES: RwLock<Vec<Option<Arc<Recipe>>>> = RwLock::new(Vec::new());

/// A datatype made at run time by a constructor: its handle.
pub(crate) fn add_made(l: Layout, r: Recipe) -> MpiResult<Handle> {
    let h = add(l)?;
    set_recipe(h, Some(Arc::new(r)));
    Ok(h)
}

fn set_recipe(h: Handle, r: Option<Arc<Recipe>>) {
    let i = (h & HANDLE_INDEX) as usize;
    let mut t = RECIPES.write().unwrap_or_else(|p| p.into_inner());
    if t.len() <= i {
        t.resize(i + 1, None);
    }
    t[i] = r;
}

/// How derived datatype `h` was made, if it was.
pub(crate) fn recipe(h: Handle) -> Option<Arc<Recipe>> {
    if h & !HANDLE_INDEX != TYPE_INDIRECT {
        return None;
    }
    let t = RECIPES.read().unwrap_or_else(|p| p.into_inner());
    t.get((h & HANDLE_INDEX) as usize).cloned().flatten()
}

/// A new handle for a datatype a recipe names (`MPI_Type_get_contents`
/// returns a derived one as a new datatype the program frees).
pub(crate) fn handle_of(m: &Made) -> MpiResult<Handle> {
    match m {
        Made::Named(h) => Ok(*h),
        Made::Derived(l, r) => {
            let h = add((**l).clone())?;
            set_recipe(h, r.clone());
            Ok(h)
        }
    }
}

/// Derived datatype `h` is now `l` (`None`: gone). Operations under way
/// keep the layout they hold.
pub(crate) fn replace(h: Handle, l: Option<Layout>) {
    let gone = l.is_none();
    if let Some(slot) = table_mut().get_mut((h & HANDLE_INDEX) as usize) {
        *slot = l.map(Arc::new);
    }
    if gone {
        set_recipe(h, None);
    }
}
