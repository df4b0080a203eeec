//! external32 (MPI-4.0 §14.5.2), the representation `MPI_Pack_external`
//! writes for another MPI, whatever its machine: every basic element
//! big-endian, in the sizes of Table 14.2. A layout's elements
//! ([`Basic`]) say how each is converted; the data is packed as usual
//! first, then converted element by element (and the other way round).

use crate::datatype::{Basic, External, Layout};

impl Layout {
    /// The bytes `count` elements take in external32 (`None` past an
    /// address).
    pub fn external_size(&self, count: usize) -> Option<usize> {
        let one = (self.elements.iter()).try_fold(0usize, |sum, &(b, n)| {
            usize::try_from(n)
                .ok()
                .and_then(|n| n.checked_mul(b.external_size()))
                .and_then(|bytes| sum.checked_add(bytes))
        })?;
        one.checked_mul(count)
    }

    /// Append `count` elements at `buf` to `out` in external32.
    ///
    /// # Safety
    /// `buf` holds `count` elements of this layout.
    pub unsafe fn pack_external(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        let mut native = Vec::new();
        self.pack(buf, count, &mut native);
        let mut at = 0;
        for _ in 0..count {
            for &(b, n) in &self.elements {
                for _ in 0..n {
                    to_external(b, &native[at..at + b.size], out);
                    at += b.size;
                }
            }
        }
    }

    /// Read `count` elements from external32 `data` into `buf`, stopping
    /// where `data` ends (a partial element is not written). Returns the
    /// bytes of `data` taken.
    ///
    /// # Safety
    /// `buf` holds `count` writable elements of this layout.
    pub unsafe fn unpack_external(&self, data: &[u8], buf: *mut u8, count: usize) -> usize {
        let mut native = Vec::new();
        let mut at = 0;
        'elements: for _ in 0..count {
            for &(b, n) in &self.elements {
                for _ in 0..n {
                    let Some(ext) = data.get(at..at + b.external_size()) else {
                        break 'elements;
                    };
                    from_external(b, ext, &mut native);
                    at += ext.len();
                }
            }
        }
        self.unpack(&native, buf, count);
        at
    }
}

/// One element's `native` bytes (little-endian x86-64), in external32.
fn to_external(b: Basic, native: &[u8], out: &mut Vec<u8>) {
    match b.external {
        External::Swapped { unit } => {
            for part in native.chunks(unit) {
                out.extend(part.iter().rev());
            }
        }
        External::Int { size, .. } => out.extend(native[..size].iter().rev()),
        External::Quad => {
            for part in native.chunks(16) {
                out.extend_from_slice(&x87_to_quad(part).to_be_bytes());
            }
        }
    }
}

/// One element's external32 bytes `ext`, as this machine holds it.
fn from_external(b: Basic, ext: &[u8], out: &mut Vec<u8>) {
    match b.external {
        External::Swapped { unit } => {
            for part in ext.chunks(unit) {
                out.extend(part.iter().rev());
            }
        }
        External::Int { size, signed } => {
            let negative = signed && ext.first().is_some_and(|&top| top & 0x80 != 0);
            out.extend(ext.iter().rev());
            let fill = if negative { 0xff } else { 0 };
            out.extend(std::iter::repeat_n(fill, b.size - size));
        }
        External::Quad => {
            for part in ext.chunks(16) {
                let mut q = [0u8; 16];
                q.copy_from_slice(part);
                out.extend_from_slice(&quad_to_x87(u128::from_be_bytes(q)));
            }
        }
    }
}

/// x87's 80-bit extended number (in 16 bytes: the 64-bit significand with
/// its explicit integer bit, then sign and 15-bit exponent) as binary128:
/// the same sign and biased exponent, the fraction widened.
fn x87_to_quad(x: &[u8]) -> u128 {
    let mut m = [0u8; 8];
    m.copy_from_slice(&x[..8]);
    let significand = u64::from_le_bytes(m);
    let sign_exp = u16::from_le_bytes([x[8], x[9]]);
    let fraction = u128::from(significand & (u64::MAX >> 1)) << 49;
    (u128::from(sign_exp) << 112) | fraction
}

/// [`x87_to_quad`] the other way: the fraction's top 63 bits, the integer
/// bit set for every exponent but zero's.
fn quad_to_x87(q: u128) -> [u8; 16] {
    let sign_exp = (q >> 112) as u16;
    let integer = u64::from(sign_exp & 0x7fff != 0) << 63;
    let significand = integer | ((q >> 49) as u64 & (u64::MAX >> 1));
    let mut x = [0u8; 16];
    x[..8].copy_from_slice(&significand.to_le_bytes());
    x[8..10].copy_from_slice(&sign_exp.to_le_bytes());
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(size: usize, external: External) -> Basic {
        Basic { size, external }
    }

    #[test]
    fn elements_are_written_as_mpich_writes_them() {
        let mut out = Vec::new();
        let long = basic(
            8,
            External::Int {
                size: 4,
                signed: true,
            },
        );
        to_external(long, &(-2i64).to_le_bytes(), &mut out);
        assert_eq!(out, [0xff, 0xff, 0xff, 0xfe]);
        let mut back = Vec::new();
        from_external(long, &out, &mut back);
        assert_eq!(back, (-2i64).to_le_bytes());
        let ulong = basic(
            8,
            External::Int {
                size: 4,
                signed: false,
            },
        );
        back.clear();
        from_external(ulong, &out, &mut back);
        assert_eq!(back, 4_294_967_294u64.to_le_bytes());

        // 1.0 + 2.0i as two big-endian floats.
        out.clear();
        let c = [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
        to_external(basic(8, External::Swapped { unit: 4 }), &c, &mut out);
        assert_eq!(out, [0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]);
    }

    #[test]
    fn long_double_is_binary128_both_ways() {
        // 1.0L on x87: significand 1 << 63, exponent 0x3fff.
        let mut one = [0u8; 16];
        one[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
        one[8..10].copy_from_slice(&0x3fffu16.to_le_bytes());
        let q = x87_to_quad(&one);
        assert_eq!(q.to_be_bytes()[..2], [0x3f, 0xff]);
        assert!(q.to_be_bytes()[2..].iter().all(|&b| b == 0));
        assert_eq!(quad_to_x87(q), one);
        // -3.25: 1.625 * 2^1, negative.
        let mut x = [0u8; 16];
        x[..8].copy_from_slice(&(0b1101u64 << 60).to_le_bytes());
        x[8..10].copy_from_slice(&(0x8000u16 | 0x4000).to_le_bytes());
        assert_eq!(quad_to_x87(x87_to_quad(&x)), x);
        // Zero keeps its integer bit clear.
        assert_eq!(quad_to_x87(x87_to_quad(&[0; 16])), [0; 16]);
    }

    #[test]
    fn a_layout_round_trips_and_counts_its_external_bytes() {
        // A char, then a long 8 bytes on: 12 bytes in external32 each.
        let c = Layout::basic(1);
        let mut long = Layout::basic(8);
        long.elements[0].0.external = External::Int {
            size: 4,
            signed: true,
        };
        let s = Layout::structure(&[(1, 0, &c), (1, 8, &long)]).expect("a struct");
        assert_eq!(s.external_size(3), Some(3 * 5));
        let mut data = [0u8; 48];
        for (i, v) in [-7i64, 1 << 20, 42].iter().enumerate() {
            data[i * 16] = b'a' + i as u8;
            data[i * 16 + 8..i * 16 + 16].copy_from_slice(&v.to_le_bytes());
        }
        let mut ext = Vec::new();
        // SAFETY: 3 elements of 16 bytes.
        unsafe { s.pack_external(data.as_ptr(), 3, &mut ext) };
        assert_eq!(ext.len(), 15);
        assert_eq!(&ext[..5], &[b'a', 0xff, 0xff, 0xff, 0xf9]);
        let mut back = [0u8; 48];
        // SAFETY: 3 elements of 16 bytes.
        let taken = unsafe { s.unpack_external(&ext, back.as_mut_ptr(), 3) };
        assert_eq!(taken, 15);
        for i in 0..3 {
            assert_eq!(back[i * 16], data[i * 16]);
            assert_eq!(back[i * 16 + 8..i * 16 + 16], data[i * 16 + 8..i * 16 + 16]);
        }
    }
}
