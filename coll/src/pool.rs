//! Large buffers the schedules work in, kept for the next collective.
//!
//! malloc serves a request past its mmap threshold (128 KiB at first)
//! with fresh pages from the kernel and returns them at free, so a
//! collective of 1 MiB that packed its input and received into scratch
//! faulted in every page of both, every call: 2 ranks' `MPI_Reduce` of
//! 1 MiB took 800 µs where the data's transfer takes 30
//! (docs/PERFORMANCE.md, "Collectives: eager limit, buffers and hosts").
//! Buffers of [`POOLED`] bytes and more go back here when their schedule
//! ends and serve the next one. Smaller ones are left to malloc, which
//! keeps them in its own free lists.

use std::sync::Mutex;

/// Buffers at least this large are pooled.
pub const POOLED: usize = 64 * 1024;
/// At most this many buffers, of at most this many bytes in all, wait.
const KEEP: usize = 16;
const KEEP_BYTES: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The smallest pooled buffer with room for `len` bytes, if `len` is
/// worth pooling and one is kept.
fn kept(len: usize) -> Option<Vec<u8>> {
    if len < POOLED {
        return None;
    }
    let mut p = pool();
    let best = (p.iter().enumerate())
        .filter(|(_, v)| v.capacity() >= len)
        .min_by_key(|(_, v)| v.capacity())
        .map(|(i, _)| i);
    best.map(|i| p.swap_remove(i))
}

/// An empty buffer with room for `len` bytes: the smallest pooled one
/// that fits, else a new one.
pub fn take(len: usize) -> Vec<u8> {
    match kept(len) {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(len),
    }
}

/// `len` bytes to receive into. A pooled buffer keeps what an earlier
/// collective of this process left in it: every schedule writes a
/// scratch span before it reads or delivers it, and zeroing a 1 MiB
/// buffer was a tenth of the time of 2 ranks' `MPI_Reduce` of 1 MiB
/// (docs/PERFORMANCE.md). Only bytes no earlier use reached are zeroed.
pub fn scratch(len: usize) -> Vec<u8> {
    let mut v = kept(len).unwrap_or_default();
    v.resize(len, 0);
    v
}

/// A buffer its schedule is done with, kept if large and there is room
/// (else the smallest kept one makes way for a larger one).
pub fn give(v: Vec<u8>) {
    if v.capacity() < POOLED {
        return;
    }
    let mut p = pool();
    let held: usize = p.iter().map(Vec::capacity).sum();
    if p.len() < KEEP && held + v.capacity() <= KEEP_BYTES {
        p.push(v);
    } else if let Some((i, _)) = (p.iter().enumerate())
        .filter(|(_, k)| k.capacity() < v.capacity())
        .min_by_key(|(_, k)| k.capacity())
    {
        if held - p[i].capacity() + v.capacity() <= KEEP_BYTES {
            p[i] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_given_back_serves_the_next_take_and_small_ones_are_not_kept() {
        let v = scratch(POOLED * 3);
        let at = v.as_ptr();
        give(v);
        let again = take(POOLED * 2);
        assert_eq!(again.as_ptr(), at, "the pooled buffer");
        assert!(again.is_empty() && again.capacity() >= POOLED * 3);
        give(vec![0; 100]);
        assert!(pool().iter().all(|b| b.capacity() >= POOLED));
    }

    #[test]
    fn scratch_is_as_long_as_asked_whether_pooled_or_new() {
        let mut v = scratch(POOLED * 2);
        v.fill(7);
        give(v);
        assert_eq!(scratch(POOLED).len(), POOLED);
        assert_eq!(scratch(POOLED * 5).len(), POOLED * 5);
        assert_eq!(scratch(10), [0; 10]);
    }
}
