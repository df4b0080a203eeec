//! The settings file's fuzz target (`fm-api/fuzz`, `settings_file`), its
//! corpus replayed, with every seed also cut short at each byte and with
//! each byte in turn replaced by the characters TOML cares most about.

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("the corpus is in the repository")
        .flatten()
        .map(|e| std::fs::read(e.path()).expect("a corpus file"))
        .collect();
    assert!(!seeds.is_empty(), "empty corpus {}", dir.display());
    seeds
}

/// Each seed, each of its prefixes, and each single-byte replacement.
fn variants(seed: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let cuts = (0..seed.len()).map(|i| seed[..i].to_vec());
    let swaps = (0..seed.len()).flat_map(move |i| {
        [b'\n', b'=', b'"', b'[', 0x7f, 0xff]
            .into_iter()
            .map(move |b| {
                let mut v = seed.to_vec();
                v[i] = b;
                v
            })
    });
    std::iter::once(seed.to_vec()).chain(cuts).chain(swaps)
}

#[test]
fn the_settings_file_corpus_and_its_variants_never_panic() {
    let mut n = 0;
    for seed in corpus("settings_file") {
        for v in variants(&seed) {
            fm::config_file::fuzz_settings_file(&v);
            n += 1;
        }
    }
    assert!(n > 1000, "{n} inputs");
}
