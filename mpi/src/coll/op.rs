//! Reduction operations: MPI's predefined ones on the element types the
//! standard names for each (MPI-4.0 §6.9.2), and the caller's own
//! (`MPI_Op_create`).
//!
//! Every operation combines two vectors as MPI's user functions do:
//! `inout[i] = in[i] op inout[i]`, where `in` holds the contribution of
//! the lower ranks. The predefined ones read and write *packed* elements
//! (the data of a datatype without its gaps, as messages carry it); a
//! caller's function gets its datatype's own layout (`UserOp::apply`).

use crate::abi::*;
use crate::datatype::Layout;
use crate::engine::{err, MpiResult};
use std::os::raw::{c_int, c_void};

mod long_double;
use long_double::F80;

/// MPI's predefined operations, in the order of their handles
/// (`MPI_MAX` is 0x58000001, … `MPI_NO_OP` 0x5800000e).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Predefined {
    Max,
    Min,
    Sum,
    Prod,
    Land,
    Band,
    Lor,
    Bor,
    Lxor,
    Bxor,
    Minloc,
    Maxloc,
    Replace,
    NoOp,
}

const PREDEFINED: [Predefined; 14] = {
    use Predefined::*;
    [
        Max, Min, Sum, Prod, Land, Band, Lor, Bor, Lxor, Bxor, Minloc, Maxloc, Replace, NoOp,
    ]
};

impl Predefined {
    /// The predefined operation with handle `op`.
    pub fn of(op: Handle) -> Option<Predefined> {
        let i = (op as u32).checked_sub(MPI_MAX as u32)?;
        PREDEFINED.get(i as usize).copied()
    }

    fn name(self) -> &'static str {
        use Predefined::*;
        match self {
            Max => "MPI_MAX",
            Min => "MPI_MIN",
            Sum => "MPI_SUM",
            Prod => "MPI_PROD",
            Land => "MPI_LAND",
            Band => "MPI_BAND",
            Lor => "MPI_LOR",
            Bor => "MPI_BOR",
            Lxor => "MPI_LXOR",
            Bxor => "MPI_BXOR",
            Minloc => "MPI_MINLOC",
            Maxloc => "MPI_MAXLOC",
            Replace => "MPI_REPLACE",
            NoOp => "MPI_NO_OP",
        }
    }
}

/// The element types operations compute on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    /// C's `long double` on x86-64: the x87 80-bit format in 16 bytes.
    F80,
    /// C's `bool` (one byte).
    Bool,
    /// Fortran's `LOGICAL` (an int: zero is false).
    Logical,
    /// Complex numbers of two of the given float.
    Complex(Float),
    /// MINLOC and MAXLOC's (value, index) pairs.
    Pair(Value, Value),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Float {
    F32,
    F64,
    F80,
}

/// The value or index of a pair type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    I16,
    I32,
    I64,
    F32,
    F64,
    F80,
}

impl Value {
    fn size(self) -> usize {
        match self {
            Value::I16 => 2,
            Value::I32 | Value::F32 => 4,
            Value::I64 | Value::F64 => 8,
            Value::F80 => 16,
        }
    }
}

impl Elem {
    /// The element type of predefined datatype `t` (MPICH's handles).
    pub fn of(t: Handle) -> Option<Elem> {
        use Elem::*;
        Some(match t as u32 {
            0x4c00_0101 | 0x4c00_0118 | 0x4c00_012d | 0x4c00_0137 => I8,
            0x4c00_0102 | 0x4c00_010d | 0x4c00_010f | 0x4c00_011a | 0x4c00_013b => U8,
            0x4c00_0203 | 0x4c00_022f | 0x4c00_0238 => I16,
            0x4c00_0204 | 0x4c00_023c => U16,
            0x4c00_0405 | 0x4c00_040e | 0x4c00_041b | 0x4c00_0430 | 0x4c00_0439 => I32,
            0x4c00_0406 | 0x4c00_043d => U32,
            0x4c00_0807 | 0x4c00_0809 | 0x4c00_0831 | 0x4c00_083a | 0x4c00_0843 | 0x4c00_0844
            | 0x4c00_0845 => I64,
            0x4c00_0808 | 0x4c00_0819 | 0x4c00_083e => U64,
            0x4c00_040a | 0x4c00_041c | 0x4c00_0427 => F32,
            0x4c00_080b | 0x4c00_081f | 0x4c00_0829 => F64,
            0x4c00_100c => F80,
            0x4c00_013f | 0x4c00_0133 => Bool,
            0x4c00_041d => Logical,
            0x4c00_081e | 0x4c00_0828 | 0x4c00_0840 | 0x4c00_0834 => Complex(Float::F32),
            0x4c00_1022 | 0x4c00_102a | 0x4c00_1041 | 0x4c00_1035 => Complex(Float::F64),
            0x4c00_2042 | 0x4c00_2036 => Complex(Float::F80),
            0x8c00_0000 => Pair(Value::F32, Value::I32),
            0x8c00_0001 => Pair(Value::F64, Value::I32),
            0x8c00_0002 => Pair(Value::I64, Value::I32),
            0x8c00_0003 => Pair(Value::I16, Value::I32),
            0x4c00_0816 | 0x4c00_0820 => Pair(Value::I32, Value::I32),
            0x8c00_0004 => Pair(Value::F80, Value::I32),
            0x4c00_0821 => Pair(Value::F32, Value::F32),
            0x4c00_1023 => Pair(Value::F64, Value::F64),
            _ => return None,
        })
    }

    /// Bytes of one packed element.
    pub fn size(self) -> usize {
        use Elem::*;
        match self {
            I8 | U8 | Bool => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 | Logical => 4,
            I64 | U64 | F64 => 8,
            F80 => 16,
            Complex(Float::F32) => 8,
            Complex(Float::F64) => 16,
            Complex(Float::F80) => 32,
            Pair(v, i) => v.size() + i.size(),
        }
    }

    fn is_integer(self) -> bool {
        use Elem::*;
        matches!(self, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64)
    }

    fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F64 | Elem::F80)
    }
}

/// Whether the standard defines `op` on elements of type `e` (MPICH
/// also lets the logical operations take floating-point values).
pub fn defined(op: Predefined, e: Elem) -> bool {
    use Predefined::*;
    match op {
        Max | Min => e.is_integer() || e.is_float(),
        Sum | Prod => e.is_integer() || e.is_float() || matches!(e, Elem::Complex(_)),
        Land | Lor | Lxor => {
            e.is_integer() || e.is_float() || matches!(e, Elem::Bool | Elem::Logical)
        }
        Band | Bor | Bxor => e.is_integer(),
        Minloc | Maxloc => matches!(e, Elem::Pair(..)),
        Replace | NoOp => true,
    }
}

/// `inout[i] = in[i] op inout[i]` over packed elements of type `e`
/// (`defined(op, e)` holds).
pub fn combine(op: Predefined, e: Elem, inp: &[u8], inout: &mut [u8]) {
    use Predefined::*;
    match op {
        NoOp => {}
        Replace => inout.copy_from_slice(inp),
        Minloc | Maxloc => {
            if let Elem::Pair(v, i) = e {
                pairs(op == Minloc, v, i, inp, inout);
            }
        }
        _ => match e {
            Elem::I8 => int::<i8>(op, inp, inout),
            Elem::I16 => int::<i16>(op, inp, inout),
            Elem::I32 => int::<i32>(op, inp, inout),
            Elem::I64 => int::<i64>(op, inp, inout),
            Elem::U8 | Elem::Bool => int::<u8>(op, inp, inout),
            Elem::U16 => int::<u16>(op, inp, inout),
            Elem::U32 => int::<u32>(op, inp, inout),
            Elem::U64 => int::<u64>(op, inp, inout),
            Elem::Logical => int::<i32>(op, inp, inout),
            Elem::F32 => float::<f32>(op, inp, inout),
            Elem::F64 => float::<f64>(op, inp, inout),
            Elem::F80 => float::<F80>(op, inp, inout),
            Elem::Complex(Float::F32) => complex::<f32>(op, inp, inout),
            Elem::Complex(Float::F64) => complex::<f64>(op, inp, inout),
            Elem::Complex(Float::F80) => complex::<F80>(op, inp, inout),
            Elem::Pair(..) => {}
        },
    }
}

/// A number read from and written to packed bytes.
trait Number: Copy {
    const SIZE: usize;
    fn get(b: &[u8]) -> Self;
    fn put(self, b: &mut [u8]);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn lt(self, o: Self) -> bool;
    fn is_true(self) -> bool;
    fn truth(t: bool) -> Self;

    /// Packed bytes as elements, where they lie aligned for the type
    /// (a plain loop over them then vectorizes); `None` otherwise, and
    /// for types other than Rust's primitives.
    fn view(_b: &[u8]) -> Option<&[Self]> {
        None
    }

    fn view_mut(_b: &mut [u8]) -> Option<&mut [Self]> {
        None
    }
}

trait Bits: Number {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
}

/// `Number` for primitive `$t`, with its addition, multiplication and
/// negation (wrapping for integers) and its zero and one.
macro_rules! number {
    ($($t:ty: $add:expr, $mul:expr, $neg:expr, $zero:expr, $one:expr);* $(;)?) => {$(
        impl Number for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn put(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes());
            }
            fn add(self, o: Self) -> Self {
                $add(self, o)
            }
            fn mul(self, o: Self) -> Self {
                $mul(self, o)
            }
            fn neg(self) -> Self {
                $neg(self)
            }
            fn lt(self, o: Self) -> bool {
                self < o
            }
            fn is_true(self) -> bool {
                self != $zero
            }
            fn truth(t: bool) -> Self {
                if t { $one } else { $zero }
            }
            fn view(b: &[u8]) -> Option<&[Self]> {
                fm_coll::op::aligned(b)
            }
            fn view_mut(b: &mut [u8]) -> Option<&mut [Self]> {
                fm_coll::op::aligned_mut(b)
            }
        }
    )*};
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
        }
    )*};
}

number! {
    i8: i8::wrapping_add, i8::wrapping_mul, i8::wrapping_neg, 0, 1;
    i16: i16::wrapping_add, i16::wrapping_mul, i16::wrapping_neg, 0, 1;
    i32: i32::wrapping_add, i32::wrapping_mul, i32::wrapping_neg, 0, 1;
    i64: i64::wrapping_add, i64::wrapping_mul, i64::wrapping_neg, 0, 1;
    u8: u8::wrapping_add, u8::wrapping_mul, u8::wrapping_neg, 0, 1;
    u16: u16::wrapping_add, u16::wrapping_mul, u16::wrapping_neg, 0, 1;
    u32: u32::wrapping_add, u32::wrapping_mul, u32::wrapping_neg, 0, 1;
    u64: u64::wrapping_add, u64::wrapping_mul, u64::wrapping_neg, 0, 1;
    f32: std::ops::Add::add, std::ops::Mul::mul, std::ops::Neg::neg, 0.0, 1.0;
    f64: std::ops::Add::add, std::ops::Mul::mul, std::ops::Neg::neg, 0.0, 1.0;
}
bits!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Each element pair of `inp` and `inout` through `f`, the result into `inout`.
fn each<T: Number>(inp: &[u8], inout: &mut [u8], f: impl Fn(T, T) -> T) {
    if let (Some(a), Some(b)) = (T::view(inp), T::view_mut(inout)) {
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y = f(*x, *y);
        }
        return;
    }
    for (a, b) in inp
        .chunks_exact(T::SIZE)
        .zip(inout.chunks_exact_mut(T::SIZE))
    {
        f(T::get(a), T::get(b)).put(b);
    }
}

/// MPICH's order: `min(a, b)` is `a < b ? a : b`.
fn arith<T: Number>(op: Predefined, inp: &[u8], inout: &mut [u8]) -> bool {
    use Predefined::*;
    match op {
        Max => each::<T>(inp, inout, |a, b| if b.lt(a) { a } else { b }),
        Min => each::<T>(inp, inout, |a, b| if a.lt(b) { a } else { b }),
        Sum => each::<T>(inp, inout, T::add),
        Prod => each::<T>(inp, inout, T::mul),
        Land => each::<T>(inp, inout, |a, b| T::truth(a.is_true() && b.is_true())),
        Lor => each::<T>(inp, inout, |a, b| T::truth(a.is_true() || b.is_true())),
        Lxor => each::<T>(inp, inout, |a, b| T::truth(a.is_true() != b.is_true())),
        _ => return false,
    }
    true
}

fn int<T: Bits>(op: Predefined, inp: &[u8], inout: &mut [u8]) {
    use Predefined::*;
    if !arith::<T>(op, inp, inout) {
        match op {
            Band => each::<T>(inp, inout, T::and),
            Bor => each::<T>(inp, inout, T::or),
            Bxor => each::<T>(inp, inout, T::xor),
            _ => {}
        }
    }
}

fn float<T: Number>(op: Predefined, inp: &[u8], inout: &mut [u8]) {
    arith::<T>(op, inp, inout);
}

/// A complex number of two `T`: sums and products only.
fn complex<T: Number>(op: Predefined, inp: &[u8], inout: &mut [u8]) {
    let n = 2 * T::SIZE;
    for (a, b) in inp.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
        let (ar, ai) = (T::get(a), T::get(&a[T::SIZE..]));
        let (br, bi) = (T::get(b), T::get(&b[T::SIZE..]));
        let (r, i) = match op {
            Predefined::Sum => (ar.add(br), ai.add(bi)),
            Predefined::Prod => (ar.mul(br).add(ai.mul(bi).neg()), ar.mul(bi).add(ai.mul(br))),
            _ => return,
        };
        r.put(b);
        i.put(&mut b[T::SIZE..]);
    }
}

/// MINLOC and MAXLOC: the lesser (greater) value with its index; of
/// equal values, the lesser index.
fn pairs(min: bool, v: Value, i: Value, inp: &[u8], inout: &mut [u8]) {
    let n = v.size() + i.size();
    for (a, b) in inp.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
        let (better, equal) = match v {
            Value::I16 => order::<i16>(a, b),
            Value::I32 => order::<i32>(a, b),
            Value::I64 => order::<i64>(a, b),
            Value::F32 => order::<f32>(a, b),
            Value::F64 => order::<f64>(a, b),
            Value::F80 => order::<F80>(a, b),
        };
        let better = if min { better.0 } else { better.1 };
        let vs = v.size();
        if better {
            b.copy_from_slice(a);
        } else if equal {
            let a_index_lower = match i {
                Value::I32 => order::<i32>(&a[vs..], &b[vs..]).0 .0,
                Value::F32 => order::<f32>(&a[vs..], &b[vs..]).0 .0,
                Value::F64 => order::<f64>(&a[vs..], &b[vs..]).0 .0,
                _ => false,
            };
            if a_index_lower {
                b[vs..].copy_from_slice(&a[vs..]);
            }
        }
    }
}

/// ((a < b, a > b), a == b) of the values at the start of `a` and `b`.
fn order<T: Number>(a: &[u8], b: &[u8]) -> ((bool, bool), bool) {
    let (x, y) = (T::get(a), T::get(b));
    let (lt, gt) = (x.lt(y), y.lt(x));
    ((lt, gt), !lt && !gt)
}

/// A caller's operation (`MPI_Op_create`, or `MPI_Op_create_c` with
/// large counts).
#[derive(Clone, Copy, Debug)]
pub struct UserOp {
    pub func: UserFn,
    pub commute: bool,
}

#[derive(Clone, Copy, Debug)]
pub enum UserFn {
    C(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle)),
    Large(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut Handle)),
}

impl UserOp {
    /// `inout = in op inout` over `count` packed elements of `datatype`:
    /// the function gets them in the datatype's own layout, so a type
    /// with gaps is unpacked into scratch first and packed back after.
    pub fn apply(
        &self,
        datatype: Handle,
        layout: &Layout,
        count: usize,
        inp: &[u8],
        inout: &mut [u8],
    ) -> MpiResult<()> {
        if count == 0 {
            return Ok(());
        }
        if layout.contiguous_at() == Some(0) {
            // SAFETY: both hold `count` elements laid out as the type says.
            unsafe { self.call(inp.as_ptr() as *mut u8, inout.as_mut_ptr(), count, datatype) }
        } else {
            let span = span(layout, count)?;
            let (mut a, mut b) = (vec![0u8; span.1], vec![0u8; span.1]);
            // SAFETY: each scratch holds the `count` elements from byte
            // `-span.0` on (their lowest byte is at offset `span.0`).
            unsafe {
                let (pa, pb) = (
                    a.as_mut_ptr().offset(-span.0),
                    b.as_mut_ptr().offset(-span.0),
                );
                layout.unpack(inp, pa, count);
                layout.unpack(inout, pb, count);
                self.call(pa, pb, count, datatype)?;
                let mut out = Vec::with_capacity(inout.len());
                layout.pack(pb, count, &mut out);
                inout.copy_from_slice(&out);
            }
            Ok(())
        }
    }

    /// # Safety
    /// `a` and `b` hold `count` elements of `datatype`.
    unsafe fn call(&self, a: *mut u8, b: *mut u8, count: usize, datatype: Handle) -> MpiResult<()> {
        let mut t = datatype;
        match self.func {
            UserFn::C(f) => {
                let Ok(mut n) = c_int::try_from(count) else {
                    return err(
                        MPI_ERR_COUNT,
                        format!("{count} elements are too many for an operation made by MPI_Op_create (MPI_Op_create_c takes them)"),
                    );
                };
                f(a.cast(), b.cast(), &mut n, &mut t);
            }
            UserFn::Large(f) => {
                let mut n = count as i64;
                f(a.cast(), b.cast(), &mut n, &mut t);
            }
        }
        Ok(())
    }
}

/// (lowest byte offset, bytes) that `count` elements of `layout` touch.
fn span(layout: &Layout, count: usize) -> MpiResult<(isize, usize)> {
    let last = (count as isize - 1) * layout.extent;
    let lo = layout.true_lb.min(last + layout.true_lb);
    let hi = layout.true_ub.max(last + layout.true_ub);
    Ok((lo, (hi - lo) as usize))
}

/// What a reduction combines with: a predefined operation on the
/// element type of the datatype's data, or the caller's function.
#[derive(Clone, Debug)]
pub enum Reduction {
    Predefined(Predefined, Elem),
    User {
        op: UserOp,
        datatype: Handle,
        layout: std::sync::Arc<Layout>,
    },
}

impl Reduction {
    /// The reduction of `op` over elements of `datatype` (`layout`),
    /// refused with MPI's error when the standard does not define it.
    pub fn new(
        op: Handle,
        user: Option<UserOp>,
        datatype: Handle,
        layout: std::sync::Arc<Layout>,
    ) -> MpiResult<Reduction> {
        if let Some(op) = user {
            return Ok(Reduction::User {
                op,
                datatype,
                layout,
            });
        }
        let Some(p) = Predefined::of(op) else {
            return err(MPI_ERR_OP, format!("{op:#x} is not an operation"));
        };
        let elem = layout.base.and_then(Elem::of);
        match elem {
            Some(e) if defined(p, e) => Ok(Reduction::Predefined(p, e)),
            _ => err(
                MPI_ERR_OP,
                format!(
                    "{} is not defined on datatype {datatype:#x}{}",
                    p.name(),
                    if elem.is_none() {
                        " (a predefined operation needs data of one predefined type)"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }

    /// Whether operands may be combined in any order.
    pub fn commutative(&self) -> bool {
        match self {
            Reduction::Predefined(..) => true,
            Reduction::User { op, .. } => op.commute,
        }
    }

    /// `inout = in op inout` over packed data (whole elements).
    pub fn combine(&self, inp: &[u8], inout: &mut [u8]) -> MpiResult<()> {
        match self {
            Reduction::Predefined(p, e) => {
                combine(*p, *e, inp, inout);
                Ok(())
            }
            Reduction::User {
                op,
                datatype,
                layout,
            } => {
                let count = inout.len().checked_div(layout.size).unwrap_or(0);
                op.apply(*datatype, layout, count, inp, inout)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn back(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4).map(i32::get).collect()
    }

    #[test]
    fn handles_name_the_operations_in_order() {
        assert_eq!(Predefined::of(MPI_MAX), Some(Predefined::Max));
        assert_eq!(Predefined::of(0x5800_000c), Some(Predefined::Maxloc));
        assert_eq!(Predefined::of(0x5800_000e), Some(Predefined::NoOp));
        assert_eq!(Predefined::of(0x5800_000f), None);
        assert_eq!(Predefined::of(MPI_OP_NULL), None);
    }

    #[test]
    fn integer_operations_combine_in_into_inout() {
        let cases = [
            (Predefined::Sum, [3, -3, 7]),
            (Predefined::Prod, [2, -4, 10]),
            (Predefined::Max, [2, 1, 5]),
            (Predefined::Min, [1, -4, 2]),
            (Predefined::Band, [0, 1 & -4, 2 & 5]),
            (Predefined::Bxor, [3, 1 ^ -4, 7]),
            (Predefined::Land, [1, 1, 1]),
            (Predefined::Lxor, [0, 0, 0]),
        ];
        for (op, want) in cases {
            let mut inout = ints(&[2, 1, 5]);
            combine(op, Elem::I32, &ints(&[1, -4, 2]), &mut inout);
            assert_eq!(back(&inout), want, "{op:?}");
        }
    }

    #[test]
    fn float_and_long_double_sums_are_exact_where_c_is() {
        let mut inout: Vec<u8> = [0.25f64, 1e300]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let inp: Vec<u8> = [0.5f64, 1e300]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        combine(Predefined::Sum, Elem::F64, &inp, &mut inout);
        assert_eq!(f64::get(&inout), 0.75);
        assert_eq!(f64::get(&inout[8..]), 2e300);
        // 3 + 4 = 7 and 3 * 4 = 12 in x87 format; max and min by bits.
        let three = F80::truth(true).add(F80::truth(true)).add(F80::truth(true));
        let four = three.add(F80::truth(true));
        assert_eq!(three.add(four).to_f64(), 7.0);
        assert_eq!(three.mul(four).to_f64(), 12.0);
        assert!(three.lt(four) && !four.lt(three));
        assert!(four.neg().lt(three) && four.neg().lt(three.neg()));
        assert_eq!(four.neg().to_f64(), -4.0);
    }

    #[test]
    fn complex_products_multiply_as_complex_numbers() {
        // (1 + 2i)(3 + 4i) = -5 + 10i
        let mut inout: Vec<u8> = [3.0f32, 4.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let inp: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
        combine(
            Predefined::Prod,
            Elem::Complex(Float::F32),
            &inp,
            &mut inout,
        );
        assert_eq!((f32::get(&inout), f32::get(&inout[4..])), (-5.0, 10.0));
    }

    #[test]
    fn minloc_takes_the_lower_index_of_equal_values() {
        // DOUBLE_INT packed: 8-byte value, 4-byte index.
        let pair = |v: f64, i: i32| [v.to_ne_bytes().to_vec(), i.to_ne_bytes().to_vec()].concat();
        let e = Elem::Pair(Value::F64, Value::I32);
        for (a, b, min, max) in [
            ((1.0, 5), (2.0, 3), (1.0, 5), (2.0, 3)),
            ((2.0, 5), (2.0, 3), (2.0, 3), (2.0, 3)),
            ((2.0, 1), (2.0, 3), (2.0, 1), (2.0, 1)),
        ] {
            for (op, want) in [(Predefined::Minloc, min), (Predefined::Maxloc, max)] {
                let mut inout = pair(b.0, b.1);
                combine(op, e, &pair(a.0, a.1), &mut inout);
                assert_eq!(inout, pair(want.0, want.1), "{op:?} of {a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn undefined_pairs_of_operation_and_type_are_refused() {
        assert!(!defined(Predefined::Band, Elem::F64));
        assert!(!defined(Predefined::Max, Elem::Complex(Float::F64)));
        assert!(!defined(Predefined::Minloc, Elem::I32));
        assert!(defined(Predefined::Lor, Elem::Logical));
        let layout = std::sync::Arc::new(Layout::basic(8).of_predefined(0x4c00_080b));
        assert!(Reduction::new(0x5800_0006, None, 0x4c00_080b, layout.clone()).is_err());
        assert!(Reduction::new(MPI_SUM, None, 0x4c00_080b, layout).is_ok());
    }
}
