//! Row ops along one dim: `softmax`, `log_softmax`, ..., one typed method
//! per entry of the catalogue's row-op table.

use super::check_result;
use super::dispatch::dispatch;
use super::index::RemoveDim;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::{RowOp, RowShape};

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// Row op `op` along `dim`, computed in at least f32; the result type
    /// `SO` (the input's dims, or the input's dims without `dim` for an op
    /// that removes it) is checked at run time. The typed methods
    /// (`x.softmax::<1>()`) check it at compile time.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// use tensorfn_kernels::RowOp;
    /// let x = Tensor::<Cpu, f32, shape![1, 2]>::from_vec(vec![1000., 1000.]).unwrap();
    /// let y = x.row_op::<shape![1, 2]>(RowOp::Softmax, 1).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0.5, 0.5]);
    /// assert!(x.row_op::<shape![1, 2]>(RowOp::Softmax, 2).is_err()); // no dim 2
    /// assert!(x.row_op::<shape![2, 1]>(RowOp::Softmax, 1).is_err()); // not its dims
    /// ```
    pub fn row_op<SO: Shape>(&self, op: RowOp, dim: usize) -> Result<Tensor<D, T, SO>> {
        let removed = rules::reduce(op.name(), ("self", self.dims()), dim, false)?;
        let dims = match op.shape() {
            RowShape::Keep => self.dims().to_vec(),
            RowShape::Reduce => removed,
        };
        check_result::<SO>(op.name(), &dims)?;
        let storage = dispatch!(D, |be| be.wrap(be.row_op(
            op,
            be.buf(&self.storage),
            &self.layout,
            dim
        )?));
        output(storage, &dims)
    }
}

/// One method per op of the catalogue's row-op table, on float dtypes:
/// `Self` for an op that keeps its dim, the dims without `DIM` for one
/// that removes it.
macro_rules! row_methods {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { dtype: $dtype:ident, shape: $shape:ident, $($field:tt)* })*) => {
        $(row_method!($shape, $V, $m, $($doc)*);)*
    };
}

macro_rules! row_method {
    (Keep, $V:ident, $m:ident, $($doc:literal)*) => {
        row_method!(@fn Self, $V, $m, $($doc)*);
    };
    (Reduce, $V:ident, $m:ident, $($doc:literal)*) => {
        row_method!(@fn Tensor<D, T, S::Output>, $V, $m, $($doc)*);
    };
    (@fn $out:ty, $V:ident, $m:ident, $($doc:literal)*) => {
        impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
            $(#[doc = $doc])*
            ///
            /// Along dim `DIM`, numerically stable, computed in at least
            /// f32, on the CPU and on CUDA; see
            #[doc = concat!("[`RowOp::", stringify!($V), "`] for its reference.")]
            ///
            /// ```
            /// use tensorfn_runtime::{Tensor, Cpu, shape};
            /// use tensorfn_kernels::RowOp;
            /// let xs = vec![0.5, -1.0, 2.0, 1000.0, 999.0, -3.0];
            /// let x = Tensor::<Cpu, f64, shape![2, 3]>::from_vec(xs.clone()).unwrap();
            #[doc = concat!("let y = x.", stringify!($m), "::<1>().unwrap().to_vec().unwrap();")]
            #[doc = concat!("let want: Vec<f64> = xs.chunks(3).flat_map(|r| RowOp::", stringify!($V), ".eval_f64(r)).collect();")]
            /// assert_eq!(y.len(), want.len());
            /// for (y, w) in y.iter().zip(&want) {
            ///     assert!((y - w).abs() <= 1e-13 * w.abs().max(1.0), "{y} vs {w}");
            /// }
            /// ```
            pub fn $m<const DIM: usize>(&self) -> Result<$out>
            where
                S: RemoveDim<DIM>,
            {
                self.row_op(RowOp::$V, DIM)
            }
        }
    };
}

tensorfn_core::for_each_row_op!(row_methods);
