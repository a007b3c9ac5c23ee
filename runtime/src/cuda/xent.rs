//! `cross_entropy` and its backward on the GPU: one launch of the row
//! kernel (one block of `XENT_THREADS` per row,
//! `tensorfn_kernels::builtin::cross_entropy`),
//! which checks every target before it reads through it and records a
//! bad one in a flag buffer, read back after the launch. The fused pass
//! (a training step's loss, whose gradient is wanted at once) runs the
//! backward's kernel with the forward's per-row losses added and writes
//! the gradient over the logits: one read of them, no second buffer. The forward
//! writes one `f64` loss per row and counts the rows not ignored; the
//! reduction is the runtime's sum over those `N` values (in `f64`),
//! divided by the count for the mean. The backward keeps each row in
//! shared memory where it fits (`row_bytes`), so it reads the logits
//! once and writes the gradient once.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey};
use crate::backend::{xent_layouts, Backend, Gathered};
use crate::dtype::{FloatDType, IndexDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
use tensorfn_kernels::builtin::XENT_THREADS;
use tensorfn_kernels::{BinaryOp, ReduceOp};

/// Blocks of a row launch at most (one row per block, grid-stride).
const MAX_ROW_BLOCKS: usize = 65_535;

/// Shared memory the backward's blocks leave for their own reductions
/// (the row kernels' static slots, with room to spare).
const STATIC_SHARED: usize = 1024;

/// The dynamic shared memory of a backward block that keeps its row of
/// `cols` elements of `size` bytes at `input` (so the logits are read
/// from global memory once) and writes its gradient to `output` in
/// 16-byte stores, or 0 where the row does not fit `limit` bytes or its
/// 16-byte chunks would not line up in either.
fn row_bytes(cols: usize, size: usize, (input, output): (u64, u64), limit: usize) -> usize {
    let bytes = cols * size;
    let fits = bytes + STATIC_SHARED <= limit;
    if fits && bytes % 16 == 0 && input % 16 == 0 && output % 16 == 0 {
        bytes
    } else {
        0
    }
}

/// What one launch of the cross-entropy kernel computes.
pub(crate) enum Pass<'a, T: FloatDType> {
    /// The loss.
    Forward,
    /// The gradient of the logits, given the gradient of the loss.
    Backward((&'a CudaStorage<T>, &'a Layout)),
    /// The loss, and its gradient for a gradient of 1 written over the
    /// logits (whose rows must be contiguous).
    Fused,
}

impl CudaBackend {
    /// See `Backend::cross_entropy` (`Pass::Forward`),
    /// `Backend::cross_entropy_backward` and `Backend::cross_entropy_fused`
    /// (`Pass::Fused`, which writes through `x`: the caller holds it
    /// mutably).
    pub(crate) fn cross_entropy_gpu<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&CudaStorage<T>, &Layout),
        (t, lt): (&CudaStorage<I>, &Layout),
        pass: Pass<'_, T>,
        args: CrossEntropyArgs,
    ) -> Result<Gathered<CudaStorage<T>>> {
        let ctx = self.ctx();
        ctx.bind()?;
        let per_row = args.reduction == Reduction::None;
        let grad = match pass {
            Pass::Backward(g) => Some(g),
            _ => None,
        };
        let (op, suffix, gradient) = match pass {
            Pass::Forward => ("cross_entropy", "", false),
            Pass::Backward(_) => ("cross_entropy_backward", "_backward", true),
            Pass::Fused => ("cross_entropy_with_grad", "_fused", true),
        };
        xent_layouts(
            op,
            (x.len(), lx),
            (t.len(), lt),
            grad.map(|(g, lg)| (g.len(), lg, per_row)),
        )?;
        let (n, c) = (lx.dims()[0], lx.dims()[1]);
        // A gradient of the mean needs the divisor before the launch; a
        // row of no classes reads nothing: both from the targets on the
        // host.
        let host_targets = (c == 0 || (gradient && args.reduction == Reduction::Mean))
            .then(|| self.download_host(t, lt))
            .transpose()?;
        let mut count = 0usize;
        if let Some(ts) = &host_targets {
            for k in ts.iter().map(|k| k.to_i64()) {
                if k == args.ignore_index {
                    continue;
                }
                if k < 0 || k as usize >= c {
                    return Ok(Err(k));
                }
                count += 1;
            }
        }
        if n == 0 || c == 0 {
            return Ok(Ok(match (grad.is_some(), args.reduction) {
                (true, _) => ctx.storage::<T>(0)?,
                (false, Reduction::None) => self.full(n, T::from_f64(0.0))?,
                (false, Reduction::Sum) => self.full(1, T::from_f64(0.0))?,
                (false, Reduction::Mean) => self.full(1, T::from_f64(f64::NAN))?,
            }));
        }
        let (input, copy) = self.rows_of(x, lx, 1)?;
        if copy.is_some() && matches!(pass, Pass::Fused) {
            return Err(Error::InvalidArgument {
                op: op.into(),
                message: format!(
                    "internal: the logits' rows are not contiguous (strides {:?}), so the gradient cannot be written over them",
                    lx.strides()
                ),
            });
        }
        // flag[0]: a target was out of range; flag[1]: one such target;
        // flag[2]: the rows not ignored (the forward counts them).
        let flag = self.full::<i64>(3, 0)?;
        let kernel = Builtin::CrossEntropy(T::KIND, I::KIND);
        let f = ctx.function(ModuleKey::Builtin(kernel), suffix, || {
            kernel.source(ctx.target())
        })?;
        // The backward's gradient, or the per-row losses.
        let (out, losses) = match pass {
            Pass::Backward(_) => (Some(ctx.storage::<T>(n * c)?), None),
            _ => (None, Some(ctx.storage::<f64>(n)?)),
        };
        let first = match (&out, &losses, &pass) {
            (Some(o), _, _) => o.device_ptr(),
            (_, _, Pass::Fused) => input,
            (_, Some(l), _) => l.device_ptr(),
            _ => unreachable!("one output"),
        };
        let shared = if gradient {
            row_bytes(
                c,
                T::KIND.size_bytes(),
                (input, first),
                ctx.shared_per_block,
            )
        } else {
            0
        };
        let mut values: Vec<u64> = vec![
            first,
            input,
            n as u64,
            c as u64,
            t.ptr_at(lt.offset()),
            lt.strides()[0] as u64,
            flag.device_ptr(),
            args.ignore_index as u64,
            args.label_smoothing.to_bits(),
        ];
        let scale = if args.reduction == Reduction::Mean {
            1.0 / count as f64
        } else {
            1.0
        };
        match (&pass, &losses) {
            (Pass::Backward((g, lg)), _) => values.extend([
                g.ptr_at(lg.offset()),
                if per_row { lg.strides()[0] as u64 } else { 0 },
                scale.to_bits(),
                u64::from(shared > 0),
            ]),
            (Pass::Fused, Some(l)) => {
                values.extend([l.device_ptr(), scale.to_bits(), u64::from(shared > 0)])
            }
            _ => {}
        }

        let grid = n.min(MAX_ROW_BLOCKS) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?}{suffix} over {n}x{c}"),
            (grid, 1),
            XENT_THREADS,
            shared as u32,
            &mut values,
        )?;
        let flag = self.download_host(&flag, &Layout::contiguous(&[3]))?;
        if flag[0] != 0 {
            return Ok(Err(flag[1]));
        }
        let losses = match (out, losses) {
            (Some(out), _) => return Ok(Ok(out)),
            (_, Some(losses)) => losses,
            _ => unreachable!("one output"),
        };
        let rows = Layout::contiguous(&[n]);
        let scalar = Layout::contiguous(&[]);
        let reduced = match args.reduction {
            Reduction::None => return Ok(Ok(self.cast::<f64, T>(&losses, &rows)?)),
            Reduction::Sum => self.reduce(ReduceOp::Sum, &losses, &rows, 0)?,
            Reduction::Mean => {
                let sum = self.reduce(ReduceOp::Sum, &losses, &rows, 0)?;
                self.binary_scalar(BinaryOp::Div, &sum, &scalar, flag[2] as f64, false)?
            }
        };
        Ok(Ok(self.cast::<f64, T>(&reduced, &scalar)?))
    }
}
