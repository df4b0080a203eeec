//! The tuning of the collectives of the job this process is in: the
//! `FM_COLL_*` settings and the job's hosts (`fm::coll::Tuning`), read
//! when the library joins the job.

pub use fm::coll::Tuning;
use std::sync::{Arc, Mutex};

/// Set when the library joins the job; the defaults before.
static TUNING: Mutex<Option<Arc<Tuning>>> = Mutex::new(None);

pub fn set(t: Tuning) {
    *TUNING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(t));
}

pub fn current() -> Arc<Tuning> {
    let mut t = TUNING.lock().unwrap_or_else(|e| e.into_inner());
    t.get_or_insert_with(Default::default).clone()
}
