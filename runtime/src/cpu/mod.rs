//! The CPU backend: loops over strided host buffers (vectorisable runs,
//! rayon for large outputs) and `gemm` for matrix products.

mod attention;
pub(crate) mod blocks;
pub(crate) mod bnorm;
pub(crate) mod buffer;
pub(crate) mod conv;
pub(crate) mod copy;
mod cumsum;
pub(crate) mod dropout;
pub(crate) mod elementwise;
mod fused;
pub(crate) mod gather;
pub(crate) mod matmul;
mod multinomial;
mod norm;
pub(crate) mod par;
pub(crate) mod pool;
pub(crate) mod reduce;
mod rope;
pub(crate) mod rows;
pub(crate) mod scalar;
mod scatter;
pub(crate) mod simd;
pub(crate) mod softmax;
pub(crate) mod strided;
mod topk;
pub(crate) mod typed;
pub mod vmath;
mod xent;

use crate::backend::{
    xent_layouts, AttnMask, AttnMaskArg, Backend, CopyTo, Gathered, RowBlocks, Selected,
};
use crate::dtype::{DType, FloatDType, IndexDType, NumDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_core::ops::pool::Pool2d;
use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
use tensorfn_kernels::{BinaryOp, NormOp, ReduceOp, RowOp, UnaryOp};
use typed::{slice, vec, with_float_type, with_int_type, with_num_type};

/// The host CPU as a [`Backend`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuBackend;

impl CpuBackend {
    /// `op(a, b)` into the contiguous `out` (of `la`'s dims).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn binary_into_dense<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &[T],
        la: &Layout,
        b: &[T],
        lb: &Layout,
        out: &mut [T],
    ) -> Result<()> {
        strided::check_extent(op.name(), la, a.len())?;
        strided::check_extent(op.name(), lb, b.len())?;
        with_num_type!(T, U => elementwise::binary_into::<U>(
            op,
            slice(a),
            la,
            slice(b),
            lb,
            typed::slice_mut(out)
        ))
    }

    /// `op(dst, b)` into the contiguous `dst` of `dims` (`b` broadcast to them).
    pub(crate) fn binary_assign_dense<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut [T],
        dims: &[usize],
        b: &[T],
        lb: &Layout,
    ) -> Result<()> {
        strided::check_extent(op.name(), lb, b.len())?;
        with_num_type!(T, U => elementwise::binary_assign::<U>(
            op,
            typed::slice_mut(dst),
            dims,
            slice(b),
            lb
        ))
    }

    /// `op(dst, s)` into the contiguous `dst`.
    pub(crate) fn binary_scalar_assign_dense<T: NumDType>(
        &self,
        op: BinaryOp,
        dst: &mut [T],
        s: T,
    ) -> Result<()> {
        with_num_type!(T, U => elementwise::binary_scalar_assign::<U>(
            op,
            typed::slice_mut(dst),
            typed::value(s)
        ))
    }

    /// `x + value * t1 * t2` (equal dims), rounded once.
    pub(crate) fn addcmul_fused<T: NumDType>(
        &self,
        x: [(&Vec<T>, &Layout); 3],
        value: T,
    ) -> Result<Vec<T>> {
        let [(a, la), (b, lb), (c, lc)] = x;
        strided::check_extent("addcmul", la, a.len())?;
        strided::check_extent("addcmul", lb, b.len())?;
        strided::check_extent("addcmul", lc, c.len())?;
        Ok(with_num_type!(T, U => vec(elementwise::addcmul::<U>(
            [(slice(a), la), (slice(b), lb), (slice(c), lc)],
            typed::value(value)
        ))))
    }
}

/// Host to host: a row-major copy.
impl CopyTo<CpuBackend> for CpuBackend {
    fn copy_to<T: DType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        _pinned: bool,
        dst: &CpuBackend,
    ) -> Result<Vec<T>> {
        dst.upload(Cow::Owned(copy::gather(x, l)))
    }
}

impl Backend for CpuBackend {
    type Buf<T: DType> = Vec<T>;

    fn full<T: DType>(&self, n: usize, value: T) -> Result<Vec<T>> {
        Ok(vec![value; n])
    }

    fn filled<T: DType>(&self, n: usize, value: T) -> Result<Vec<T>> {
        copy::try_filled(n, |_| value)
    }

    fn upload<T: DType>(&self, data: Cow<'_, [T]>) -> Result<Vec<T>> {
        Ok(data.into_owned())
    }

    fn download<T: DType>(&self, x: &Vec<T>, l: &Layout) -> Result<Vec<T>> {
        Ok(copy::gather(x, l))
    }

    fn download_into<T: DType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        dst: &mut [T],
        _pinned: bool,
    ) -> Result<()> {
        let ld = Layout::contiguous(l.dims());
        strided::check_extent("copy_into", l, x.len())?;
        strided::check_extent("copy_into", &ld, dst.len())?;
        copy::copy_into(x, l, dst, &ld);
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        // Operations on the host finish before they return.
        Ok(())
    }

    fn free_memory(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    fn alloc<T: DType>(&self, n: usize) -> Result<Vec<T>> {
        self.full(n, T::zero())
    }

    fn cat_rows<T: DType>(&self, plan: &RowBlocks<'_, Vec<T>>) -> Result<Vec<T>> {
        copy::cat_rows(plan)
    }

    fn contiguous<T: DType>(&self, x: &Vec<T>, l: &Layout) -> Result<Vec<T>> {
        strided::check_extent("contiguous", l, x.len())?;
        Ok(copy::contiguous(x, l))
    }

    fn copy_into<T: DType>(
        &self,
        src: &Vec<T>,
        ls: &Layout,
        dst: &mut Vec<T>,
        ld: &Layout,
    ) -> Result<()> {
        strided::check_extent("copy_into", ls, src.len())?;
        strided::check_extent("copy_into", ld, dst.len())?;
        copy::copy_into(src, ls, dst, ld);
        Ok(())
    }

    fn unary<T: NumDType>(&self, op: UnaryOp, x: &Vec<T>, l: &Layout) -> Result<Vec<T>> {
        strided::check_extent(op.name(), l, x.len())?;
        if T::KIND.is_float() {
            Ok(with_float_type!(T, U => vec(elementwise::unary_float::<U>(op, slice(x), l))))
        } else if op.needs_float() {
            Err(Error::float_only(op.name(), T::KIND))
        } else {
            with_num_type!(T, U => elementwise::unary_num::<U>(op, slice(x), l).map(vec))
        }
    }

    fn binary<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &Vec<T>,
        la: &Layout,
        b: &Vec<T>,
        lb: &Layout,
    ) -> Result<Vec<T>> {
        strided::check_extent(op.name(), la, a.len())?;
        strided::check_extent(op.name(), lb, b.len())?;
        with_num_type!(T, U => elementwise::binary::<U>(op, slice(a), la, slice(b), lb).map(vec))
    }

    fn binary_scalar<T: NumDType>(
        &self,
        op: BinaryOp,
        x: &Vec<T>,
        l: &Layout,
        s: T,
        scalar_first: bool,
    ) -> Result<Vec<T>> {
        strided::check_extent(op.name(), l, x.len())?;
        with_num_type!(T, U => elementwise::binary_scalar::<U>(
            op,
            slice(x),
            l,
            typed::value(s),
            scalar_first
        )
        .map(vec))
    }

    fn cast<T: DType, U: DType>(&self, x: &Vec<T>, l: &Layout) -> Result<Vec<U>> {
        strided::check_extent("cast", l, x.len())?;
        Ok(copy::cast(x, l))
    }

    fn reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &Vec<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Vec<T>> {
        strided::check_extent(op.name(), l, x.len())?;
        if T::KIND.is_float() {
            with_float_type!(T, U => {
                let r = reduce::rows(slice::<T, U>(x), l, dim);
                reduce::reduce_float::<U>(op, &r).map(vec)
            })
        } else if op == ReduceOp::Mean {
            Err(Error::float_only("mean", T::KIND))
        } else {
            with_int_type!(T, U => {
                let r = reduce::rows(slice::<T, U>(x), l, dim);
                reduce::reduce_int::<U>(op, &r).map(vec)
            })
        }
    }

    fn arg_reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &Vec<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Vec<i64>> {
        strided::check_extent(op.name(), l, x.len())?;
        with_num_type!(T, U => {
            let r = reduce::rows(slice::<T, U>(x), l, dim);
            reduce::arg_reduce::<U>(op, &r)
        })
    }

    fn gather<T: DType, I: IndexDType>(
        &self,
        x: &Vec<T>,
        lx: &Layout,
        sel: Selected,
        idx: &Vec<I>,
        li: &Layout,
    ) -> Result<Gathered<Vec<T>>> {
        gather::gather(x, lx, sel, idx, li)
    }

    fn cumsum<T: NumDType, U: NumDType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Vec<U>> {
        strided::check_extent("cumsum", l, x.len())?;
        crate::backend::cumsum_fits::<T, U>(l, dim)?;
        Ok(cumsum::cumsum(x, l, dim))
    }

    fn multinomial<T: FloatDType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<Vec<i64>> {
        strided::check_extent("multinomial", l, x.len())?;
        multinomial::multinomial(x, l, num_samples, replacement, seed)
            .map_err(crate::backend::multinomial_fault)
    }

    fn topk<T: NumDType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        k: usize,
        largest: bool,
    ) -> Result<(Vec<T>, Vec<i64>)> {
        strided::check_extent("topk", l, x.len())?;
        topk::topk(x, l, k, largest)
    }

    fn scatter_add<T: FloatDType, I: IndexDType>(
        &self,
        out: &mut Vec<T>,
        lo: &Layout,
        sel: Selected,
        src: (&Vec<T>, &Layout),
        idx: (&Vec<I>, &Layout),
        alpha: f64,
        fresh: bool,
    ) -> Result<Gathered<()>> {
        if fresh {
            out.fill(T::zero());
        }
        scatter::scatter_add(out, lo, sel, (src.0, src.1), (idx.0, idx.1), alpha)
    }

    fn cross_entropy<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&Vec<T>, &Layout),
        (t, lt): (&Vec<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Vec<T>>> {
        xent_layouts("cross_entropy", (x.len(), lx), (t.len(), lt), None)?;
        Ok(with_float_type!(T, U => xent::cross_entropy::<U, I>(
            (slice(x), lx),
            (t, lt),
            args
        )
        .map(vec)))
    }

    fn cross_entropy_backward<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&Vec<T>, &Layout),
        (t, lt): (&Vec<I>, &Layout),
        (g, lg): (&Vec<T>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Vec<T>>> {
        let per_row = args.reduction == Reduction::None;
        xent_layouts(
            "cross_entropy_backward",
            (x.len(), lx),
            (t.len(), lt),
            Some((g.len(), lg, per_row)),
        )?;
        Ok(
            with_float_type!(T, U => xent::cross_entropy_backward::<U, I>(
            (slice(x), lx),
            (t, lt),
            (slice(g), lg),
            args
        )
        .map(vec)),
        )
    }

    fn cross_entropy_fused<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&mut Vec<T>, &Layout),
        t: (&Vec<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Vec<T>>> {
        // The two passes, then the gradient copied over the logits: the
        // CPU reads the logits from its caches either way.
        let loss = match self.cross_entropy((&*x, lx), t, args)? {
            Ok(loss) => loss,
            Err(k) => return Ok(Err(k)),
        };
        let n = lx.dims()[0];
        let rows = if args.reduction == Reduction::None {
            vec![n]
        } else {
            vec![]
        };
        let one = vec![T::from_f64(1.0); rows.iter().product()];
        let g = (&one, &Layout::contiguous(&rows));
        let grad = match self.cross_entropy_backward((&*x, lx), t, g, args)? {
            Ok(grad) => grad,
            Err(k) => return Ok(Err(k)),
        };
        for (o, v) in lx.offsets().zip(grad) {
            x[o] = v;
        }
        Ok(Ok(loss))
    }

    fn dropout<T: FloatDType>(&self, x: &Vec<T>, l: &Layout, p: f64, seed: u64) -> Result<Vec<T>> {
        strided::check_extent("dropout", l, x.len())?;
        Ok(dropout::dropout(x, l, p, seed))
    }

    fn pool2d<T: FloatDType>(
        &self,
        x: &Vec<T>,
        l: &Layout,
        pool: &Pool2d,
        out: [usize; 2],
    ) -> Result<Vec<T>> {
        strided::check_extent(pool.kind.name(), l, x.len())?;
        let y = pool::pool2d(x, l, pool, out);
        let mut dims = l.dims().to_vec();
        let r = dims.len();
        dims[r - 2..].copy_from_slice(&out);
        crate::backend::in_layout(self, y, &l.result_like(&dims))
    }

    fn pool2d_backward<T: FloatDType>(
        &self,
        (x, lx): (&Vec<T>, &Layout),
        (g, lg): (&Vec<T>, &Layout),
        pool: &Pool2d,
    ) -> Result<Vec<T>> {
        strided::check_extent(pool.kind.name(), lx, x.len())?;
        strided::check_extent(pool.kind.name(), lg, g.len())?;
        let dx = pool::pool2d_backward((x, lx), (g, lg), pool);
        crate::backend::in_layout(self, dx, &lx.result_like(lx.dims()))
    }

    fn row_op<T: FloatDType>(
        &self,
        op: RowOp,
        x: &Vec<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Vec<T>> {
        strided::check_extent(op.name(), l, x.len())?;
        Ok(with_float_type!(T, U => vec(rows::row_op::<U>(op, slice(x), l, dim))))
    }

    fn norm<T: FloatDType>(
        &self,
        op: NormOp,
        (x, l): (&Vec<T>, &Layout),
        (w, lw): (&Vec<T>, &Layout),
        bias: Option<(&Vec<T>, &Layout)>,
        eps: f64,
    ) -> Result<Vec<T>> {
        if l.rank() == 0 {
            return Err(Error::shape(
                op.name(),
                "an input of rank 1 or more",
                "a scalar",
            ));
        }
        strided::check_extent(op.name(), l, x.len())?;
        strided::check_extent(op.name(), lw, w.len())?;
        if let Some((b, lb)) = bias {
            strided::check_extent(op.name(), lb, b.len())?;
        }
        Ok(with_float_type!(T, U => vec(norm::norm::<U>(
            op,
            (slice(x), l),
            (slice(w), lw),
            bias.map(|(b, lb)| (slice(b), lb)),
            eps,
        ))))
    }

    fn row_kernel<T: FloatDType>(
        &self,
        kernel: &'static tensorfn_kernels::rowkernel::RowKernelDef,
        inputs: &[(&Vec<T>, usize)],
        scalars: &[f64],
        (rows, cols): (usize, usize),
        cpu: &crate::ops::rowkernel::RowCpu<'_, T>,
    ) -> Result<Vec<T>> {
        let width = if kernel.per_row { 1 } else { cols };
        let mut out = vec![T::default(); rows * width];
        if rows == 0 || width == 0 {
            return Ok(out);
        }
        // Rows in chunks of about 4096 elements, each a task.
        let per_task = (4096 / cols.max(1)).max(1);
        par::chunks_mut(&mut out, per_task * width, &|i, part| {
            let mut ins: Vec<&[T]> = Vec::with_capacity(inputs.len());
            for (k, o) in part.chunks_mut(width).enumerate() {
                let r = i * per_task + k;
                ins.clear();
                for (buf, step) in inputs {
                    ins.push(&buf[r * step..r * step + cols]);
                }
                cpu(&ins, scalars, o);
            }
        });
        Ok(out)
    }

    fn norm_backward<T: FloatDType>(
        &self,
        op: NormOp,
        (x, l): (&Vec<T>, &Layout),
        (w, lw): (&Vec<T>, &Layout),
        (g, lg): (&Vec<T>, &Layout),
        eps: f64,
    ) -> Result<(Vec<T>, Vec<T>, Option<Vec<T>>)> {
        let name = op.name();
        if l.rank() == 0 || lg.dims() != l.dims() || lw.dims() != [l.dims()[l.rank() - 1]] {
            return Err(Error::shape(
                name,
                "an input of rank 1 or more, a weight of its last dim and a grad_output of its dims",
                format!("{:?}, {:?}, {:?}", l.dims(), lw.dims(), lg.dims()),
            ));
        }
        strided::check_extent(name, l, x.len())?;
        strided::check_extent(name, lw, w.len())?;
        strided::check_extent(name, lg, g.len())?;
        Ok(with_float_type!(T, U => {
            let (dx, dw, db) =
                norm::norm_backward::<U>(op, (slice(x), l), (slice(w), lw), (slice(g), lg), eps);
            (vec(dx), vec(dw), db.map(vec))
        }))
    }

    fn batch_norm<T: FloatDType>(
        &self,
        (x, l): (&Vec<T>, &Layout),
        weight: Option<(&Vec<T>, &Layout)>,
        bias: Option<(&Vec<T>, &Layout)>,
        running: Option<((&Vec<T>, &Layout), (&Vec<T>, &Layout))>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<(Vec<T>, Option<(Vec<T>, Vec<T>)>)> {
        let name = "batch_norm";
        if l.rank() < 2 {
            return Err(Error::shape(
                name,
                "an input of rank 2 or more",
                format!("{:?}", l.dims()),
            ));
        }
        strided::check_extent(name, l, x.len())?;
        for (v, lv) in [weight, bias, running.map(|r| r.0), running.map(|r| r.1)]
            .into_iter()
            .flatten()
        {
            strided::check_extent(name, lv, v.len())?;
        }
        fn s<'a, T>((v, lv): (&'a Vec<T>, &'a Layout)) -> (&'a [T], &'a Layout) {
            (v, lv)
        }
        let (y, updated) = bnorm::batch_norm(
            (x, l),
            weight.map(s),
            bias.map(s),
            running.map(|(m, v)| (s(m), s(v))),
            training,
            momentum,
            eps,
        );
        let y = crate::backend::in_layout(self, y, &l.result_like(l.dims()))?;
        Ok((y, updated))
    }

    fn batch_norm_backward<T: FloatDType>(
        &self,
        (x, l): (&Vec<T>, &Layout),
        weight: Option<(&Vec<T>, &Layout)>,
        running: Option<((&Vec<T>, &Layout), (&Vec<T>, &Layout))>,
        (g, lg): (&Vec<T>, &Layout),
        training: bool,
        eps: f64,
    ) -> Result<(Vec<T>, Vec<T>, Vec<T>)> {
        let name = "batch_norm_backward";
        if l.rank() < 2 || lg.dims() != l.dims() {
            return Err(Error::shape(
                name,
                "an input of rank 2 or more and a grad_output of its dims",
                format!("{:?}, {:?}", l.dims(), lg.dims()),
            ));
        }
        strided::check_extent(name, l, x.len())?;
        strided::check_extent(name, lg, g.len())?;
        for (v, lv) in [weight, running.map(|r| r.0), running.map(|r| r.1)]
            .into_iter()
            .flatten()
        {
            strided::check_extent(name, lv, v.len())?;
        }
        fn s<'a, T>((v, lv): (&'a Vec<T>, &'a Layout)) -> (&'a [T], &'a Layout) {
            (v, lv)
        }
        let (dx, dw, db) = bnorm::batch_norm_backward(
            (x, l),
            weight.map(s),
            running.map(|(m, v)| (s(m), s(v))),
            (g, lg),
            training,
            eps,
        );
        let dx = crate::backend::in_layout(self, dx, &l.result_like(l.dims()))?;
        Ok((dx, dw, db))
    }

    fn attention<T: FloatDType>(
        &self,
        q: (&Vec<T>, &Layout),
        k: (&Vec<T>, &Layout),
        v: (&Vec<T>, &Layout),
        mask: AttnMaskArg<'_, Vec<bool>, Vec<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<Vec<T>> {
        Ok(self
            .attention_any(q, k, v, mask, causal, scale, out, false)?
            .0)
    }

    fn attention_lse<T: FloatDType>(
        &self,
        q: (&Vec<T>, &Layout),
        k: (&Vec<T>, &Layout),
        v: (&Vec<T>, &Layout),
        mask: AttnMaskArg<'_, Vec<bool>, Vec<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<(Vec<T>, Vec<f32>)> {
        self.attention_any(q, k, v, mask, causal, scale, out, true)
    }

    fn attention_backward<T: FloatDType>(
        &self,
        q: (&Vec<T>, &Layout),
        k: (&Vec<T>, &Layout),
        v: (&Vec<T>, &Layout),
        o: (&Vec<T>, &Layout),
        g: (&Vec<T>, &Layout),
        lse: Option<&Vec<f32>>,
        mask: AttnMaskArg<'_, Vec<bool>, Vec<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<(Vec<T>, Vec<T>, Vec<T>)> {
        let op = "scaled_dot_product_attention";
        for (x, l) in [q, k, v, o, g] {
            strided::check_extent(op, l, x.len())?;
        }
        match &mask {
            Some((AttnMask::Bool(m), l)) => strided::check_extent(op, l, m.len())?,
            Some((AttnMask::Add(m), l)) => strided::check_extent(op, l, m.len())?,
            None => {}
        }
        let rows = |l: &Layout| -> usize {
            let d = l.dims();
            d[..d.len() - 1].iter().product()
        };
        if let Some(x) = lse {
            if x.len() != rows(q.1) {
                return Err(Error::shape(
                    op,
                    format!("a log-sum-exp of {} rows (batch x L)", rows(q.1)),
                    format!("{} elements", x.len()),
                ));
            }
        }
        Ok(with_float_type!(T, U => {
            fn v3<'a, T: 'static, U: 'static>((x, layout): (&'a Vec<T>, &'a Layout)) -> attention::View<'a, U> {
                attention::View { data: slice::<T, U>(x), layout }
            }
            let mask = mask.map(|(m, l)| match m {
                AttnMask::Bool(m) => (attention::Mask::Bool(&m[..]), l),
                AttnMask::Add(m) => (attention::Mask::Add(slice::<T, U>(m)), l),
            });
            let (dq, dk, dv) = attention::attention_backward::<U>(
                v3::<T, U>(q),
                v3::<T, U>(k),
                v3::<T, U>(v),
                v3::<T, U>(o),
                v3::<T, U>(g),
                // f64 recomputes them in f64: the saved ones are f32.
                lse.filter(|_| T::KIND != tensorfn_core::DTypeKind::F64).map(|x| &x[..]),
                mask,
                causal,
                scale,
            );
            (vec(dq), vec(dk), vec(dv))
        }))
    }

    fn rope<T: FloatDType>(
        &self,
        (x, l): (&Vec<T>, &Layout),
        (c, lc): (&Vec<T>, &Layout),
        (s, ls): (&Vec<T>, &Layout),
    ) -> Result<Vec<T>> {
        let rank = l.rank();
        if rank < 2
            || lc.dims() != &l.dims()[rank - 2..]
            || ls.dims() != lc.dims()
            || l.dims()[rank - 1] % 2 != 0
        {
            return Err(Error::shape(
                "rope",
                "input [.., T, D] with D even, cos and sin [T, D]",
                format!("{:?}, {:?}, {:?}", l.dims(), lc.dims(), ls.dims()),
            ));
        }
        strided::check_extent("rope", l, x.len())?;
        strided::check_extent("rope", lc, c.len())?;
        strided::check_extent("rope", ls, s.len())?;
        Ok(with_float_type!(T, U => vec(rope::rope::<U>(
            (slice(x), l),
            (slice(c), lc),
            (slice(s), ls),
        ))))
    }

    fn matmul<T: FloatDType>(
        &self,
        a: &Vec<T>,
        la: &Layout,
        b: &Vec<T>,
        lb: &Layout,
        bias: Option<(&Vec<T>, &Layout)>,
        alpha: T,
        beta: T,
    ) -> Result<Vec<T>> {
        matmul::matmul(
            matmul::Operand {
                data: a,
                layout: la,
            },
            matmul::Operand {
                data: b,
                layout: lb,
            },
            bias.map(|(data, layout)| matmul::Operand { data, layout }),
            alpha,
            beta,
        )
    }
}

impl CpuBackend {
    /// [`Backend::attention`], with the rows' log-sum-exps when `want_lse`
    /// (an empty buffer otherwise).
    #[allow(clippy::too_many_arguments)]
    fn attention_any<T: FloatDType>(
        &self,
        q: (&Vec<T>, &Layout),
        k: (&Vec<T>, &Layout),
        v: (&Vec<T>, &Layout),
        mask: AttnMaskArg<'_, Vec<bool>, Vec<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
        want_lse: bool,
    ) -> Result<(Vec<T>, Vec<f32>)> {
        let op = "scaled_dot_product_attention";
        for (x, l) in [q, k, v] {
            strided::check_extent(op, l, x.len())?;
        }
        match &mask {
            Some((AttnMask::Bool(m), l)) => strided::check_extent(op, l, m.len())?,
            Some((AttnMask::Add(m), l)) => strided::check_extent(op, l, m.len())?,
            None => {}
        }
        let (dense, lse): (Vec<T>, Vec<f32>) = with_float_type!(T, U => {
            fn v3<'a, T: 'static, U: 'static>((x, layout): (&'a Vec<T>, &'a Layout)) -> attention::View<'a, U> {
                attention::View { data: slice::<T, U>(x), layout }
            }
            let mask = mask.map(|(m, l)| match m {
                AttnMask::Bool(m) => (attention::Mask::Bool(&m[..]), l),
                AttnMask::Add(m) => (attention::Mask::Add(slice::<T, U>(m)), l),
            });
            let (o, lse) = attention::attention::<U>(
                v3::<T, U>(q),
                v3::<T, U>(k),
                v3::<T, U>(v),
                mask,
                causal,
                scale,
                want_lse,
            );
            (vec(o), lse)
        });
        if out.is_contiguous() {
            return Ok((dense, lse));
        }
        // Placed as `out` asks (the order the operands' batches came in).
        let mut placed = dense.clone();
        self.copy_into(&dense, &Layout::contiguous(out.dims()), &mut placed, out)?;
        Ok((placed, lse))
    }
}
