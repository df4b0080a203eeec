//! Bytes as lowercase hexadecimal and back: for values that travel in
//! text that gives other characters a meaning (a PMI key-value space's
//! words, the host agent's rank list).

/// `bytes` as two lowercase hexadecimal digits each.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes `s` encodes, or `None` if it is not pairs of hexadecimal
/// digits.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    // Digit by digit: `u8::from_str_radix` would take a sign ("+1").
    let digit = |b: u8| (b as char).to_digit(16);
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    (b.chunks(2))
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_back_what_encode_wrote_and_refuses_the_rest() {
        for b in [&b""[..], b"\0", b"fm \xff;=\n"] {
            assert_eq!(decode(&encode(b)).as_deref(), Some(b));
        }
        for bad in ["0", "zz", "0g", "é0", "+1"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
