//! The host-file and topology-file fuzz targets (`topology/fuzz`), their
//! corpora replayed, with every seed also cut short at each byte and with
//! each byte in turn replaced by the characters the formats care about.

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

fn variants(seed: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let cuts = (0..seed.len()).map(|i| seed[..i].to_vec());
    let swaps = (0..seed.len()).flat_map(move |i| {
        [b'\n', b'=', b',', b':', b'"', b'9', 0x7f, 0xff]
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
fn the_host_file_corpus_and_its_variants_never_panic() {
    for seed in corpus("hostfile") {
        variants(&seed).for_each(|v| fm_topology::fuzz::hostfile(&v));
    }
}

#[test]
fn the_topology_file_corpus_and_its_variants_never_panic() {
    for seed in corpus("topology_file") {
        variants(&seed).for_each(|v| fm_topology::fuzz::topology_file(&v));
    }
}
