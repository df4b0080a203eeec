//! The text parsers' fuzz targets — host files and `--hosts` lists,
//! topology files (`topology/fuzz`), the settings file (`fm-api/fuzz`) —
//! their corpora and every seed's variants (`fm_tests::fuzz`).

use fm_tests::fuzz::{corpus, variants};

/// What TOML, host files and host lists are made of, and bytes they refuse.
const SWAPS: &[u8] = b"\n=,:\"[9\x7f\xff";

#[test]
fn the_host_file_corpus_and_its_variants_never_panic() {
    for seed in corpus("topology", "hostfile") {
        variants(&seed, SWAPS).for_each(|v| fm_topology::fuzz::hostfile(&v));
    }
}

#[test]
fn the_topology_file_corpus_and_its_variants_never_panic() {
    for seed in corpus("topology", "topology_file") {
        variants(&seed, SWAPS).for_each(|v| fm_topology::fuzz::topology_file(&v));
    }
}

#[test]
fn the_settings_file_corpus_and_its_variants_never_panic() {
    let mut n = 0;
    for seed in corpus("fm-api", "settings_file") {
        for v in variants(&seed, SWAPS) {
            fm::config_file::fuzz_settings_file(&v);
            n += 1;
        }
    }
    assert!(n > 1000, "{n} inputs");
}
