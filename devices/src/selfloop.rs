//! The `self` device: loopback for packets a process sends to its own rank.
//!
//! A fixed pool of slots inside the process; sending queues a slot index,
//! receiving hands the slot out in place, releasing returns it to the pool.
//! No copies beyond the one the upper layer makes into the slot.

use crate::{
    Device, DeviceError, DeviceInfo, DeviceStats, Options, Rank, RawRecv, RawSend, CONTROL_RESERVE,
};
use std::collections::VecDeque;

const SLOTS: usize = 64;
const MTU: usize = 16 * 1024;

/// Where a slot is: a token moves a slot only from the state it was handed
/// out in, so a second release, a send after an abort or a made-up token
/// changes nothing (the slot's memory is never handed out twice).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    /// Handed out by `raw_send_buffer`.
    Filling,
    /// Sent, not yet received.
    Queued,
    /// Handed out by `raw_receive`.
    Lent,
}

pub struct SelfDevice {
    rank: Rank,
    memory: Box<[u8]>,
    slots: [Slot; SLOTS],
    free: Vec<u32>,
    ready: VecDeque<(u32, u32)>,
    stats: DeviceStats,
}

impl SelfDevice {
    pub fn open(rank: Rank) -> Self {
        SelfDevice {
            rank,
            memory: vec![0u8; SLOTS * MTU].into_boxed_slice(),
            slots: [Slot::Free; SLOTS],
            free: (0..SLOTS as u32).rev().collect(),
            ready: VecDeque::with_capacity(SLOTS),
            stats: DeviceStats::default(),
        }
    }

    /// Move slot `token` from `from` to `to`: false (and nothing moves)
    /// when the token names no slot in state `from`.
    #[inline(always)]
    fn step(&mut self, token: u64, from: Slot, to: Slot) -> bool {
        match self.slots.get_mut(token as usize) {
            Some(s) if *s == from => {
                *s = to;
                true
            }
            _ => false,
        }
    }

    fn slot_ptr(&mut self, idx: u32) -> *mut u8 {
        // SAFETY: idx < SLOTS, so the offset stays inside `memory`.
        unsafe { self.memory.as_mut_ptr().add(idx as usize * MTU) }
    }
}

impl Device for SelfDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "self",
            options: Options::RELIABLE | Options::ORDERED | Options::RECEIVES,
            mtu: MTU,
        }
    }

    fn reaches(&self, dest: Rank) -> bool {
        dest == self.rank
    }

    fn window(&self, _dest: Rank) -> u32 {
        SLOTS as u32 - CONTROL_RESERVE
    }

    #[inline]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        if dest != self.rank {
            return Err(DeviceError::NotAPeer {
                device: "self",
                dest,
            });
        }
        if len > MTU {
            return Err(DeviceError::TooLarge {
                device: "self",
                len,
                mtu: MTU,
            });
        }
        let Some(idx) = self.free.pop() else {
            self.stats.no_buffer += 1;
            return Err(DeviceError::NoBuffer {
                device: "self",
                dest,
            });
        };
        self.slots[idx as usize] = Slot::Filling;
        Ok(RawSend {
            ptr: self.slot_ptr(idx),
            cap: MTU,
            dest,
            token: idx as u64,
        })
    }

    #[inline]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        if !self.step(buf.token, Slot::Filling, Slot::Queued) {
            return;
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.ready
            .push_back((buf.token as u32, len.min(MTU) as u32));
    }

    fn raw_abort(&mut self, buf: RawSend) {
        if self.step(buf.token, Slot::Filling, Slot::Free) {
            self.free.push(buf.token as u32);
        }
    }

    #[inline(always)]
    fn has_arrivals(&self) -> bool {
        !self.ready.is_empty()
    }

    fn raw_receive(&mut self) -> Option<RawRecv> {
        let (idx, len) = self.ready.pop_front()?;
        self.slots[idx as usize] = Slot::Lent;
        self.stats.packets_received += 1;
        self.stats.bytes_received += len as u64;
        Some(RawRecv {
            src: self.rank,
            ptr: self.slot_ptr(idx),
            len: len as usize,
            token: idx as u64,
        })
    }

    #[inline(always)]
    fn raw_release(&mut self, token: u64) {
        if self.step(token, Slot::Lent, Slot::Free) {
            self.free.push(token as u32);
        }
    }

    fn stats(&self) -> DeviceStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceExt;

    #[test]
    fn loops_back_in_order_and_applies_back_pressure() {
        let mut d = SelfDevice::open(3);
        for i in 0..SLOTS as u8 {
            let mut b = d.get_send_buffer(3, 1).unwrap();
            b[0] = i;
            b.send();
        }
        assert!(matches!(
            d.get_send_buffer(3, 1),
            Err(DeviceError::NoBuffer { .. })
        ));
        for i in 0..SLOTS as u8 {
            let r = d.receive().unwrap();
            assert_eq!((r.src(), r[0]), (3, i));
        }
        assert!(d.receive().is_none());
        assert!(matches!(
            d.get_send_buffer(4, 1),
            Err(DeviceError::NotAPeer { .. })
        ));
    }

    /// A token used twice, or made up, moves no slot: no slot is handed
    /// out twice, and no memory outside the pool is touched.
    #[test]
    fn a_token_used_twice_or_made_up_changes_nothing() {
        let mut d = SelfDevice::open(0);
        let b = d.raw_send_buffer(0, 1).unwrap();
        let t = b.token;
        d.raw_send(b, 1);
        d.raw_send(
            RawSend {
                ptr: std::ptr::null_mut(),
                cap: 0,
                dest: 0,
                token: t,
            },
            1,
        );
        let r = d.raw_receive().unwrap();
        assert!(
            d.raw_receive().is_none(),
            "a second send of one slot was queued"
        );
        d.raw_release(r.token);
        d.raw_release(r.token);
        d.raw_release(SLOTS as u64 + 7);
        d.raw_abort(RawSend {
            ptr: std::ptr::null_mut(),
            cap: 0,
            dest: 0,
            token: t,
        });
        let mut seen = std::collections::HashSet::new();
        while let Ok(b) = d.raw_send_buffer(0, 1) {
            assert!(seen.insert(b.token), "slot {} handed out twice", b.token);
        }
        assert_eq!(seen.len(), SLOTS);
    }
}
