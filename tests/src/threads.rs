//! Messages sent by several threads through one endpoint, and the check of
//! what arrived: each thread's messages once, in its order, intact.

use crate::fill;

/// A thread's message: thread (u64), sequence (u64), then `fill`'s bytes
/// for (thread, 1, seq) — 0 to 20 000 of them, past one packet now and then.
pub fn thread_message(t: u64, seq: u64) -> Vec<u8> {
    let len = ((seq * 7919 + t * 31) % 20000) as usize;
    let mut m = Vec::with_capacity(16 + len);
    m.extend_from_slice(&t.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.resize(16 + len, 0);
    fill(&mut m[16..], t as u32, 1, seq);
    m
}

/// What a receiver of [`thread_message`]s saw.
#[derive(Debug, Default)]
pub struct ThreadsSeen {
    /// The next sequence expected from each thread.
    pub next: Vec<u64>,
    pub errors: Vec<String>,
    /// Threads that said they are done (for the program's own use).
    pub done: usize,
}

impl ThreadsSeen {
    pub fn new(threads: usize) -> ThreadsSeen {
        ThreadsSeen {
            next: vec![0; threads],
            ..ThreadsSeen::default()
        }
    }

    /// Check one arrived message.
    pub fn see(&mut self, v: &[u8]) {
        let word = |i: usize| {
            v.get(i..i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let (Some(t), Some(seq)) = (word(0), word(8)) else {
            return self.errors.push(format!("a message of {} bytes", v.len()));
        };
        let Some(n) = self.next.get_mut(t as usize) else {
            return self.errors.push(format!("thread {t} does not exist"));
        };
        if seq != *n {
            self.errors
                .push(format!("thread {t}: seq {seq}, expected {n}"));
        }
        *n = seq + 1;
        if v != thread_message(t, seq) {
            self.errors
                .push(format!("thread {t} seq {seq}: bytes differ"));
        }
    }
}
