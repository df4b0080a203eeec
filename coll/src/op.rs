//! Typed reductions for FM programs: sum, product, minimum, maximum and
//! the bitwise operations over plain numbers, or the program's own
//! function, combining packed elements as a [`Combine`] step needs.

use crate::schedule::Combine;
use std::convert::Infallible;
use std::sync::Arc;

/// A plain number a collective can combine: the integer and floating
/// point types. Its bytes travel as they lie in memory (all members run
/// on machines of one byte order).
///
/// Sealed: received bytes are read as elements and elements sent as
/// bytes, which is sound only for types without padding that every bit
/// pattern is valid for (not `bool`, `char` or a struct):
///
/// ```compile_fail
/// use fm_coll::op::{Bitwise, Element};
/// #[derive(Clone, Copy, Default)]
/// struct Flag(bool);
/// impl Element for Flag {
///     fn sum(self, o: Self) -> Self { Flag(self.0 | o.0) }
///     fn product(self, o: Self) -> Self { Flag(self.0 & o.0) }
///     fn min_of(self, o: Self) -> Self { self.product(o) }
///     fn max_of(self, o: Self) -> Self { self.sum(o) }
///     fn bits(self, _: Bitwise, _: Self) -> Option<Self> { None }
/// }
/// ```
pub trait Element: sealed::Plain + Copy + Default + Send + Sync + 'static {
    fn sum(self, o: Self) -> Self;
    fn product(self, o: Self) -> Self;
    fn min_of(self, o: Self) -> Self;
    fn max_of(self, o: Self) -> Self;
    /// `self op o` for a bitwise operation; `None` for a type without
    /// bits to combine (floating point).
    fn bits(self, op: Bitwise, o: Self) -> Option<Self>;
}

/// The bitwise operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bitwise {
    And,
    Or,
    Xor,
}

mod sealed {
    /// Implemented only here, for the primitive numbers.
    pub trait Plain {}
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl sealed::Plain for $t {}
        impl Element for $t {
            fn sum(self, o: Self) -> Self { self.wrapping_add(o) }
            fn product(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn min_of(self, o: Self) -> Self { self.min(o) }
            fn max_of(self, o: Self) -> Self { self.max(o) }
            fn bits(self, op: Bitwise, o: Self) -> Option<Self> {
                Some(match op {
                    Bitwise::And => self & o,
                    Bitwise::Or => self | o,
                    Bitwise::Xor => self ^ o,
                })
            }
        }
    )*};
}
integer!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! float {
    ($($t:ty),*) => {$(
        impl sealed::Plain for $t {}
        impl Element for $t {
            fn sum(self, o: Self) -> Self { self + o }
            fn product(self, o: Self) -> Self { self * o }
            fn min_of(self, o: Self) -> Self { if o < self { o } else { self } }
            fn max_of(self, o: Self) -> Self { if o > self { o } else { self } }
            fn bits(self, _: Bitwise, _: Self) -> Option<Self> { None }
        }
    )*};
}
float!(f32, f64);

/// How a reduction combines two elements.
#[derive(Clone)]
pub enum Op<T> {
    Sum,
    Product,
    Min,
    Max,
    /// Bitwise and, or, exclusive or: integers only.
    Bits(Bitwise),
    /// The program's function of (lower members' value, higher members'
    /// value); members' order is kept unless it says it commutes.
    User {
        f: Arc<dyn Fn(T, T) -> T + Send + Sync>,
        commutative: bool,
    },
}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Sum => write!(f, "Sum"),
            Op::Product => write!(f, "Product"),
            Op::Min => write!(f, "Min"),
            Op::Max => write!(f, "Max"),
            Op::Bits(b) => write!(f, "{b:?}"),
            Op::User { commutative, .. } => write!(f, "User {{ commutative: {commutative} }}"),
        }
    }
}

/// An operation not defined on an element type: a bitwise one on
/// floating point numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undefined {
    pub op: String,
    pub element: &'static str,
}

impl std::fmt::Display for Undefined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not defined on {}", self.op, self.element)
    }
}

impl std::error::Error for Undefined {}

impl<T: Element> Op<T> {
    /// The program's function `f(lower, higher)`; `commutative` lets the
    /// algorithms combine in any order.
    pub fn user(f: impl Fn(T, T) -> T + Send + Sync + 'static, commutative: bool) -> Op<T> {
        Op::User {
            f: Arc::new(f),
            commutative,
        }
    }

    pub fn commutative(&self) -> bool {
        match self {
            Op::User { commutative, .. } => *commutative,
            _ => true,
        }
    }

    /// The operation checked against its element type.
    pub fn checked(self) -> Result<Checked<T>, Undefined> {
        if let Op::Bits(b) = &self {
            let zero = T::default();
            if zero.bits(*b, zero).is_none() {
                return Err(Undefined {
                    op: format!("{b:?}"),
                    element: std::any::type_name::<T>(),
                });
            }
        }
        Ok(Checked(self))
    }
}

/// An operation known to be defined on its element type.
#[derive(Clone, Debug)]
pub struct Checked<T>(Op<T>);

impl<T: Element> Checked<T> {
    pub fn commutative(&self) -> bool {
        self.0.commutative()
    }
}

impl<T: Element> Combine for Checked<T> {
    type Error = Infallible;

    fn combine(&self, lower: &[u8], higher: &mut [u8]) -> Result<(), Infallible> {
        debug_assert_eq!(lower.len(), higher.len());
        // The operation is chosen once, outside the element loop, so
        // that the loop is one the compiler vectorizes.
        match &self.0 {
            Op::Sum => each(lower, higher, T::sum),
            Op::Product => each(lower, higher, T::product),
            Op::Min => each(lower, higher, T::min_of),
            Op::Max => each(lower, higher, T::max_of),
            // `checked` refused the types without bits.
            Op::Bits(b) => each(lower, higher, |x: T, y| x.bits(*b, y).unwrap_or(y)),
            Op::User { f, .. } => each(lower, higher, |x, y| f(x, y)),
        }
        Ok(())
    }

    fn commutative(&self) -> bool {
        Checked::commutative(self)
    }
}

/// `higher[i] = f(lower[i], higher[i])` for each element of the packed
/// spans: over typed slices where both lie aligned for `T` (a loop the
/// compiler vectorizes: element by element, 2 ranks' reduce of 1 MiB of
/// floats spent 60 % of its time here), else element by element through
/// unaligned reads and writes, as a span of packed bytes may lie.
fn each<T: Element>(lower: &[u8], higher: &mut [u8], f: impl Fn(T, T) -> T) {
    if let (Some(a), Some(b)) = (aligned::<T>(lower), aligned_mut::<T>(higher)) {
        for (x, y) in a.iter().zip(b) {
            *y = f(*x, *y);
        }
        return;
    }
    let size = std::mem::size_of::<T>();
    for (a, b) in lower.chunks_exact(size).zip(higher.chunks_exact_mut(size)) {
        // SAFETY: each chunk holds one element's bytes; `T` is a plain
        // number, valid for every bit pattern.
        unsafe {
            let x = std::ptr::read_unaligned(a.as_ptr().cast::<T>());
            let y = std::ptr::read_unaligned(b.as_ptr().cast::<T>());
            std::ptr::write_unaligned(b.as_mut_ptr().cast::<T>(), f(x, y));
        }
    }
}

/// Packed bytes as elements, where they lie aligned for `T` and hold a
/// whole number of them (a loop over the slice then vectorizes); `None`
/// otherwise.
pub fn aligned<T: Element>(b: &[u8]) -> Option<&[T]> {
    // SAFETY: `T` is a plain number (sealed), valid for every bit pattern.
    let (pre, mid, post) = unsafe { b.align_to::<T>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// [`aligned`], to write through.
pub fn aligned_mut<T: Element>(b: &mut [u8]) -> Option<&mut [T]> {
    // SAFETY: as `aligned`; any `T` written is bytes.
    let (pre, mid, post) = unsafe { b.align_to_mut::<T>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// The bytes of `v`, as they lie in memory.
pub fn bytes_of<T: Element>(v: &[T]) -> &[u8] {
    // SAFETY: plain numbers have no padding; the slice is `v`'s memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of `v`, to write through.
pub fn bytes_of_mut<T: Element>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as `bytes_of`; any bytes written are a valid `T`.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combined<T: Element>(op: Op<T>, lower: &[T], higher: &[T]) -> Vec<T> {
        let mut out = higher.to_vec();
        let c = op.checked().expect("defined");
        c.combine(bytes_of(lower), bytes_of_mut(&mut out))
            .expect("infallible");
        out
    }

    #[test]
    fn each_operation_combines_elementwise_keeping_the_lower_members_value_first() {
        assert_eq!(combined(Op::Sum, &[1i32, -2], &[10, 20]), [11, 18]);
        assert_eq!(combined(Op::Product, &[3u8, 200], &[2, 2]), [6, 144]);
        assert_eq!(combined(Op::Min, &[1.5f64, -3.0], &[0.5, 2.0]), [0.5, -3.0]);
        assert_eq!(combined(Op::Max, &[7i64], &[9]), [9]);
        assert_eq!(
            combined(Op::Bits(Bitwise::Xor), &[0b1100u16], &[0b1010]),
            [0b0110]
        );
        let minus = Op::user(|a: i32, b: i32| a - b, false);
        assert!(!minus.commutative());
        assert_eq!(combined(minus, &[10, 1], &[3, 5]), [7, -4]);
    }

    #[test]
    fn packed_elements_combine_alike_whether_they_lie_aligned_or_not() {
        let lower: Vec<f64> = (0..37).map(|i| i as f64 * 1.5 - 7.0).collect();
        let higher: Vec<f64> = (0..37).map(|i| 100.0 - i as f64).collect();
        let want = combined(Op::Max, &lower, &higher);
        // The same bytes one byte into a buffer: unaligned for f64.
        let mut a = vec![0u8; 1 + 37 * 8];
        let mut b = a.clone();
        a[1..].copy_from_slice(bytes_of(&lower));
        b[1..].copy_from_slice(bytes_of(&higher));
        let c = Op::<f64>::Max.checked().expect("defined");
        c.combine(&a[1..], &mut b[1..]).expect("infallible");
        assert_eq!(&b[1..], bytes_of(&want));
        assert!(want.iter().zip(&lower).all(|(w, l)| w >= l));
    }

    #[test]
    fn a_bitwise_operation_on_floats_is_refused_naming_both() {
        let e = Op::<f32>::Bits(Bitwise::And).checked().unwrap_err();
        assert_eq!(e.to_string(), "And is not defined on f32");
    }
}
