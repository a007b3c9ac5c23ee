//! The one place where an operation picks its backend from the device
//! type, plus the composite primitives every backend gets for free.
//! Tensors, conversions and streams reach their backend through it.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::cuda::{CudaBackend, CudaStorage};
use crate::device::Device;
use crate::dtype::{DType, FloatDType, NumDType};
use crate::error::Result;
use crate::layout::Layout;
use crate::storage::Storage;
use tensorfn_kernels::BinaryOp;

/// Runs `$body` with `$be` bound to the backend of device type `$D`: the
/// CPU, or the CUDA backend of the device's ordinal (`Err` when there is
/// no usable GPU). Both arms type-check the same body against [`Exec`].
macro_rules! dispatch {
    ($D:ty, |$be:ident| $body:expr) => {{
        #[allow(unused_imports)]
        use $crate::{backend::Backend as _, ops::dispatch::Exec as _};
        // An `if` on a constant: each instance compiles one backend.
        if <$D as $crate::device::Device>::IS_CPU {
            let $be = &$crate::cpu::CpuBackend;
            $body
        } else {
            let $be =
                &$crate::cuda::CudaBackend::for_ordinal(<$D as $crate::device::Device>::ORDINAL)?;
            $body
        }
    }};
}
pub(crate) use dispatch;

/// Waits until device `D` has finished all work queued so far, like
/// `torch.cuda.synchronize()`; an error of an earlier kernel surfaces here.
/// `Ok` at once on the CPU, whose operations finish before they return.
///
/// ```
/// use tensorfn_runtime::{synchronize, Cpu, Cuda, Tensor, shape};
/// synchronize::<Cpu>().unwrap();
/// if let Ok(x) = Tensor::<Cuda, f32, shape![1024]>::ones() {
///     let _y = x.exp().unwrap(); // queued
///     synchronize::<Cuda>().unwrap(); // done
/// }
/// ```
pub fn synchronize<D: Device>() -> Result<()> {
    dispatch!(D, |be| be.synchronize())
}

/// A backend as the ops layer drives it: its buffers inside [`Storage`],
/// and composite primitives with generic defaults that a backend may do
/// better itself.
pub(crate) trait Exec: Backend + Sized {
    /// The buffer of a tensor on this backend's device.
    fn buf<'s, T: DType>(&self, s: &'s Storage<T>) -> &'s Self::Buf<T>;
    /// The buffer of a tensor on this backend's device, for writing.
    fn buf_mut<'s, T: DType>(&self, s: &'s mut Storage<T>) -> &'s mut Self::Buf<T>;
    /// Wraps a buffer of this backend.
    fn wrap<T: DType>(&self, b: Self::Buf<T>) -> Storage<T>;

    /// `x + value * t1 * t2` (equal dims).
    fn addcmul<T: NumDType>(
        &self,
        x: [(&Self::Buf<T>, &Layout); 3],
        value: T,
    ) -> Result<Self::Buf<T>> {
        let [(a, la), (b, lb), (c, lc)] = x;
        let dense = Layout::contiguous(la.dims());
        let prod = self.binary(BinaryOp::Mul, b, lb, c, lc)?;
        let scaled = self.binary_scalar(BinaryOp::Mul, &prod, &dense, value, false)?;
        self.binary(BinaryOp::Add, a, la, &scaled, &dense)
    }

    /// `a @ b` for one `[1, m, k] x [1, k, n]` product with what `extra`
    /// names computed in the same pass, where the backend has one
    /// (cuBLASLt's epilogues): the sums over `k` of an operand, GELU with
    /// its pre-activation, or GELU's backward. `None` where it has not,
    /// and the caller runs the parts.
    fn matmul_epilogue<T: FloatDType>(
        &self,
        _a: (&Self::Buf<T>, &Layout),
        _b: (&Self::Buf<T>, &Layout),
        _extra: ProductExtra<'_, Self::Buf<T>>,
    ) -> Result<Option<ProductAndSecond<Self::Buf<T>>>> {
        Ok(None)
    }

    /// `dst = op(dst, b)` where `ld` selects the written elements.
    fn binary_assign<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut Self::Buf<T>,
        ld: &Layout,
        b: &Self::Buf<T>,
        lb: &Layout,
    ) -> Result<()> {
        let r = self.binary(op, dst, ld, b, lb)?;
        self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld)
    }

    /// `dst = op(dst, s)` where `ld` selects the written elements.
    fn binary_scalar_assign<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut Self::Buf<T>,
        ld: &Layout,
        s: T,
    ) -> Result<()> {
        let r = self.binary_scalar(op, dst, ld, s, false)?;
        self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld)
    }

    /// Writes `op(a, b)` to the elements `ld` selects in `dst`.
    #[allow(clippy::too_many_arguments)]
    fn binary_into<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &Self::Buf<T>,
        la: &Layout,
        b: &Self::Buf<T>,
        lb: &Layout,
        dst: &mut Self::Buf<T>,
        ld: &Layout,
    ) -> Result<()> {
        let r = self.binary(op, a, la, b, lb)?;
        self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld)
    }
}

/// What [`Exec::matmul_epilogue`] computes besides the product.
pub(crate) enum ProductExtra<'a, B> {
    /// The sums over `k` of `b` (`of_b`: `n` values) or of `a` (`m`).
    SumK { of_b: bool },
    /// `gelu(a @ b + bias)` (tanh form) as the product, and `a @ b +
    /// bias` (the pre-activation) as the second result; `bias` holds one
    /// value per column.
    GeluAux { bias: (&'a B, &'a Layout) },
    /// `(a @ b) * gelu'(pre)` for a contiguous `m x n` pre-activation,
    /// and its `n` column sums as the second result when `sums`.
    DGelu {
        pre: (&'a B, &'a Layout),
        sums: bool,
    },
}

impl<'a, B> ProductExtra<'a, B> {
    /// The same request with each buffer replaced by `f`'s (a tensor's
    /// storage by its backend's buffer).
    pub(crate) fn map<C>(self, f: impl Fn(&'a B) -> &'a C) -> ProductExtra<'a, C> {
        match self {
            ProductExtra::SumK { of_b } => ProductExtra::SumK { of_b },
            ProductExtra::GeluAux { bias: (b, l) } => ProductExtra::GeluAux { bias: (f(b), l) },
            ProductExtra::DGelu { pre: (p, l), sums } => ProductExtra::DGelu {
                pre: (f(p), l),
                sums,
            },
        }
    }
}

/// A product's buffer and, where its epilogue has one, a second result
/// (sums, or a pre-activation).
pub(crate) type ProductAndSecond<B> = (B, Option<B>);

/// The elements of a contiguous view, as a range of its buffer (empty
/// views may carry any offset).
fn dense_range(l: &Layout) -> std::ops::Range<usize> {
    match l.numel() {
        0 => 0..0,
        n => l.offset()..l.offset() + n,
    }
}

impl Exec for CpuBackend {
    fn buf<'s, T: DType>(&self, s: &'s Storage<T>) -> &'s Vec<T> {
        s.host_vec()
    }
    fn buf_mut<'s, T: DType>(&self, s: &'s mut Storage<T>) -> &'s mut Vec<T> {
        s.host_vec_mut()
    }
    fn wrap<T: DType>(&self, b: Vec<T>) -> Storage<T> {
        Storage::Cpu(b)
    }

    fn addcmul<T: NumDType>(&self, x: [(&Vec<T>, &Layout); 3], value: T) -> Result<Vec<T>> {
        self.addcmul_fused(x, value)
    }

    fn binary_assign<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut Vec<T>,
        ld: &Layout,
        b: &Vec<T>,
        lb: &Layout,
    ) -> Result<()> {
        if !ld.is_contiguous() {
            let r = self.binary(op, dst, ld, b, lb)?;
            return self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld);
        }
        let range = dense_range(ld);
        self.binary_assign_dense(op, &mut dst[range], ld.dims(), b, lb)
    }

    fn binary_scalar_assign<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut Vec<T>,
        ld: &Layout,
        s: T,
    ) -> Result<()> {
        if !ld.is_contiguous() {
            let r = self.binary_scalar(op, dst, ld, s, false)?;
            return self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld);
        }
        let range = dense_range(ld);
        self.binary_scalar_assign_dense(op, &mut dst[range], s)
    }

    fn binary_into<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &Vec<T>,
        la: &Layout,
        b: &Vec<T>,
        lb: &Layout,
        dst: &mut Vec<T>,
        ld: &Layout,
    ) -> Result<()> {
        if !ld.is_contiguous() {
            let r = self.binary(op, a, la, b, lb)?;
            return self.copy_into(&r, &Layout::contiguous(ld.dims()), dst, ld);
        }
        let range = dense_range(ld);
        self.binary_into_dense(op, a, la, b, lb, &mut dst[range])
    }
}

impl Exec for CudaBackend {
    fn buf<'s, T: DType>(&self, s: &'s Storage<T>) -> &'s CudaStorage<T> {
        s.as_cuda()
    }
    fn buf_mut<'s, T: DType>(&self, s: &'s mut Storage<T>) -> &'s mut CudaStorage<T> {
        match s {
            Storage::Cuda(c) => c,
            _ => unreachable!("a Cuda tensor holds device memory"),
        }
    }
    fn wrap<T: DType>(&self, b: CudaStorage<T>) -> Storage<T> {
        Storage::Cuda(b)
    }

    fn addcmul<T: NumDType>(
        &self,
        x: [(&CudaStorage<T>, &Layout); 3],
        value: T,
    ) -> Result<CudaStorage<T>> {
        self.addcmul_fused(x, value)
    }

    fn matmul_epilogue<T: FloatDType>(
        &self,
        a: (&CudaStorage<T>, &Layout),
        b: (&CudaStorage<T>, &Layout),
        extra: ProductExtra<'_, CudaStorage<T>>,
    ) -> Result<Option<ProductAndSecond<CudaStorage<T>>>> {
        self.gemm_epilogue(a, b, extra)
    }
}
