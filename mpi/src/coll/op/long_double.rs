//! C's `long double` on x86-64 for the reduction operations: the x87
//! 80-bit format in 16 bytes, added and multiplied by the x87 unit itself
//! (so that sums are exactly C's), ordered from its bits.

use super::Number;

/// An x87 extended-precision value (C's `long double` on x86-64), whose
/// arithmetic runs on the x87 unit itself, so that sums are exactly C's.
#[derive(Clone, Copy)]
pub(super) struct F80([u8; 16]);

impl F80 {
    /// `a + b` or `a * b` by the x87 unit.
    #[cfg(target_arch = "x86_64")]
    fn x87(self, o: F80, mul: bool) -> F80 {
        let mut out = F80([0; 16]);
        macro_rules! x87 {
            ($op:literal) => {
                std::arch::asm!(
                    "fld tbyte ptr [{a}]",
                    "fld tbyte ptr [{b}]",
                    $op,
                    "fstp tbyte ptr [{out}]",
                    a = in(reg) self.0.as_ptr(),
                    b = in(reg) o.0.as_ptr(),
                    out = in(reg) out.0.as_mut_ptr(),
                    out("st(0)") _, out("st(1)") _,
                    options(nostack),
                )
            };
        }
        // SAFETY: the three pointers are to 16-byte values of ours; the
        // sequence leaves the x87 stack as it found it.
        unsafe {
            if mul {
                x87!("fmulp st(1), st");
            } else {
                x87!("faddp st(1), st");
            }
        }
        out
    }

    /// Elsewhere `long double` is not this format: through `f64`.
    #[cfg(not(target_arch = "x86_64"))]
    fn x87(self, o: F80, mul: bool) -> F80 {
        let (a, b) = (self.to_f64(), o.to_f64());
        F80::from_f64(if mul { a * b } else { a + b })
    }

    /// The value as an `f64` (rounded).
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub(super) fn to_f64(self) -> f64 {
        let mant = u64::from_le_bytes(self.0[..8].try_into().unwrap_or([0; 8]));
        let se = u16::from_le_bytes([self.0[8], self.0[9]]);
        let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exp = i32::from(se & 0x7fff);
        if exp == 0 && mant == 0 {
            return 0.0 * sign;
        }
        if exp == 0x7fff {
            return if mant << 1 == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        sign * (mant as f64) * 2f64.powi(exp - 16383 - 63)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn from_f64(v: f64) -> F80 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&v.to_le_bytes());
        F80(b)
    }

    /// The order of two x87 values from their bits: sign, then exponent
    /// and mantissa as one unsigned number (the format is sign-magnitude
    /// with an explicit integer bit).
    fn key(self) -> (bool, u128) {
        let mant = u64::from_le_bytes(self.0[..8].try_into().unwrap_or([0; 8]));
        let se = u16::from_le_bytes([self.0[8], self.0[9]]);
        let mag = (u128::from(se & 0x7fff) << 64) | u128::from(mant);
        (se & 0x8000 != 0 && mag != 0, mag)
    }
}

impl Number for F80 {
    const SIZE: usize = 16;
    fn get(b: &[u8]) -> Self {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        F80(a)
    }
    fn put(self, b: &mut [u8]) {
        // The six padding bytes are left as the caller's.
        b[..10].copy_from_slice(&self.0[..10]);
    }
    fn add(self, o: Self) -> Self {
        self.x87(o, false)
    }
    fn mul(self, o: Self) -> Self {
        self.x87(o, true)
    }
    fn neg(mut self) -> Self {
        self.0[9] ^= 0x80; // the sign bit
        self
    }
    fn lt(self, o: Self) -> bool {
        let ((sa, ma), (sb, mb)) = (self.key(), o.key());
        match (sa, sb) {
            (true, false) => true,
            (false, true) => false,
            (false, false) => ma < mb,
            (true, true) => ma > mb,
        }
    }
    fn is_true(self) -> bool {
        self.key().1 != 0
    }
    fn truth(t: bool) -> Self {
        let mut b = [0u8; 16];
        if t {
            // 1.0: integer bit set, exponent the bias.
            b[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
            b[8..10].copy_from_slice(&16383u16.to_le_bytes());
        }
        F80(b)
    }
}
