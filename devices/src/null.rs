//! The NULL transport of HPVM 1.9: the inter-host device that reaches nobody.
//!
//! With it a job runs on one workstation on shared memory alone; any packet
//! for a rank on another host fails with [`DeviceError::NoRoute`] naming the
//! rank and its host.

use crate::{Device, DeviceError, DeviceInfo, Options, Rank, RawRecv, RawSend};

pub struct NullDevice {
    /// Host name of every rank (for the error message).
    hosts: Vec<String>,
}

impl NullDevice {
    pub fn open(hosts: Vec<String>) -> Self {
        NullDevice { hosts }
    }
}

impl Device for NullDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "null",
            options: Options::default(),
            mtu: 0,
        }
    }

    fn reaches(&self, _dest: Rank) -> bool {
        false
    }

    fn window(&self, _dest: Rank) -> u32 {
        0
    }

    fn raw_send_buffer(&mut self, dest: Rank, _len: usize) -> Result<RawSend, DeviceError> {
        Err(DeviceError::NoRoute {
            device: "null",
            dest,
            host: self
                .hosts
                .get(dest as usize)
                .cloned()
                .unwrap_or_else(|| "?".to_string()),
        })
    }

    fn raw_send(&mut self, _buf: RawSend, _len: usize) {
        unreachable!("null never hands out send buffers")
    }

    fn raw_abort(&mut self, _buf: RawSend) {}

    fn raw_receive(&mut self) -> Option<RawRecv> {
        None
    }

    fn has_arrivals(&self) -> bool {
        false
    }

    fn raw_release(&mut self, _token: u64) {}
}
