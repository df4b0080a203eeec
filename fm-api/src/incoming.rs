//! A message being received, as its handler sees it: FM 2.x's `FM_receive`
//! in pieces (scatter), with messages larger than one packet streamed — the
//! handler starts on the first packet and each `receive` waits only for the
//! bytes it asks for.

use crate::endpoint::{Endpoint, Packet};
use crate::error::{ErrorKind, Result};
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
    /// The current stashed segment's credit is returned when it is done.
    stash_owes_credit: bool,
    /// The sender gave this message up part way (reported once).
    aborted: bool,
    /// The sender began another message before this one was complete:
    /// the bytes that had arrived (reported once, as an error, so that
    /// what a handler reads and the byte counters agree with what came).
    cut_short: Option<usize>,
}

/// What [`Incoming::receive_vec`] allocates first, whatever the sender
/// claims; it doubles from there as bytes arrive.
const FIRST_CHUNK: usize = 64 << 10;

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
            stash_owes_credit: false,
            aborted: false,
            cut_short: None,
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

    /// The endpoint, to send from inside a handler to any rank (and to read
    /// its counters, credits and MTUs). Handlers may send but not extract.
    ///
    /// Before it hands the endpoint out, the message's current packet is
    /// copied aside and released, so a handler that sends before it has
    /// read its message never holds the credit its own send may wait for
    /// (endpoint.rs, "The credit rule"); what it reads afterwards is the same.
    ///
    /// ```no_run
    /// const WORK: u16 = 1;
    /// const DONE: u16 = 2;
    /// let fm = fm::Fm::builder()
    ///     .handler(WORK, "work", |m| {
    ///         let master = 0;
    ///         let next = (m.endpoint_ref().rank() + 1) % m.endpoint_ref().size() as u32;
    ///         m.endpoint().send(next, WORK, b"pass it on")?; // to anyone
    ///         m.endpoint().send(master, DONE, b"")?;
    ///         let _rest = m.receive_vec()?; // still intact
    ///         Ok(())
    ///     })
    ///     .handler(DONE, "done", |_| Ok(()))
    ///     .from_env()?
    ///     .build()?;
    /// # Ok::<(), fm::FmError>(())
    /// ```
    #[inline]
    pub fn endpoint(&mut self) -> &mut Endpoint {
        self.detach();
        self.ep
    }

    /// The endpoint, to read only (rank, size, counters, credits, MTUs):
    /// unlike [`Incoming::endpoint`] this copies nothing.
    pub fn endpoint_ref(&self) -> &Endpoint {
        self.ep
    }

    /// Send a whole message to `dest` from inside the handler (see
    /// [`Incoming::endpoint`]).
    #[inline]
    pub fn send(&mut self, dest: Rank, handler: u16, data: &[u8]) -> Result<()> {
        self.endpoint().send(dest, handler, data)
    }

    /// Send a whole message back to the sender of this one.
    #[inline]
    pub fn reply(&mut self, handler: u16, data: &[u8]) -> Result<()> {
        let src = self.src;
        self.send(src, handler, data)
    }

    /// The endpoint, for fm's own bookkeeping (no detach).
    pub(crate) fn ep_mut(&mut self) -> &mut Endpoint {
        self.ep
    }

    /// Stop holding anything a peer's progress may need: the unread rest of
    /// the current segment is copied aside (read from the sender, for a
    /// single-copy piece) and the packet released, its credit owed.
    #[inline]
    fn detach(&mut self) {
        if self.seg == Seg::None {
            return;
        }
        self.detach_segment();
    }

    #[cold]
    fn detach_segment(&mut self) {
        match self.seg {
            Seg::Device => {
                // SAFETY: off..end lies in the packet, valid until released below.
                let rest = unsafe {
                    std::slice::from_raw_parts(self.ptr.add(self.off), self.end - self.off)
                };
                self.owned = rest.to_vec();
            }
            Seg::Remote => {
                let mut rest = vec![0u8; self.end - self.off];
                let at = self.remote + self.off as u64;
                if self.ep.dev.remote_read(self.src, at, &mut rest).is_err() {
                    // Left in place: the handler's next receive reads it
                    // again and gets the error.
                    return;
                }
                self.owned = rest;
            }
            Seg::Stashed => {
                // Already a copy; but a credit withheld for it is held no longer.
                if std::mem::take(&mut self.stash_owes_credit) {
                    self.ep.owe_withheld(self.src);
                }
                return;
            }
            Seg::None => return,
        }
        self.release_segment();
        self.seg = Seg::Stashed;
        self.ptr = self.owned.as_ptr();
        self.end -= self.off;
        self.off = 0;
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
                if std::mem::take(&mut self.aborted) {
                    return Err(ErrorKind::Aborted { src: self.src }.into());
                }
                if let Some(received) = self.cut_short.take() {
                    let (src, len) = (self.src, self.len);
                    return Err(ErrorKind::CutShort { src, len, received }.into());
                }
                break;
            }
            got += self.copy_out(Some(&mut buf[got..want]), want - got)?;
        }
        Ok(got)
    }

    /// Run `f` on the rest of the message where it lies, if all of it is
    /// in the packet at hand (a message of one packet not yet read: most
    /// small ones), and count it received: no copy out first, and nothing
    /// of it is left to read. `None`, and `f` is not run, otherwise: read
    /// the message with [`Incoming::receive`] then.
    ///
    /// ```no_run
    /// let fm = fm::Fm::builder()
    ///     .handler(3, "sum", |m| {
    ///         let sum = match m.receive_in_place(|b| b.iter().map(|&x| x as u64).sum()) {
    ///             Some(sum) => sum,
    ///             None => m.receive_vec()?.iter().map(|&x| x as u64).sum::<u64>(),
    ///         };
    ///         println!("{sum}");
    ///         Ok(())
    ///     })
    ///     .from_env()?
    ///     .build()?;
    /// # Ok::<(), fm::FmError>(())
    /// ```
    #[inline]
    pub fn receive_in_place<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let k = self.end - self.off;
        if !matches!(self.seg, Seg::Device | Seg::Stashed) || k != self.len - self.done {
            return None;
        }
        // SAFETY: off..end lies in the packet (or its copy), valid until
        // the segment is released below.
        let r = f(unsafe { std::slice::from_raw_parts(self.ptr.add(self.off), k) });
        self.off = self.end;
        self.done += k;
        self.ep.stats.bytes_received += k as u64;
        self.release_segment();
        Some(r)
    }

    /// The rest of the message as a vector. The vector grows with the
    /// bytes that arrive (doubling, from at most 64 KiB): the length is the
    /// sender's claim, and a packet claiming 4 GiB must cost what really
    /// comes, not an allocation that aborts the process.
    pub fn receive_vec(&mut self) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(self.remaining().min(FIRST_CHUNK));
        self.receive_append(&mut v)?;
        Ok(v)
    }

    /// The rest of the message after `v`'s bytes, `v` growing as
    /// [`Incoming::receive_vec`]'s vector does (a buffer with room already
    /// is filled without allocating).
    pub(crate) fn receive_append(&mut self, v: &mut Vec<u8>) -> Result<()> {
        while self.remaining() > 0 {
            let at = v.len();
            let room = v.capacity() - at;
            let chunk = self.remaining().min(room.max(at).max(FIRST_CHUNK));
            v.resize(at + chunk, 0);
            let n = self.receive(&mut v[at..])?;
            v.truncate(at + n);
            if n < chunk {
                break;
            }
        }
        Ok(())
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
            let Some((p, h)) = self.ep.open_packet(p) else {
                continue;
            };
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
                    self.cut_short = Some(self.arrived);
                    self.done = self.len;
                    self.arrived = self.len;
                    return Ok(false);
                }
                _ if h.aborted() => {
                    self.ep.stats.messages_aborted += 1;
                    self.ep.release(p);
                    self.aborted = true;
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
            Packet::Stashed {
                bytes, owes_credit, ..
            } => {
                self.seg = Seg::Stashed;
                self.stash_owes_credit = owes_credit;
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
            Seg::Stashed if std::mem::take(&mut self.stash_owes_credit) => {
                self.ep.owe_withheld(self.src)
            }
            Seg::Stashed | Seg::None => {}
        }
    }
}
