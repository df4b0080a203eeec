//! MPI datatypes as layouts: the blocks of bytes one element covers, in
//! the order the type map gives them (adjacent blocks merged), with the
//! type's size, lower bound and extent (MPI 3.1 §4.1). A derived type is
//! built by placing copies of older types; sending one packs its blocks
//! into a message, receiving unpacks them, and a type that is one block
//! as long as its extent moves as plain bytes.

/// One element's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// (offset from the element's start, length) of each block of data.
    pub blocks: Vec<(isize, usize)>,
    /// Bytes of data in one element.
    pub size: usize,
    pub lb: isize,
    pub extent: isize,
    /// Bounds of the data itself, ignoring `MPI_Type_create_resized`.
    pub true_lb: isize,
    pub true_ub: isize,
    /// `MPI_Type_commit` was called (predefined types are).
    pub committed: bool,
    /// The sizes of its basic elements in type-map order, as runs of
    /// (size, how many): what `MPI_Get_elements` counts.
    pub elements: Vec<(usize, u64)>,
    /// The largest alignment of the basic types in it: a type's extent is
    /// rounded up to it (MPI 3.1 §4.1's epsilon), so that an array of a
    /// struct type steps as the C struct's array does.
    pub align: usize,
}

impl Layout {
    /// A predefined type of `size` bytes.
    pub fn basic(size: usize) -> Layout {
        Layout {
            blocks: if size > 0 {
                vec![(0, size)]
            } else {
                Vec::new()
            },
            size,
            lb: 0,
            extent: size as isize,
            true_lb: 0,
            true_ub: size as isize,
            elements: if size > 0 {
                vec![(size, 1)]
            } else {
                Vec::new()
            },
            committed: true,
            align: if size.is_power_of_two() {
                size.min(16)
            } else {
                1
            },
        }
    }

    /// C's struct of a `first`-byte value and an `int` at `int_at` (a
    /// pair type: [`crate::abi::pair_type`]), its extent padded as C pads
    /// it (the alignment rounding of [`Layout::placed`]).
    pub fn pair(first: usize, int_at: isize) -> Layout {
        Layout {
            committed: true,
            ..Layout::placed([(0, &Layout::basic(first)), (int_at, &Layout::basic(4))])
        }
    }

    /// Copies of older layouts, each at a byte offset, in this order.
    pub fn placed<'a>(copies: impl IntoIterator<Item = (isize, &'a Layout)>) -> Layout {
        let mut l = Layout {
            blocks: Vec::new(),
            size: 0,
            lb: isize::MAX,
            extent: 0,
            true_lb: isize::MAX,
            true_ub: isize::MIN,
            elements: Vec::new(),
            committed: false,
            align: 1,
        };
        let mut ub = isize::MIN;
        for (at, old) in copies {
            l.align = l.align.max(old.align);
            for &(off, len) in &old.blocks {
                l.push(at + off, len);
            }
            for &(size, n) in &old.elements {
                match l.elements.last_mut() {
                    Some((s, k)) if *s == size => *k += n,
                    _ => l.elements.push((size, n)),
                }
            }
            l.size += old.size;
            l.lb = l.lb.min(at + old.lb);
            ub = ub.max(at + old.lb + old.extent);
            l.true_lb = l.true_lb.min(at + old.true_lb);
            l.true_ub = l.true_ub.max(at + old.true_ub);
        }
        if ub == isize::MIN {
            // No copies: an empty type.
            return Layout {
                committed: false,
                ..Layout::basic(0)
            };
        }
        let align = l.align as isize;
        l.extent = (ub - l.lb + align - 1) / align * align;
        l
    }

    fn push(&mut self, off: isize, len: usize) {
        if len == 0 {
            return;
        }
        match self.blocks.last_mut() {
            Some((o, l)) if *o + *l as isize == off => *l += len,
            _ => self.blocks.push((off, len)),
        }
    }

    /// `count` blocks of `blocklen` elements of `old`, the blocks
    /// `stride` bytes apart (`MPI_Type_create_hvector`).
    pub fn hvector(count: usize, blocklen: usize, stride: isize, old: &Layout) -> Layout {
        Layout::placed((0..count).flat_map(|i| {
            (0..blocklen).map(move |j| (i as isize * stride + j as isize * old.extent, old))
        }))
    }

    /// Blocks of `old` of the given lengths at the given byte offsets
    /// (`MPI_Type_create_hindexed`).
    pub fn hindexed(blocks: &[(usize, isize)], old: &Layout) -> Layout {
        Layout::placed(
            blocks
                .iter()
                .flat_map(|&(len, at)| (0..len).map(move |j| (at + j as isize * old.extent, old))),
        )
    }

    /// Blocks of different types (`MPI_Type_create_struct`).
    pub fn structure(blocks: &[(usize, isize, &Layout)]) -> Layout {
        Layout::placed(
            blocks.iter().flat_map(|&(len, at, old)| {
                (0..len).map(move |j| (at + j as isize * old.extent, old))
            }),
        )
    }

    /// The same data with another lower bound and extent.
    pub fn resized(old: &Layout, lb: isize, extent: isize) -> Layout {
        Layout {
            lb,
            extent,
            committed: false,
            ..old.clone()
        }
    }

    /// How many basic elements `bytes` bytes of data of this type hold
    /// (`MPI_Get_elements`): `None` when they end inside one.
    pub fn elements_in(&self, bytes: u64) -> Option<u64> {
        if self.size == 0 {
            return Some(0);
        }
        let per: u64 = self.elements.iter().map(|&(_, n)| n).sum();
        let mut n = bytes / self.size as u64 * per;
        let mut rest = bytes % self.size as u64;
        for &(size, k) in &self.elements {
            let size = size as u64;
            if rest >= size * k {
                rest -= size * k;
                n += k;
            } else {
                n += rest / size;
                rest %= size;
                break;
            }
        }
        (rest == 0).then_some(n)
    }

    /// The offset of its one block when an element is that block and
    /// elements follow each other without gaps: `count` elements are then
    /// `count * size` plain bytes from there.
    pub fn contiguous_at(&self) -> Option<isize> {
        match self.blocks.as_slice() {
            [] => Some(0),
            [(off, len)] if *len as isize == self.extent => Some(*off),
            _ => None,
        }
    }

    /// Append the data of `count` elements at `buf` to `out`.
    ///
    /// # Safety
    /// `buf` holds `count` elements of this layout.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        out.reserve(count * self.size);
        for i in 0..count as isize {
            let base = buf.offset(i * self.extent);
            for &(off, len) in &self.blocks {
                out.extend_from_slice(std::slice::from_raw_parts(base.offset(off), len));
            }
        }
    }

    /// Scatter `data` into up to `count` elements at `buf`, stopping where
    /// `data` ends. Returns the bytes taken.
    ///
    /// # Safety
    /// `buf` holds `count` writable elements of this layout.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) -> usize {
        let mut at = 0;
        for i in 0..count as isize {
            let base = buf.offset(i * self.extent);
            for &(off, len) in &self.blocks {
                let n = len.min(data.len() - at);
                std::ptr::copy_nonoverlapping(data[at..].as_ptr(), base.offset(off), n);
                at += n;
                if at == data.len() {
                    return at;
                }
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_of_ints_is_its_blocks_and_bounds() {
        let int = Layout::basic(4);
        // 3 blocks of 2 ints, 5 ints apart.
        let v = Layout::hvector(3, 2, 20, &int);
        assert_eq!(v.blocks, vec![(0, 8), (20, 8), (40, 8)]);
        assert_eq!((v.size, v.lb, v.extent), (24, 0, 48));
        assert_eq!(v.contiguous_at(), None);
        let c = Layout::hvector(4, 1, 4, &int);
        assert_eq!(
            (c.blocks.clone(), c.contiguous_at()),
            (vec![(0, 16)], Some(0))
        );
    }

    #[test]
    fn pack_then_unpack_is_the_identity_on_the_data() {
        let d = Layout::basic(8);
        let c = Layout::basic(1);
        // struct { char c; double d; } with C's padding, then resized.
        let s = Layout::structure(&[(1, 0, &c), (1, 8, &d)]);
        assert_eq!((s.size, s.extent, s.blocks.len()), (9, 16, 2));
        // { char; double; int }: 20 bytes of data and padding, 24 with the
        // struct's trailing padding.
        let i = Layout::basic(4);
        let t = Layout::structure(&[(1, 0, &c), (1, 8, &d), (1, 16, &i)]);
        assert_eq!((t.size, t.extent), (13, 24));
        let src: Vec<u8> = (0..48).collect();
        let mut packed = Vec::new();
        // SAFETY: 3 elements of 16 bytes.
        unsafe { s.pack(src.as_ptr(), 3, &mut packed) };
        assert_eq!(packed.len(), 27);
        assert_eq!(&packed[..9], &[0, 8, 9, 10, 11, 12, 13, 14, 15]);
        let mut back = vec![0xeeu8; 48];
        // SAFETY: 3 elements of 16 bytes.
        let n = unsafe { s.unpack(&packed, back.as_mut_ptr(), 3) };
        assert_eq!(n, 27);
        for (i, b) in back.iter().enumerate() {
            let data = i % 16 == 0 || i % 16 >= 8;
            assert_eq!(*b, if data { i as u8 } else { 0xee }, "byte {i}");
        }
        // Basic elements: 2 per element, and a partial one is none.
        assert_eq!(s.elements, vec![(1, 1), (8, 1)]);
        assert_eq!(s.elements_in(27), Some(6));
        assert_eq!(s.elements_in(28), Some(7));
        assert_eq!(s.elements_in(29), None);
        assert_eq!(s.elements_in(10), Some(3));
        let v = Layout::hvector(3, 2, 20, &i);
        assert_eq!(v.elements, vec![(4, 6)]);
        assert_eq!(v.elements_in(24 + 8), Some(8));
        assert_eq!(v.elements_in(24 + 6), None);
        let r = Layout::resized(&s, -4, 32);
        assert_eq!((r.lb, r.extent, r.true_lb, r.true_ub), (-4, 32, 0, 16));
    }
}
