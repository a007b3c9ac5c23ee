//! Comparisons giving `bool` tensors, `where_`, `masked_fill` and `clamp`.
//!
//! Each is one elementwise kernel of the kernels IR, built once per op and
//! dtype at run time and applied through the fused-kernel path that runs
//! `tensor_fn!`'s kernels: its PTX on CUDA, a Rust closure computing the
//! same thing on the CPU. Scalars (`masked_fill`'s value, `clamp`'s
//! bounds) are rank-0 tensors on the same device, broadcast like any
//! operand, so one kernel serves every value.

use super::fused::{fused2, fused3};
use crate::cpu::blocks::Lanes;
use crate::cpu::scalar::{max_nan, min_nan};
use crate::device::Device;
use crate::dtype::{DType, NumDType};
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tensorfn_core::rules;
use tensorfn_kernels::ir::{ElementwiseBuilder, Value};
use tensorfn_kernels::ptx::{self, Target};
use tensorfn_kernels::{BinaryOp, CmpOp, DTypeKind, FusedKernel};

/// Which kernel built at run time: the op and the dtype of its data
/// operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Which {
    Compare(CmpOp),
    Where,
    MaskedFill,
    Clamp,
    /// `g * gelu'(x)`, GELU's backward where no product runs it
    /// (`Tensor::gelu_backward`).
    GeluBackward,
}

/// The kernel of `which` over `dtype`, built on first use: its inputs and
/// body written by `build` with the kernels crate's builder, its PTX
/// texts generated once and kept for the process (there are at most a
/// few dozen).
pub(super) fn kernel(
    which: Which,
    dtype: DTypeKind,
    build: impl FnOnce(&mut ElementwiseBuilder) -> Value,
) -> Result<&'static FusedKernel> {
    static KERNELS: OnceLock<Mutex<HashMap<(Which, DTypeKind), &'static FusedKernel>>> =
        OnceLock::new();
    let cache = KERNELS.get_or_init(Default::default);
    // A panic elsewhere while the lock was held leaves the map valid.
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = map.get(&(which, dtype)) {
        return Ok(k);
    }
    let failed = |e: tensorfn_kernels::Error| Error::DType {
        op: format!("{which:?}"),
        expected: "operands the kernel is defined on".into(),
        found: e.to_string(),
    };
    let mut b = ElementwiseBuilder::new();
    let out = build(&mut b);
    let k = b.output(out).map_err(failed)?;
    let name = k.default_name();
    let text = ptx::elementwise(&k, &name).map_err(failed)?;
    let sm80 = if ptx::differs_on(&k, Target::Sm80) {
        Some(ptx::elementwise_for(&k, &name, Target::Sm80).map_err(failed)?)
    } else {
        None
    };
    let fused: &'static FusedKernel = Box::leak(Box::new(FusedKernel {
        name: Box::leak(name.into_boxed_str()),
        ptx: Box::leak(text.into_boxed_str()),
        ptx_sm80: sm80.map(|t| &*Box::leak(t.into_boxed_str())),
        inputs: Box::leak(k.inputs().to_vec().into_boxed_slice()),
        output: k.output_dtype(),
    }));
    map.insert((which, dtype), fused);
    Ok(fused)
}

fn compare_kernel(op: CmpOp, t: DTypeKind) -> Result<&'static FusedKernel> {
    kernel(Which::Compare(op), t, |b| {
        let (x, y) = (b.input(t), b.input(t));
        b.compare(op, x, y)
    })
}

/// `op(a, b)` with `a` and `b` broadcast together, as `bool`.
fn compare<D: Device, T: NumDType, SO: Shape>(
    op: CmpOp,
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
) -> Result<Tensor<D, bool, SO>> {
    let dims = rules::broadcast(op.name(), &[("self", a.dims()), ("other", b.dims())])?;
    let k = compare_kernel(op, T::KIND)?;
    // One loop per comparison, the comparison inlined in it.
    tensorfn_core::with_cmp_op!(op, C => {
        fused2(a, b, &dims, k, |_: &mut Lanes, x: T, y: T| C.apply(x, y))
    })
}

macro_rules! compare_methods {
    ($($name:ident, $scalar:ident => $op:ident, $sym:literal;)*) => {
        $(
            #[doc = concat!("`self ", $sym, " other` elementwise, broadcast as in PyTorch, as a `bool` tensor")]
            /// (floats compare as IEEE: every comparison with NaN is false
            /// but `ne`).
            ///
            /// ```
            /// use tensorfn_runtime::{Tensor, Cpu, shape};
            /// let a = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., f32::NAN]).unwrap();
            /// let b = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![2., 2., 0.]).unwrap();
            #[doc = concat!("let c: Tensor<Cpu, bool, shape![3]> = a.", stringify!($name), "(&b).unwrap();")]
            /// let want: Vec<bool> = [(1f32, 2f32), (2., 2.), (f32::NAN, 0.)]
            #[doc = concat!("    .iter().map(|&(x, y)| x ", $sym, " y).collect();")]
            /// assert_eq!(c.to_vec().unwrap(), want);
            /// ```
            pub fn $name<SO: Shape>(&self, other: &Tensor<D, T, impl Shape>) -> Result<Tensor<D, bool, SO>> {
                compare(CmpOp::$op, self, other)
            }

            #[doc = concat!("`self ", $sym, " value` elementwise, as a `bool` tensor of `self`'s shape.")]
            ///
            /// ```
            /// use tensorfn_runtime::{Tensor, Cpu, shape};
            /// let a = Tensor::<Cpu, i64, shape![3]>::from_vec(vec![1, 2, 3]).unwrap();
            #[doc = concat!("let c = a.", stringify!($scalar), "(2).unwrap().to_vec().unwrap();")]
            #[doc = concat!("assert_eq!(c, [1i64, 2, 3].iter().map(|&x| x ", $sym, " 2).collect::<Vec<_>>());")]
            /// ```
            pub fn $scalar(&self, value: T) -> Result<Tensor<D, bool, S>> {
                compare(CmpOp::$op, self, &Tensor::<D, T, ()>::full(value)?)
            }
        )*
    };
}

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    compare_methods! {
        eq, eq_scalar => Eq, "==";
        ne, ne_scalar => Ne, "!=";
        lt, lt_scalar => Lt, "<";
        le, le_scalar => Le, "<=";
        gt, gt_scalar => Gt, ">";
        ge, ge_scalar => Ge, ">=";
    }

    /// `value` where `mask` is true, else `self` (PyTorch's `masked_fill`);
    /// `mask` broadcasts to `self`'s shape.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let upper = Tensor::<Cpu, bool, shape![2]>::from_vec(vec![false, true]).unwrap();
    /// let y = x.masked_fill(&upper, f32::NEG_INFINITY).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1., f32::NEG_INFINITY, 3., f32::NEG_INFINITY]);
    /// ```
    pub fn masked_fill(&self, mask: &Tensor<D, bool, impl Shape>, value: T) -> Result<Self> {
        rules::broadcast_to("masked_fill", ("mask", mask.dims()), self.dims())?;
        let t = T::KIND;
        let k = kernel(Which::MaskedFill, t, |b| {
            let (x, m, v) = (b.input(t), b.input(DTypeKind::Bool), b.input(t));
            b.select(m, v, x)
        })?;
        let value = Tensor::<D, T, ()>::full(value)?;
        fused3(
            self,
            mask,
            &value,
            self.dims(),
            k,
            |_: &mut Lanes, x: T, m: bool, v: T| {
                if m {
                    v
                } else {
                    x
                }
            },
        )
    }

    /// `min(max(self, min), max)` elementwise (PyTorch's `clamp`; NaN stays
    /// NaN, and `min > max` gives `max` everywhere, as in PyTorch).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![4]>::from_vec(vec![-2., 0.5, 9., f32::NAN]).unwrap();
    /// let y = x.clamp(0., 1.).unwrap().to_vec().unwrap();
    /// assert_eq!(&y[..3], &[0., 0.5, 1.]);
    /// assert!(y[3].is_nan());
    /// ```
    pub fn clamp(&self, min: T, max: T) -> Result<Self> {
        let t = T::KIND;
        let k = kernel(Which::Clamp, t, |b| {
            let (x, lo, hi) = (b.input(t), b.input(t), b.input(t));
            let low = b.binary(BinaryOp::Max, x, lo);
            b.binary(BinaryOp::Min, low, hi)
        })?;
        let (lo, hi) = (
            Tensor::<D, T, ()>::full(min)?,
            Tensor::<D, T, ()>::full(max)?,
        );
        fused3(
            self,
            &lo,
            &hi,
            self.dims(),
            k,
            |_: &mut Lanes, x: T, lo: T, hi: T| min_nan(max_nan(x, lo), hi),
        )
    }
}

/// `a` where `condition` is true, else `b`, all three broadcast together
/// (PyTorch's `torch.where`).
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// use tensorfn_runtime::ops::where_;
/// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![-1., 2., -3.]).unwrap();
/// let positive = x.gt_scalar(0.).unwrap();
/// let zero = Tensor::<Cpu, f32, shape![]>::zeros().unwrap();
/// let y: Tensor<Cpu, f32, shape![3]> = where_(&positive, &x, &zero).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![0., 2., 0.]);
/// ```
pub fn where_<D: Device, T: DType, SO: Shape>(
    condition: &Tensor<D, bool, impl Shape>,
    a: &Tensor<D, T, impl Shape>,
    b: &Tensor<D, T, impl Shape>,
) -> Result<Tensor<D, T, SO>> {
    let dims = rules::broadcast(
        "where_",
        &[
            ("condition", condition.dims()),
            ("input", a.dims()),
            ("other", b.dims()),
        ],
    )?;
    let t = T::KIND;
    let k = kernel(Which::Where, t, |bld| {
        let (c, x, y) = (bld.input(DTypeKind::Bool), bld.input(t), bld.input(t));
        bld.select(c, x, y)
    })?;
    fused3(
        condition,
        a,
        b,
        &dims,
        k,
        |_: &mut Lanes, c: bool, x: T, y: T| {
            if c {
                x
            } else {
                y
            }
        },
    )
}
