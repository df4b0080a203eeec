//! The program's own error handlers (`MPI_Comm_create_errhandler`) and
//! error classes, codes and strings (`MPI_Add_error_class` and its kin).
//!
//! A handler stays callable while a communicator holds it, even after
//! `MPI_Errhandler_free` (MPI's reference counting): freeing only stops
//! the handle from being set again, and slots are never reused.
//! Classes and codes the program adds are numbered from
//! `MPI_ERR_LASTCODE + 1` up, which `MPI_LASTUSEDCODE` follows.

use crate::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};

/// `MPI_Comm_errhandler_function`: called with the communicator and the
/// error code (MPICH passes nothing more).
pub(crate) type HandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int, ...);

/// What `MPI_Comm_create_errhandler` handles look like (MPICH's direct
/// error-handler kind).
pub(crate) const ERRHANDLER_DIRECT: Handle = 0x9400_0000_u32 as Handle;

/// `MPI_LASTUSEDCODE`'s value, which `MPI_Comm_get_attr` points at.
pub(crate) static LAST_USED: AtomicI32 = AtomicI32::new(MPI_ERR_LASTCODE);

#[derive(Default)]
pub(crate) struct Errors {
    handlers: Vec<(HandlerFn, bool)>,
    /// Added classes (their own class) and codes, with their strings.
    added: BTreeMap<c_int, (c_int, Option<String>)>,
}

/// What a communicator's error handler does with an error.
pub(crate) enum Handling {
    Fatal,
    Return,
    Call(HandlerFn),
}

impl Errors {
    pub(crate) fn create(&mut self, f: HandlerFn) -> MpiResult<Handle> {
        if self.handlers.len() > HANDLE_INDEX as usize {
            return err(MPI_ERR_OTHER, "too many error handlers");
        }
        self.handlers.push((f, false));
        Ok(ERRHANDLER_DIRECT | (self.handlers.len() - 1) as Handle)
    }

    /// Handler `h`, which may be set on a communicator (not freed).
    pub(crate) fn settable(&self, h: Handle) -> MpiResult<Handle> {
        match h {
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(h),
            _ => match self.user(h) {
                Some((_, false)) => Ok(h),
                _ => err(MPI_ERR_ARG, format!("{h:#x} is not an error handler")),
            },
        }
    }

    fn user(&self, h: Handle) -> Option<(HandlerFn, bool)> {
        if h & !HANDLE_INDEX != ERRHANDLER_DIRECT {
            return None;
        }
        self.handlers.get((h & HANDLE_INDEX) as usize).copied()
    }

    pub(crate) fn free(&mut self, h: Handle) -> MpiResult<()> {
        match h {
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT => Ok(()),
            _ => match self.handlers.get_mut((h & HANDLE_INDEX) as usize) {
                Some((_, freed)) if h & !HANDLE_INDEX == ERRHANDLER_DIRECT && !*freed => {
                    *freed = true;
                    Ok(())
                }
                _ => err(MPI_ERR_ARG, format!("{h:#x} is not an error handler")),
            },
        }
    }

    pub(crate) fn handling(&self, h: Handle) -> Handling {
        match h {
            MPI_ERRORS_RETURN => Handling::Return,
            _ => match self.user(h) {
                Some((f, _)) => Handling::Call(f),
                None => Handling::Fatal,
            },
        }
    }

    /// A new class (`of: None`) or a new code of class `of`.
    pub(crate) fn add(&mut self, of: Option<c_int>) -> MpiResult<c_int> {
        if let Some(c) = of {
            if self.class_of(c) != c {
                return err(MPI_ERR_ARG, format!("{c} is not an error class"));
            }
        }
        let value = LAST_USED.load(Ordering::Relaxed).checked_add(1);
        let Some(value) = value else {
            return err(MPI_ERR_OTHER, "no error code is left");
        };
        self.added.insert(value, (of.unwrap_or(value), None));
        LAST_USED.store(value, Ordering::Relaxed);
        Ok(value)
    }

    /// `MPIX_Delete_error_class` and `_code`: `class` says which is meant.
    pub(crate) fn delete(&mut self, value: c_int, class: bool) -> MpiResult<()> {
        match self.added.get(&value) {
            Some(&(c, _)) if (c == value) == class => {
                if class && self.added.values().any(|&(of, _)| of == value && of != c) {
                    return err(MPI_ERR_OTHER, format!("class {value} still has codes"));
                }
                self.added.remove(&value);
                Ok(())
            }
            _ => err(
                MPI_ERR_ARG,
                format!("{value} is not an added error class or code"),
            ),
        }
    }

    pub(crate) fn set_string(&mut self, code: c_int, s: Option<String>) -> MpiResult<()> {
        match self.added.get_mut(&code) {
            Some(entry) => {
                entry.1 = s;
                Ok(())
            }
            None if (0..=MPI_ERR_LASTCODE).contains(&code) => err(
                MPI_ERR_ARG,
                format!("{code} is predefined: its string cannot be changed"),
            ),
            None => err(MPI_ERR_ARG, format!("{code} is not an added error code")),
        }
    }

    pub(crate) fn class_of(&self, code: c_int) -> c_int {
        self.added.get(&code).map_or(code, |&(c, _)| c)
    }

    pub(crate) fn string(&self, code: c_int) -> Option<&str> {
        self.added
            .get(&code)
            .map(|(_, s)| s.as_deref().unwrap_or(""))
    }
}
