//! The GRM protocol decoder on arbitrary bytes: it must return a message or
//! an error, never panic, and whatever it accepts must encode back to the
//! same bytes (no two readings of one frame).
#![no_main]

use fm_grm::proto::{read_frame, Msg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Msg::decode(data) {
        assert_eq!(&m.encode()[4..], data);
    }
    // The same bytes as a stream: length prefix first.
    if let Ok(frame) = read_frame(&mut &data[..], fm_grm::proto::MAX_FRAME) {
        let _ = Msg::decode(&frame);
    }
});
