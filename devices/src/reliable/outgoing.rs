//! The protocol's datagrams out: what was decided is made into bytes when
//! polled, in the send slot itself for DATA.

use super::header::{seq_le, seq_lt, Header, Kind, CONTROL_LEN, HEADER};
use super::protocol::{HandedData, Intent, Protocol, Transmit};
use super::timers::earliest;
use crate::Rank;
use std::time::Instant;

impl Protocol {
    /// Something waits to be transmitted (then [`Protocol::poll_transmit`]).
    pub fn has_transmits(&self) -> bool {
        !self.intents.is_empty()
    }

    /// The next datagram to put on the link, sent at `now`; after a local
    /// failure to send it, [`Protocol::transmit_failed`].
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        self.handed = None;
        while let Some(&intent) = self.intents.front() {
            match intent {
                Intent::Window(dest) => {
                    // Stays queued while the window lets packets go.
                    let send = &mut self.sessions[dest as usize].send;
                    if let Some(seq) = send.next_to_transmit() {
                        send.sent = seq;
                        return Some(self.data(dest, seq, true, now));
                    }
                }
                Intent::Probe(dest, seq) => {
                    let send = &self.sessions[dest as usize].send;
                    // Unless acknowledged meanwhile: its slot may hold another packet.
                    if seq_lt(send.acked, seq) && seq_le(seq, send.last()) {
                        self.intents.pop_front();
                        return Some(self.data(dest, seq, false, now));
                    }
                }
                Intent::Control(dest, kind, number) => {
                    self.intents.pop_front();
                    return Some(self.control(dest, kind, number));
                }
                Intent::OwedAck(dest) => {
                    let recv = &self.sessions[dest as usize].recv;
                    if recv.ack_owed > 0 {
                        let k = recv.last_in_order();
                        self.intents.pop_front();
                        return Some(self.control(dest, Kind::Ack, k));
                    }
                }
            }
            self.intents.pop_front();
        }
        None
    }

    /// The datagram last handed out could not be sent (a local failure,
    /// such as a full socket buffer): DATA goes again by the timer.
    pub fn transmit_failed(&mut self) {
        self.rstats.link_errors += 1;
        let Some(d) = self.handed.take() else { return };
        if d.retransmit {
            self.rstats.retransmits -= 1;
        } else {
            self.rstats.data_sent -= 1;
        }
        if d.window {
            let send = &mut self.sessions[d.dest as usize].send;
            if send.sent == d.seq {
                send.sent = d.seq.wrapping_sub(1);
            }
            if self.intents.front() == Some(&Intent::Window(d.dest)) {
                self.intents.pop_front();
            }
        }
    }

    /// DATA `seq` to `dest`, carrying our cumulative ACK.
    fn data(&mut self, dest: Rank, seq: u32, window: bool, now: Instant) -> Transmit<'_> {
        let s = &mut self.sessions[dest as usize];
        let ack = s.recv.last_in_order();
        s.recv.acked();
        let slot = s.send.slot(seq);
        let retransmit = slot.sent_at.is_some();
        slot.resent |= retransmit;
        slot.sent_at = Some(now);
        let len = slot.len;
        Header {
            kind: Kind::Data,
            job_key: self.cfg.job_key.0,
            src: self.cfg.rank,
            dst: dest,
            src_epoch: self.cfg.epoch,
            dst_epoch: s.epoch.unwrap_or(0),
            number: seq,
            ack,
            len: len as u32,
            control: 0,
            payload_crc: self.cfg.payload_crc,
            mac: self.cfg.mac.is_some(),
        }
        .write(&mut slot.buf, self.cfg.mac.as_ref());
        if retransmit {
            self.rstats.retransmits += 1;
        } else {
            self.rstats.data_sent += 1;
        }
        self.handed = Some(HandedData {
            dest,
            seq,
            window,
            retransmit,
        });
        let at = s.arm_after_send(&self.cfg, now);
        self.next_timeout = earliest(self.next_timeout, at);
        Transmit {
            dest,
            datagram: &s.send.slot(seq).buf[..HEADER + len],
        }
    }

    /// A control packet (not retained: it is made again if needed). A
    /// LOSE, STOP or GO takes the next control number; an ACK, which is
    /// idempotent, carries the last.
    fn control(&mut self, dest: Rank, kind: Kind, number: u32) -> Transmit<'_> {
        let s = &mut self.sessions[dest as usize];
        if kind != Kind::Ack {
            s.control_sent = s.control_sent.wrapping_add(1);
        }
        Header {
            kind,
            job_key: self.cfg.job_key.0,
            src: self.cfg.rank,
            dst: dest,
            src_epoch: self.cfg.epoch,
            dst_epoch: s.epoch.unwrap_or(0),
            number,
            ack: s.recv.last_in_order(),
            len: CONTROL_LEN,
            control: s.control_sent,
            // Always covered: a control number bent by the wire must not
            // make the peer take later ones for replays.
            payload_crc: true,
            mac: self.cfg.mac.is_some(),
        }
        .write(&mut self.control, self.cfg.mac.as_ref());
        s.recv.acked();
        match kind {
            Kind::Ack => self.rstats.acks_sent += 1,
            Kind::Lose => self.rstats.loses_sent += 1,
            Kind::Stop => self.rstats.stops_sent += 1,
            Kind::Go => self.rstats.gos_sent += 1,
            Kind::Data => {}
        }
        Transmit {
            dest,
            datagram: &self.control,
        }
    }
}
