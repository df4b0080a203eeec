//! The reliable layer's datagram parser on arbitrary bytes: never panics,
//! and a datagram it accepts without a MAC is exactly what writing that
//! header over the same payload produces (one reading per datagram; a MAC
//! needs the job's key, which the MAC check itself covers).
#![no_main]

use fm_devices::reliable::header::{Header, HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse(data) {
        if !h.mac {
            let mut again = data.to_vec();
            again[..HEADER].fill(0);
            h.write(&mut again, None);
            assert_eq!(again, data);
        }
    }
});
