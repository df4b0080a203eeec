//! MPI errors: a class and what happened.

use crate::abi::*;
use std::os::raw::c_int;

/// An error as MPI reports it: its class, and what happened.
#[derive(Debug)]
pub struct MpiError {
    pub class: c_int,
    pub message: String,
}

pub type MpiResult<T> = Result<T, MpiError>;

pub fn err<T>(class: c_int, message: impl Into<String>) -> MpiResult<T> {
    Err(MpiError {
        class,
        message: message.into(),
    })
}

impl From<crate::datatype::Refused> for MpiError {
    fn from(r: crate::datatype::Refused) -> Self {
        MpiError {
            class: match r {
                crate::datatype::Refused::Blocks => MPI_ERR_OTHER,
                crate::datatype::Refused::Bounds => MPI_ERR_ARG,
            },
            message: r.to_string(),
        }
    }
}

impl From<fm::FmError> for MpiError {
    fn from(e: fm::FmError) -> Self {
        MpiError {
            class: MPI_ERR_OTHER,
            message: format!("fm: {e}"),
        }
    }
}
