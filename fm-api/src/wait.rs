//! Waiting without starving a descheduled peer: spin briefly, then yield the
//! CPU, then sleep in short naps once nothing has happened for a while. With
//! more processes than cores the peer we wait for gets to run.

use std::time::{Duration, Instant};

const SPINS: u32 = 256;
const YIELD_FOR: Duration = Duration::from_millis(20);
const NAP: Duration = Duration::from_micros(50);

#[derive(Default)]
pub struct Waiter {
    polls: u32,
    idle_since: Option<Instant>,
}

impl Waiter {
    pub fn new() -> Self {
        Waiter::default()
    }

    /// Something happened: start over with fast polling.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.polls = 0;
        self.idle_since = None;
    }

    /// Nothing happened on this poll.
    #[inline]
    pub fn snooze(&mut self) {
        self.polls = self.polls.saturating_add(1);
        if self.polls < SPINS {
            std::hint::spin_loop();
            return;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
    }
}
