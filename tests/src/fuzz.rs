//! Replaying the fuzz targets' corpora in `cargo test`: each seed as it
//! is, cut short at every byte, and with every byte in turn replaced by
//! characters the text formats care about.

use std::path::{Path, PathBuf};

/// The seeds of fuzz target `target` of crate folder `krate` (`topology`,
/// `fm-api`), from the repository; never empty.
pub fn corpus(krate: &str, target: &str) -> Vec<Vec<u8>> {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("fuzz/corpus")
        .join(target);
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus {} is in the repository: {e}", dir.display()))
        .flatten()
        .map(|e| std::fs::read(e.path()).expect("a corpus file"))
        .collect();
    assert!(!seeds.is_empty(), "empty corpus {}", dir.display());
    seeds
}

/// The seed, each of its prefixes, and each single-byte replacement by
/// one of `swaps`.
pub fn variants<'a>(seed: &'a [u8], swaps: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
    let cuts = (0..seed.len()).map(|i| seed[..i].to_vec());
    let swapped = (0..seed.len()).flat_map(move |i| {
        swaps.iter().map(move |&b| {
            let mut v = seed.to_vec();
            v[i] = b;
            v
        })
    });
    std::iter::once(seed.to_vec()).chain(cuts).chain(swapped)
}
