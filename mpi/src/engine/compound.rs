//! Requests made of others, which every progress advances: a collective's
//! schedule (its sends and receives in stages) and `MPI_Isendrecv`'s pair.

use super::*;

impl Engine {
    /// One request for a send and a receive started together
    /// (`MPI_Isendrecv`): complete when both are, with the receive's
    /// status (and the send's error, if it had one and the receive none).
    pub fn start_pair(&mut self, send: Option<u32>, recv: u32) -> MpiResult<u32> {
        let req = self
            .matching()
            .add(Request::new(Op::Collective, false, None));
        self.pairs.push((req, send, recv));
        self.advance_pairs();
        Ok(req)
    }

    pub(super) fn advance_pairs(&mut self) {
        let mut i = 0;
        while i < self.pairs.len() {
            let (req, send, recv) = self.pairs[i];
            let sent = send.is_none_or(|s| self.peek(s).is_some());
            if !sent || self.peek(recv).is_none() {
                i += 1;
                continue;
            }
            self.pairs.swap_remove(i);
            let sent = send.and_then(|s| self.test(s));
            let Some(mut status) = self.test(recv) else {
                continue;
            };
            if status.error == MPI_SUCCESS {
                status.error = sent.map_or(MPI_SUCCESS, |s| s.error);
            }
            self.matching().complete(req, status);
        }
    }

    /// Run collective `s` to its end (a blocking collective).
    pub fn run(&mut self, s: impl Into<Running>) -> MpiResult<()> {
        let mut s = s.into();
        if s.advance(self)? {
            return Ok(());
        }
        self.progress_watching(|e| match s.advance(e) {
            Ok(false) => Err(s.watch()),
            done => Ok(done),
        })?
        .map(drop)
    }

    /// Start collective `s` (a non-blocking one): its request, which
    /// completes when the schedule ends (advanced by every progress).
    pub fn start_collective(&mut self, s: impl Into<Running>) -> MpiResult<u32> {
        let req = self
            .matching()
            .add(Request::new(Op::Collective, false, None));
        self.collectives.push((req, s.into()));
        self.advance_collectives();
        Ok(req)
    }

    /// Advance every non-blocking collective; complete those that ended
    /// (one that failed completes with its error class in its status).
    pub(super) fn advance_collectives(&mut self) {
        let mut running = std::mem::take(&mut self.collectives);
        let mut i = 0;
        while i < running.len() {
            let status = match running[i].1.advance(self) {
                Ok(false) => {
                    i += 1;
                    continue;
                }
                Ok(true) => MpiStatus::empty(),
                Err(e) => {
                    tracing::warn!("a non-blocking collective failed: {}", e.message);
                    MpiStatus {
                        error: e.class,
                        ..MpiStatus::empty()
                    }
                }
            };
            let (req, _) = running.swap_remove(i);
            self.matching().complete(req, status);
        }
        running.append(&mut self.collectives);
        self.collectives = running;
    }
}
