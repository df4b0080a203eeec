//! Host files and `--hosts` lists on arbitrary text: a list of hosts or an
//! error naming the line, never a panic; placing ranks on what was
//! accepted never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fm_topology::fuzz::hostfile(data));
