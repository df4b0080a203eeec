//! `fm-bench put`, `get` and `atomic`: FM's one-sided windows
//! (`fm::Window`) between the leader and its peer. Every rank of the job
//! makes one window (collectively); the leader then times operations on
//! its peer's part while the peer serves them in its handlers, waiting.
//!
//! - put: one-way latency as `ucx_perftest -t ucp_put_lat` measures it:
//!   the two ranks put to each other in turn, each waiting until the
//!   other's put has landed in its own window (the last word of the
//!   data, a sequence number, polled), half the round trip; and the
//!   bandwidth of `--window` puts completed by one flush;
//! - get: one get (it waits for its data);
//! - atomic: one 64-bit fetch-add, compare-and-swap and swap each.

use crate::stats::{Sample, Summary};
use crate::{batch_for, default_iters, e, Ctx, Res};
use fm::Window;
use std::time::Instant;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OneSided {
    Put,
    Get,
    Atomic,
}

/// One operation the leader times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    PutPingpong,
    Get,
    FetchAdd,
    CompareSwap,
    Swap,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::PutPingpong => "put",
            Op::Get => "get",
            Op::FetchAdd => "fetch_add",
            Op::CompareSwap => "compare_swap",
            Op::Swap => "swap",
        }
    }
}

impl Ctx<'_> {
    pub(crate) fn one_sided(&mut self, what: OneSided) -> Res<()> {
        let (sizes, ops) = match what {
            OneSided::Put => (self.sizes(&[8, 65536, 1 << 20]), vec![Op::PutPingpong]),
            OneSided::Get => (self.sizes(&[8, 65536, 1 << 20]), vec![Op::Get]),
            OneSided::Atomic => (vec![8], vec![Op::FetchAdd, Op::CompareSwap, Op::Swap]),
        };
        let world = self.fm.world().map_err(e)?;
        let len = sizes.iter().copied().max().unwrap_or(8).max(8);
        let mut win = self.fm.window(&world, len).map_err(e)?;
        for &size in &sizes {
            for &op in &ops {
                self.sync()?;
                if op == Op::PutPingpong {
                    self.put_pingpong(&mut win, size)?;
                } else if self.leader() {
                    self.time_one_sided(&mut win, op, size)?;
                }
                if what == OneSided::Put && self.leader() {
                    self.put_bandwidth(&mut win, size)?;
                }
                self.sync()?;
            }
        }
        win.free(self.fm).map_err(e)?;
        Ok(())
    }

    /// Time `op` of `size` bytes on the peer's window, each operation to
    /// completion.
    fn time_one_sided(&mut self, win: &mut Window, op: Op, size: usize) -> Res<()> {
        let t = self.peer as usize;
        let mut buf = vec![0x5au8; size];
        let (iters, samples) = self.batches(win, size, 1.0, |ctx, win, i| {
            let fm = &mut *ctx.fm;
            match op {
                Op::PutPingpong => unreachable!("timed by put_pingpong"),
                Op::Get => win.get(fm, t, 0, &mut buf),
                Op::FetchAdd => win.fetch_add(fm, t, 0, 1).map(drop),
                Op::CompareSwap => win.compare_swap(fm, t, 0, i, i + 1).map(drop),
                Op::Swap => win.swap(fm, t, 0, i).map(drop),
            }
            .map_err(e)
        })?;
        self.latency_row(op.name(), size, iters, &samples);
        Ok(())
    }

    /// Puts of `size` bytes (at least 8) back and forth between the
    /// leader and its peer, each waiting for the other's to land: half
    /// the round trip.
    fn put_pingpong(&mut self, win: &mut Window, size: usize) -> Res<()> {
        let size = size.max(8);
        // The sequence number: the data's last aligned word.
        let flag = (size - 8) & !7;
        let t = self.peer as usize;
        let mut buf = vec![0x5au8; size];
        // Both start from 0, each having cleared its own flag before the
        // other may put: read after the pair's sync instead, the leader's
        // first put could land before its peer read the flag, which then
        // waited for one more than the leader would ever send.
        win.local_mut(self.fm)[flag..flag + 8].fill(0);
        self.sync()?;
        let mut seq = 0u64;
        let leader = self.leader();
        let (iters, samples) = self.batches(win, size, 2.0, |ctx, win, _| {
            seq += 1;
            if !leader {
                ctx.landed(win, flag, seq)?;
            }
            buf[flag..flag + 8].copy_from_slice(&seq.to_ne_bytes());
            win.put(ctx.fm, t, 0, &buf).map_err(e)?;
            if leader {
                ctx.landed(win, flag, seq)?;
            }
            Ok(())
        })?;
        if leader {
            self.latency_row("put", size, iters, &samples);
        }
        Ok(())
    }

    /// Run `once` in timed batches as the ping-pong's (warm-up batches
    /// first): the calls timed, and each batch's µs per call over `per`.
    fn batches(
        &mut self,
        win: &mut Window,
        size: usize,
        per: f64,
        mut once: impl FnMut(&mut Self, &mut Window, u64) -> Res<()>,
    ) -> Res<(u64, Vec<f64>)> {
        let iters = self.opts.iters.unwrap_or(default_iters(size) / 4).max(1);
        let warmup = self.opts.warmup.unwrap_or(iters / 10 + 10);
        let batch = batch_for(size);
        let (warm_rounds, rounds) = (warmup.div_ceil(batch), iters.div_ceil(batch).max(1));
        let mut samples = Vec::with_capacity(rounds as usize);
        for round in 0..warm_rounds + rounds {
            let start = Instant::now();
            for i in 0..batch {
                once(self, win, i)?;
            }
            if round >= warm_rounds {
                samples.push(start.elapsed().as_secs_f64() * 1e6 / batch as f64 / per);
            }
        }
        Ok((rounds * batch, samples))
    }

    fn latency_row(&mut self, name: &'static str, size: usize, iters: u64, samples: &[f64]) {
        let device = self.device_name();
        let row = Sample::latency(name, device, "fm", size, iters, &Summary::of(samples));
        self.printer.row(&row);
    }

    /// Wait until the word at `flag` of this rank's window is `seq`,
    /// running handlers (which apply puts that come as messages).
    fn landed(&mut self, win: &Window, flag: usize, seq: u64) -> Res<()> {
        let start = Instant::now();
        while win.load(self.fm, flag).map_err(e)? != seq {
            self.fm.extract(usize::MAX).map_err(e)?;
            if start.elapsed() > self.opts.stall_limit {
                return Err(format!(
                    "rank {}: put {seq} never landed within {:?} (--stall-limit)",
                    self.fm.rank(),
                    self.opts.stall_limit
                ));
            }
        }
        Ok(())
    }

    /// `--window` puts of `size` bytes, then one flush: per put.
    fn put_bandwidth(&mut self, win: &mut Window, size: usize) -> Res<()> {
        let window = self.opts.window.max(1);
        let windows = (self.opts.iters.unwrap_or(default_iters(size) / 4) / window).max(2);
        let t = self.peer as usize;
        let buf = vec![0xa5u8; size];
        let mut samples = Vec::with_capacity(windows as usize);
        for w in 0..windows + windows / 10 + 1 {
            let start = Instant::now();
            for _ in 0..window {
                win.put(self.fm, t, 0, &buf).map_err(e)?;
            }
            win.flush(self.fm, t).map_err(e)?;
            if w > windows / 10 {
                samples.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        let device = self.device_name();
        let row = Sample::stream(
            "put_bw",
            device,
            size,
            windows * window,
            window,
            &Summary::of(&samples),
        );
        self.printer.row(&row);
        Ok(())
    }
}
