//! Any `FM_*` variable set to arbitrary text (the first byte picks the
//! setting): the configuration or an error naming the variable, never a
//! panic. It sets this process's environment: one input at a time.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fm::config::fuzz_fm_value(data));
