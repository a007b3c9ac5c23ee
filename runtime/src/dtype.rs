//! Element types as Rust types.

use half::{bf16, f16};
use std::fmt;
pub use tensorfn_core::DTypeKind;

mod sealed {
    pub trait Sealed {}
}

/// An element type a tensor can hold: `f32`, `f64`, `f16`, `bf16`, `i32`,
/// `i64`, `u8`, `bool`. Conversions between them are explicit
/// (`x.cast::<f16>()`); nothing is promoted silently.
///
/// ```
/// use tensorfn_runtime::{DType, DTypeKind, f16};
/// assert_eq!(<f16 as DType>::KIND, DTypeKind::F16);
/// assert_eq!(f16::from_f64(1.5).to_f64(), 1.5);
/// assert_eq!(<i64 as DType>::from_i64(-3), -3i64);
/// assert_eq!(<bool as DType>::one(), true);
/// // On the CPU, `Tensor::cast` applies this to each element.
/// assert_eq!(2.75f32.cast::<i32>(), 2);
/// assert_eq!(300i64.cast::<u8>(), 44); // integers wrap, as in PyTorch
/// assert_eq!(300.0f32.cast::<u8>(), 255); // through a float: saturates
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensorfn dtype",
    note = "dtypes are f32, f64, f16, bf16, i32, i64, u8 and bool"
)]
pub trait DType:
    sealed::Sealed
    + Copy
    + Default
    + PartialEq
    + PartialOrd
    + fmt::Debug
    + fmt::Display
    + Send
    + Sync
    + 'static
{
    /// This dtype as a value.
    const KIND: DTypeKind;
    /// The value as `f64` (exact for every dtype but large `i64`).
    fn to_f64(self) -> f64;
    /// The nearest value of this dtype (Rust `as` semantics for integers:
    /// truncation toward zero, saturating; `bool` is `v != 0`).
    fn from_f64(v: f64) -> Self;
    /// The value as `i64` (floats truncate toward zero).
    fn to_i64(self) -> i64;
    /// The value from an `i64` (exact for integers that fit).
    fn from_i64(v: i64) -> Self;
    /// Zero of this dtype (`false` for `bool`).
    fn zero() -> Self {
        Self::from_i64(0)
    }
    /// One of this dtype (`true` for `bool`).
    fn one() -> Self {
        Self::from_i64(1)
    }
    /// Converts to another dtype. Integer to integer goes through `i64`,
    /// exact when the value fits and wrapping as Rust `as` does otherwise;
    /// a conversion involving a float goes through `f64` and
    /// [`from_f64`](Self::from_f64) (saturating into integers).
    fn cast<U: DType>(self) -> U {
        if Self::KIND.is_float() || U::KIND.is_float() {
            U::from_f64(self.to_f64())
        } else {
            U::from_i64(self.to_i64())
        }
    }
}

/// The dtypes with arithmetic: every dtype but `bool`.
///
/// ```
/// use tensorfn_runtime::{NumDType, f16};
/// fn twice<T: NumDType>(x: T) -> T { T::from_f64(x.to_f64() * 2.0) }
/// assert_eq!(twice(f16::from_f32(1.5)), f16::from_f32(3.0));
/// ```
pub trait NumDType: DType {}

/// The floating-point dtypes: transcendental functions, `mean`, `softmax`.
///
/// ```
/// use tensorfn_runtime::{shape, bf16, Cpu, FloatDType, Result, Tensor};
/// fn squash<T: FloatDType>(v: Vec<T>) -> Result<Vec<f64>> {
///     let x = Tensor::<Cpu, T, shape![_]>::from_vec_dims(v.clone(), &[v.len()])?;
///     Ok(x.sigmoid()?.to_vec()?.into_iter().map(|y| y.to_f64()).collect())
/// }
/// assert_eq!(squash(vec![0.0f32])?, vec![0.5]);
/// assert_eq!(squash(vec![bf16::from_f32(0.0)])?, vec![0.5]);
/// # Ok::<(), tensorfn_runtime::Error>(())
/// ```
///
/// Integer tensors have no transcendental functions; they do not compile:
///
/// ```compile_fail
/// use tensorfn_runtime::{shape, Cpu, Tensor};
/// let x = Tensor::<Cpu, i32, shape![2]>::ones().unwrap();
/// let _ = x.sigmoid();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a floating-point dtype",
    note = "this operation needs f32, f64, f16 or bf16: convert with `.cast::<f32>()`"
)]
pub trait FloatDType: NumDType {}

/// The dtypes of index tensors (`embedding`'s ids, `index_select`'s and
/// `gather`'s `index`): `i64`, as PyTorch, and `i32`.
///
/// ```
/// use tensorfn_runtime::{Cpu, IndexDType, Tensor, shape};
/// fn picks<I: IndexDType>(v: Vec<I>) -> Vec<f32> {
///     let x = Tensor::<Cpu, f32, shape![4]>::arange(10.0, 1.0).unwrap();
///     let i = Tensor::<Cpu, I, shape![_]>::from_vec_dims(v.clone(), &[v.len()]).unwrap();
///     x.index_select::<0, shape![_]>(&i).unwrap().to_vec().unwrap()
/// }
/// assert_eq!(picks(vec![3i64, 0]), vec![13.0, 10.0]);
/// assert_eq!(picks(vec![1i32]), vec![11.0]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an index dtype",
    note = "indices are i64 or i32: convert them with `.cast::<i64>()`"
)]
pub trait IndexDType: NumDType {}
impl IndexDType for i64 {}
impl IndexDType for i32 {}

macro_rules! int_dtype {
    ($t:ty, $kind:ident) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
            const KIND: DTypeKind = DTypeKind::$kind;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
        impl NumDType for $t {}
    };
}
int_dtype!(i32, I32);
int_dtype!(i64, I64);
int_dtype!(u8, U8);

macro_rules! float_dtype {
    ($t:ty, $kind:ident, |$v:ident| $from:expr, |$s:ident| $to:expr) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
            const KIND: DTypeKind = DTypeKind::$kind;
            fn to_f64(self) -> f64 {
                let $s = self;
                $to
            }
            fn from_f64($v: f64) -> Self {
                $from
            }
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
        }
        impl NumDType for $t {}
        impl FloatDType for $t {}
    };
}
float_dtype!(f32, F32, |v| v as f32, |s| s as f64);
float_dtype!(f64, F64, |v| v, |s| s);
float_dtype!(f16, F16, |v| f16::from_f32(f32_round_to_odd(v)), |s| s
    .to_f64());
float_dtype!(bf16, BF16, |v| bf16::from_f32(f32_round_to_odd(v)), |s| s
    .to_f64());

/// `v` rounded to f32 toward zero, with the last bit set when that drops
/// anything (rounding to odd): rounding the result to a float of at most
/// 21 significant bits (f16, bf16) gives what rounding `v` itself to
/// nearest even gives. `half`'s own `from_f64` drops the low 32 bits of
/// `v` before it rounds, so a value just past a tie rounds as the tie
/// (an f32 sum of bf16 values converted through f64 came out one bf16
/// ulp below the GPU's correctly rounded result).
///
/// ```
/// use tensorfn_runtime::{bf16, DType};
/// // 158.5 is a tie between the bf16 values 158 and 159; just above it
/// // (in the f32 bits that `half` drops) is 159.
/// let above = f64::from(158.5f32 + 158.5f32 * f32::EPSILON);
/// assert_eq!(bf16::from_f64(above), bf16::from_f32(158.0)); // half: as the tie
/// assert_eq!(<bf16 as DType>::from_f64(above), bf16::from_f32(159.0));
/// assert_eq!(<bf16 as DType>::from_f64(158.5), bf16::from_f32(158.0)); // ties to even
/// ```
fn f32_round_to_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f as f64 == v {
        return f;
    }
    let mut bits = f.to_bits();
    if (f as f64).abs() > v.abs() {
        // One step toward zero: the magnitude's encoding is monotonic.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

impl sealed::Sealed for bool {}
impl DType for bool {
    const KIND: DTypeKind = DTypeKind::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

/// Proof that two tensors have the same dtype; the compiler names both and
/// the cast that fixes it when they differ.
///
/// ```
/// use tensorfn_runtime::{DType, SameDType};
/// fn sum_as_f64<A: DType + SameDType<B>, B: DType>(a: A, b: B) -> f64 {
///     a.to_f64() + b.to_f64()
/// }
/// assert_eq!(sum_as_f64(1.5f32, 2.0f32), 3.5);
/// ```
///
/// Mixing dtypes does not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{DType, SameDType};
/// fn sum_as_f64<A: DType + SameDType<B>, B: DType>(a: A, b: B) -> f64 {
///     a.to_f64() + b.to_f64()
/// }
/// sum_as_f64(1.5f32, 2.0f64);
/// ```
#[diagnostic::on_unimplemented(
    message = "dtype mismatch: `{Self}` and `{T}`",
    label = "this tensor is `{Self}`",
    note = "tensorfn never converts silently: cast one with `.cast::<{T}>()`"
)]
pub trait SameDType<T: DType>: DType {}
impl<T: DType> SameDType<T> for T {}

/// Whether the dtype `Self` is `U`, as a constant, so that an instance of
/// a generic function compiles only the body of its own dtype.
///
/// ```
/// use tensorfn_runtime::{bf16, __private::Is};
/// assert!(<f32 as Is<f32>>::IS);
/// assert!(!<bf16 as Is<f32>>::IS);
/// ```
pub trait Is<U: DType>: DType {
    /// True when `Self` and `U` are one dtype.
    const IS: bool;
}

impl<T: DType, U: DType> Is<U> for T {
    const IS: bool = T::KIND as u8 == U::KIND as u8;
}
