//! The `FM_*` values' fuzz target (`fm-api/fuzz`, `fm_value`): every
//! setting with values at and beyond every kind of edge, and the corpus.
//! A test binary of its own: the target changes the environment.

const VALUES: &[&str] = &[
    "",
    " ",
    "0",
    "1",
    "-1",
    "18446744073709551616",
    "4294967296",
    "2147483648",
    "1e9",
    "0x10",
    "x",
    "auto",
    "none",
    "/",
    "/dev/zero",
    "a,b,,c",
    "self,shmem*99999999999",
    "é",
    "\u{7f}",
];

#[test]
fn every_fm_value_of_every_setting_is_read_or_refused_never_a_panic() {
    let count = fm::settings::all().count() as u8;
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for pick in 0..count {
        for v in VALUES {
            inputs.push([&[pick][..], v.as_bytes()].concat());
        }
    }
    inputs.extend(fm_tests::fuzz::corpus("fm-api", "fm_value"));
    for i in &inputs {
        fm::config::fuzz_fm_value(i);
    }
    assert!(inputs.len() > 500, "{} inputs", inputs.len());
}
