//! Sums over a leading dim of f16 and bf16 tensors as a matrix product.
//!
//! A bias's or a norm's gradient is a `[rows, cols]` gradient summed over
//! its rows (`rows` = batch times positions). The generic path makes the
//! summed dim the last one with a transposing copy, then reduces rows,
//! which costs two passes and a strided one; `ones[1, rows] @ x[rows,
//! cols]` reads `x` once, in order, on the tensor cores, accumulating in
//! f32 like the row kernel (products by 1 are exact), and rounds once.
//! f32 and f64 keep the kernels: with TF32 allowed a product would round
//! their inputs.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use crate::backend::Backend;
use crate::cpu::typed::with_type_among;
use crate::dtype::{DType, NumDType};
use crate::error::Result;
use crate::layout::Layout;
use std::any::Any;

impl CudaBackend {
    /// The sum over `dim` of a contiguous f16 or bf16 `x` whose dims
    /// before `dim` are all 1 and which has dims after it, as a product;
    /// `None` (nothing queued) for any other operand.
    pub(crate) fn column_sum<T: NumDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Option<CudaStorage<T>>> {
        let dims = l.dims();
        if !l.is_contiguous() || dim + 1 >= dims.len() || dims[..dim].iter().any(|&d| d != 1) {
            return Ok(None);
        }
        let (rows, cols) = (dims[dim], dims[dim + 1..].iter().product::<usize>());
        if rows < 2 || cols == 0 {
            return Ok(None);
        }
        with_type_among!(T, U => {
            let xs = (x as &dyn Any)
                .downcast_ref::<CudaStorage<U>>()
                .expect("T is U");
            let ones = self.full::<U>(rows, U::one())?;
            // The backend's products take `[batch, m, k]` layouts.
            let lx = Layout::new(vec![1, rows, cols], vec![rows * cols, cols, 1], l.offset());
            let out = self.matmul::<U>(
                &ones,
                &Layout::contiguous(&[1, 1, rows]),
                xs,
                &lx,
                None,
                U::one(),
                U::zero(),
            )?;
            let out: Box<dyn Any> = Box::new(out);
            Ok(Some(*out.downcast::<CudaStorage<T>>().expect("U is T")))
        }, [half::f16, half::bf16], Ok(None))
    }
}
