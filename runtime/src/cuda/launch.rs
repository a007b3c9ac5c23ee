//! PTX modules and kernel launches.
//!
//! A module is JIT-compiled by the driver the first time one of its entries
//! is needed and cached in its context, keyed by which kernel it is; later
//! launches only look the function up. The text is the one for the
//! context's device ([`Target`]: sm_80 text on compute capability 8.0 and
//! newer where it differs); a context is one device, so the key needs no
//! target. Every launch's status is checked;
//! faults inside a kernel surface at the next synchronisation (a download,
//! or after every launch when `TENSORFN_SYNC_LAUNCHES=1` or
//! `CUDA_LAUNCH_BLOCKING=1` is set, which names the faulting kernel).

use super::alloc::CudaStorage;

use super::context::Context;
use super::error::{driver, lock};
use super::grid::{elementwise_grid, elementwise_steps, Launch};
#[cfg(test)]
use super::modules::addcmul_kernel;
pub(crate) use super::modules::{Builtin, ModuleKey};
use super::modules::{KernelSource, BLOCK};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::{coalesce, widen, Layout};
use cudarc::driver::{result, sys};

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::abi::{FusedKernel, StridedMeta, MAX_RANK};
#[cfg(test)]
use tensorfn_kernels::ptx::Target;

/// Most blocks a row kernel (reduce, softmax) is launched with; the kernels
/// stride over the rows beyond.
const MAX_ROW_BLOCKS: usize = 65_535;

/// True when every launch should be followed by a synchronisation.
fn sync_launches() -> bool {
    static SYNC: OnceLock<bool> = OnceLock::new();
    *SYNC.get_or_init(|| {
        ["TENSORFN_SYNC_LAUNCHES", "CUDA_LAUNCH_BLOCKING"]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| s == "1"))
    })
}

/// The driver's parameter list for an entry whose parameters are all 64
/// bits: the address of each of `values`, in the entry's order. The
/// driver copies each parameter's declared size from its address, so an
/// f64 passes as its `to_bits` with the same bits, and a `.u32` parameter
/// as its value widened to 64 bits (the low half comes first on the
/// little-endian hosts CUDA runs on).
fn u64_params(values: &mut [u64]) -> Vec<*mut c_void> {
    values
        .iter_mut()
        .map(|v| v as *mut u64 as *mut c_void)
        .collect()
}

/// The row length and input mask of the `_cols` entry (see
/// `tensorfn_kernels::abi`) for an elementwise walk coalesced to `dims`
/// with `strides` (the output's first): a contiguous output of rows of
/// `cols` elements, each input contiguous with it or one row read by every
/// row (strides `[0, 1]`: a per-channel operand of a channels-last
/// tensor). `None` for any other walk.
fn repeating_cols(dims: &[usize], strides: &[Vec<usize>]) -> Option<(usize, u64)> {
    let &[_, cols] = dims else {
        return None;
    };
    let full = [cols, 1];
    if strides[0] != full {
        return None;
    }
    let mut mask = 0;
    for (k, s) in strides[1..].iter().enumerate() {
        match &s[..] {
            s if s == full => {}
            [0, 1] => mask |= 1 << k,
            _ => return None,
        }
    }
    Some((cols, mask))
}

impl Context {
    /// Entry `prefix + suffix` of the module `key`, loading the module the
    /// first time.
    pub(crate) fn function(
        &self,
        key: ModuleKey,
        suffix: &'static str,
        source: impl FnOnce() -> Result<KernelSource>,
    ) -> Result<sys::CUfunction> {
        lock(&self.modules).function(key, suffix, source)
    }

    /// Queues `f` on the stream with 1-D grid and block sizes.
    fn launch(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        grid: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_grid(f, what, (grid, 1), params)
    }

    /// Queues `f` on the stream with a 2-D grid of `BLOCK`-thread blocks.
    pub(crate) fn launch_grid(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        grid: (u32, u32),
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_grid_block(f, what, grid, BLOCK, params)
    }

    /// Queues `f` on the stream with a 2-D grid of `block`-thread blocks
    /// (for entries that declare another block size).
    pub(crate) fn launch_grid_block(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        (gx, gy): (u32, u32),
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_grid_block_shared(f, what, (gx, gy), block, 0, params)
    }

    /// [`Self::launch_grid_block`] with `shared` bytes of dynamic shared
    /// memory (an entry may take more than the default 48 KiB).
    pub(crate) fn launch_grid_block_shared(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        (gx, gy): (u32, u32),
        block: u32,
        shared: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        if shared > 48 * 1024 {
            // SAFETY: `f` is a loaded function.
            unsafe {
                result::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared as i32,
                )
            }
            .map_err(|e| driver(&format!("giving {} its shared memory", what()), e))?;
        }
        // SAFETY: the caller passes parameters matching the entry's ABI
        // (abi.rs, builtin.rs), pointing at live device memory of the
        // right size.
        unsafe {
            result::launch_kernel(f, (gx, gy, 1), (block, 1, 1), shared, self.stream, params)
        }
        .map_err(|e| driver(&format!("launching {}", what()), e))?;
        super::counters::add(super::Count::Launch, 1);
        if sync_launches() {
            self.sync(&format!("kernel {}", what()))?;
        }
        Ok(())
    }

    /// [`Self::launch_grid_block_shared`] for an entry whose parameters
    /// are all 64 bits (addresses, counts, strides, an f64's bits):
    /// `values` in the entry's order.
    pub(crate) fn launch_u64s(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        grid: (u32, u32),
        block: u32,
        shared: u32,
        values: &mut [u64],
    ) -> Result<()> {
        let mut params = u64_params(values);
        self.launch_grid_block_shared(f, what, grid, block, shared, &mut params)
    }

    /// [`Self::launch_u64s`] for an entry whose last parameter is a
    /// struct passed by value (a `StridedMeta`, a kernel's meta words),
    /// after the 64-bit `values`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_u64s_meta(
        &self,
        f: sys::CUfunction,
        what: &dyn Fn() -> String,
        grid: (u32, u32),
        block: u32,
        shared: u32,
        values: &mut [u64],
        meta: &[u64],
    ) -> Result<()> {
        let mut params = u64_params(values);
        // The driver only reads the struct's bytes from this address.
        params.push(meta.as_ptr() as *mut c_void);
        self.launch_grid_block_shared(f, what, grid, block, shared, &mut params)
    }

    /// Runs an elementwise kernel (`NAME_contig` / `NAME_strided`, see
    /// `tensorfn_kernels::abi`) writing `out` (address at its offset, and
    /// its layout) from `inputs` (addresses at their offsets, layouts with
    /// the output's dims); `widest` is the size in bytes of its widest
    /// element type (which sets the contiguous entry's vector step).
    pub(crate) fn elementwise(
        &self,
        key: ModuleKey,
        source: impl FnOnce() -> Result<KernelSource>,
        out: (u64, &Layout),
        inputs: &[(u64, &Layout)],
        widest: usize,
    ) -> Result<()> {
        let (out_ptr, out_layout) = out;
        let n = out_layout.numel();
        if n == 0 {
            return Ok(());
        }
        debug_assert!(inputs.iter().all(|(_, l)| l.dims() == out_layout.dims()));
        let contig = out_layout.is_contiguous() && inputs.iter().all(|(_, l)| l.is_contiguous());
        // The strided entry divides once per dim per element: merged dims
        // cost less (and let ranks above MAX_RANK through when they merge).
        let (dims, strides) = if contig {
            (out_layout.dims().to_vec(), Vec::new())
        } else {
            let all: Vec<&[usize]> = std::iter::once(out_layout.strides())
                .chain(inputs.iter().map(|(_, l)| l.strides()))
                .collect();
            coalesce(out_layout.dims(), &all)
        };
        if dims.len() > MAX_RANK {
            return Err(Error::shape(
                "CUDA elementwise kernel",
                format!("at most {MAX_RANK} dims"),
                format!("dims {dims:?}"),
            ));
        }
        let mut values: Vec<u64> = Vec::with_capacity(inputs.len() + 4);
        values.push(out_ptr);
        values.extend(inputs.iter().map(|&(p, _)| p));
        values.push(n as u64);
        let cols = (!contig).then(|| repeating_cols(&dims, &strides)).flatten();
        if let Some((cols, mask)) = cols {
            values.extend([cols as u64, mask]);
        }
        let strided = !contig && cols.is_none();
        let meta = strided.then(|| {
            let ins: Vec<&[usize]> = strides[1..].iter().map(|s| &s[..]).collect();
            StridedMeta::new(&dims, &strides[0], &ins)
        });
        let mut params = u64_params(&mut values);
        if let Some(meta) = &meta {
            params.push(meta.words().as_ptr() as *mut c_void);
        }
        let suffix = match (contig, strided) {
            (true, _) => "_contig",
            (false, true) => "_strided",
            (false, false) => "_cols",
        };
        let f = self.function(key, suffix, source)?;
        let what = || format!("{key:?}{suffix} over {dims:?}");
        let grid = if contig {
            // Contiguous operands span n elements of at most `widest` bytes.
            let span = |&(p, _): &(u64, &Layout)| (p, n * widest);
            let launch = Launch {
                key,
                steps: elementwise_steps(n, widest),
                out: (out_ptr, n * widest),
                inputs: inputs.iter().map(span),
            };
            let params = RefCell::new(&mut params);
            self.tuned_grid(&launch, |grid| {
                self.launch(f, &what, grid, &mut params.borrow_mut())
                    .is_ok()
            })?
        } else if strided {
            elementwise_grid(n, 0, self.sm_count)
        } else {
            elementwise_grid(n, widest, self.sm_count)
        };
        self.launch(f, &what, grid, &mut params)
    }

    /// A strided copy of `size`-byte elements run as a copy of 4- or
    /// 8-byte words where whole runs of the last dim line up in both
    /// operands: the strided entry's index arithmetic is per element, so a
    /// head split of bf16 moves four elements per step instead of one.
    /// False (nothing launched) where no width fits.
    fn wide_copy(&self, size: usize, out: (u64, &Layout), input: (u64, &Layout)) -> Result<bool> {
        let (dims, strides) = coalesce(out.1.dims(), &[out.1.strides(), input.1.strides()]);
        for (word, kind) in [(8, DTypeKind::I64), (4, DTypeKind::I32)] {
            if word <= size || out.0 % word as u64 != 0 || input.0 % word as u64 != 0 {
                continue;
            }
            let Some((wide, ws)) = widen(&dims, &strides, word / size) else {
                continue;
            };
            let lo = Layout::new(wide.clone(), ws[0].clone(), 0);
            let li = Layout::new(wide, ws[1].clone(), 0);
            let kernel = Builtin::Cast(kind, kind);
            let target = self.target();
            self.elementwise(
                ModuleKey::Builtin(kernel),
                || kernel.source(target),
                (out.0, &lo),
                &[(input.0, &li)],
                word,
            )?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Runs a row kernel `NAME(out, in, rows, cols)` (reductions, softmax)
    /// over `rows` contiguous rows of `cols` elements.
    pub(crate) fn rows(
        &self,
        key: ModuleKey,
        source: impl FnOnce() -> Result<KernelSource>,
        out: u64,
        input: u64,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let mut values = [out, input, rows as u64, cols as u64];
        let f = self.function(key, "", source)?;
        let grid = rows.min(MAX_ROW_BLOCKS) as u32;
        self.launch_u64s(
            f,
            &|| format!("{key:?} over {rows}x{cols}"),
            (grid, 1),
            BLOCK,
            0,
            &mut values,
        )
    }

    /// [`elementwise`](Self::elementwise) for a built-in kernel.
    pub(crate) fn builtin_elementwise(
        &self,
        kernel: Builtin,
        out: (u64, &Layout),
        inputs: &[(u64, &Layout)],
    ) -> Result<()> {
        if let (Builtin::Cast(from, to), [input]) = (kernel, inputs) {
            if from == to && self.wide_copy(from.size_bytes(), out, *input)? {
                return Ok(());
            }
        }
        let target = self.target();
        self.elementwise(
            ModuleKey::Builtin(kernel),
            || kernel.source(target),
            out,
            inputs,
            kernel.widest_element(),
        )
    }

    /// Runs the normalisation `op` over `rows` contiguous rows of `cols`
    /// elements of dtype `dtype` at `input`, with `weight` and `bias`
    /// (0 for `rms_norm`) of `cols` elements, into `out`: the row program
    /// `tensorfn_kernels::rowkernel::norm_program` writes, launched as a
    /// row kernel written in `tensor_fn!` is ([`Self::launch_rows`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn builtin_norm(
        &self,
        (op, dtype): (tensorfn_kernels::NormOp, tensorfn_core::DTypeKind),
        out: u64,
        input: u64,
        weight: u64,
        bias: u64,
        (rows, cols): (usize, usize),
        eps: f64,
    ) -> Result<()> {
        let kernel = Builtin::Norm(op, dtype);
        let target = self.target();
        let mut inputs = vec![(input, cols), (weight, 0)];
        if op.has_bias() {
            inputs.push((bias, 0));
        }
        self.launch_rows(
            (ModuleKey::Builtin(kernel), &|| kernel.source(target)),
            &format!("{kernel:?}"),
            dtype,
            (out, false),
            &inputs,
            &[eps],
            (rows, cols),
        )
    }

    /// Runs a row kernel (`tensorfn_kernels::ptx::row_kernel`'s entries,
    /// the module `key`, its PTX from `source`) over `rows` rows of `cols`
    /// elements of `dtype` into `out` (one value per row when `per_row`):
    /// `inputs` are the row parameters' buffers and the elements between
    /// their rows (`cols`, or 0 for one row read by every row), `scalars`
    /// the scalar parameters. The entry is the one
    /// `tensorfn_kernels::norm::entry` picks for the row length and the
    /// 16-byte alignment of every buffer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_rows(
        &self,
        (key, source): (ModuleKey, &dyn Fn() -> Result<KernelSource>),
        name: &str,
        dtype: tensorfn_core::DTypeKind,
        (out, per_row): (u64, bool),
        inputs: &[(u64, usize)],
        scalars: &[f64],
        (rows, cols): (usize, usize),
    ) -> Result<()> {
        let width = if per_row { 1 } else { cols };
        if rows == 0 || width == 0 {
            return Ok(());
        }
        let aligned = std::iter::once(out)
            .chain(inputs.iter().map(|&(b, _)| b))
            .all(|p| p % 16 == 0);
        let entry = tensorfn_kernels::norm::entry(dtype, cols, aligned);
        let f = self.function(key, entry.suffix(), source)?;
        let mut words: Vec<u64> = vec![out];
        words.extend(inputs.iter().map(|&(b, _)| b));
        words.extend(inputs.iter().map(|&(_, s)| s as u64));
        words.push(rows as u64);
        words.push(cols as u64);
        words.extend(scalars.iter().map(|v| v.to_bits()));
        let grid = rows.div_ceil(entry.rows_per_block()).min(MAX_ROW_BLOCKS) as u32;
        self.launch_u64s(
            f,
            &|| format!("{name}{} over {rows}x{cols}", entry.suffix()),
            (grid, 1),
            BLOCK,
            0,
            &mut words,
        )
    }

    /// The blocks of the backward of a normalisation: at most this many,
    /// each keeping `2 * cols` partial sums. Each row costs a block four
    /// reductions, so the blocks wait on their barriers most of the time
    /// and only many blocks per SM keep the memory busy: 256 (about two
    /// per SM of an H100) took 112 µs over GPT-2's 8192 rows of 768.
    pub(crate) const NORM_BACKWARD_BLOCKS: usize = 1024;

    /// The blocks of the backward over no more than this many bytes of
    /// partial sums (2 per column and block, up to 8 bytes each), but at
    /// least 256: 8192-element rows keep 256 blocks.
    const NORM_BACKWARD_SCRATCH: usize = 16 << 20;

    /// Runs the backward of normalisation `op` over `rows` contiguous rows
    /// of `cols` elements: `dx` into `dx`, `dweight` (and `dbias` for
    /// `layer_norm`, else `0`) through `part`, scratch space of
    /// `blocks * 2 * cols` values of the statistics' type (f64 for f64,
    /// else f32) where `blocks` is [`Self::norm_backward_blocks`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn builtin_norm_backward(
        &self,
        (op, dtype): (tensorfn_kernels::NormOp, tensorfn_core::DTypeKind),
        (dx, dw, db): (u64, u64, u64),
        [input, weight, grad]: [u64; 3],
        part: u64,
        (rows, cols): (usize, usize),
        eps: f64,
    ) -> Result<()> {
        if cols == 0 {
            return Ok(());
        }
        let kernel = Builtin::NormBackward(op, dtype);
        let target = self.target();
        // Rows a warp holds in 16-byte accesses take the warp entry,
        // which reads each row once; its blocks are never more than
        // `norm_backward_blocks`, so `part` holds their sums too.
        let aligned = [dx, input, weight, grad].iter().all(|p| p % 16 == 0);
        let warp = tensorfn_kernels::norm::entry(dtype, cols, aligned)
            == tensorfn_kernels::norm::NormEntry::Warp { vector: true };
        let (entry, blocks) = if warp {
            ("_dx_warp", self.norm_backward_warp_blocks(rows, cols))
        } else {
            ("_dx", Self::norm_backward_blocks(rows, cols))
        };
        if rows > 0 {
            let f = self.function(ModuleKey::Builtin(kernel), entry, || kernel.source(target))?;
            let mut values = [
                dx,
                input,
                weight,
                grad,
                rows as u64,
                cols as u64,
                eps.to_bits(),
                part,
            ];
            self.launch_u64s(
                f,
                &|| format!("{kernel:?}{entry} over {rows}x{cols}"),
                (blocks as u32, 1),
                BLOCK,
                0,
                &mut values,
            )?;
        }
        let f = self.function(ModuleKey::Builtin(kernel), "_sum", || kernel.source(target))?;
        // No rows: the sums over no blocks are 0.
        let mut values = [
            dw,
            db,
            part,
            if rows > 0 { blocks as u64 } else { 0 },
            cols as u64,
        ];
        self.launch_u64s(
            f,
            &|| format!("{kernel:?}_sum over {cols} columns"),
            (cols.div_ceil(32) as u32, 1 + op.has_bias() as u32),
            tensorfn_kernels::builtin::NORM_SUM_THREADS,
            0,
            &mut values,
        )
    }

    /// The blocks [`Self::builtin_norm_backward`] launches for `rows`.
    pub(crate) fn norm_backward_blocks(rows: usize, cols: usize) -> usize {
        let scratch = (Self::NORM_BACKWARD_SCRATCH / (16 * cols.max(1))).max(256);
        rows.clamp(1, Self::NORM_BACKWARD_BLOCKS.min(scratch))
    }

    /// The blocks of the warp entry `_dx_warp` for `rows`: eight rows a
    /// block at most, and two blocks per SM (the entry's registers leave
    /// room for one block an SM at a time), so that each warp takes a few
    /// rows and the partial sums `_sum` adds stay few; never more than
    /// [`Self::norm_backward_blocks`].
    fn norm_backward_warp_blocks(&self, rows: usize, cols: usize) -> usize {
        let warps = BLOCK as usize / 32;
        rows.div_ceil(warps)
            .min(2 * self.sm_count.max(1))
            .clamp(1, Self::norm_backward_blocks(rows, cols))
    }

    /// Runs `rope` over `rows` contiguous rows of `2 * half` elements of
    /// dtype `dtype` at `input` (row `r` at position `r % positions`), with
    /// `cos` and `sin` of `positions` rows, into `out`.
    pub(crate) fn builtin_rope(
        &self,
        dtype: tensorfn_core::DTypeKind,
        out: u64,
        [input, cos, sin]: [u64; 3],
        (rows, positions, half): (usize, usize, usize),
    ) -> Result<()> {
        if rows * half == 0 {
            return Ok(());
        }
        // 16 bytes of pairs a thread where every row, table and half of a
        // row starts on a 16-byte boundary.
        let w = tensorfn_kernels::norm::vector(dtype);
        let vector = half % w == 0 && [out, input, cos, sin].iter().all(|p| p % 16 == 0);
        let (suffix, half) = if vector { ("_v", half / w) } else { ("", half) };
        let pairs = rows * half;
        let kernel = Builtin::Rope(dtype);
        let target = self.target();
        let f = self.function(ModuleKey::Builtin(kernel), suffix, || kernel.source(target))?;
        let mut values = [
            out,
            input,
            cos,
            sin,
            pairs as u64,
            positions as u64,
            half as u64,
        ];
        let grid = elementwise_grid(pairs, 0, self.sm_count);
        self.launch_u64s(
            f,
            &|| format!("{kernel:?}{suffix} over {rows} rows"),
            (grid, 1),
            BLOCK,
            0,
            &mut values,
        )
    }

    /// [`rows`](Self::rows) for a built-in kernel.
    pub(crate) fn builtin_rows(
        &self,
        kernel: Builtin,
        out: u64,
        input: u64,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        self.rows(
            ModuleKey::Builtin(kernel),
            || kernel.source(self.target()),
            out,
            input,
            rows,
            cols,
        )
    }
}

/// Launches a fused elementwise kernel over `inputs` (device address of
/// element 0 of each storage, and its layout broadcast to `out_dims`),
/// returning a contiguous output of `out_dims`. The `_contig` entry runs
/// when every input is contiguous with the output's dims, else `_strided`.
#[cfg(test)]
pub(crate) fn launch_fused<O: DType>(
    kernel: &'static FusedKernel,
    ord: usize,
    inputs: &[(u64, &Layout)],
    out_dims: &[usize],
) -> Result<CudaStorage<O>> {
    launch_fused_in(kernel, || super::context::context(ord), inputs, out_dims)
}

/// [`launch_fused`] on the context `ctx` gives, which is asked for only
/// once the arguments are checked.
pub(crate) fn launch_fused_in<O: DType>(
    kernel: &'static FusedKernel,
    ctx: impl FnOnce() -> Result<Arc<Context>>,
    inputs: &[(u64, &Layout)],
    out_dims: &[usize],
) -> Result<CudaStorage<O>> {
    let op = || format!("fused kernel {}", kernel.name);
    if kernel.output != O::KIND {
        return Err(Error::shape(
            op(),
            format!("an output of dtype {}", kernel.output),
            format!("a request for {}", O::KIND),
        ));
    }
    if inputs.len() != kernel.inputs.len() {
        return Err(Error::shape(
            op(),
            format!("{} inputs", kernel.inputs.len()),
            format!("{} inputs", inputs.len()),
        ));
    }
    if let Some((i, (_, l))) = inputs
        .iter()
        .enumerate()
        .find(|(_, (_, l))| l.dims() != out_dims)
    {
        return Err(Error::shape(
            op(),
            format!("input {i} broadcast to the output dims {out_dims:?}"),
            format!("dims {:?}", l.dims()),
        ));
    }
    let ctx = ctx()?;
    let out = ctx.storage::<O>(out_dims.iter().product())?;
    let at_offsets: Vec<(u64, &Layout)> = inputs
        .iter()
        .zip(kernel.inputs)
        .map(|(&(ptr, l), dtype)| (ptr + (l.offset() * dtype.size_bytes()) as u64, l))
        .collect();
    ctx.elementwise(
        ModuleKey::Fused(kernel.name),
        || {
            Ok(KernelSource {
                name: kernel.name.to_string(),
                ptx: kernel.ptx_for(ctx.target()).to_string(),
            })
        },
        (out.device_ptr(), &Layout::contiguous(out_dims)),
        &at_offsets,
        kernel
            .inputs
            .iter()
            .chain([&kernel.output])
            .map(|d| d.size_bytes())
            .max()
            .unwrap_or(1),
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;
    use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};

    #[test]
    fn the_addcmul_kernel_builds_for_every_numeric_dtype() {
        for t in DTypeKind::ALL.into_iter().filter(|&t| t != DTypeKind::Bool) {
            for target in [Target::Sm70, Target::Sm80] {
                let src = Builtin::Addcmul(t).source(target).unwrap();
                assert_eq!(src.name, format!("tf_addcmul_{t}"));
                assert!(src.ptx.starts_with(target.header()));
                assert!(src.ptx.contains(&format!(".entry tf_addcmul_{t}_contig(")));
                assert!(src.ptx.contains(&format!(".entry tf_addcmul_{t}_strided(")));
                assert!(src.ptx.contains(&format!(".entry tf_addcmul_{t}_cols(")));
            }
        }
    }

    #[test]
    fn per_channel_operands_of_channels_last_walks_take_the_cols_entry() {
        // [N, H, W, C] = [2, 3, 4, 5] row-major output (a channels-last
        // batch seen in memory order), a full input and a [C] one.
        let dims = [2, 3, 4, 5];
        let full = [60, 20, 5, 1];
        let chan = [0, 0, 0, 1];
        let (d, s) = coalesce(&dims, &[&full, &full, &chan, &chan]);
        assert_eq!(repeating_cols(&d, &s), Some((5, 0b110)));
        // Every input full: no repeating input is still a valid walk.
        let (d, s) = coalesce(&dims, &[&full, &full]);
        assert_eq!(d, [120]);
        assert_eq!(repeating_cols(&d, &s), None);
        // A per-channel operand of an NCHW tensor repeats every H * W
        // elements but not as one row: strided.
        let nchw_chan = [0, 1, 0, 0];
        let (d, s) = coalesce(&dims, &[&full, &nchw_chan]);
        assert_eq!(repeating_cols(&d, &s), None);
        // A transposed output, a per-row operand, a scalar: strided.
        let (d, s) = coalesce(&[6, 7], &[&[1, 6], &[0, 1]]);
        assert_eq!(repeating_cols(&d, &s), None);
        let (d, s) = coalesce(&[6, 7], &[&[7, 1], &[1, 0]]);
        assert_eq!(repeating_cols(&d, &s), None);
        let (d, s) = coalesce(&[6, 7], &[&[7, 1], &[0, 0]]);
        assert_eq!(repeating_cols(&d, &s), None);
    }

    /// The kernel (run by the interpreter, which computes what the PTX
    /// computes) rounds once, so it matches the CPU backend even where the
    /// two terms cancel.
    #[test]
    fn addcmul_rounds_once() {
        let mut rng = SplitMix64::new(0xadd);
        for t in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
            DTypeKind::I32,
            DTypeKind::I64,
            DTypeKind::U8,
        ] {
            let n = 257;
            let (lo, hi) = if t == DTypeKind::U8 {
                (0.0, 6.0)
            } else {
                (-50.0, 50.0)
            };
            let draw = |rng: &mut SplitMix64| -> Vec<f64> {
                let raw: Vec<f64> = (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect();
                HostData::from_f64(t, &raw).to_f64_vec()
            };
            let (b, c) = (draw(&mut rng), draw(&mut rng));
            let v = HostData::from_f64(t, &[if t.is_float() { 0.5 } else { 2.0 }]).to_f64_vec()[0];
            // Half the x values cancel the product up to one unit of t.
            let mut a = draw(&mut rng);
            for i in (0..n).step_by(2) {
                let neg = HostData::from_f64(t, &[-(v * b[i] * c[i])]).to_f64_vec()[0];
                a[i] = if t == DTypeKind::U8 { a[i] } else { neg };
            }
            let want: Vec<f64> = (0..n).map(|i| a[i] + v * b[i] * c[i]).collect();
            let data = [&a, &b, &c].map(|x| HostData::from_f64(t, x));
            let value = HostData::from_f64(t, &[v]);
            let kernel = addcmul_kernel(t).unwrap();
            let out = run_elementwise(
                &kernel,
                &[
                    HostView::contiguous(&data[0]),
                    HostView::contiguous(&data[1]),
                    HostView::contiguous(&data[2]),
                    HostView::strided(&value, 0, vec![0]),
                ],
                &[n],
            )
            .unwrap();
            assert_eq!(out, HostData::from_f64(t, &want), "addcmul {t}");
        }
    }
}
