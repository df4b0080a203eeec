//! A message being received, as its handler sees it: FM 2.x's `FM_receive`
//! in pieces (scatter), with messages larger than one packet streamed — the
//! handler starts on the first packet and each `receive` waits only for the
//! bytes it asks for.

use crate::endpoint::{Endpoint, Packet};
use crate::error::Result;
use crate::wire::{self, Header, Kind, HEADER};
use fm_devices::{Device, Rank};

/// What the current segment of the message is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seg {
    None,
    /// Bytes `off..end` at `ptr`, in device memory; released with `token`.
    Device,
    /// Bytes `off..end` of `owned` (a packet that was set aside).
    Stashed,
    /// A piece left in the sender's memory: bytes `off..end` at `remote`.
    Remote,
}

/// The message a handler is running for.
///
/// The current segment is kept as plain fields rather than an enum that is
/// moved around: this sits on every message's path.
pub struct Incoming<'a> {
    ep: &'a mut Endpoint,
    src: Rank,
    handler: u16,
    len: usize,
    /// Bytes of the message delivered or skipped so far.
    done: usize,
    /// Bytes of the message that arrived in segments so far.
    arrived: usize,
    seg: Seg,
    ptr: *const u8,
    off: usize,
    end: usize,
    token: u64,
    remote: u64,
    owned: Vec<u8>,
}

impl<'a> Incoming<'a> {
    /// A message from `src` described by its first packet's header `h`;
    /// [`Incoming::take_segment`] then hands it that packet.
    #[inline(always)]
    pub(crate) fn new(ep: &'a mut Endpoint, src: Rank, h: &Header) -> Self {
        Incoming {
            src,
            handler: h.handler,
            len: h.msg_len as usize,
            done: 0,
            arrived: 0,
            seg: Seg::None,
            ptr: std::ptr::null(),
            off: 0,
            end: 0,
            token: 0,
            remote: 0,
            owned: Vec::new(),
            ep,
        }
    }

    /// The sending rank.
    pub fn src(&self) -> Rank {
        self.src
    }

    /// The handler ID the message was sent to.
    pub fn handler(&self) -> u16 {
        self.handler
    }

    /// Length of the whole message in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes not yet received.
    pub fn remaining(&self) -> usize {
        self.len - self.done
    }

    /// The endpoint, to send from inside a handler (replies). Handlers may
    /// send but not extract.
    pub fn endpoint(&mut self) -> &mut Endpoint {
        self.ep
    }

    /// Send a whole message back to the sender of this one.
    pub fn reply(&mut self, handler: u16, data: &[u8]) -> Result<()> {
        let src = self.src;
        self.ep.send(src, handler, data)
    }

    /// FM_receive: copy the next `buf.len()` bytes of the message into `buf`
    /// (fewer at the end of the message); returns how many. Waits for
    /// packets that have not arrived yet.
    #[inline]
    pub fn receive(&mut self, buf: &mut [u8]) -> Result<usize> {
        let want = buf.len().min(self.remaining());
        let mut got = 0;
        while got < want {
            if !self.ensure_segment()? {
                break;
            }
            got += self.copy_out(Some(&mut buf[got..want]), want - got)?;
        }
        Ok(got)
    }

    /// The rest of the message as a vector.
    pub fn receive_vec(&mut self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.remaining()];
        let n = self.receive(&mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// Skip the rest of the message (what happens anyway when the handler returns).
    #[inline]
    pub(crate) fn finish(&mut self) -> Result<()> {
        while self.done < self.len {
            if !self.ensure_segment()? {
                break;
            }
            let left = self.len - self.done;
            self.copy_out(None, left)?;
        }
        self.release_segment();
        Ok(())
    }

    /// Move up to `n` bytes of the current segment into `dst` (or drop them).
    #[inline]
    fn copy_out(&mut self, dst: Option<&mut [u8]>, n: usize) -> Result<usize> {
        let k = n.min(self.end - self.off);
        if let Some(d) = dst {
            match self.seg {
                // SAFETY: off + k ≤ end ≤ the packet's length; the packet
                // stays valid until this segment is released.
                Seg::Device | Seg::Stashed => unsafe {
                    std::ptr::copy_nonoverlapping(self.ptr.add(self.off), d.as_mut_ptr(), k)
                },
                Seg::Remote => {
                    self.ep
                        .dev
                        .remote_read(self.src, self.remote + self.off as u64, &mut d[..k])?
                }
                Seg::None => return Ok(0),
            }
        }
        self.off += k;
        self.done += k;
        self.ep.stats.bytes_received += k as u64;
        if self.off == self.end {
            // Done with it: free the frame (its credit goes back) or tell the
            // sender its piece was copied, now rather than when the handler
            // returns, so a sender blocked on it does not wait for our reply.
            self.release_segment();
        }
        Ok(k)
    }

    /// Make sure the current segment has unread bytes, pulling the next
    /// packet of this message if needed. `false` if the message is over.
    #[inline]
    fn ensure_segment(&mut self) -> Result<bool> {
        loop {
            if self.seg != Seg::None && self.off < self.end {
                return Ok(true);
            }
            self.release_segment();
            if self.arrived >= self.len {
                return Ok(false);
            }
            let p = self.ep.next_packet_from(self.src)?;
            let h = match Header::decode(p.bytes()) {
                Ok(h) => h,
                Err(_) => {
                    self.ep.drop_malformed(p, "bad header");
                    continue;
                }
            };
            self.ep.take_credits(self.src, &h);
            match h.kind {
                Kind::Credit | Kind::Fin => self.ep.on_control(self.src, &h, p),
                _ if h.first() => {
                    // A new message began before this one was complete: the
                    // sender broke the protocol. End this one here.
                    tracing::warn!(
                        src = self.src,
                        len = self.len,
                        arrived = self.arrived,
                        "fm: message cut short by its sender"
                    );
                    self.ep.stats.dropped_malformed += 1;
                    self.ep.unread(p);
                    self.done = self.len;
                    self.arrived = self.len;
                    return Ok(false);
                }
                _ => self.take_segment(p, &h),
            }
        }
    }

    /// Make a packet of this message the current segment.
    #[inline(always)]
    pub(crate) fn take_segment(&mut self, p: Packet, h: &Header) {
        if h.kind == Kind::Remote {
            return self.take_remote(p);
        }
        let room = self.len - self.arrived;
        let n = p.bytes().len() - HEADER;
        if n > room {
            tracing::warn!(
                src = self.src,
                extra = n - room,
                "fm: packet carries more than its message declared"
            );
            self.ep.stats.dropped_malformed += 1;
        }
        let n = n.min(room);
        self.arrived += n;
        self.off = HEADER;
        self.end = HEADER + n;
        match p {
            Packet::Device(r) => {
                self.seg = Seg::Device;
                self.ptr = r.ptr;
                self.token = r.token;
            }
            Packet::Stashed { bytes, .. } => {
                self.seg = Seg::Stashed;
                self.owned = bytes;
                self.ptr = self.owned.as_ptr();
            }
        }
    }

    /// A single-copy descriptor: the bytes stay in the sender until read.
    #[cold]
    fn take_remote(&mut self, p: Packet) {
        let room = self.len - self.arrived;
        let Some((addr, len)) = wire::decode_remote(&p.bytes()[HEADER..]) else {
            self.ep.drop_malformed(p, "bad single-copy descriptor");
            return;
        };
        let len = (len as usize).min(room);
        self.ep.release(p);
        self.arrived += len;
        self.seg = Seg::Remote;
        self.remote = addr;
        self.off = 0;
        self.end = len;
    }

    #[inline]
    fn release_segment(&mut self) {
        match std::mem::replace(&mut self.seg, Seg::None) {
            Seg::Device => self.ep.release_device(self.src, self.token),
            Seg::Remote => self.ep.send_fin(self.src),
            Seg::Stashed | Seg::None => {}
        }
    }
}
