//! The `Backend` primitives on one CUDA device: memsets and copies, the
//! built-in PTX kernels of the kernels crate, and cuBLAS for products.
//!
//! Every primitive first checks that the layouts it was given stay inside
//! their storage, so an indexing mistake is an `Err` here instead of an
//! illegal memory access inside a kernel.

use super::alloc::CudaStorage;
use super::context::{context, Context};
use super::error::driver;
use super::handles::Epilogue;
use super::modules::Builtin;
use super::xent::Pass;
use super::Count;
use crate::backend::{AttnMaskArg, Backend, Gathered, RowBlocks, Selected};
use crate::dtype::{DType, FloatDType, IndexDType, NumDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use cudarc::driver::{result, sys};
use std::borrow::Cow;
use std::sync::Arc;
use tensorfn_core::ops::conv::ConvArgs;
use tensorfn_core::ops::pool::Pool2d;
use tensorfn_core::ops::xent::CrossEntropyArgs;
use tensorfn_kernels::{BinaryOp, NormOp, ReduceOp, RowOp, RowShape, UnaryOp};

/// The CUDA backend for one ordinal.
#[derive(Clone, Debug)]
pub(crate) struct CudaBackend {
    ctx: Arc<Context>,
}

/// `Err(Index)` unless every element `l` selects lies inside `s`.
pub(super) fn check_extent<T: DType>(
    op: &str,
    operand: &str,
    s: &CudaStorage<T>,
    l: &Layout,
) -> Result<()> {
    let extent = l.storage_extent();
    if extent > s.len() {
        return Err(Error::Index(format!(
            "{op}: `{operand}` with dims {:?}, strides {:?} and offset {} reaches element {} \
             of a device buffer of {} elements",
            l.dims(),
            l.strides(),
            l.offset(),
            extent - 1,
            s.len()
        )));
    }
    Ok(())
}

fn same_dims(op: &str, a: &Layout, b: &Layout) -> Result<()> {
    if a.dims() != b.dims() {
        return Err(Error::shape(
            op,
            format!(
                "operands of equal dims (broadcast first), got {:?}",
                a.dims()
            ),
            format!("{:?}", b.dims()),
        ));
    }
    Ok(())
}

/// The permutation moving `dim` last, keeping the others in order.
fn dim_last(rank: usize, dim: usize) -> Vec<usize> {
    (0..rank).filter(|&d| d != dim).chain([dim]).collect()
}

impl CudaBackend {
    /// The backend of cuda:`ord`, creating its context on first use.
    pub(crate) fn for_ordinal(ord: usize) -> Result<CudaBackend> {
        Ok(CudaBackend { ctx: context(ord)? })
    }

    /// The backend of an existing context.
    pub(crate) fn on(ctx: Arc<Context>) -> CudaBackend {
        CudaBackend { ctx }
    }

    /// The context (device, stream, caches) this backend runs on.
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// [`Backend::matmul_relu`] with a bias, the form a linear layer has.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn addmm_relu<T: FloatDType>(
        &self,
        bias: (&CudaStorage<T>, &Layout),
        a: &CudaStorage<T>,
        la: &Layout,
        b: &CudaStorage<T>,
        lb: &Layout,
        alpha: T,
        beta: T,
    ) -> Result<CudaStorage<T>> {
        self.matmul_act(a, la, b, lb, Some(bias), (alpha, beta), UnaryOp::Relu)
    }

    /// `x + value * t1 * t2` (equal dims) in one kernel that rounds once,
    /// like the CPU backend; three separate kernels would round after each
    /// step, which for f16/bf16 loses the result when the terms cancel.
    pub(crate) fn addcmul_fused<T: NumDType>(
        &self,
        x: [(&CudaStorage<T>, &Layout); 3],
        value: T,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let [(a, la), (b, lb), (c, lc)] = x;
        same_dims("addcmul", la, lb)?;
        same_dims("addcmul", la, lc)?;
        check_extent("addcmul", "self", a, la)?;
        check_extent("addcmul", "tensor1", b, lb)?;
        check_extent("addcmul", "tensor2", c, lc)?;
        let out = self.ctx.storage::<T>(la.numel())?;
        if la.numel() == 0 {
            return Ok(out);
        }
        let v = self.scalar(value)?;
        let lv = Layout::new(la.dims().to_vec(), vec![0; la.rank()], 0);
        self.ctx.builtin_elementwise(
            Builtin::Addcmul(T::KIND),
            (out.device_ptr(), &Layout::contiguous(la.dims())),
            &[
                (a.ptr_at(la.offset()), la),
                (b.ptr_at(lb.offset()), lb),
                (c.ptr_at(lc.offset()), lc),
                (v.device_ptr(), &lv),
            ],
        )?;
        Ok(out)
    }

    /// A one-element buffer holding `value`, written by memsets so that no
    /// host memory has to stay alive for it.
    fn scalar<T: DType>(&self, value: T) -> Result<CudaStorage<T>> {
        let out = self.ctx.storage::<T>(1)?;
        let bytes = value_bytes(value);
        let ptr = out.device_ptr();
        if bytes.len() == 8 {
            let lo = u32::from_le_bytes(bytes[..4].try_into().expect("8 bytes"));
            let hi = u32::from_le_bytes(bytes[4..].try_into().expect("8 bytes"));
            self.memset32(ptr, lo, 1)?;
            self.memset32(ptr + 4, hi, 1)?;
        } else {
            self.memset(ptr, &bytes, 1)?;
        }
        Ok(out)
    }

    /// Sets every element of `out` to `value`: a memset where one exists
    /// for the element's size (or the value is zero), else the copy
    /// kernel broadcasting one element.
    pub(crate) fn fill<T: DType>(&self, out: &CudaStorage<T>, value: T) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let bytes = value_bytes(value);
        if bytes.len() < 8 {
            self.memset(out.device_ptr(), &bytes, n)?;
        } else if bytes.iter().all(|&b| b == 0) {
            self.memset32(out.device_ptr(), 0, 2 * n)?;
        } else {
            // No 64-bit memset: broadcast one element with the copy kernel.
            let one = self.scalar(value)?;
            self.ctx.builtin_elementwise(
                Builtin::Cast(T::KIND, T::KIND),
                (out.device_ptr(), &Layout::contiguous(&[n])),
                &[(one.device_ptr(), &Layout::new(vec![n], vec![0], 0))],
            )?;
        }
        Ok(())
    }

    pub(crate) fn memset32(&self, ptr: u64, value: u32, n: usize) -> Result<()> {
        // SAFETY: the caller owns `n` 32-bit words at `ptr`.
        unsafe { sys::cuMemsetD32Async(ptr, value, n, self.ctx.stream) }
            .result()
            .map_err(|e| driver("cuMemsetD32Async", e))
    }

    /// Fills `n` elements of 1, 2 or 4 bytes at `ptr` with `bytes`.
    fn memset(&self, ptr: u64, bytes: &[u8], n: usize) -> Result<()> {
        let stream = self.ctx.stream;
        // SAFETY: the caller owns `n` elements of `bytes.len()` bytes.
        let status = unsafe {
            match bytes.len() {
                1 => sys::cuMemsetD8Async(ptr, bytes[0], n, stream),
                2 => {
                    sys::cuMemsetD16Async(ptr, u16::from_le_bytes([bytes[0], bytes[1]]), n, stream)
                }
                4 => sys::cuMemsetD32Async(
                    ptr,
                    u32::from_le_bytes(bytes.try_into().expect("4 bytes")),
                    n,
                    stream,
                ),
                other => unreachable!("memset of {other}-byte elements"),
            }
        };
        status.result().map_err(|e| driver("cuMemsetAsync", e))
    }

    /// Rows of `cols` elements along `dim`, contiguous: the input itself
    /// when `dim` is already last and contiguous, else a permuted copy.
    pub(crate) fn rows_of<T: DType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<(u64, Option<CudaStorage<T>>)> {
        let moved = l.permute(&dim_last(l.rank(), dim));
        if moved.is_contiguous() {
            return Ok((x.ptr_at(moved.offset()), None));
        }
        let copy = self.contiguous(x, &moved)?;
        Ok((copy.device_ptr(), Some(copy)))
    }

    /// `Err(Arithmetic)` when `op` is an integer division and the divisor
    /// holds a 0, as on the CPU (PyTorch raises `ZeroDivisionError`). Costs
    /// one small reduction and a synchronisation.
    fn check_divisor<T: NumDType>(
        &self,
        op: BinaryOp,
        divisor: &CudaStorage<T>,
        l: &Layout,
        operand: &str,
    ) -> Result<()> {
        if op != BinaryOp::Div || T::KIND.is_float() || l.numel() == 0 {
            return Ok(());
        }
        // min over (x != 0) is 0 exactly when some x is 0.
        let nonzero = self.cast::<T, bool>(divisor, l)?.into_bytes();
        let n = l.numel();
        let min = self.reduce(ReduceOp::Min, &nonzero, &Layout::contiguous(&[1, n]), 1)?;
        let mut byte = [0u8];
        self.ctx.copy_dtoh(min.device_ptr(), &mut byte)?;
        if byte[0] == 0 {
            return Err(zero_division(op, operand));
        }
        Ok(())
    }

    fn check_dim(op: &str, l: &Layout, dim: usize) -> Result<()> {
        if dim >= l.rank() {
            return Err(Error::shape(
                op,
                format!("a dim below the rank {}", l.rank()),
                format!("dim {dim}"),
            ));
        }
        Ok(())
    }
}

fn zero_division(op: BinaryOp, operand: &str) -> Error {
    Error::Arithmetic {
        op: op.name().into(),
        message: format!(
            "integer division by zero: {operand} contains 0 (PyTorch raises ZeroDivisionError); \
             cast to a float dtype with `.cast::<f32>()` to get inf/NaN instead"
        ),
    }
}

/// Number of elements left when `dim` is reduced away.
fn rows_without(l: &Layout, dim: usize) -> usize {
    l.dims()
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != dim)
        .map(|(_, &n)| n)
        .product()
}

/// The bytes of one value as the device stores it.
fn value_bytes<T: DType>(value: T) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    // SAFETY: dtype values are plain data without padding.
    unsafe { std::slice::from_raw_parts(&value as *const T as *const u8, size) }.to_vec()
}

impl Backend for CudaBackend {
    type Buf<T: DType> = CudaStorage<T>;

    fn full<T: DType>(&self, n: usize, value: T) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let out = self.ctx.storage::<T>(n)?;
        self.fill(&out, value)?;
        Ok(out)
    }

    fn filled<T: DType>(&self, n: usize, value: T) -> Result<CudaStorage<T>> {
        // Filled where it lives: nothing crosses the bus.
        self.full(n, value)
    }

    fn upload<T: DType>(&self, data: Cow<'_, [T]>) -> Result<CudaStorage<T>> {
        self.upload_host(&data)
    }

    fn download<T: DType>(&self, x: &CudaStorage<T>, l: &Layout) -> Result<Vec<T>> {
        self.download_host(x, l)
    }

    fn download_into<T: DType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        dst: &mut [T],
        pinned: bool,
    ) -> Result<()> {
        self.download_host_into(x, l, dst, pinned)
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.sync("synchronize")
    }

    fn free_memory(&self) -> Result<Option<usize>> {
        // Blocks the caching allocator holds unused are free for tensors.
        let (free, _) = self.ctx.mem_info()?;
        Ok(Some(free + self.ctx.memory_stats().cached_bytes))
    }

    fn alloc<T: DType>(&self, n: usize) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        self.ctx.storage::<T>(n)
    }

    fn cat_rows<T: DType>(&self, plan: &RowBlocks<'_, CudaStorage<T>>) -> Result<CudaStorage<T>> {
        self.cat_rows_gpu(plan)
    }

    fn contiguous<T: DType>(&self, x: &CudaStorage<T>, l: &Layout) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        check_extent("contiguous", "self", x, l)?;
        let n = l.numel();
        let out = self.ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(out);
        }
        if l.is_contiguous() {
            let bytes = n * std::mem::size_of::<T>();
            // SAFETY: both ranges hold `bytes` bytes (extent checked).
            unsafe {
                result::memcpy_dtod_async(
                    out.device_ptr(),
                    x.ptr_at(l.offset()),
                    bytes,
                    self.ctx.stream,
                )
            }
            .map_err(|e| driver("cuMemcpyDtoDAsync", e))?;
            super::counters::copy(Count::DeviceToDevice, Count::DeviceToDeviceBytes, bytes);
        } else {
            self.ctx.builtin_elementwise(
                Builtin::Cast(T::KIND, T::KIND),
                (out.device_ptr(), &Layout::contiguous(l.dims())),
                &[(x.ptr_at(l.offset()), l)],
            )?;
        }
        Ok(out)
    }

    fn copy_into<T: DType>(
        &self,
        src: &CudaStorage<T>,
        ls: &Layout,
        dst: &mut CudaStorage<T>,
        ld: &Layout,
    ) -> Result<()> {
        self.ctx.bind()?;
        same_dims("copy_into", ld, ls)?;
        check_extent("copy_into", "src", src, ls)?;
        check_extent("copy_into", "dst", dst, ld)?;
        let n = ls.numel();
        if n == 0 {
            return Ok(());
        }
        if ls.is_contiguous() && ld.is_contiguous() {
            let bytes = n * std::mem::size_of::<T>();
            super::counters::copy(Count::DeviceToDevice, Count::DeviceToDeviceBytes, bytes);
            // SAFETY: both ranges hold `bytes` bytes (extents checked).
            unsafe {
                result::memcpy_dtod_async(
                    dst.ptr_at(ld.offset()),
                    src.ptr_at(ls.offset()),
                    bytes,
                    self.ctx.stream,
                )
            }
            .map_err(|e| driver("cuMemcpyDtoDAsync", e))
        } else {
            self.ctx.builtin_elementwise(
                Builtin::Cast(T::KIND, T::KIND),
                (dst.ptr_at(ld.offset()), ld),
                &[(src.ptr_at(ls.offset()), ls)],
            )
        }
    }

    fn unary<T: NumDType>(
        &self,
        op: UnaryOp,
        x: &CudaStorage<T>,
        l: &Layout,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        check_extent(op.name(), "self", x, l)?;
        let out = self.ctx.storage::<T>(l.numel())?;
        self.ctx.builtin_elementwise(
            Builtin::Unary(op, T::KIND),
            (out.device_ptr(), &Layout::contiguous(l.dims())),
            &[(x.ptr_at(l.offset()), l)],
        )?;
        Ok(out)
    }

    fn binary<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &CudaStorage<T>,
        la: &Layout,
        b: &CudaStorage<T>,
        lb: &Layout,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        same_dims(op.name(), la, lb)?;
        check_extent(op.name(), "self", a, la)?;
        check_extent(op.name(), "other", b, lb)?;
        self.check_divisor(op, b, lb, "the divisor `other`")?;
        let out = self.ctx.storage::<T>(la.numel())?;
        self.ctx.builtin_elementwise(
            Builtin::Binary(op, T::KIND),
            (out.device_ptr(), &Layout::contiguous(la.dims())),
            &[(a.ptr_at(la.offset()), la), (b.ptr_at(lb.offset()), lb)],
        )?;
        Ok(out)
    }

    fn binary_scalar<T: NumDType>(
        &self,
        op: BinaryOp,
        x: &CudaStorage<T>,
        l: &Layout,
        s: T,
        scalar_first: bool,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        check_extent(op.name(), "self", x, l)?;
        let out = self.ctx.storage::<T>(l.numel())?;
        if l.numel() == 0 {
            return Ok(out);
        }
        if scalar_first {
            self.check_divisor(op, x, l, "the divisor `self`")?;
        } else if op == BinaryOp::Div && !T::KIND.is_float() && s == T::zero() {
            return Err(zero_division(op, "the scalar divisor"));
        }
        let scalar = self.scalar(s)?;
        let sl = Layout::new(l.dims().to_vec(), vec![0; l.rank()], 0);
        let xs = (x.ptr_at(l.offset()), l);
        let ss = (scalar.device_ptr(), &sl);
        let inputs = if scalar_first { [ss, xs] } else { [xs, ss] };
        self.ctx.builtin_elementwise(
            Builtin::Binary(op, T::KIND),
            (out.device_ptr(), &Layout::contiguous(l.dims())),
            &inputs,
        )?;
        Ok(out)
    }

    fn cast<T: DType, U: DType>(&self, x: &CudaStorage<T>, l: &Layout) -> Result<CudaStorage<U>> {
        self.ctx.bind()?;
        check_extent("cast", "self", x, l)?;
        let out = self.ctx.storage::<U>(l.numel())?;
        self.ctx.builtin_elementwise(
            Builtin::Cast(T::KIND, U::KIND),
            (out.device_ptr(), &Layout::contiguous(l.dims())),
            &[(x.ptr_at(l.offset()), l)],
        )?;
        Ok(out)
    }

    fn reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        Self::check_dim(op.name(), l, dim)?;
        check_extent(op.name(), "self", x, l)?;
        let cols = l.dims()[dim];
        let rows = rows_without(l, dim);
        if rows == 0 {
            return self.ctx.storage::<T>(0);
        }
        if cols == 0 {
            return match op {
                ReduceOp::Sum => self.full(rows, T::zero()),
                ReduceOp::Mean => self.full(rows, T::from_f64(f64::NAN)),
                _ => Err(Error::shape(
                    op.name(),
                    format!("a non-empty dim {dim} to take the {} of", op.name()),
                    format!("dims {:?}", l.dims()),
                )),
            };
        }
        if op == ReduceOp::Sum {
            if let Some(out) = self.column_sum(x, l, dim)? {
                return Ok(out);
            }
        }
        let (input, _copy) = self.rows_of(x, l, dim)?;
        let out = self.ctx.storage::<T>(rows)?;
        self.ctx.builtin_rows(
            Builtin::Reduce(op, T::KIND),
            out.device_ptr(),
            input,
            rows,
            cols,
        )?;
        Ok(out)
    }

    fn gather<T: DType, I: IndexDType>(
        &self,
        x: &CudaStorage<T>,
        lx: &Layout,
        sel: Selected,
        idx: &CudaStorage<I>,
        li: &Layout,
    ) -> Result<Gathered<CudaStorage<T>>> {
        self.gather_gpu(x, lx, sel, idx, li)
    }

    fn cumsum<T: NumDType, U: NumDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<CudaStorage<U>> {
        self.cumsum_gpu(x, l, dim)
    }

    fn topk<T: NumDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        k: usize,
        largest: bool,
    ) -> Result<(CudaStorage<T>, CudaStorage<i64>)> {
        self.topk_gpu(x, l, k, largest)
    }

    fn multinomial<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<CudaStorage<i64>> {
        self.multinomial_gpu(x, l, num_samples, replacement, seed)
    }

    fn dropout<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        p: f64,
        seed: u64,
    ) -> Result<CudaStorage<T>> {
        self.dropout_gpu(x, l, p, seed)
    }

    fn conv2d<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        bias: Option<(&CudaStorage<T>, &Layout)>,
        args: &ConvArgs,
    ) -> Result<CudaStorage<T>> {
        self.conv2d_gpu(x, w, bias, args)
    }

    fn conv2d_backward<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        w: (&CudaStorage<T>, &Layout),
        grad: (&CudaStorage<T>, &Layout),
        args: &ConvArgs,
        input: bool,
    ) -> Result<CudaStorage<T>> {
        self.conv2d_backward_gpu(x, w, grad, args, input)
    }

    fn pool2d<T: FloatDType>(
        &self,
        x: &CudaStorage<T>,
        l: &Layout,
        pool: &Pool2d,
        out: [usize; 2],
    ) -> Result<CudaStorage<T>> {
        self.pool2d_gpu(x, l, pool, out)
    }

    fn pool2d_backward<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        grad: (&CudaStorage<T>, &Layout),
        pool: &Pool2d,
    ) -> Result<CudaStorage<T>> {
        self.pool2d_backward_gpu(x, grad, pool)
    }

    fn scatter_add<T: FloatDType, I: IndexDType>(
        &self,
        out: &mut CudaStorage<T>,
        lo: &Layout,
        sel: Selected,
        src: (&CudaStorage<T>, &Layout),
        idx: (&CudaStorage<I>, &Layout),
        alpha: f64,
        fresh: bool,
    ) -> Result<Gathered<()>> {
        self.scatter_add_gpu(out, lo, sel, src, idx, alpha, fresh)
    }

    fn cross_entropy<T: FloatDType, I: IndexDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        t: (&CudaStorage<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<CudaStorage<T>>> {
        self.cross_entropy_gpu(x, t, Pass::Forward, args)
    }

    fn cross_entropy_backward<T: FloatDType, I: IndexDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        t: (&CudaStorage<I>, &Layout),
        grad: (&CudaStorage<T>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<CudaStorage<T>>> {
        self.cross_entropy_gpu(x, t, Pass::Backward(grad), args)
    }

    fn cross_entropy_fused<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&mut CudaStorage<T>, &Layout),
        t: (&CudaStorage<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<CudaStorage<T>>> {
        self.cross_entropy_gpu((&*x, lx), t, Pass::Fused, args)
    }

    fn arg_reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<CudaStorage<i64>> {
        self.ctx.bind()?;
        Self::check_dim(op.name(), l, dim)?;
        check_extent(op.name(), "self", x, l)?;
        let cols = l.dims()[dim];
        let rows = rows_without(l, dim);
        if rows == 0 {
            return self.ctx.storage::<i64>(0);
        }
        if cols == 0 {
            return Err(Error::shape(
                op.name(),
                format!("a non-empty dim {dim} to search"),
                format!("dims {:?}", l.dims()),
            ));
        }
        let (input, _copy) = self.rows_of(x, l, dim)?;
        let out = self.ctx.storage::<i64>(rows)?;
        self.ctx.builtin_rows(
            Builtin::Reduce(op, T::KIND),
            out.device_ptr(),
            input,
            rows,
            cols,
        )?;
        Ok(out)
    }

    fn batch_norm<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        weight: Option<(&CudaStorage<T>, &Layout)>,
        bias: Option<(&CudaStorage<T>, &Layout)>,
        running: Option<((&CudaStorage<T>, &Layout), (&CudaStorage<T>, &Layout))>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<(CudaStorage<T>, Option<(CudaStorage<T>, CudaStorage<T>)>)> {
        self.batch_norm_gpu(x, weight, bias, running, training, momentum, eps)
    }

    fn batch_norm_backward<T: FloatDType>(
        &self,
        x: (&CudaStorage<T>, &Layout),
        weight: Option<(&CudaStorage<T>, &Layout)>,
        running: Option<((&CudaStorage<T>, &Layout), (&CudaStorage<T>, &Layout))>,
        grad: (&CudaStorage<T>, &Layout),
        training: bool,
        eps: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        self.batch_norm_backward_gpu(x, weight, running, grad, training, eps)
    }

    fn attention<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<CudaStorage<T>> {
        self.attention_gpu(q, k, v, mask, causal, scale, out)
    }

    fn attention_lse<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<(CudaStorage<T>, CudaStorage<f32>)> {
        self.attention_lse_gpu(q, k, v, mask, causal, scale, out)
    }

    fn attention_backward<T: FloatDType>(
        &self,
        q: (&CudaStorage<T>, &Layout),
        k: (&CudaStorage<T>, &Layout),
        v: (&CudaStorage<T>, &Layout),
        out: (&CudaStorage<T>, &Layout),
        grad_out: (&CudaStorage<T>, &Layout),
        lse: Option<&CudaStorage<f32>>,
        mask: AttnMaskArg<'_, CudaStorage<bool>, CudaStorage<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, CudaStorage<T>)> {
        self.attention_backward_gpu(q, k, v, out, grad_out, lse, mask, causal, scale)
    }

    fn row_op<T: FloatDType>(
        &self,
        op: RowOp,
        x: &CudaStorage<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        Self::check_dim(op.name(), l, dim)?;
        check_extent(op.name(), "self", x, l)?;
        let cols = l.dims()[dim];
        let rows = rows_without(l, dim);
        let keeps = op.shape() == RowShape::Keep;
        if rows == 0 || (cols == 0 && keeps) {
            return self.ctx.storage::<T>(0);
        }
        if cols == 0 {
            // One value per empty row: the op's value of no elements.
            let empty = op.eval_f64(&[]).first().copied().unwrap_or(f64::NAN);
            return self.full(rows, T::from_f64(empty));
        }
        let n = rows * if keeps { cols } else { 1 };
        let (input, _copy) = self.rows_of(x, l, dim)?;
        let out = self.ctx.storage::<T>(n)?;
        self.ctx.builtin_rows(
            Builtin::Row(op, T::KIND),
            out.device_ptr(),
            input,
            rows,
            cols,
        )?;
        if !keeps {
            // One value per row, in the order of the other dims.
            return Ok(out);
        }
        let perm = dim_last(l.rank(), dim);
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(out);
        }
        // The rows came out with `dim` last: put it back in place.
        let moved_dims: Vec<usize> = perm.iter().map(|&p| l.dims()[p]).collect();
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        self.contiguous(&out, &Layout::contiguous(&moved_dims).permute(&inverse))
    }

    fn norm<T: FloatDType>(
        &self,
        op: NormOp,
        (x, l): (&CudaStorage<T>, &Layout),
        (w, lw): (&CudaStorage<T>, &Layout),
        bias: Option<(&CudaStorage<T>, &Layout)>,
        eps: f64,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let name = op.name();
        if l.rank() == 0 {
            return Err(Error::shape(name, "an input of rank 1 or more", "a scalar"));
        }
        check_extent(name, "input", x, l)?;
        check_extent(name, "weight", w, lw)?;
        if let Some((b, lb)) = bias {
            check_extent(name, "bias", b, lb)?;
        }
        let dim = l.rank() - 1;
        let cols = l.dims()[dim];
        let n = l.numel();
        let out = self.ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(out);
        }
        let (input, _copy) = self.rows_of(x, l, dim)?;
        let (weight, _wcopy) = self.rows_of(w, lw, 0)?;
        let (bias, _bcopy) = match bias {
            Some((b, lb)) => self.rows_of(b, lb, 0)?,
            None => (0, None),
        };
        self.ctx.builtin_norm(
            (op, T::KIND),
            out.device_ptr(),
            input,
            weight,
            bias,
            (n / cols, cols),
            eps,
        )?;
        Ok(out)
    }

    fn row_kernel<T: FloatDType>(
        &self,
        kernel: &'static tensorfn_kernels::rowkernel::RowKernelDef,
        inputs: &[(&CudaStorage<T>, usize)],
        scalars: &[f64],
        (rows, cols): (usize, usize),
        _cpu: &crate::ops::rowkernel::RowCpu<'_, T>,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let width = if kernel.per_row { 1 } else { cols };
        let out = self.ctx.storage::<T>(rows * width)?;
        if rows == 0 || width == 0 {
            return Ok(out);
        }
        for (k, (buf, step)) in inputs.iter().enumerate() {
            let need = if *step == 0 { cols } else { rows * cols };
            if buf.len() < need {
                return Err(Error::shape(
                    kernel.name,
                    format!("row argument {k} of {need} elements"),
                    format!("{} elements", buf.len()),
                ));
            }
        }
        let ins: Vec<(u64, usize)> = inputs.iter().map(|(b, s)| (b.device_ptr(), *s)).collect();
        self.ctx.launch_rows(
            (super::modules::ModuleKey::Fused(kernel.name), &|| {
                Ok(super::modules::KernelSource {
                    name: kernel.name.to_string(),
                    ptx: kernel.ptx.to_string(),
                })
            }),
            &format!("row kernel {}", kernel.name),
            T::KIND,
            (out.device_ptr(), kernel.per_row),
            &ins,
            scalars,
            (rows, cols),
        )?;
        Ok(out)
    }

    fn norm_backward<T: FloatDType>(
        &self,
        op: NormOp,
        (x, l): (&CudaStorage<T>, &Layout),
        (w, lw): (&CudaStorage<T>, &Layout),
        (g, lg): (&CudaStorage<T>, &Layout),
        eps: f64,
    ) -> Result<(CudaStorage<T>, CudaStorage<T>, Option<CudaStorage<T>>)> {
        self.ctx.bind()?;
        let name = op.name();
        if l.rank() == 0 || lg.dims() != l.dims() || lw.dims() != [l.dims()[l.rank() - 1]] {
            return Err(Error::shape(
                name,
                "an input of rank 1 or more, a weight of its last dim and a grad_output of its dims",
                format!("{:?}, {:?}, {:?}", l.dims(), lw.dims(), lg.dims()),
            ));
        }
        check_extent(name, "input", x, l)?;
        check_extent(name, "weight", w, lw)?;
        check_extent(name, "grad_output", g, lg)?;
        let dim = l.rank() - 1;
        let cols = l.dims()[dim];
        let n = l.numel();
        let rows = n.checked_div(cols).unwrap_or(0);
        let dx = self.ctx.storage::<T>(n)?;
        let dw = self.ctx.storage::<T>(cols)?;
        let db = op
            .has_bias()
            .then(|| self.ctx.storage::<T>(cols))
            .transpose()?;
        if cols == 0 {
            return Ok((dx, dw, db));
        }
        // No rows: only the zero sums of `dweight` and `dbias` to write.
        let ((input, _copy), (grad, _gcopy)) = if rows == 0 {
            ((0, None), (0, None))
        } else {
            (self.rows_of(x, l, dim)?, self.rows_of(g, lg, dim)?)
        };
        let (weight, _wcopy) = self.rows_of(w, lw, 0)?;
        // Partial sums in the statistics' precision: f64 for f64, else f32
        // (counted in f32 words).
        let part = self
            .ctx
            .storage::<f32>(super::cuda_norm_backward_scratch_bytes(rows, cols, T::KIND) / 4)?;
        self.ctx.builtin_norm_backward(
            (op, T::KIND),
            (
                dx.device_ptr(),
                dw.device_ptr(),
                db.as_ref().map_or(0, |b| b.device_ptr()),
            ),
            [input, weight, grad],
            part.device_ptr(),
            (rows, cols),
            eps,
        )?;
        Ok((dx, dw, db))
    }

    fn rope<T: FloatDType>(
        &self,
        (x, l): (&CudaStorage<T>, &Layout),
        (c, lc): (&CudaStorage<T>, &Layout),
        (s, ls): (&CudaStorage<T>, &Layout),
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        let rank = l.rank();
        let fits = rank >= 2
            && lc.dims() == &l.dims()[rank - 2..]
            && ls.dims() == lc.dims()
            && l.dims()[rank - 1] % 2 == 0;
        if !fits {
            return Err(Error::shape(
                "rope",
                "input [.., T, D] with D even, cos and sin [T, D]",
                format!("{:?}, {:?}, {:?}", l.dims(), lc.dims(), ls.dims()),
            ));
        }
        check_extent("rope", "input", x, l)?;
        check_extent("rope", "cos", c, lc)?;
        check_extent("rope", "sin", s, ls)?;
        let n = l.numel();
        let out = self.ctx.storage::<T>(n)?;
        if n == 0 {
            return Ok(out);
        }
        let (d, t) = (l.dims()[rank - 1], l.dims()[rank - 2]);
        let (input, _copy) = self.rows_of(x, l, rank - 1)?;
        let (cos, _ccopy) = self.rows_of(c, lc, 1)?;
        let (sin, _scopy) = self.rows_of(s, ls, 1)?;
        self.ctx.builtin_rope(
            T::KIND,
            out.device_ptr(),
            [input, cos, sin],
            (n / d, t, d / 2),
        )?;
        Ok(out)
    }

    fn matmul<T: FloatDType>(
        &self,
        a: &CudaStorage<T>,
        la: &Layout,
        b: &CudaStorage<T>,
        lb: &Layout,
        bias: Option<(&CudaStorage<T>, &Layout)>,
        alpha: T,
        beta: T,
    ) -> Result<CudaStorage<T>> {
        self.ctx.bind()?;
        check_extent("matmul", "mat1", a, la)?;
        check_extent("matmul", "mat2", b, lb)?;
        if let Some((bs, bl)) = bias {
            check_extent("addmm", "bias", bs, bl)?;
        }
        self.gemm(a, la, b, lb, bias, alpha, beta, Epilogue::None)
    }

    /// ReLU and GELU in one cuBLASLt call (with a bias of one value per
    /// output column: a linear layer), else a product followed by the
    /// activation's kernel.
    fn matmul_act<T: FloatDType>(
        &self,
        a: &CudaStorage<T>,
        la: &Layout,
        b: &CudaStorage<T>,
        lb: &Layout,
        bias: Option<(&CudaStorage<T>, &Layout)>,
        (alpha, beta): (T, T),
        act: UnaryOp,
    ) -> Result<CudaStorage<T>> {
        let epilogue = match act {
            UnaryOp::Relu => Epilogue::Relu,
            UnaryOp::Gelu => Epilogue::Gelu,
            _ => {
                let out = self.matmul(a, la, b, lb, bias, alpha, beta)?;
                let dims = [la.dims()[0], la.dims()[1], lb.dims()[2]];
                return self.unary(act, &out, &Layout::contiguous(&dims));
            }
        };
        self.ctx.bind()?;
        if let Some((bs, bl)) = bias {
            check_extent("addmm", "bias", bs, bl)?;
        }
        check_extent("addmm", "mat1", a, la)?;
        check_extent("addmm", "mat2", b, lb)?;
        self.gemm(a, la, b, lb, bias, alpha, beta, epilogue)
    }
}
