//! The credit and stash rules with no I/O in them: what a rank may send,
//! what it owes and withholds, and what a rank that cannot send yet does
//! next. The endpoint (`endpoint.rs`, whose module docs state the rules and
//! why they cannot deadlock) keeps the packets and the devices and asks
//! this core at every decision; the model in `accounts/model.rs` drives
//! the same core through every interleaving of a few ranks.

#[cfg(test)]
mod model;

/// Where a rank stands when it decides: inside a handler, and whether a
/// message of its own is open (part way sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Standing {
    pub in_handler: bool,
    pub message_open: bool,
}

/// What a rank that cannot send now (no credit, or no buffer) does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhileWaiting {
    /// Run the handler of the oldest set-aside message (the stash is at its
    /// bound and this rank may run handlers).
    RunSetAside,
    /// Take in what arrives: credits are applied, data is set aside and
    /// its credit owed (or withheld past the bound).
    TakeIn,
}

/// Per peer credit state, and the stash's bytes against its bound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Accounts {
    /// Credits we hold towards each destination.
    pub credits: Vec<u32>,
    /// The most credits we may hold towards each destination.
    pub window: Vec<u32>,
    /// Credits we owe each source (packets of theirs we consumed).
    pub owed: Vec<u32>,
    /// Credits withheld per source for set-aside messages (stash at its bound).
    pub withheld: Vec<u32>,
    /// Return credits to a source once this many are owed.
    pub return_at: Vec<u32>,
    /// Bytes of the copies set aside, and their bound (`FM_STASH_BYTES`).
    pub stashed_bytes: usize,
    pub stash_limit: usize,
}

impl Accounts {
    /// Full windows towards every peer.
    pub fn new(windows: Vec<u32>, stash_limit: usize) -> Accounts {
        let n = windows.len();
        Accounts {
            credits: windows.clone(),
            return_at: windows.iter().map(|w| w.div_ceil(2).max(1)).collect(),
            window: windows,
            owed: vec![0; n],
            withheld: vec![0; n],
            stashed_bytes: 0,
            stash_limit,
        }
    }

    /// Whether the copies set aside reached their bound.
    #[inline(always)]
    pub fn stash_full(&self) -> bool {
        self.stashed_bytes >= self.stash_limit
    }

    /// Whether a rank may run handlers while it sends: outside any handler,
    /// with no message of its own open.
    #[inline]
    pub fn may_run_handlers(s: Standing) -> bool {
        !s.in_handler && !s.message_open
    }

    /// Before a rank opens a message: run set-aside handlers first while
    /// the stash is at its bound (outside handlers).
    #[inline(always)]
    pub fn runs_set_aside_before_sending(&self, s: Standing) -> bool {
        self.stash_full() && !s.in_handler
    }

    /// What a rank that cannot send now does next; `set_aside`: whether
    /// anything is set aside.
    #[inline]
    pub fn while_waiting(&self, s: Standing, set_aside: bool) -> WhileWaiting {
        if set_aside && self.stash_full() && Accounts::may_run_handlers(s) {
            WhileWaiting::RunSetAside
        } else {
            WhileWaiting::TakeIn
        }
    }

    /// A handler begins to wait: it runs no handlers, so every withheld
    /// credit must go back (the endpoint returns them, message by message).
    #[inline]
    pub fn returns_withheld_when_waiting(&self, s: Standing) -> bool {
        s.in_handler && self.withheld.iter().any(|&w| w != 0)
    }

    /// A data packet of `src` is set aside (`first`: it begins a message):
    /// whether its credit is withheld until the message is handled — only
    /// past the bound, outside handlers, and for fewer than half the peer's
    /// window, so that a credit return's worth keeps circulating.
    #[inline]
    pub fn withholds(&mut self, src: usize, first: bool, s: Standing) -> bool {
        let w = first
            && self.stash_full()
            && !s.in_handler
            && self.withheld[src] + self.return_at[src] < self.window[src];
        if w {
            self.withheld[src] += 1;
        }
        w
    }

    /// One packet of `src` consumed: its credit is owed. Whether a credit
    /// return is due (half a window owed).
    #[inline(always)]
    pub fn consumed(&mut self, src: usize) -> bool {
        self.owed[src] += 1;
        self.owed[src] >= self.return_at[src]
    }

    /// A set-aside message whose credit was withheld was consumed; as
    /// [`Accounts::consumed`].
    #[inline]
    pub fn withheld_consumed(&mut self, src: usize) -> bool {
        self.withheld[src] -= 1;
        self.consumed(src)
    }

    /// Everything owed to `dest`, to go with a packet to it.
    #[inline(always)]
    pub fn take_owed(&mut self, dest: usize) -> u32 {
        std::mem::take(&mut self.owed[dest])
    }

    /// `src` returned `n` credits. `Err(c)`: more than were out (a peer
    /// that breaks the protocol; `c` what we would hold), kept to the window.
    #[inline(always)]
    pub fn returned(&mut self, src: usize, n: u32) -> Result<(), u32> {
        let c = self.credits[src].saturating_add(n);
        self.credits[src] = c.min(self.window[src]);
        if c > self.window[src] {
            return Err(c);
        }
        Ok(())
    }
}
