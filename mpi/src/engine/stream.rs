//! A rendezvous send's data, once its receiver cleared it: in pieces,
//! each an FM message of its own (`DATA`: the receive's request, the
//! piece's offset, its bytes) that progress sends only when FM takes it
//! whole on the credit at hand ([`Engine::piece_for`]).
//!
//! Why pieces: sent as one message, a large send waited for credit part
//! way, and while it waited FM could run no handler, so whatever arrived
//! was set aside (a copy and an allocation per packet) and copied again
//! later. Two ranks streaming to each other did that all the time, and
//! their bandwidth fell to a third of one direction's. Between pieces
//! progress runs handlers, so each rank takes the other's data straight
//! into its posted receive. The receiver's side is `handlers::on_data`.

use super::*;

/// A piece's data bytes where the route has no credit window to size it
/// by (see [`Engine::piece_for`]).
pub(crate) const PIECE: usize = 256 << 10;

/// A cleared rendezvous send under way.
pub(super) struct Stream {
    /// The send's request: its data, and what completes once the last
    /// piece is handed to FM.
    req: u32,
    to: Rank,
    /// The receive's request at `to`, which each piece names.
    recv_req: u32,
    /// Data bytes handed to FM so far.
    sent: usize,
}

impl Engine {
    /// Send request `req`'s data to receive `recv_req` at `to` (its
    /// clear to send came).
    pub(super) fn start_stream(&mut self, req: u32, to: Rank, recv_req: u32) {
        self.streams.push(Stream {
            req,
            to,
            recv_req,
            sent: 0,
        });
    }

    /// Send the cleared sends' pieces, oldest send first: without `wait`,
    /// each that FM takes whole now; with it, one piece, waiting for
    /// credit (what a blocking call does when polling found nothing).
    pub(super) fn send_streams(&mut self, wait: bool) -> MpiResult<()> {
        let mut i = 0;
        while i < self.streams.len() {
            let Stream {
                req,
                to,
                recv_req,
                sent,
            } = self.streams[i];
            // Read each time: a blocking send may set its data aside
            // meanwhile (`Matching::set_aside`) and return.
            let send = match self.matching().get(req).map(|r| &r.op) {
                Some(Op::Send { data, len }) => Some((*data, *len)),
                _ => None,
            };
            let Some((data, len)) = send else {
                self.streams.remove(i);
                continue;
            };
            let n = (len - sent).min(self.piece_for(to));
            let mut head = [0u8; DATA_HEAD];
            head[..4].copy_from_slice(&recv_req.to_le_bytes());
            head[4..].copy_from_slice(&(sent as u64).to_le_bytes());
            // SAFETY: the send's data lives until its request completes,
            // which is after its last piece.
            let bytes = unsafe { slice_or_empty(data.add(sent), n) };
            if !self.send_whole(to, DATA, &head, bytes, wait)? {
                i += 1;
                continue;
            }
            self.streams[i].sent = sent + n;
            if sent + n == len {
                self.streams.remove(i);
                self.matching().complete(req, MpiStatus::proc_null());
            }
            if wait {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Data bytes of the next piece to `to`: what the credits held now
    /// carry, but no fewer than half the credit window carries (a credit
    /// return is half a window, so such a piece always goes out whole
    /// before long). So a message the window holds goes as one piece, as
    /// a single message did, and a longer one in pieces of half a window
    /// or more; a piece by single copy (which takes one credit) is as
    /// long, and waits for its receiver's read once.
    fn piece_for(&self, to: Rank) -> usize {
        let window = self.fm.credit_window(to);
        let packets = self.fm.credits(to).max(window / 2) as usize;
        match (packets * self.fm.mtu(to)).checked_sub(DATA_HEAD) {
            Some(room) if room > 0 => room,
            _ => PIECE,
        }
    }
}
