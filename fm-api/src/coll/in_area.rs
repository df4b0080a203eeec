//! FM programs' collectives through the host's area ([`super::area`]):
//! a group whose members all share this host runs its small collectives
//! (up to `FM_COLL_SHM_BYTES` per member) there, as fm's MPI does.
//!
//! A step starts only once this member completed the one before
//! ([`super::area::Step`]), but a program's pending collectives advance
//! only when it tests or waits for them. So the group keeps its
//! collectives through the area that are not complete, oldest first
//! ([`Chain`]), and testing or waiting for one advances those before it
//! too, keeping their outcome for their own test or wait.

use super::area::{AreaError, AreaOp, Steps, Watch};
use super::Reduction;
use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Whether a group's collectives go through an area: not known until
/// its first collective that could.
#[derive(Default)]
pub(super) enum GroupArea {
    #[default]
    Unknown,
    /// Never (members on other hosts, too few or too many, no shared
    /// memory device).
    Never,
    Open(Arc<Chain>),
}

type Outcome = std::result::Result<(), AreaError<Infallible>>;

/// A group's area at this member, and its collectives through it that
/// are not complete, oldest first.
pub(super) struct Chain {
    steps: Arc<Steps>,
    running: Mutex<VecDeque<Weak<Mutex<Link>>>>,
    /// A collective was dropped before it completed: the steps after it
    /// can never start.
    broken: AtomicBool,
}

struct Link {
    op: AreaOp<Reduction>,
    outcome: Option<Outcome>,
}

impl Link {
    fn drive(&mut self, ep: &Endpoint) {
        if self.outcome.is_none() {
            match self.op.advance(ep) {
                Ok(false) => {}
                Ok(true) => self.outcome = Some(Ok(())),
                Err(e) => self.outcome = Some(Err(e)),
            }
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Chain {
    pub(super) fn new(steps: Steps) -> Chain {
        Chain {
            steps: Arc::new(steps),
            running: Mutex::new(VecDeque::new()),
            broken: AtomicBool::new(false),
        }
    }

    pub(super) fn steps(&self) -> &Arc<Steps> {
        &self.steps
    }
}

/// One collective of a group through its area.
pub(super) struct InArea {
    chain: Arc<Chain>,
    link: Arc<Mutex<Link>>,
}

impl InArea {
    /// `op` (the group's next step) joins the chain.
    pub(super) fn start(chain: &Arc<Chain>, op: AreaOp<Reduction>) -> InArea {
        let link = Arc::new(Mutex::new(Link { op, outcome: None }));
        locked(&chain.running).push_back(Arc::downgrade(&link));
        InArea {
            chain: chain.clone(),
            link,
        }
    }

    /// Advance the collectives before it, then it: whether it is
    /// complete.
    pub(super) fn advance(&self, ep: &Endpoint) -> Result<bool> {
        let mut running = locked(&self.chain.running);
        while let Some(front) = running.front() {
            let Some(l) = front.upgrade() else {
                running.pop_front();
                continue;
            };
            if Arc::ptr_eq(&l, &self.link) {
                break;
            }
            let mut l = locked(&l);
            l.drive(ep);
            if l.outcome.is_none() {
                return self.unbroken().map(|()| false);
            }
            running.pop_front();
        }
        let mut me = locked(&self.link);
        me.drive(ep);
        let Some(outcome) = me.outcome.take() else {
            return self.unbroken().map(|()| false);
        };
        // Complete: it leaves the chain (it is at its front).
        running.pop_front();
        me.outcome = Some(Ok(()));
        let ranks = me.op.ranks();
        outcome.map(|()| true).map_err(|e| area_error(e, ranks))
    }

    /// A collective before this one was given up: this one cannot go on.
    fn unbroken(&self) -> Result<()> {
        match self.chain.broken.load(Ordering::Relaxed) {
            false => Ok(()),
            true => Err(ErrorKind::Group(
                "an earlier collective of this group was dropped before it completed, so the later ones through the host's area cannot start".into(),
            )
            .into()),
        }
    }

    /// What a wait for it looks at: the watch of the oldest collective of
    /// the chain not complete (this one or one before it).
    pub(super) fn watch(&self) -> Option<Watch> {
        let running = locked(&self.chain.running);
        let front = running.iter().find_map(Weak::upgrade)?;
        let watch = locked(&front).op.watch();
        watch
    }
}

impl Drop for InArea {
    fn drop(&mut self) {
        if locked(&self.link).outcome.is_none() {
            self.chain.broken.store(true, Ordering::Relaxed);
        }
    }
}

fn area_error(e: AreaError<Infallible>, ranks: &[Rank]) -> FmError {
    match e {
        AreaError::Mismatch {
            member,
            got: Some(got),
            want,
        } => ErrorKind::CollectiveMismatch {
            rank: ranks[member],
            got,
            want,
        }
        .into(),
        AreaError::Mismatch { member, want, .. } => ErrorKind::Group(format!(
            "rank {} passed more than the host's area holds where {want} bytes were expected: do all members make the same calls, with the same root and lengths?",
            ranks[member]
        ))
        .into(),
        AreaError::TooLong { len, room } => ErrorKind::Group(format!(
            "{len} bytes where the members agreed on at most {room}: do all members make the same calls, with the same lengths?"
        ))
        .into(),
        AreaError::Combine(e) => match e {},
    }
}
