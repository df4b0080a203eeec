//! The seam between fm and a launcher's key-value space: one trait over
//! the PMI-1/PMI-2 client (`pmi.rs`) and the PMIx client (`pmix.rs`).

use super::pmi::{self, PmiError};
use super::pmix;
use std::sync::{Arc, Mutex};

/// A launcher's key-value space, as PMI-1, PMI-2 and PMIx serve it: each
/// process puts keys, a fence makes them visible, any process gets what
/// another put.
pub(crate) trait KeyValueSpace: Send {
    fn rank(&self) -> u32;
    fn size(&self) -> usize;
    /// Each rank's host as the launcher names it, where it says (PMIx);
    /// otherwise the ranks tell each other theirs.
    fn hosts(&mut self) -> Result<Option<Vec<String>>, PmiError>;
    fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError>;
    /// Wait until every process put what it puts before its fence.
    fn fence(&mut self) -> Result<(), PmiError>;
    /// What `rank` put under `key`.
    fn get(&mut self, rank: u32, key: &str) -> Result<String, PmiError>;
    /// End the whole job: the launcher kills every process and reports `code`.
    fn abort(&mut self, code: i32, message: &str);
    fn finalize(&mut self) -> Result<(), PmiError>;
}

/// PMI's space is one for the whole job: a key is made the putter's own by
/// its rank.
impl KeyValueSpace for pmi::Pmi {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&mut self) -> Result<Option<Vec<String>>, PmiError> {
        Ok(None)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        let k = format!("{key}-{}", self.rank);
        pmi::Pmi::put(self, &k, value)
    }
    fn fence(&mut self) -> Result<(), PmiError> {
        pmi::Pmi::fence(self)
    }
    fn get(&mut self, rank: u32, key: &str) -> Result<String, PmiError> {
        pmi::Pmi::get(self, &format!("{key}-{rank}"))
    }
    fn abort(&mut self, code: i32, message: &str) {
        pmi::Pmi::abort(self, code, message)
    }
    fn finalize(&mut self) -> Result<(), PmiError> {
        pmi::Pmi::finalize(self)
    }
}

impl KeyValueSpace for pmix::Pmix {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&mut self) -> Result<Option<Vec<String>>, PmiError> {
        pmix::Pmix::hosts(self).map(Some)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        pmix::Pmix::put(self, key, value)
    }
    fn fence(&mut self) -> Result<(), PmiError> {
        pmix::Pmix::fence(self)
    }
    fn get(&mut self, rank: u32, key: &str) -> Result<String, PmiError> {
        self.get_from(rank, key)
    }
    fn abort(&mut self, code: i32, message: &str) {
        pmix::Pmix::abort(self, code, message)
    }
    fn finalize(&mut self) -> Result<(), PmiError> {
        pmix::Pmix::finalize(self)
    }
}

pub(crate) type Space = Arc<Mutex<Box<dyn KeyValueSpace>>>;
