//! Which way a long piece goes to one peer on this host: through the
//! device's frames, or by single copy (the receiver reads it with
//! `process_vm_readv`).
//!
//! Neither is always faster. When the two processes share a cache, the
//! pipelined frames are about twice as fast as single copy. When they sit on
//! different core complexes or sockets, every store into a frame first has
//! to take the line from the other side, and the frames become 4–9× slower
//! while single copy does not change (docs/PERFORMANCE.md, "Far placement").
//! The placement is not known in advance and can change while a job runs (a
//! VM's vCPUs move), so each endpoint measures both ways towards each peer:
//!
//! - frames: the sender's own time copying the piece into its frames, per
//!   byte — the part that collapses. The receiver's copy-out is not in it,
//!   so the estimate favours frames;
//! - single copy: from handing the piece over to the receiver's "done", per
//!   byte — everything, including the receiver's latency.
//!
//! The cheaper of the two medians of the last three samples wins; every
//! [`EXPLORE_EVERY`]th piece (every [`EXPLORE_SELDOM`]th when one way is
//! at least twice as fast) takes the other way, so a change of placement is
//! seen within a few such pieces.

/// One piece in this many takes the way not chosen, to keep both estimates
/// current, while they are close.
pub(crate) const EXPLORE_EVERY: u32 = 64;

/// The same when one way is at least twice as fast as the other: then
/// exploring costs the most, and is least likely to change the choice.
/// One piece in 256 at the slower way's price is ~0.5 % of large-message
/// throughput on the hosts measured (one in 64 was 2–3 %).
pub(crate) const EXPLORE_SELDOM: u32 = 256;

/// While frames are chosen, one piece in this many is timed (two clock
/// reads per frame, ~50 ns, on the sender's path).
pub(crate) const TIME_FRAMES_EVERY: u32 = 8;

/// The way of one long piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Through frames; `timed`: report the copying time with
    /// [`PathChoice::frames_took`].
    Frames { timed: bool },
    /// By single copy; report the time with [`PathChoice::single_took`].
    SingleCopy,
}

/// The last three samples of one way, in picoseconds per byte.
#[derive(Clone, Copy, Debug, Default)]
struct Samples {
    ps_per_byte: [u32; 3],
    len: u8,
    next: u8,
}

impl Samples {
    fn add(&mut self, bytes: usize, ns: u64) {
        if bytes == 0 {
            return;
        }
        let ps = (ns.saturating_mul(1000) / bytes as u64).min(u32::MAX as u64) as u32;
        self.ps_per_byte[self.next as usize] = ps;
        self.next = (self.next + 1) % 3;
        self.len = (self.len + 1).min(3);
    }

    /// The median of three samples; with fewer, the smallest (a sample can
    /// only be too slow — a preempted copy — never too fast).
    fn estimate(&self) -> Option<u32> {
        let s = &self.ps_per_byte[..self.len as usize];
        match s.len() {
            0 => None,
            1 | 2 => s.iter().copied().min(),
            _ => {
                let (a, b, c) = (s[0], s[1], s[2]);
                Some(a.max(b).min(a.min(b).max(c)))
            }
        }
    }
}

/// The choice towards one peer.
#[derive(Clone, Debug, Default)]
pub(crate) struct PathChoice {
    frames: Samples,
    single: Samples,
    pieces: u32,
}

impl PathChoice {
    /// The way of the next long piece.
    pub(crate) fn next(&mut self) -> Way {
        self.pieces = self.pieces.wrapping_add(1);
        let mut exploring = false;
        let single = match (self.frames.estimate(), self.single.estimate()) {
            // Measure both first: frames, then single copy.
            (None, _) => false,
            (Some(_), None) => true,
            (Some(f), Some(s)) => {
                let clear = f.max(s) / 2 >= f.min(s);
                let every = if clear { EXPLORE_SELDOM } else { EXPLORE_EVERY };
                exploring = self.pieces.is_multiple_of(every);
                (s < f) != exploring
            }
        };
        if single {
            Way::SingleCopy
        } else {
            let timed =
                exploring || self.frames.len < 3 || self.pieces.is_multiple_of(TIME_FRAMES_EVERY);
            Way::Frames { timed }
        }
    }

    /// `ns` spent copying `bytes` into frames.
    pub(crate) fn frames_took(&mut self, bytes: usize, ns: u64) {
        self.frames.add(bytes, ns);
    }

    /// `ns` from handing over `bytes` by single copy to the receiver's "done".
    pub(crate) fn single_took(&mut self, bytes: usize, ns: u64) {
        self.single.add(bytes, ns);
    }

    /// The current estimates, picoseconds per byte: (frames, single copy).
    #[cfg(test)]
    fn estimates(&self) -> (Option<u32>, Option<u32>) {
        (self.frames.estimate(), self.single.estimate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `n` pieces of 64 KiB against a placement whose frames cost
    /// `frames_ps` and single copy `single_ps` per byte; the count that went
    /// by single copy.
    fn run(c: &mut PathChoice, n: u32, frames_ps: u64, single_ps: u64) -> u32 {
        let bytes = 65536usize;
        let mut single = 0;
        for _ in 0..n {
            match c.next() {
                Way::SingleCopy => {
                    single += 1;
                    c.single_took(bytes, single_ps * bytes as u64 / 1000);
                }
                Way::Frames { timed: true } => {
                    c.frames_took(bytes, frames_ps * bytes as u64 / 1000)
                }
                Way::Frames { timed: false } => {}
            }
        }
        single
    }

    #[test]
    fn measures_both_then_takes_the_faster_and_explores_the_other() {
        // Near: frames 30 ps/B, single copy 107 ps/B (this VM).
        let mut c = PathChoice::default();
        assert_eq!(c.next(), Way::Frames { timed: true }, "frames first");
        c.frames_took(65536, 2000);
        assert_eq!(c.next(), Way::SingleCopy, "then single copy");
        c.single_took(65536, 7000);
        let mut timed = 0;
        for _ in 0..640 {
            match c.next() {
                Way::SingleCopy => c.single_took(65536, 7000),
                Way::Frames { timed: true } => {
                    timed += 1;
                    c.frames_took(65536, 2000);
                }
                Way::Frames { timed: false } => {}
            }
        }
        assert_eq!(c.pieces, 642);
        // Single copy is 3.5× slower: explore one piece in 256. Pieces
        // 3..=642: 2 explore by single copy, 80 are multiples of 8 (minus the
        // 2 that explore), plus pieces 3 and 4, which fill the three samples.
        assert_eq!(timed, 80 - 2 + 2, "frames are timed one piece in 8");
        let single = run(&mut c, 640, 30, 107); // pieces 643..=1282
        assert_eq!(single, 3, "only the exploring pieces go by single copy");
        // Far: frames 230 ps/B, single copy 110.
        let mut c = PathChoice::default();
        let single = run(&mut c, 642, 230, 110);
        assert_eq!(single, 642 - 1 - 2, "all but the first and the explorers");
        // Close (130 against 100 ps/B): explore one piece in 64.
        let mut c = PathChoice::default();
        let single = run(&mut c, 642, 130, 100);
        assert_eq!(single, 642 - 1 - 10);
        let mut c = PathChoice::default();
        let single = run(&mut c, 642, 100, 130);
        assert_eq!(single, 1 + 10);
    }

    #[test]
    fn follows_a_change_of_placement_within_a_few_explorations() {
        let mut c = PathChoice::default();
        run(&mut c, 200, 30, 107); // near
        assert!(c.estimates().0 < c.estimates().1);
        // The vCPUs move apart: frames collapse. Frames are in use and timed
        // one piece in 8; two slow samples make the median slow.
        let mut pieces = 0;
        loop {
            pieces += 1;
            match c.next() {
                Way::SingleCopy => break,
                Way::Frames { timed: true } => c.frames_took(65536, 230 * 65536 / 1000),
                Way::Frames { timed: false } => {}
            }
            assert!(pieces < 4 * EXPLORE_EVERY, "never went to single copy");
        }
        assert!(
            pieces <= 2 * TIME_FRAMES_EVERY + 1,
            "switched after {pieces} slow pieces"
        );
        // And back: single copy is in use, frames are only measured when
        // exploring, so it takes two explorations.
        c.single_took(65536, 110 * 65536 / 1000);
        let mut pieces = 0;
        loop {
            pieces += 1;
            match c.next() {
                Way::SingleCopy => c.single_took(65536, 110 * 65536 / 1000),
                Way::Frames { timed } => {
                    assert!(timed, "an exploring piece is timed");
                    c.frames_took(65536, 30 * 65536 / 1000);
                    if c.estimates().0 < c.estimates().1 {
                        break;
                    }
                }
            }
            assert!(pieces < 4 * EXPLORE_SELDOM, "never went back to frames");
        }
        assert!(pieces <= 2 * EXPLORE_SELDOM, "took {pieces} pieces");
        assert!(matches!(c.next(), Way::Frames { .. }));
    }

    #[test]
    fn one_preempted_sample_does_not_flip_the_choice() {
        let mut c = PathChoice::default();
        run(&mut c, 100, 30, 107);
        // A copy that was descheduled for a millisecond.
        c.frames_took(65536, 1_000_000);
        assert!(c.estimates().0 < c.estimates().1);
    }

    #[test]
    fn odd_samples_do_not_overflow() {
        let mut s = Samples::default();
        s.add(0, 5); // ignored
        assert_eq!(s.estimate(), None);
        s.add(1, u64::MAX);
        s.add(usize::MAX, 0);
        assert_eq!(s.estimate(), Some(0));
        s.add(3, 3);
        assert_eq!(s.estimate(), Some(1000));
    }
}
