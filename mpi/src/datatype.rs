//! MPI datatypes as layouts: the blocks of bytes one element covers, in
//! the order the type map gives them (adjacent blocks merged), with the
//! type's size, lower bound and extent (MPI 3.1 §4.1). A derived type is
//! built by placing copies of older types; sending one packs its blocks
//! into a message, receiving unpacks them, and a type that is one block
//! as long as its extent moves as plain bytes.

/// Blocks (and copies of types that are not one block) a datatype may be
/// built from. fm keeps a type's blocks as a list, so a type of more is
/// refused with a clear error instead of taking minutes or all memory to
/// build (a vector of `INT_MAX` blocks of `INT_MAX` doubles, say).
pub const MAX_BLOCKS: u64 = 1 << 24;

/// Why a datatype is not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// More than [`MAX_BLOCKS`] blocks.
    Blocks,
    /// Its bounds, extent or size do not fit an address.
    Bounds,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Blocks => write!(
                f,
                "the datatype has more than {MAX_BLOCKS} separate blocks, the most fm's MPI builds one of"
            ),
            Refused::Bounds => f.write_str("the datatype's bounds, extent or size do not fit an address"),
        }
    }
}

fn within_steps(steps: u64) -> Result<(), Refused> {
    match steps > MAX_BLOCKS {
        true => Err(Refused::Blocks),
        false => Ok(()),
    }
}

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
    /// Its basic elements in type-map order, as runs of (element, how
    /// many): what `MPI_Get_elements` counts and external32 converts.
    pub elements: Vec<(Basic, u64)>,
    /// The largest alignment of the basic types in it: a type's extent is
    /// rounded up to it (MPI 3.1 §4.1's epsilon), so that an array of a
    /// struct type steps as the C struct's array does.
    pub align: usize,
    /// The one predefined datatype all its data is made of, if there is
    /// one: what the predefined reduction operations work on.
    pub base: Option<i32>,
}

/// A basic element: its size here, and how external32 writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Basic {
    pub size: usize,
    pub external: External,
}

/// How external32 (MPI-4.0 §14.5.2) writes a basic element: big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum External {
    /// Its bytes reversed `unit` at a time (a complex number's parts
    /// apart; 1 for bytes and characters).
    Swapped { unit: usize },
    /// An integer in `size` bytes there, cut or extended (C's `long` is 4
    /// bytes in external32, `wchar_t` 2).
    Int { size: usize, signed: bool },
    /// x87's 80-bit `long double` (16 bytes here) as IEEE binary128, each
    /// part of a complex number apart.
    Quad,
}

impl Basic {
    /// An element of `size` bytes written as its bytes reversed.
    pub fn swapped(size: usize) -> Basic {
        Basic {
            size,
            external: External::Swapped { unit: size.max(1) },
        }
    }

    /// Its size in external32.
    pub fn external_size(&self) -> usize {
        match self.external {
            External::Int { size, .. } => size,
            External::Swapped { .. } | External::Quad => self.size,
        }
    }
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
                vec![(Basic::swapped(size), 1)]
            } else {
                Vec::new()
            },
            committed: true,
            align: if size.is_power_of_two() {
                size.min(16)
            } else {
                1
            },
            base: None,
        }
    }

    /// Predefined datatype `handle`, of this layout.
    pub fn of_predefined(self, handle: i32) -> Layout {
        Layout {
            base: Some(handle),
            ..self
        }
    }

    /// C's struct of a `first`-byte value and an `int` at `int_at` (a
    /// pair type: [`crate::abi::pair_type`]), its extent padded as C pads
    /// it (the alignment rounding of [`Layout::placed`]).
    pub fn pair(first: usize, int_at: isize) -> Layout {
        let copies = [
            (0, &Layout::basic(first), 1),
            (int_at as i128, &Layout::basic(4), 1),
        ];
        Layout {
            committed: true,
            ..Layout::placed(copies).expect("a value and an int: two blocks, small bounds")
        }
    }

    /// Whether an element is one block exactly as long as its extent, so
    /// that copies of it one after another are one block.
    fn dense(&self) -> bool {
        matches!(self.blocks.as_slice(), [(_, len)] if *len as isize == self.extent)
    }

    /// What placing `reps` copies of this layout costs against
    /// [`MAX_BLOCKS`]: one block for a contiguous run, else a step per
    /// block per copy (and per copy of a type without data).
    fn run_steps(&self, reps: usize) -> u64 {
        match reps {
            0 => 0,
            _ if self.dense() && self.extent > 0 => 1,
            _ => (reps as u64).saturating_mul(self.blocks.len().max(1) as u64),
        }
    }

    /// Refused at once if runs of copies would take more than
    /// [`MAX_BLOCKS`] steps in all (not after building that many).
    fn check_steps<'a>(runs: impl Iterator<Item = (&'a Layout, usize)>) -> Result<(), Refused> {
        let steps = runs.fold(0u64, |n, (old, reps)| n.saturating_add(old.run_steps(reps)));
        within_steps(steps)
    }

    /// Runs of copies of older layouts, in this order: `(at, old, reps)`
    /// is `reps` copies of `old`, the first at byte offset `at`, each
    /// `old.extent` after the one before. Offsets are `i128`, so that the
    /// callers' products of counts, strides and extents cannot overflow;
    /// a type whose bounds or size do not fit, or with more than
    /// [`MAX_BLOCKS`] blocks, is refused before it is built.
    pub fn placed<'a>(
        copies: impl IntoIterator<Item = (i128, &'a Layout, usize)>,
    ) -> Result<Layout, Refused> {
        let mut l = Layout {
            blocks: Vec::new(),
            size: 0,
            lb: 0,
            extent: 0,
            true_lb: 0,
            true_ub: 0,
            elements: Vec::new(),
            committed: false,
            align: 1,
            base: None,
        };
        // The base all copies with data share (`None` inside: they differ).
        let mut base: Option<Option<i32>> = None;
        let (mut lb, mut ub) = (i128::MAX, i128::MIN);
        let (mut true_lb, mut true_ub) = (i128::MAX, i128::MIN);
        let mut steps = 0u64;
        for (at, old, reps) in copies {
            if reps == 0 {
                continue;
            }
            l.align = l.align.max(old.align);
            if old.size > 0 {
                base = match base {
                    None => Some(old.base),
                    Some(b) if b == old.base => Some(b),
                    Some(_) => Some(None),
                };
            }
            let ext = old.extent as i128;
            let last = at + (reps as i128 - 1) * ext;
            let (lo, hi) = (at.min(last), at.max(last));
            lb = lb.min(lo + old.lb as i128);
            ub = ub.max(hi + old.lb as i128 + ext);
            true_lb = true_lb.min(lo + old.true_lb as i128);
            true_ub = true_ub.max(hi + old.true_ub as i128);
            if true_lb < isize::MIN as i128 || true_ub > isize::MAX as i128 {
                return Err(Refused::Bounds);
            }
            l.size = (old.size.checked_mul(reps))
                .and_then(|n| l.size.checked_add(n))
                .filter(|&n| n <= isize::MAX as usize)
                .ok_or(Refused::Bounds)?;
            for &(basic, n) in &old.elements {
                let n = n.checked_mul(reps as u64).ok_or(Refused::Bounds)?;
                match l.elements.last_mut() {
                    Some((b, k)) if *b == basic => *k += n,
                    _ => l.elements.push((basic, n)),
                }
            }
            steps = steps.saturating_add(old.run_steps(reps));
            within_steps(steps)?;
            if old.dense() && ext > 0 {
                // One block however many copies (a contiguous run).
                let (off, len) = old.blocks[0];
                l.push((at + off as i128) as isize, len * reps);
            } else {
                for j in 0..reps as i128 {
                    for &(off, len) in &old.blocks {
                        l.push((at + j * ext + off as i128) as isize, len);
                    }
                }
            }
        }
        if ub == i128::MIN {
            // No copies: an empty type.
            return Ok(Layout {
                committed: false,
                ..Layout::basic(0)
            });
        }
        l.base = base.flatten();
        let align = l.align as i128;
        let extent = (ub - lb + align - 1).div_euclid(align) * align;
        let fits = |v: i128| isize::try_from(v).map_err(|_| Refused::Bounds);
        (l.lb, l.extent) = (fits(lb)?, fits(extent)?);
        (l.true_lb, l.true_ub) = (fits(true_lb)?, fits(true_ub)?);
        Ok(l)
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
    pub fn hvector(
        count: usize,
        blocklen: usize,
        stride: i128,
        old: &Layout,
    ) -> Result<Layout, Refused> {
        if stride == blocklen as i128 * old.extent as i128 {
            // The blocks follow each other: one run (a contiguous type).
            let reps = count.checked_mul(blocklen).ok_or(Refused::Bounds)?;
            return Layout::placed([(0, old, reps)]);
        }
        if old.blocks.is_empty() || blocklen == 0 {
            // No data: only the first and the last block's bounds count.
            let ends = [0, count.saturating_sub(1)];
            let ends = &ends[..count.min(2)];
            return Layout::placed(ends.iter().map(|&i| (i as i128 * stride, old, blocklen)));
        }
        within_steps((count as u64).saturating_mul(old.run_steps(blocklen)))?;
        Layout::placed((0..count).map(|i| (i as i128 * stride, old, blocklen)))
    }

    /// Blocks of `old` of the given lengths at the given byte offsets
    /// (`MPI_Type_create_hindexed`).
    pub fn hindexed(blocks: &[(usize, i128)], old: &Layout) -> Result<Layout, Refused> {
        Layout::check_steps(blocks.iter().map(|&(len, _)| (old, len)))?;
        Layout::placed(blocks.iter().map(|&(len, at)| (at, old, len)))
    }

    /// Blocks of different types (`MPI_Type_create_struct`).
    pub fn structure(blocks: &[(usize, i128, &Layout)]) -> Result<Layout, Refused> {
        Layout::check_steps(blocks.iter().map(|&(len, _, old)| (old, len)))?;
        Layout::placed(blocks.iter().map(|&(len, at, old)| (at, old, len)))
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
        for &(basic, k) in &self.elements {
            let size = basic.size as u64;
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
    ///
    /// Addresses are computed with wrapping arithmetic: with `MPI_BOTTOM`
    /// (a null `buf`) the blocks' offsets are absolute addresses, and an
    /// offset from null would let the compiler assume the result is null.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        out.reserve(count * self.size);
        // Elements one after another without gaps: one copy, not one per
        // element (a predefined type's million bytes were a million
        // copies of one byte each).
        if let Some(at) = self.contiguous_at() {
            out.extend_from_slice(crate::engine::slice_or_empty(
                buf.wrapping_offset(at),
                count * self.size,
            ));
            return;
        }
        for i in 0..count as isize {
            let base = buf.wrapping_offset(i * self.extent);
            for &(off, len) in &self.blocks {
                // A block of no bytes may sit at a null address (MPI_BOTTOM).
                out.extend_from_slice(crate::engine::slice_or_empty(
                    base.wrapping_offset(off),
                    len,
                ));
            }
        }
    }

    /// Scatter `data` into up to `count` elements at `buf`, stopping where
    /// `data` ends. Returns the bytes taken.
    ///
    /// # Safety
    /// `buf` holds `count` writable elements of this layout.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) -> usize {
        // As in `pack`: contiguous elements are one copy.
        if let Some(at) = self.contiguous_at() {
            let n = (count * self.size).min(data.len());
            if n > 0 {
                std::ptr::copy_nonoverlapping(data.as_ptr(), buf.wrapping_offset(at), n);
            }
            return n;
        }
        let mut at = 0;
        for i in 0..count as isize {
            let base = buf.wrapping_offset(i * self.extent);
            for &(off, len) in &self.blocks {
                let n = len.min(data.len() - at);
                if n > 0 {
                    std::ptr::copy_nonoverlapping(
                        data[at..].as_ptr(),
                        base.wrapping_offset(off),
                        n,
                    );
                }
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

    /// A layout's runs of basic elements by their sizes.
    fn sizes(l: &Layout) -> Vec<(usize, u64)> {
        l.elements.iter().map(|&(b, n)| (b.size, n)).collect()
    }

    #[test]
    fn a_vector_of_ints_is_its_blocks_and_bounds() {
        let int = Layout::basic(4);
        // 3 blocks of 2 ints, 5 ints apart.
        let v = Layout::hvector(3, 2, 20, &int).unwrap();
        assert_eq!(v.blocks, vec![(0, 8), (20, 8), (40, 8)]);
        assert_eq!((v.size, v.lb, v.extent), (24, 0, 48));
        assert_eq!(v.contiguous_at(), None);
        let c = Layout::hvector(4, 1, 4, &int).unwrap();
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
        let s = Layout::structure(&[(1, 0, &c), (1, 8, &d)]).unwrap();
        assert_eq!((s.size, s.extent, s.blocks.len()), (9, 16, 2));
        // { char; double; int }: 20 bytes of data and padding, 24 with the
        // struct's trailing padding.
        let i = Layout::basic(4);
        let t = Layout::structure(&[(1, 0, &c), (1, 8, &d), (1, 16, &i)]).unwrap();
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
        assert_eq!(sizes(&s), vec![(1, 1), (8, 1)]);
        assert_eq!(s.elements_in(27), Some(6));
        assert_eq!(s.elements_in(28), Some(7));
        assert_eq!(s.elements_in(29), None);
        assert_eq!(s.elements_in(10), Some(3));
        let v = Layout::hvector(3, 2, 20, &i).unwrap();
        assert_eq!(sizes(&v), vec![(4, 6)]);
        assert_eq!(v.elements_in(24 + 8), Some(8));
        assert_eq!(v.elements_in(24 + 6), None);
        let r = Layout::resized(&s, -4, 32);
        assert_eq!((r.lb, r.extent, r.true_lb, r.true_ub), (-4, 32, 0, 16));
    }

    /// Huge types are refused at once or built as runs, never expanded
    /// copy by copy (a vector of INT_MAX blocks of INT_MAX doubles hung
    /// `MPI_Type_vector` before).
    #[test]
    fn huge_types_are_refused_or_built_as_runs_at_once() {
        let d = Layout::basic(8);
        let max = i32::MAX as usize;
        assert_eq!(
            Layout::hvector(max, max, max as i128 * 8, &d),
            Err(Refused::Bounds)
        );
        assert_eq!(Layout::hvector(max, 1, 16, &d), Err(Refused::Blocks));
        // A contiguous type of INT_MAX doubles is one block.
        let c = Layout::hvector(max, 1, 8, &d).unwrap();
        assert_eq!(
            (c.blocks.len(), c.size, c.extent),
            (1, max * 8, max as isize * 8)
        );
        assert_eq!(sizes(&c), vec![(8, max as u64)]);
        // INT_MAX of those does not fit an address.
        assert_eq!(
            Layout::hvector(max, 1, c.extent as i128, &c),
            Err(Refused::Bounds)
        );
        // A vector of an empty type: its bounds, at once.
        let empty = Layout::resized(&Layout::basic(0), -4, 0);
        let e = Layout::hvector(max, 7, -8, &empty).unwrap();
        assert_eq!(
            (e.size, e.blocks.len(), e.lb),
            (0, 0, -4 - (max as isize - 1) * 8)
        );
        let far = [(1, i128::from(i64::MAX), &d)];
        assert_eq!(Layout::structure(&far), Err(Refused::Bounds));
    }

    /// A run of `reps` copies is the same layout as the copies placed one
    /// by one, for random types: dense and not, strides forward, backward
    /// and overlapping, resized extents.
    #[test]
    fn runs_are_their_copies_one_by_one() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let basics = [Layout::basic(1), Layout::basic(4), Layout::basic(8)];
        for _ in 0..2000 {
            let b = &basics[next(3) as usize];
            let mut old = Layout::hvector(
                1 + next(3) as usize,
                1 + next(3) as usize,
                next(40) as i128 - 12,
                b,
            )
            .unwrap();
            if next(3) == 0 {
                old = Layout::resized(&old, next(8) as isize - 4, next(48) as isize - 8);
            }
            let runs: Vec<(i128, usize)> = (0..1 + next(4))
                .map(|_| (next(200) as i128 - 100, next(5) as usize))
                .collect();
            let as_runs = Layout::placed(runs.iter().map(|&(at, reps)| (at, &old, reps)));
            let one_by_one = Layout::placed(runs.iter().flat_map(|&(at, reps)| {
                let old = &old;
                (0..reps).map(move |j| (at + j as i128 * old.extent as i128, old, 1))
            }));
            assert_eq!(as_runs, one_by_one, "runs {runs:?} of {old:?}");
        }
    }
}
