//! Topology files on arbitrary text: a topology (and its per-rank plans)
//! or an error naming the line, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fm_topology::fuzz::topology_file(data));
