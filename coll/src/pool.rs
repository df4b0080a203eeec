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

/// An empty buffer with room for `len` bytes: the smallest pooled one
/// that fits, else a new one.
pub fn take(len: usize) -> Vec<u8> {
    if len >= POOLED {
        let mut p = pool();
        let best = (p.iter().enumerate())
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut v = p.swap_remove(i);
            v.clear();
            return v;
        }
    }
    Vec::with_capacity(len)
}

/// `len` zero bytes (a buffer to receive into).
pub fn zeroed(len: usize) -> Vec<u8> {
    let mut v = take(len);
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
        let v = zeroed(POOLED * 3);
        let at = v.as_ptr();
        give(v);
        let again = take(POOLED * 2);
        assert_eq!(again.as_ptr(), at, "the pooled buffer");
        assert!(again.is_empty() && again.capacity() >= POOLED * 3);
        give(vec![0; 100]);
        assert!(pool().iter().all(|b| b.capacity() >= POOLED));
    }
}
