//! Helpers shared by the integration tests and the test program.

/// Deterministic bytes for message `seq` from `src` to `dst` (xorshift64*).
pub fn fill(buf: &mut [u8], src: u32, dst: u32, seq: u64) {
    let mut x = (src as u64) << 48 ^ (dst as u64) << 32 ^ seq ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A small deterministic generator for sizes and split points.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in 0..=max.
    pub fn upto(&mut self, max: u64) -> u64 {
        self.next_u64() % (max + 1)
    }
    /// Log-uniform size in 0..=max: every order of magnitude equally likely,
    /// with the end points 0 and max forced now and then.
    pub fn size(&mut self, max: u64) -> u64 {
        match self.upto(31) {
            0 => 0,
            1 => max,
            _ => {
                let bits = 64 - max.leading_zeros() as u64;
                let b = self.upto(bits);
                self.upto((1u64 << b).min(max))
            }
        }
    }
}

/// Environment for test processes: tracing to stderr at warn unless FM_LOG says otherwise.
pub fn init_tracing() {
    let filter = std::env::var("FM_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}
