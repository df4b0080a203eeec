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

pub struct SelfDevice {
    rank: Rank,
    memory: Box<[u8]>,
    free: Vec<u32>,
    ready: VecDeque<(u32, u32)>,
    stats: DeviceStats,
}

impl SelfDevice {
    pub fn open(rank: Rank) -> Self {
        SelfDevice {
            rank,
            memory: vec![0u8; SLOTS * MTU].into_boxed_slice(),
            free: (0..SLOTS as u32).rev().collect(),
            ready: VecDeque::with_capacity(SLOTS),
            stats: DeviceStats::default(),
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
        Ok(RawSend {
            ptr: self.slot_ptr(idx),
            cap: MTU,
            dest,
            token: idx as u64,
        })
    }

    #[inline]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        debug_assert!(len <= MTU);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.ready
            .push_back((buf.token as u32, len.min(MTU) as u32));
    }

    fn raw_abort(&mut self, buf: RawSend) {
        self.free.push(buf.token as u32);
    }

    #[inline(always)]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        let (idx, len) = self.ready.pop_front()?;
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
        self.free.push(token as u32);
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
}
