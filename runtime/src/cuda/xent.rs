//! `cross_entropy` and its backward on the GPU: one launch of the row
//! kernel (one block per row, `tensorfn_kernels::builtin::cross_entropy`),
//! which checks every target before it reads through it and records a
//! bad one in a flag buffer, read back after the launch. The forward
//! writes one `f64` loss per row and counts the rows not ignored; the
//! reduction is the runtime's sum over those `N` values (in `f64`),
//! divided by the count for the mean. The backward keeps each row in
//! shared memory where it fits (`row_bytes`), so it reads the logits
//! once and writes the gradient once.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::modules::{Builtin, ModuleKey, BLOCK};
use crate::backend::{xent_layouts, Backend, Gathered};
use crate::dtype::{FloatDType, IndexDType};
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
use tensorfn_kernels::{BinaryOp, ReduceOp};

/// Blocks of a row launch at most (one row per block, grid-stride).
const MAX_ROW_BLOCKS: usize = 65_535;

/// Shared memory the backward's blocks leave for their own reductions
/// (the row kernels' static slots, with room to spare).
const STATIC_SHARED: usize = 1024;

/// The dynamic shared memory of a backward block that keeps its row of
/// `cols` elements of `size` bytes at `input` (so the logits are read
/// from global memory once), or 0 where the row does not fit `limit`
/// bytes or its copy's 16-byte chunks would not line up.
fn row_bytes(cols: usize, size: usize, input: u64, limit: usize) -> usize {
    let bytes = cols * size;
    let fits = bytes + STATIC_SHARED <= limit;
    if fits && bytes % 16 == 0 && input % 16 == 0 {
        bytes
    } else {
        0
    }
}

impl CudaBackend {
    /// See `Backend::cross_entropy` (`grad: None`) and
    /// `Backend::cross_entropy_backward`.
    pub(crate) fn cross_entropy_gpu<T: FloatDType, I: IndexDType>(
        &self,
        (x, lx): (&CudaStorage<T>, &Layout),
        (t, lt): (&CudaStorage<I>, &Layout),
        grad: Option<(&CudaStorage<T>, &Layout)>,
        args: CrossEntropyArgs,
    ) -> Result<Gathered<CudaStorage<T>>> {
        let ctx = self.ctx();
        ctx.bind()?;
        let per_row = args.reduction == Reduction::None;
        let op = if grad.is_some() {
            "cross_entropy_backward"
        } else {
            "cross_entropy"
        };
        xent_layouts(
            op,
            (x.len(), lx),
            (t.len(), lt),
            grad.map(|(g, lg)| (g.len(), lg, per_row)),
        )?;
        let (n, c) = (lx.dims()[0], lx.dims()[1]);
        // The backward's mean needs the divisor before the launch; a row
        // of no classes reads nothing: both from the targets on the host.
        let host_targets = (c == 0 || (grad.is_some() && args.reduction == Reduction::Mean))
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
        let (input, _copy) = self.rows_of(x, lx, 1)?;
        // flag[0]: a target was out of range; flag[1]: one such target;
        // flag[2]: the rows not ignored (the forward counts them).
        let flag = self.full::<i64>(3, 0)?;
        let kernel = Builtin::CrossEntropy(T::KIND, I::KIND);
        let suffix = if grad.is_some() { "_backward" } else { "" };
        let f = ctx.function(ModuleKey::Builtin(kernel), suffix, || {
            kernel.source(ctx.target())
        })?;
        let (out, losses) = if grad.is_some() {
            (Some(ctx.storage::<T>(n * c)?), None)
        } else {
            (None, Some(ctx.storage::<f64>(n)?))
        };
        let shared = if grad.is_some() {
            row_bytes(c, T::KIND.size_bytes(), input, ctx.shared_per_block)
        } else {
            0
        };
        let mut values: Vec<u64> = vec![
            match (&out, &losses) {
                (Some(o), _) => o.device_ptr(),
                (_, Some(l)) => l.device_ptr(),
                _ => unreachable!("one output"),
            },
            input,
            n as u64,
            c as u64,
            t.ptr_at(lt.offset()),
            lt.strides()[0] as u64,
            flag.device_ptr(),
            args.ignore_index as u64,
            args.label_smoothing.to_bits(),
        ];
        if let Some((g, lg)) = grad {
            let scale = if args.reduction == Reduction::Mean {
                1.0 / count as f64
            } else {
                1.0
            };
            values.extend([
                g.ptr_at(lg.offset()),
                if per_row { lg.strides()[0] as u64 } else { 0 },
                scale.to_bits(),
                u64::from(shared > 0),
            ]);
        }

        let grid = n.min(MAX_ROW_BLOCKS) as u32;
        ctx.launch_u64s(
            f,
            &|| format!("{kernel:?}{suffix} over {n}x{c}"),
            (grid, 1),
            BLOCK,
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
