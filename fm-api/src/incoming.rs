//! A message being received, as its handler sees it: FM 2.x's `FM_receive`
//! in pieces (scatter), with messages larger than one packet streamed — the
//! handler starts on the first packet and each `receive` waits only for the
//! bytes it asks for.

use crate::endpoint::{Endpoint, Packet};
use crate::error::Result;
use crate::wire::{self, Header, Kind, HEADER};
use fm_devices::{Device, Rank};

enum Segment {
    /// Bytes `off..end` of a packet are still to be read.
    Packet { p: Packet, off: usize, end: usize },
    /// A piece left in the sender's memory: `len` bytes at `addr`, `off` read.
    Remote { addr: u64, len: usize, off: usize },
}

/// The message a handler is running for.
pub struct Incoming<'a> {
    ep: &'a mut Endpoint,
    src: Rank,
    handler: u16,
    len: usize,
    /// Bytes of the message delivered or skipped so far.
    done: usize,
    /// Bytes of the message that arrived in segments so far.
    arrived: usize,
    cur: Option<Segment>,
}

impl<'a> Incoming<'a> {
    /// Start with the message's first packet (already decoded as `h`).
    pub(crate) fn start(ep: &'a mut Endpoint, p: Packet, h: &Header) -> Self {
        let mut m = Incoming {
            src: p.src(),
            handler: h.handler,
            len: h.msg_len as usize,
            done: 0,
            arrived: 0,
            cur: None,
            ep,
        };
        m.take_segment(p, h);
        m
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

    /// FM_receive: copy the next `buf.len()` bytes of the message into `buf`
    /// (fewer at the end of the message); returns how many. Waits for
    /// packets that have not arrived yet.
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
    pub(crate) fn finish(mut self) -> Result<()> {
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
    fn copy_out(&mut self, dst: Option<&mut [u8]>, n: usize) -> Result<usize> {
        let src = self.src;
        let take = match self.cur.as_mut() {
            Some(Segment::Packet { p, off, end }) => {
                let k = n.min(*end - *off);
                if let Some(d) = dst {
                    d[..k].copy_from_slice(&p.bytes()[*off..*off + k]);
                }
                *off += k;
                k
            }
            Some(Segment::Remote { addr, len, off }) => {
                let k = n.min(*len - *off);
                if let Some(d) = dst {
                    self.ep
                        .dev
                        .remote_read(src, *addr + *off as u64, &mut d[..k])?;
                }
                *off += k;
                k
            }
            None => 0,
        };
        self.done += take;
        if take > 0 {
            self.ep.stats.bytes_received += take as u64;
        }
        Ok(take)
    }

    /// Make sure the current segment has unread bytes, pulling the next
    /// packet of this message if needed. `false` if the message is over.
    fn ensure_segment(&mut self) -> Result<bool> {
        loop {
            let exhausted = match &self.cur {
                Some(Segment::Packet { off, end, .. }) => off >= end,
                Some(Segment::Remote { len, off, .. }) => off >= len,
                None => true,
            };
            if !exhausted {
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
    fn take_segment(&mut self, p: Packet, h: &Header) {
        let room = self.len - self.arrived;
        match h.kind {
            Kind::Remote => {
                let Some((addr, len)) = wire::decode_remote(&p.bytes()[HEADER..]) else {
                    self.ep.drop_malformed(p, "bad single-copy descriptor");
                    return;
                };
                let len = (len as usize).min(room);
                self.ep.release(p);
                self.arrived += len;
                self.cur = Some(Segment::Remote { addr, len, off: 0 });
            }
            _ => {
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
                self.cur = Some(Segment::Packet {
                    p,
                    off: HEADER,
                    end: HEADER + n,
                });
            }
        }
    }

    fn release_segment(&mut self) {
        match self.cur.take() {
            Some(Segment::Packet { p, .. }) => self.ep.release(p),
            Some(Segment::Remote { .. }) => self.ep.send_fin(self.src),
            None => {}
        }
    }
}
