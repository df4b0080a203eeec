//! Attributes on communicators and datatypes (MPI-4.0 §7.7): keyvals
//! with the caller's copy and delete callbacks, and each object's values
//! under them. A keyval is for one kind of object; handles of the two
//! kinds never coincide, so values are kept by handle alone.
//!
//! The callbacks are the caller's code and may call MPI themselves, so
//! they never run under the library's lock: what needs them returns a
//! list of [`Callback`]s, which the caller runs after the lock is let go.

use crate::abi::*;
use crate::engine::{err, MpiResult};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

/// `MPI_Comm_copy_attr_function` (and MPI-1's `MPI_Copy_function`;
/// `MPI_Type_copy_attr_function` has the same shape).
pub type CopyFn = unsafe extern "C" fn(
    oldcomm: Handle,
    keyval: c_int,
    extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int;

/// `MPI_Comm_delete_attr_function` (and MPI-1's `MPI_Delete_function`).
pub type DeleteFn = unsafe extern "C" fn(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
    extra_state: *mut c_void,
) -> c_int;

/// How a value was given (MPICH's `MPIR_Attr_type`): a C pointer, or
/// from Fortran an address-sized or a default integer. Fortran's calls go
/// through `MPII_Comm_set_attr` and its kin with theirs.
pub const GIVEN_AS_POINTER: c_int = 0;
pub const GIVEN_AS_AINT: c_int = 1;
pub const GIVEN_AS_INT: c_int = 3;

/// MPICH's `MPII_Attr_copy_proxy`: how Fortran's library calls a copy
/// callback of a keyval made in Fortran (`MPII_Keyval_set_proxy`).
pub type CopyProxy = unsafe extern "C" fn(
    user_function: CopyFn,
    handle: Handle,
    keyval: c_int,
    extra_state: *mut c_void,
    given: c_int,
    attribute_val: *mut c_void,
    attribute_copy: *mut *mut c_void,
    flag: *mut c_int,
) -> c_int;

/// MPICH's `MPII_Attr_delete_proxy`, for delete callbacks.
pub type DeleteProxy = unsafe extern "C" fn(
    user_function: DeleteFn,
    handle: Handle,
    keyval: c_int,
    given: c_int,
    attribute_val: *mut c_void,
    extra_state: *mut c_void,
) -> c_int;

/// What a keyval's attributes are set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Comm,
    Datatype,
    Win,
}

impl Kind {
    fn maker(self) -> &'static str {
        match self {
            Kind::Comm => "MPI_Comm_create_keyval",
            Kind::Datatype => "MPI_Type_create_keyval",
            Kind::Win => "MPI_Win_create_keyval",
        }
    }
}

/// A keyval made by `MPI_Comm_create_keyval` or `MPI_Type_create_keyval`.
struct Keyval {
    kind: Kind,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    /// The caller's, passed back to its callbacks (kept as an address: the
    /// library only hands it back).
    extra: usize,
    /// `MPI_Comm_free_keyval` was called: no new values, but the values
    /// already set stay until deleted (MPI's rule).
    freed: bool,
    /// Made in Fortran: its callbacks are called through these.
    proxies: (Option<CopyProxy>, Option<DeleteProxy>),
}

/// A callback to run outside the library's lock.
#[derive(Debug)]
pub enum Callback {
    /// Copy the value of `keyval` on `comm` (a communicator or datatype)
    /// for a duplicate of it.
    Copy {
        comm: Handle,
        keyval: c_int,
        f: CopyFn,
        proxy: Option<CopyProxy>,
        extra: usize,
        value: usize,
        given: c_int,
    },
    /// Tell the owner of `keyval` that its value on `comm` is gone.
    Delete {
        comm: Handle,
        keyval: c_int,
        f: DeleteFn,
        proxy: Option<DeleteProxy>,
        extra: usize,
        value: usize,
        given: c_int,
    },
}

impl Callback {
    pub fn keyval(&self) -> c_int {
        match *self {
            Callback::Copy { keyval, .. } | Callback::Delete { keyval, .. } => keyval,
        }
    }

    /// Run it: for a copy, the value to give the duplicate (`None`: the
    /// callback chose not to copy); an error for a callback that failed.
    ///
    /// # Safety
    /// The callback is the caller's, called as MPI says.
    pub unsafe fn run(&self) -> MpiResult<Option<usize>> {
        match *self {
            Callback::Copy {
                comm,
                keyval,
                f,
                proxy,
                extra,
                value,
                given,
            } => {
                let mut out: *mut c_void = std::ptr::null_mut();
                let mut flag: c_int = 0;
                let (extra, value) = (extra as *mut c_void, value as *mut c_void);
                let rc = match proxy {
                    Some(p) => p(f, comm, keyval, extra, given, value, &mut out, &mut flag),
                    None => f(
                        comm,
                        keyval,
                        extra,
                        value,
                        std::ptr::from_mut(&mut out).cast(),
                        &mut flag,
                    ),
                };
                if rc != MPI_SUCCESS {
                    return err(
                        rc,
                        format!("the copy callback of keyval {keyval:#x} returned {rc}"),
                    );
                }
                Ok((flag != 0).then_some(out as usize))
            }
            Callback::Delete {
                comm,
                keyval,
                f,
                proxy,
                extra,
                value,
                given,
            } => {
                let (extra, value) = (extra as *mut c_void, value as *mut c_void);
                let rc = match proxy {
                    Some(p) => p(f, comm, keyval, given, value, extra),
                    None => f(comm, keyval, value, extra),
                };
                if rc != MPI_SUCCESS {
                    return err(
                        rc,
                        format!("the delete callback of keyval {keyval:#x} returned {rc}"),
                    );
                }
                Ok(None)
            }
        }
    }
}

/// Keyvals, and the values set under them on each communicator.
#[derive(Default)]
pub struct Attributes {
    keyvals: Vec<Keyval>,
    /// Values by communicator handle, in the order they were set.
    values: HashMap<Handle, Vec<(c_int, usize)>>,
    /// How each value not given as a C pointer was given, by object and
    /// keyval (`GIVEN_AS_*`).
    given: HashMap<(Handle, c_int), c_int>,
}

impl Attributes {
    /// `MPI_Comm_create_keyval` (`MPI_Type_create_keyval`): a new keyval's
    /// handle.
    pub fn create_keyval(
        &mut self,
        kind: Kind,
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        extra: usize,
    ) -> MpiResult<c_int> {
        if self.keyvals.len() > KEYVAL_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many keyvals");
        }
        self.keyvals.push(Keyval {
            kind,
            copy,
            delete,
            extra,
            freed: false,
            proxies: (None, None),
        });
        Ok(KEYVAL_DIRECT | (self.keyvals.len() - 1) as c_int)
    }

    /// `MPII_Keyval_set_proxy`: `keyval` was made in Fortran, whose
    /// library calls its callbacks through these.
    pub fn set_proxies(
        &mut self,
        keyval: c_int,
        copy: Option<CopyProxy>,
        delete: Option<DeleteProxy>,
    ) {
        if self.keyval(keyval).is_ok() {
            self.keyvals[(keyval & KEYVAL_INDEX) as usize].proxies = (copy, delete);
        }
    }

    /// How `keyval`'s value on `comm` was given.
    pub fn given(&self, comm: Handle, keyval: c_int) -> c_int {
        self.given
            .get(&(comm, keyval))
            .copied()
            .unwrap_or(GIVEN_AS_POINTER)
    }

    fn keyval(&self, keyval: c_int) -> MpiResult<&Keyval> {
        (keyval & !KEYVAL_INDEX == KEYVAL_DIRECT)
            .then(|| self.keyvals.get((keyval & KEYVAL_INDEX) as usize))
            .flatten()
            .ok_or_else(|| crate::engine::MpiError {
                class: MPI_ERR_KEYVAL,
                message: format!("{keyval:#x} is not a keyval made by MPI_Comm_create_keyval or MPI_Type_create_keyval"),
            })
    }

    /// A keyval for objects of `kind`.
    fn keyval_for(&self, keyval: c_int, kind: Kind) -> MpiResult<&Keyval> {
        let k = self.keyval(keyval)?;
        if k.kind != kind {
            return err(
                MPI_ERR_KEYVAL,
                format!(
                    "keyval {keyval:#x} was made by {}, for another kind of object",
                    k.kind.maker()
                ),
            );
        }
        Ok(k)
    }

    /// A keyval for `kind` new values may be set under.
    fn live_keyval(&self, keyval: c_int, kind: Kind) -> MpiResult<&Keyval> {
        let k = self.keyval_for(keyval, kind)?;
        if k.freed {
            return err(MPI_ERR_KEYVAL, format!("keyval {keyval:#x} was freed"));
        }
        Ok(k)
    }

    /// `MPI_Comm_free_keyval`. Freeing one already freed is let pass, as
    /// MPICH lets it (attr/keyval_double_free: a copy of the handle, freed
    /// while attributes still use the keyval); the standard leaves it open.
    pub fn free_keyval(&mut self, keyval: c_int, kind: Kind) -> MpiResult<()> {
        self.keyval_for(keyval, kind)?;
        self.keyvals[(keyval & KEYVAL_INDEX) as usize].freed = true;
        Ok(())
    }

    /// `MPI_Comm_get_attr` of a keyval made at run time.
    pub fn get(&self, comm: Handle, keyval: c_int, kind: Kind) -> MpiResult<Option<usize>> {
        self.keyval_for(keyval, kind)?;
        Ok(self
            .values
            .get(&comm)
            .and_then(|v| v.iter().find(|(k, _)| *k == keyval))
            .map(|&(_, value)| value))
    }

    /// The delete callback for `keyval`'s `value` on `comm`, given as
    /// `given`, if it has one.
    fn deletion(
        &self,
        comm: Handle,
        keyval: c_int,
        value: usize,
        given: c_int,
    ) -> Option<Callback> {
        let k = self.keyval(keyval).ok()?;
        Some(Callback::Delete {
            comm,
            keyval,
            f: k.delete?,
            proxy: k.proxies.1,
            extra: k.extra,
            value,
            given,
        })
    }

    /// `MPI_Comm_set_attr`: the old value's deletion, if there was one.
    pub fn set(
        &mut self,
        comm: Handle,
        keyval: c_int,
        kind: Kind,
        value: usize,
    ) -> MpiResult<Option<Callback>> {
        self.set_given(comm, keyval, kind, value, GIVEN_AS_POINTER)
    }

    /// [`Attributes::set`] of a value given as `given` (from Fortran).
    pub fn set_given(
        &mut self,
        comm: Handle,
        keyval: c_int,
        kind: Kind,
        value: usize,
        given: c_int,
    ) -> MpiResult<Option<Callback>> {
        self.live_keyval(keyval, kind)?;
        let values = self.values.entry(comm).or_default();
        let old = match values.iter_mut().find(|(k, _)| *k == keyval) {
            Some(slot) => Some(std::mem::replace(&mut slot.1, value)),
            None => {
                values.push((keyval, value));
                None
            }
        };
        let old_given = self.given(comm, keyval);
        match given {
            GIVEN_AS_POINTER => self.given.remove(&(comm, keyval)),
            g => self.given.insert((comm, keyval), g),
        };
        Ok(old.and_then(|v| self.deletion(comm, keyval, v, old_given)))
    }

    /// `MPI_Comm_delete_attr`: the value's deletion (none if there was no
    /// value, which is not an error, as in MPICH).
    pub fn delete(
        &mut self,
        comm: Handle,
        keyval: c_int,
        kind: Kind,
    ) -> MpiResult<Option<Callback>> {
        self.keyval_for(keyval, kind)?;
        let Some(values) = self.values.get_mut(&comm) else {
            return Ok(None);
        };
        let Some(i) = values.iter().position(|(k, _)| *k == keyval) else {
            return Ok(None);
        };
        let (_, value) = values.remove(i);
        let given = self
            .given
            .remove(&(comm, keyval))
            .unwrap_or(GIVEN_AS_POINTER);
        Ok(self.deletion(comm, keyval, value, given))
    }

    /// A deletion whose callback failed did not happen: its value is set
    /// again (MPI-4.0 §7.7.4: a failed delete callback fails the call).
    pub fn restore(&mut self, cb: &Callback) {
        if let Callback::Delete {
            comm,
            keyval,
            value,
            given,
            ..
        } = *cb
        {
            if given != GIVEN_AS_POINTER {
                self.given.insert((comm, keyval), given);
            }
            let values = self.values.entry(comm).or_default();
            match values.iter_mut().find(|(k, _)| *k == keyval) {
                Some(slot) => slot.1 = value,
                None => values.push((keyval, value)),
            }
        }
    }

    /// Every value on `comm` is gone (`MPI_Comm_free`, or `MPI_COMM_SELF`
    /// at `MPI_Finalize`): their deletions, the last set first.
    pub fn clear(&mut self, comm: Handle) -> Vec<Callback> {
        let values = self.values.remove(&comm).unwrap_or_default();
        (values.into_iter().rev())
            .filter_map(|(k, v)| {
                let given = self.given.remove(&(comm, k)).unwrap_or(GIVEN_AS_POINTER);
                self.deletion(comm, k, v, given)
            })
            .collect()
    }

    /// The copies `MPI_Comm_dup` of `comm` makes: the values whose keyval
    /// has a copy callback.
    pub fn copies(&self, comm: Handle) -> Vec<Callback> {
        let Some(values) = self.values.get(&comm) else {
            return Vec::new();
        };
        (values.iter())
            .filter_map(|&(keyval, value)| {
                let k = self.keyval(keyval).ok()?;
                Some(Callback::Copy {
                    comm,
                    keyval,
                    f: k.copy?,
                    proxy: k.proxies.0,
                    extra: k.extra,
                    value,
                    given: self.given(comm, keyval),
                })
            })
            .collect()
    }

    /// The values duplicate `comm` of `old` gets, as the copy callbacks
    /// said, each given as its original was.
    pub fn set_copied(&mut self, old: Handle, comm: Handle, values: Vec<(c_int, usize)>) {
        for &(keyval, _) in &values {
            match self.given(old, keyval) {
                GIVEN_AS_POINTER => {}
                g => {
                    self.given.insert((comm, keyval), g);
                }
            }
        }
        if !values.is_empty() {
            self.values.insert(comm, values);
        }
    }
}

/// `MPI_COMM_DUP_FN` (MPICH's header names it `MPIR_Dup_fn`, so programs
/// built against MPICH call it by that name): the duplicate gets the same
/// value.
///
/// # Safety
/// `out` points at a pointer-sized value and `flag` at an int.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldcomm: Handle,
    _keyval: c_int,
    _extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    if attribute_val_out.is_null() || flag.is_null() {
        return MPI_ERR_ARG;
    }
    *attribute_val_out.cast::<*mut c_void>() = attribute_val_in;
    *flag = 1;
    MPI_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn count_delete(
        _: Handle,
        _: c_int,
        value: *mut c_void,
        _: *mut c_void,
    ) -> c_int {
        *value.cast::<c_int>() += 1;
        MPI_SUCCESS
    }

    #[test]
    fn values_are_replaced_deleted_and_cleared_with_their_callbacks() {
        let mut a = Attributes::default();
        let c = Kind::Comm;
        let k = a
            .create_keyval(c, Some(MPIR_Dup_fn), Some(count_delete), 0)
            .unwrap();
        let plain = a.create_keyval(c, None, None, 0).unwrap();
        // A datatype's keyval is refused on a communicator, and back.
        let typed = a.create_keyval(Kind::Datatype, None, None, 0).unwrap();
        assert_eq!(a.set(5, typed, c, 1).unwrap_err().class, MPI_ERR_KEYVAL);
        assert_eq!(
            a.get(5, k, Kind::Datatype).unwrap_err().class,
            MPI_ERR_KEYVAL
        );
        assert!(a.set(9, typed, Kind::Datatype, 1).unwrap().is_none());
        assert_eq!(a.get(9, typed, Kind::Datatype).unwrap(), Some(1));
        assert_ne!(k, plain);
        let (mut first, mut second) = (0 as c_int, 0 as c_int);
        let (p1, p2) = (
            &mut first as *mut c_int as usize,
            &mut second as *mut c_int as usize,
        );
        assert!(a.set(5, k, c, p1).unwrap().is_none());
        // Replacing calls the delete callback on the old value.
        let old = a.set(5, k, c, p2).unwrap().unwrap();
        unsafe { old.run().unwrap() };
        assert_eq!(first, 1);
        assert!(a.set(5, plain, c, 7).unwrap().is_none());
        assert_eq!(a.get(5, k, c).unwrap(), Some(p2));
        assert_eq!(a.get(6, k, c).unwrap(), None);
        // A duplicate copies only what has a copy callback.
        let copies = a.copies(5);
        assert_eq!(copies.len(), 1);
        let copied = unsafe { copies[0].run().unwrap() };
        assert_eq!(copied, Some(p2));
        // Freeing the keyval keeps its values until they go.
        a.free_keyval(k, c).unwrap();
        assert!(a.set(5, k, c, p1).is_err());
        // A second free is let pass, as MPICH lets it.
        assert!(a.free_keyval(k, c).is_ok());
        for d in a.clear(5) {
            unsafe { d.run().unwrap() };
        }
        assert_eq!(second, 1);
        assert_eq!(a.get(5, plain, c).unwrap(), None);
        assert_eq!(a.get(5, 0x1234, c).unwrap_err().class, MPI_ERR_KEYVAL);
        assert_eq!(
            a.get(5, KEYVAL_DIRECT | 99, c).unwrap_err().class,
            MPI_ERR_KEYVAL
        );
        assert!(a.delete(5, plain, c).unwrap().is_none());
        assert_eq!(a.delete(5, 77, c).unwrap_err().class, MPI_ERR_KEYVAL);
    }
}
