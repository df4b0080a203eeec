//! The settings file (fm.toml) on arbitrary text: its settings or an
//! error naming the line and why, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fm::config_file::fuzz_settings_file(data));
