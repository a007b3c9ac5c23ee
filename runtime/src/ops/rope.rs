//! Rotary position embedding, `rope`, one fused kernel on the CPU and on
//! CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;

/// A shape of rank 2 or more, `[.., T, D]`: the positions and the
/// rotated dim of `rope`, whose `cos` and `sin` are `[T, D]`.
///
/// ```
/// use std::any::type_name;
/// use tensorfn_runtime::{shape, LastTwoDims};
/// fn last_two<S: LastTwoDims>() -> (&'static str, &'static str) {
///     (type_name::<S::Positions>(), type_name::<S::Last>())
/// }
/// let (t, d) = last_two::<shape![2, 12, 16, 64]>();
/// assert!(t.ends_with("Const<16>") && d.ends_with("Const<64>"));
/// ```
///
/// A vector has no positions:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![4]>::zeros().unwrap();
/// let c = Tensor::<Cpu, f32, shape![1, 4]>::ones().unwrap();
/// let _ = x.rope(&c, &c);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no `[.., T, D]` dims for `rope`",
    label = "`rope` needs a tensor of rank 2 or more",
    note = "positions are the second-to-last dim: reshape a single row with `.reshape::<shape![1, D]>()`"
)]
pub trait LastTwoDims: Shape {
    /// The positions' dim (`T`).
    type Positions: Dim;
    /// The rotated dim (`D`).
    type Last: Dim;
}

macro_rules! last_two {
    ($($all:ident),* ; $t:ident, $d:ident) => {
        impl<$($all: Dim,)* $t: Dim, $d: Dim> LastTwoDims for ($($all,)* $t, $d) {
            type Positions = $t;
            type Last = $d;
        }
    };
}
last_two!(; A, B);
last_two!(A; B, C);
last_two!(A, B; C, E);
last_two!(A, B, C; E, F);
last_two!(A, B, C, E; F, G);

impl<D: Device, T: FloatDType, S: LastTwoDims> Tensor<D, T, S> {
    /// Rotary position embedding in the Hugging Face Llama convention:
    /// `x * cos + rotate_half(x) * sin`, where `rotate_half(x)` is
    /// `cat([-x2, x1], -1)` of the halves of the last dim. `self` is
    /// `[.., T, D]` (`D` even) and `cos`, `sin` are `[T, D]`, broadcast
    /// over the leading dims; computed in f32 (f64 for f64) and rounded
    /// once. An odd `D` is an `Err`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// // One position, a quarter turn of the pairs (x0, x2) and (x1, x3).
    /// let x = Tensor::<Cpu, f32, shape![1, 1, 4]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let cos = Tensor::<Cpu, f32, shape![1, 4]>::zeros().unwrap();
    /// let sin = Tensor::<Cpu, f32, shape![1, 4]>::ones().unwrap();
    /// let y = x.rope(&cos, &sin).unwrap().to_vec().unwrap();
    /// assert_eq!(y, vec![-3., -4., 1., 2.]);
    /// ```
    pub fn rope(
        &self,
        cos: &Tensor<D, T, (S::Positions, S::Last)>,
        sin: &Tensor<D, T, (S::Positions, S::Last)>,
    ) -> Result<Self> {
        let dims = rules::rope(
            "rope",
            ("input", self.dims()),
            ("cos", cos.dims()),
            ("sin", sin.dims()),
        )?;
        let storage = dispatch!(D, |be| be.wrap(be.rope(
            (be.buf(&self.storage), &self.layout),
            (be.buf(&cos.storage), &cos.layout),
            (be.buf(&sin.storage), &sin.layout),
        )?));
        output(storage, &dims)
    }
}
