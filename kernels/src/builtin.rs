//! The kernels the CUDA runtime loads for single operations: elementwise
//! `unary`, `binary` and `cast` (the launch contract of [`abi`](crate::abi)),
//! row reductions and row ops (`softmax`, ...), `cat` of row blocks and
//! the gather behind `index_select`, `gather` and `embedding`.
//!
//! Names are derived from the op and dtypes only (`tf_unary_sin_f32`,
//! `tf_binary_add_i64`, `tf_cast_f32_bf16`, `tf_reduce_argmax_f16`,
//! `tf_softmax_f32`, `tf_log_softmax_bf16`, `tf_cat_rows_16b`,
//! `tf_gather_4b_i64`), so a runtime can key its
//! module cache with the `*_name` functions before generating any text.
//!
//! Row kernels have one entry, `NAME(.param .u64 out, .param .u64 in,
//! .param .u64 rows, .param .u64 cols)`, reading `rows` contiguous rows of
//! `cols` elements. Launch them with `grid.x = min(rows, 65535)` and
//! `block.x = BLOCK`; they loop over the rows the grid does not cover.
//!
//! ```
//! use tensorfn_kernels::builtin::{self, BLOCK};
//! use tensorfn_kernels::{DTypeKind, ReduceOp, UnaryOp};
//! let k = builtin::unary(UnaryOp::Sin, DTypeKind::F32);
//! assert_eq!(k.name, "tf_unary_sin_f32");
//! assert!(k.ptx.contains(".entry tf_unary_sin_f32_contig("));
//! assert!(k.ptx.contains(".entry tf_unary_sin_f32_strided("));
//! let r = builtin::reduce(ReduceOp::Sum, DTypeKind::F16);
//! assert!(r.ptx.contains(".entry tf_reduce_sum_f16("));
//! assert_eq!(BLOCK, 256);
//! ```

use crate::error::{Error, Result};
use crate::ir::ElementwiseBuilder;
use crate::ops::{BinaryOp, NormOp, ReduceOp, RowOp, UnaryOp};
use crate::ptx::{self, Target};
use crate::reduction::{reduce_spec, row_spec, topk_spec};
use tensorfn_core::DTypeKind;

pub use crate::abi::BLOCK;

pub use crate::ptx::{CAT_PARTS, SOFTMAX_REGISTER_COLS, XENT_THREADS};

/// A PTX module and the name of its kernel: the entry prefix of an
/// elementwise kernel (entries `NAME_contig` and `NAME_strided`), or the
/// entry itself for a row kernel.
///
/// ```
/// let k = tensorfn_kernels::builtin::cast(
///     tensorfn_kernels::DTypeKind::F32,
///     tensorfn_kernels::DTypeKind::F16,
/// );
/// assert_eq!(k.contig_entry(), "tf_cast_f32_f16_contig");
/// assert_eq!(k.strided_entry(), "tf_cast_f32_f16_strided");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Entry name (row kernels) or entry-name prefix (elementwise).
    pub name: String,
    /// The PTX module text.
    pub ptx: String,
}

impl Kernel {
    /// `NAME_contig`, the entry for contiguous same-shape operands.
    ///
    /// ```
    /// use tensorfn_kernels::{builtin, BinaryOp, DTypeKind};
    /// let k = builtin::binary(BinaryOp::Sub, DTypeKind::I32);
    /// assert_eq!(k.contig_entry(), "tf_binary_sub_i32_contig");
    /// ```
    pub fn contig_entry(&self) -> String {
        format!("{}_contig", self.name)
    }

    /// `NAME_strided`, the entry taking packed dims and strides.
    ///
    /// ```
    /// use tensorfn_kernels::{builtin, DTypeKind, UnaryOp};
    /// let k = builtin::unary(UnaryOp::Exp, DTypeKind::F64);
    /// assert!(k.ptx.contains(&format!(".entry {}(", k.strided_entry())));
    /// ```
    pub fn strided_entry(&self) -> String {
        format!("{}_strided", self.name)
    }

    /// `NAME_cols`, the entry for contiguous operands mixed with operands
    /// repeating every row of `cols` elements.
    ///
    /// ```
    /// use tensorfn_kernels::{builtin, BinaryOp, DTypeKind};
    /// let k = builtin::binary(BinaryOp::Add, DTypeKind::BF16);
    /// assert!(k.ptx.contains(&format!(".entry {}(", k.cols_entry())));
    /// ```
    pub fn cols_entry(&self) -> String {
        format!("{}_cols", self.name)
    }
}

/// Name of [`unary`]`(op, dtype)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, UnaryOp};
/// assert_eq!(builtin::unary_name(UnaryOp::Gelu, DTypeKind::BF16), "tf_unary_gelu_bf16");
/// ```
pub fn unary_name(op: UnaryOp, dtype: DTypeKind) -> String {
    format!("tf_unary_{}_{dtype}", op.name())
}

/// Name of [`binary`]`(op, dtype)`.
///
/// ```
/// use tensorfn_kernels::{builtin, BinaryOp, DTypeKind};
/// assert_eq!(builtin::binary_name(BinaryOp::Max, DTypeKind::I32), "tf_binary_maximum_i32");
/// ```
pub fn binary_name(op: BinaryOp, dtype: DTypeKind) -> String {
    format!("tf_binary_{}_{dtype}", op.name())
}

/// Name of [`cast`]`(from, to)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::cast_name(DTypeKind::U8, DTypeKind::F32), "tf_cast_u8_f32");
/// ```
pub fn cast_name(from: DTypeKind, to: DTypeKind) -> String {
    format!("tf_cast_{from}_{to}")
}

/// Name of [`reduce`]`(op, dtype)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, ReduceOp};
/// assert_eq!(builtin::reduce_name(ReduceOp::ArgMin, DTypeKind::F64), "tf_reduce_argmin_f64");
/// ```
pub fn reduce_name(op: ReduceOp, dtype: DTypeKind) -> String {
    format!("tf_reduce_{}_{dtype}", op.name())
}

/// Name of [`row`]`(op, dtype)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, RowOp};
/// assert_eq!(builtin::row_name(RowOp::LogSoftmax, DTypeKind::F16), "tf_log_softmax_f16");
/// ```
pub fn row_name(op: RowOp, dtype: DTypeKind) -> String {
    format!("tf_{}_{dtype}", op.name())
}

/// `op` over one input of `dtype`, output of `dtype`; `Err` when `op` is
/// not defined on `dtype` (floats only for [`UnaryOp::needs_float`], never
/// `bool`).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, UnaryOp};
/// assert!(builtin::try_unary(UnaryOp::Abs, DTypeKind::I64).is_ok());
/// assert!(builtin::try_unary(UnaryOp::Exp, DTypeKind::I64).is_err());
/// ```
pub fn try_unary(op: UnaryOp, dtype: DTypeKind) -> Result<Kernel> {
    try_unary_for(op, dtype, Target::Sm70)
}

/// [`try_unary`] written for `target`.
///
/// ```
/// use tensorfn_kernels::{builtin, ptx::Target, DTypeKind, UnaryOp};
/// let k = builtin::try_unary_for(UnaryOp::Exp, DTypeKind::BF16, Target::Sm80)?;
/// assert!(k.ptx.contains(".target sm_80"));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn try_unary_for(op: UnaryOp, dtype: DTypeKind, target: Target) -> Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let y = k.unary(op, x);
    let kernel = k.output(y).map_err(|e| unsupported("unary", e))?;
    let name = unary_name(op, dtype);
    let ptx = ptx::elementwise_for(&kernel, &name, target)?;
    Ok(Kernel { name, ptx })
}

/// `op` over two inputs of `dtype`; `Err` when `op` is not defined on
/// `dtype` (ops with [`BinaryOp::needs_float`] take floats only, nothing
/// takes `bool`).
///
/// ```
/// use tensorfn_kernels::{builtin, BinaryOp, DTypeKind};
/// assert!(builtin::try_binary(BinaryOp::Div, DTypeKind::U8).is_ok());
/// assert!(builtin::try_binary(BinaryOp::Pow, DTypeKind::I32).is_err());
/// ```
pub fn try_binary(op: BinaryOp, dtype: DTypeKind) -> Result<Kernel> {
    try_binary_for(op, dtype, Target::Sm70)
}

/// [`try_binary`] written for `target`.
///
/// ```
/// use tensorfn_kernels::{builtin, ptx::Target, BinaryOp, DTypeKind};
/// let k = builtin::try_binary_for(BinaryOp::Add, DTypeKind::BF16, Target::Sm80)?;
/// assert!(k.ptx.contains("fma.rn.bf16"));
/// let k = builtin::try_binary_for(BinaryOp::Div, DTypeKind::BF16, Target::Sm80)?;
/// assert!(k.ptx.contains("cvt.rn.bf16x2.f32"));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn try_binary_for(op: BinaryOp, dtype: DTypeKind, target: Target) -> Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let a = k.input(dtype);
    let b = k.input(dtype);
    let c = k.binary(op, a, b);
    let kernel = k.output(c).map_err(|e| unsupported("binary", e))?;
    let name = binary_name(op, dtype);
    let ptx = ptx::elementwise_for(&kernel, &name, target)?;
    Ok(Kernel { name, ptx })
}

/// The reduction `op` over rows of `dtype`; `Err` for `bool`, and for
/// `Mean` of an integer dtype.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, ReduceOp};
/// assert!(builtin::try_reduce(ReduceOp::Mean, DTypeKind::I32).is_err());
/// assert!(builtin::try_reduce(ReduceOp::Max, DTypeKind::U8).is_ok());
/// ```
pub fn try_reduce(op: ReduceOp, dtype: DTypeKind) -> Result<Kernel> {
    let spec = reduce_spec(op, dtype)?;
    let name = reduce_name(op, dtype);
    let ptx = ptx::reduce(&name, &spec);
    Ok(Kernel { name, ptx })
}

/// Row op `op` over rows of `dtype`; `Err` unless `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, RowOp};
/// assert!(builtin::try_row(RowOp::Softmax, DTypeKind::I64).is_err());
/// ```
pub fn try_row(op: RowOp, dtype: DTypeKind) -> Result<Kernel> {
    let spec = row_spec(op, dtype)?;
    let name = row_name(op, dtype);
    let ptx = ptx::row(&name, &spec);
    Ok(Kernel { name, ptx })
}

/// Name of [`norm`]`(op, dtype)`: the prefix of its entries' names.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// assert_eq!(builtin::norm_name(NormOp::RmsNorm, DTypeKind::BF16), "tf_rms_norm_bf16");
/// ```
pub fn norm_name(op: NormOp, dtype: DTypeKind) -> String {
    format!("tf_{}_{dtype}", op.name())
}

/// Normalisation `op` (`layer_norm`, `rms_norm`) over contiguous rows of
/// `dtype`: a module with the entries `NAME_SUFFIX` of every
/// [`NormEntry`](crate::norm::NormEntry) (see [`norm`](crate::norm) for
/// which runs a row): the row program
/// [`norm_program`](crate::rowkernel::norm_program)`(op, dtype)` as
/// [`ptx::row_kernel`] writes a user's, with its parameters (`x`,
/// `weight`, for `layer_norm` `bias`, as rows; `eps`); `Err` unless
/// `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// let k = builtin::try_norm(NormOp::LayerNorm, DTypeKind::F16)?;
/// assert!(k.ptx.contains(".entry tf_layer_norm_f16_warp_v("));
/// assert!(k.ptx.contains(".entry tf_layer_norm_f16_long("));
/// assert!(builtin::try_norm(NormOp::RmsNorm, DTypeKind::I32).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn try_norm(op: NormOp, dtype: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "norm",
            message: format!(
                "{} over {} rows; normalisations take float dtypes",
                op.name(),
                dtype.name()
            ),
        });
    }
    let name = norm_name(op, dtype);
    let ptx = ptx::row_kernel(&crate::rowkernel::norm_program(op, dtype), &name)?;
    Ok(Kernel { name, ptx })
}

/// [`try_norm`] for a float dtype.
///
/// # Panics
///
/// Unless `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// let k = builtin::norm(NormOp::RmsNorm, DTypeKind::F32);
/// assert!(k.ptx.contains(".entry tf_rms_norm_f32_block_v("));
/// ```
pub fn norm(op: NormOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_norm(op, dtype))
}

/// Threads of a block of a normalisation backward's `_sum` entry (see
/// [`try_norm_backward`]): 32 columns, each summed by every warp.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::NORM_SUM_THREADS, 1024);
/// ```
pub const NORM_SUM_THREADS: u32 = 32 * ptx::NORM_SUM_WARPS as u32;

/// Name of [`norm_backward`]`(op, dtype)`: the prefix of its entries'
/// names.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// assert_eq!(
///     builtin::norm_backward_name(NormOp::RmsNorm, DTypeKind::BF16),
///     "tf_norm_backward_rms_norm_bf16"
/// );
/// ```
pub fn norm_backward_name(op: NormOp, dtype: DTypeKind) -> String {
    format!("tf_norm_backward_{}_{dtype}", op.name())
}

/// The gradients of normalisation `op` over contiguous rows of `dtype`: a
/// module with the entries `NAME_dx` (one block per row: the row's
/// statistics recomputed from the input, its `dx`, and per-block partial
/// sums of `dweight` and `dbias`) and `NAME_sum` (those partial sums added
/// in a fixed order by blocks of [`NORM_SUM_THREADS`] threads, a lane per
/// column and a grid row per sum: no atomics); see `ptx::norm_backward` for
/// the parameters. `Err` unless `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// let k = builtin::try_norm_backward(NormOp::LayerNorm, DTypeKind::F16)?;
/// assert!(k.ptx.contains(".entry tf_norm_backward_layer_norm_f16_dx("));
/// assert!(k.ptx.contains(".entry tf_norm_backward_layer_norm_f16_sum("));
/// assert!(builtin::try_norm_backward(NormOp::RmsNorm, DTypeKind::I32).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn try_norm_backward(op: NormOp, dtype: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "norm_backward",
            message: format!(
                "{} gradients over {} rows; normalisations take float dtypes",
                op.name(),
                dtype.name()
            ),
        });
    }
    let name = norm_backward_name(op, dtype);
    let ptx = ptx::norm_backward(&name, op, dtype);
    Ok(Kernel { name, ptx })
}

/// [`try_norm_backward`] for a float dtype.
///
/// # Panics
///
/// Unless `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, NormOp};
/// let k = builtin::norm_backward(NormOp::RmsNorm, DTypeKind::F32);
/// assert!(k.ptx.contains(".entry tf_norm_backward_rms_norm_f32_dx("));
/// ```
pub fn norm_backward(op: NormOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_norm_backward(op, dtype))
}

/// Name of [`rope`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::rope_name(tensorfn_kernels::DTypeKind::F16), "tf_rope_f16");
/// ```
pub fn rope_name(dtype: DTypeKind) -> String {
    format!("tf_rope_{dtype}")
}

/// Rotary position embedding (`rope`) of contiguous rows of `dtype`, in
/// the Hugging Face Llama convention: the entries `NAME(out, in, cos, sin,
/// pairs, positions, half)` and `NAME_v` (the same in groups of 16 bytes;
/// see `ptx::rope` for the parameters); `Err` unless `dtype` is a float.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::try_rope(DTypeKind::BF16)?;
/// assert!(k.ptx.contains(".entry tf_rope_bf16("));
/// assert!(builtin::try_rope(DTypeKind::U8).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn try_rope(dtype: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "rope",
            message: format!("{} rows; rope takes float dtypes", dtype.name()),
        });
    }
    let name = rope_name(dtype);
    let ptx = ptx::rope(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`cross_entropy`]`(dtype, index)`, its forward entry (the
/// backward entry is `NAME_backward`).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::cross_entropy_name(DTypeKind::BF16, DTypeKind::I64), "tf_cross_entropy_bf16_i64");
/// ```
pub fn cross_entropy_name(dtype: DTypeKind, index: DTypeKind) -> String {
    format!("tf_cross_entropy_{dtype}_{index}")
}

/// `cross_entropy` of contiguous rows of logits of `dtype` against
/// targets of `index` (`I32` or `I64`), and its backward: a module with
/// the entries `NAME`, `NAME_backward` and `NAME_fused` (the loss and
/// its gradient from one read of the logits; see `ptx::xent` for the
/// parameters), one block per row, accumulating in f32 (f64 for f64);
/// `Err` unless `dtype` is a float and `index` an index dtype.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::cross_entropy(DTypeKind::F16, DTypeKind::I32)?;
/// assert!(k.ptx.contains(".entry tf_cross_entropy_f16_i32("));
/// assert!(k.ptx.contains(".entry tf_cross_entropy_f16_i32_backward("));
/// assert!(k.ptx.contains(".entry tf_cross_entropy_f16_i32_fused("));
/// assert!(builtin::cross_entropy(DTypeKind::I32, DTypeKind::I64).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn cross_entropy(dtype: DTypeKind, index: DTypeKind) -> Result<Kernel> {
    if !matches!(index, DTypeKind::I32 | DTypeKind::I64) {
        return Err(Error::Unsupported {
            kernel: "cross_entropy",
            message: format!("{} targets; class indices are i64 or i32", index.name()),
        });
    }
    let spec = row_spec(RowOp::LogSoftmax, dtype)?;
    let name = cross_entropy_name(dtype, index);
    let ptx = ptx::cross_entropy(&name, &spec, index);
    Ok(Kernel { name, ptx })
}

/// Name of [`topk`]`(dtype, largest)`.
///
/// ```
/// use tensorfn_kernels::{builtin::topk_name, DTypeKind};
/// assert_eq!(topk_name(DTypeKind::F32, true), "tf_topk_f32");
/// assert_eq!(topk_name(DTypeKind::F32, false), "tf_topk_smallest_f32");
/// ```
pub fn topk_name(dtype: DTypeKind, largest: bool) -> String {
    if largest {
        format!("tf_topk_{dtype}")
    } else {
        format!("tf_topk_smallest_{dtype}")
    }
}

/// `topk` along contiguous rows of `dtype`, the largest first (`largest`)
/// or the smallest first (NaN last, as PyTorch's `largest = False`): the
/// entry `NAME(out, in, rows, cols, idx, k)` (see `ptx::topk`), `k` passes
/// of a block-wide arg-max (arg-min) per row; `Err` for `bool`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::topk(DTypeKind::BF16, true)?;
/// assert!(k.ptx.contains(".entry tf_topk_bf16("));
/// let k = builtin::topk(DTypeKind::F32, false)?;
/// assert!(k.ptx.contains(".entry tf_topk_smallest_f32("));
/// assert!(builtin::topk(DTypeKind::Bool, false).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn topk(dtype: DTypeKind, largest: bool) -> Result<Kernel> {
    let spec = topk_spec(dtype, largest)?;
    let name = topk_name(dtype, largest);
    let ptx = ptx::topk(&name, &spec);
    Ok(Kernel { name, ptx })
}

/// Name of [`cumsum`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::cumsum_name(tensorfn_kernels::DTypeKind::I32), "tf_cumsum_i32");
/// ```
pub fn cumsum_name(dtype: DTypeKind) -> String {
    format!("tf_cumsum_{dtype}")
}

/// `cumsum` along contiguous rows of `dtype` (floats into their dtype,
/// accumulated in f32 or f64; `i32`, `i64`, `u8` into `i64`, as
/// PyTorch's): the entry `NAME(out, in, rows, cols)`, one thread per row;
/// `Err` for `bool`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert!(builtin::cumsum(DTypeKind::F16)?.ptx.contains(".entry tf_cumsum_f16("));
/// assert!(builtin::cumsum(DTypeKind::Bool).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn cumsum(dtype: DTypeKind) -> Result<Kernel> {
    if dtype == DTypeKind::Bool {
        return Err(Error::Unsupported {
            kernel: "cumsum",
            message: "bool rows; cast to i64 first".to_string(),
        });
    }
    let name = cumsum_name(dtype);
    let ptx = ptx::cumsum(&name, dtype);
    Ok(Kernel { name, ptx })
}

fn float_only(kernel: &'static str, dtype: DTypeKind) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::Unsupported {
            kernel,
            message: format!("{dtype} elements; it takes floats"),
        })
    }
}

/// Name of [`column_sum`]`(dtype)`: the prefix of its entries' names.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::column_sum_name(tensorfn_kernels::DTypeKind::BF16), "tf_colsum_bf16");
/// ```
pub fn column_sum_name(dtype: DTypeKind) -> String {
    format!("tf_colsum_{dtype}")
}

/// The sums over rows of a contiguous `[rows, cols]` matrix of `dtype`
/// (f32, f16 or bf16; a bias's gradient), accumulated in f32 and rounded
/// once, in two passes without atomics:
///
/// - `NAME_part` / `NAME_part1(part, x, rows, cols, chunk)`: grid
///   `(ceil(cols / (32 w)), ceil(rows / chunk))` of
///   [`abi::BLOCK`](crate::abi::BLOCK) threads writing one f32 partial
///   sum per chunk and column to `part[chunk][col]`; `_part` loads
///   [`ptx::column_sum_width`](crate::ptx::column_sum_width) elements (16
///   bytes) at once and needs `cols` a multiple of it and `x` 16-byte
///   aligned, `_part1` (`w = 1`) takes any matrix.
/// - `NAME_sum(out, 0, part, chunks, cols)`: grid `(ceil(cols / 32), 1)`
///   of [`NORM_SUM_THREADS`] threads adding the chunks' sums in a fixed
///   order into `out` (the norms' backward's `_sum` over one part).
///
/// `Err` for other dtypes.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::column_sum(DTypeKind::BF16)?;
/// assert!(k.ptx.contains(".entry tf_colsum_bf16_part("));
/// assert!(k.ptx.contains(".entry tf_colsum_bf16_sum("));
/// assert!(builtin::column_sum(DTypeKind::F64).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn column_sum(dtype: DTypeKind) -> Result<Kernel> {
    if !matches!(dtype, DTypeKind::F32 | DTypeKind::F16 | DTypeKind::BF16) {
        return Err(Error::Unsupported {
            kernel: "column_sum",
            message: format!("{dtype} elements; it takes f32, f16 and bf16"),
        });
    }
    let name = column_sum_name(dtype);
    let ptx = ptx::column_sum(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`pool2d`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::pool2d_name(tensorfn_kernels::DTypeKind::BF16), "tf_pool2d_bf16");
/// ```
pub fn pool2d_name(dtype: DTypeKind) -> String {
    format!("tf_pool2d_{dtype}")
}

/// 2-D pooling of a float `dtype` over `[N, C, H, W]` read through any
/// strides: entries `NAME_max`, `NAME_avg`, `NAME_adaptive` (`out, x,
/// meta`: one thread per output element) and their `_backward` (`dx, x,
/// g, meta`: one thread per input element, gathering the windows that
/// cover it, no atomics), `meta` being [`ptx::POOL_META_WORDS`] words.
/// Sums in f64 in the reference's order: the CPU's bits in every dtype.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::pool2d(DTypeKind::F16)?;
/// assert!(k.ptx.contains(".entry tf_pool2d_f16_max("));
/// assert!(k.ptx.contains(".entry tf_pool2d_f16_adaptive_backward("));
/// assert!(builtin::pool2d(DTypeKind::I32).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn pool2d(dtype: DTypeKind) -> Result<Kernel> {
    float_only("pool2d", dtype)?;
    let name = pool2d_name(dtype);
    let ptx = ptx::pool2d(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`conv2d`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::conv2d_name(tensorfn_kernels::DTypeKind::F16), "tf_conv2d_f16");
/// ```
pub fn conv2d_name(dtype: DTypeKind) -> String {
    format!("tf_conv2d_{dtype}")
}

/// The column kernels of the built-in 2-D convolution over a float
/// `dtype` (the matrix products are cuBLAS's): `NAME_im2col(cols, x,
/// meta)` copies the taps of `[N, C, H, W]` (any strides) into contiguous
/// `[N, C * kH * kW, OH * OW]` columns, and `NAME_col2im(dx, cols, meta)`
/// gathers, for each element of a contiguous `dx`, the column entries of
/// the taps that read it (no atomics; sums in f64, one rounding), `meta`
/// being [`ptx::CONV_META_WORDS`] words.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::conv2d(DTypeKind::BF16)?;
/// assert!(k.ptx.contains(".entry tf_conv2d_bf16_im2col("));
/// assert!(k.ptx.contains(".entry tf_conv2d_bf16_col2im("));
/// assert!(builtin::conv2d(DTypeKind::I64).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn conv2d(dtype: DTypeKind) -> Result<Kernel> {
    float_only("conv2d", dtype)?;
    let name = conv2d_name(dtype);
    let ptx = ptx::conv2d(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`dropout`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::dropout_name(tensorfn_kernels::DTypeKind::F32), "tf_dropout_f32");
/// ```
pub fn dropout_name(dtype: DTypeKind) -> String {
    format!("tf_dropout_{dtype}")
}

/// Seeded `dropout` of contiguous float `dtype` elements: the entry
/// `NAME(out, x, n, mixed_seed, cut, scale)` keeps element `i` when
/// `tensorfn_core::ops::dropout::bits(seed, i) >= cut`, the mask of every
/// other back-end, and scales it in f64.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert!(builtin::dropout(DTypeKind::BF16)?.ptx.contains(".entry tf_dropout_bf16("));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn dropout(dtype: DTypeKind) -> Result<Kernel> {
    float_only("dropout", dtype)?;
    let name = dropout_name(dtype);
    let ptx = ptx::dropout(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`multinomial`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::multinomial_name(tensorfn_kernels::DTypeKind::F32), "tf_multinomial_f32");
/// ```
pub fn multinomial_name(dtype: DTypeKind) -> String {
    format!("tf_multinomial_{dtype}")
}

/// Seeded `multinomial` draws from contiguous rows of float `dtype`
/// weights: the entry `NAME(out, x, scratch, status, rows, cols, n,
/// replacement, mixed_seed)`, one thread per row following the runtime's
/// CPU procedure in f64 step for step (the same indices from the same
/// seed), faulty rows reported through `status` (see `ptx::multinomial`).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert!(builtin::multinomial(DTypeKind::BF16)?.ptx.contains(".entry tf_multinomial_bf16("));
/// assert!(builtin::multinomial(DTypeKind::I64).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn multinomial(dtype: DTypeKind) -> Result<Kernel> {
    float_only("multinomial", dtype)?;
    let name = multinomial_name(dtype);
    let ptx = ptx::multinomial(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`batch_norm`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::batch_norm_name(tensorfn_kernels::DTypeKind::F64), "tf_batch_norm_f64");
/// ```
pub fn batch_norm_name(dtype: DTypeKind) -> String {
    format!("tf_batch_norm_{dtype}")
}

/// `batch_norm` of a float `dtype` over the channels of `[N, C, S]` read
/// through any strides, blocks of [`BLOCK`] threads over the channels
/// (`grid.x`) and parts of each channel (`grid.y`): entries `NAME`
/// (statistics, the normalised output, the running statistics' update)
/// and `NAME_backward` (`dx`, `dweight`, `dbias`), and with several parts
/// the partial sums first (`NAME_stats_sum`, `NAME_stats_dev`,
/// `NAME_backward_sums`); see the PTX module's comment for the
/// parameters.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::batch_norm(DTypeKind::F32)?;
/// assert!(k.ptx.contains(".entry tf_batch_norm_f32("));
/// assert!(k.ptx.contains(".entry tf_batch_norm_f32_backward("));
/// assert!(k.ptx.contains(".entry tf_batch_norm_f32_stats_sum("));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn batch_norm(dtype: DTypeKind) -> Result<Kernel> {
    float_only("batch_norm", dtype)?;
    let name = batch_norm_name(dtype);
    let ptx = ptx::batch_norm(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`cat_rows`]`(unit)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::cat_rows_name(16), "tf_cat_rows_16b");
/// ```
pub fn cat_rows_name(unit: u32) -> String {
    format!("tf_cat_rows_{unit}b")
}

/// Unit sizes in bytes [`cat_rows`] is defined for.
///
/// ```
/// use tensorfn_kernels::builtin::{cat_rows, CAT_UNITS};
/// assert!(CAT_UNITS.iter().all(|&u| cat_rows(u).is_ok()));
/// assert!(cat_rows(3).is_err());
/// ```
pub const CAT_UNITS: [u32; 5] = [1, 2, 4, 8, 16];

/// Concatenation of contiguous row blocks (the `cat` of contiguous
/// inputs), copying units of `unit` bytes; `Err` unless `unit` is one of
/// [`CAT_UNITS`].
///
/// The entry `NAME(.param .u64 out, .param .u64 outer, .param .u64 row,`
/// then for each of [`CAT_PARTS`] inputs `.param .u64 src, .param .u64
/// inner, .param .u64 offset)` writes, for every input `k` below
/// `grid.y` and every `r < outer`, the `inner_k` units at `src_k + r *
/// inner_k` to units `r * row + offset_k ..` of `out`. Every count is in
/// units; each address must be aligned to the unit. Launch with
/// `block.x = BLOCK`, any `grid.x` (the threads stride over the units) and
/// `grid.y` = the number of inputs, at most [`CAT_PARTS`]; unused inputs
/// may be zero.
///
/// ```
/// use tensorfn_kernels::builtin;
/// let k = builtin::cat_rows(16).unwrap();
/// assert!(k.ptx.contains(".entry tf_cat_rows_16b("));
/// assert!(k.ptx.contains("ld.global.nc.v4.u32"));
/// assert!(builtin::cat_rows(3).is_err());
/// ```
pub fn cat_rows(unit: u32) -> Result<Kernel> {
    if !CAT_UNITS.contains(&unit) {
        return Err(Error::Unsupported {
            kernel: "cat_rows",
            message: format!("a unit of {unit} bytes; units are 1, 2, 4, 8 or 16 bytes"),
        });
    }
    let name = cat_rows_name(unit);
    let ptx = ptx::cat_rows(&name, unit);
    Ok(Kernel { name, ptx })
}

/// The multi-tensor optimizer update `kernel` over parameters of `dtype`
/// (a float): one launch updates every chunk of every tensor of that
/// dtype. `Err` for other dtypes.
///
/// The entry `NAME(.param .u64 table, .param .u64 records, .param .f64
/// h0, ..., h6, .param .u32 flags)` reads `records` chunk records of
/// [`OPTIM_RECORD_WORDS`](crate::optim::OPTIM_RECORD_WORDS) `u64` words at
/// `table` (device memory): the addresses of the chunk's first parameter,
/// gradient and state elements (as many as
/// [`OptimKernel::state_buffers`](crate::optim::OptimKernel::state_buffers)),
/// and at word 6 its element count. The hyperparameters and flags are
/// those [`OptimKernel`](crate::optim::OptimKernel) lists. Launch with
/// `block.x = BLOCK` and any `grid.x` (blocks stride over the records).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// use tensorfn_kernels::optim::OptimKernel;
/// let k = builtin::optim(OptimKernel::AdamW { amsgrad: false, master: true }, DTypeKind::BF16).unwrap();
/// assert!(k.ptx.contains(".entry tf_adamw_master_bf16("));
/// assert!(builtin::optim(OptimKernel::Sgd { momentum: true }, DTypeKind::I32).is_err());
/// ```
pub fn optim(kernel: crate::optim::OptimKernel, dtype: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "optim",
            message: format!(
                "{} parameters; optimizers update float dtypes",
                dtype.name()
            ),
        });
    }
    let name = kernel.name(dtype);
    let ptx = ptx::optim(&name, kernel, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`gather`]`(unit, index)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::gather_name(4, DTypeKind::I64), "tf_gather_4b_i64");
/// ```
pub fn gather_name(unit: u32, index: DTypeKind) -> String {
    format!("tf_gather_{unit}b_{index}")
}

/// Element sizes in bytes [`gather`] is defined for.
///
/// ```
/// use tensorfn_kernels::builtin::GATHER_UNITS;
/// use tensorfn_kernels::DTypeKind;
/// assert!(DTypeKind::ALL.iter().all(|d| GATHER_UNITS.contains(&(d.size_bytes() as u32))));
/// ```
pub const GATHER_UNITS: [u32; 4] = [1, 2, 4, 8];

/// The gather behind `index_select`, `gather` and `embedding`, moving
/// elements of `unit` bytes picked by `index` (`I64` or `I32`) indices;
/// `Err` for other units or index dtypes.
///
/// The entry `NAME(.param .u64 out, .param .u64 src, .param .u64 idx,
/// .param .u64 flag, .param .u64 n, .param .u64 sel_stride, .param .u64
/// sel_size, .param .align 8 .b8 meta[META_BYTES(2)])` computes, for every
/// `i < n` with coordinates `c` over the dims of `meta` (an
/// [`abi::StridedMeta`](crate::abi::StridedMeta) of the output's dims,
/// any output strides, then the strides of `src` and of `idx`):
/// `k = idx[c . idx_strides]` and `out[i] = src[c . src_strides + k *
/// sel_stride]` (`out` is contiguous; counts in elements). An index
/// outside `0..sel_size` is never used as an address: `out[i]` becomes
/// zero, the `u64` `flag[0]` becomes 1 and `flag[1]` one such index (as
/// `i64`). Launch with `block.x = BLOCK`, any `grid.x`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::gather(2, DTypeKind::I32).unwrap();
/// assert!(k.ptx.contains(".entry tf_gather_2b_i32("));
/// assert!(k.ptx.contains("atom.global.exch.b64"));
/// assert!(builtin::gather(3, DTypeKind::I64).is_err());
/// assert!(builtin::gather(4, DTypeKind::F32).is_err());
/// ```
pub fn gather(unit: u32, index: DTypeKind) -> Result<Kernel> {
    if !GATHER_UNITS.contains(&unit) {
        return Err(Error::Unsupported {
            kernel: "gather",
            message: format!("elements of {unit} bytes; elements are 1, 2, 4 or 8 bytes"),
        });
    }
    if !matches!(index, DTypeKind::I64 | DTypeKind::I32) {
        return Err(Error::Unsupported {
            kernel: "gather",
            message: format!("{index} indices; indices are i64 or i32"),
        });
    }
    let name = gather_name(unit, index);
    let ptx = ptx::gather(&name, unit, index);
    Ok(Kernel { name, ptx })
}

/// Name of [`scatter_add`]`(dtype, index)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::scatter_add_name(DTypeKind::BF16, DTypeKind::I64), "tf_scatter_add_bf16_i64");
/// ```
pub fn scatter_add_name(dtype: DTypeKind, index: DTypeKind) -> String {
    format!("tf_scatter_add_{dtype}_{index}")
}

/// The scatter-add behind `index_add`, `scatter_add` and the gradients
/// of `embedding`, `index_select` and `gather`: `dtype` (a float) sources
/// added at `index` (`I64` or `I32`) indices into an accumulator of f32
/// (f64 for `F64` sources); `Err` for other dtypes.
///
/// The entry `NAME(.param .u64 acc, .param .u64 src, .param .u64 idx,
/// .param .u64 flag, .param .u64 n, .param .u64 sel_stride, .param .u64
/// sel_size, .param .f64 alpha, .param .align 8 .b8 meta[META_BYTES(2)])`
/// computes, for every `i < n` with coordinates `c` over the dims of
/// `meta` (an [`abi::StridedMeta`](crate::abi::StridedMeta) of the
/// positions' dims, the accumulator's strides, then the strides of `src`
/// and of `idx`): `k = idx[c . idx_strides]` and `acc[c . acc_strides + k
/// * sel_stride] += alpha * src[c . src_strides]`, an atomic add (repeated
/// indices sum in any order). An index outside `0..sel_size` is never
/// used as an address: the `u64` `flag[0]` becomes 1 and `flag[1]` one
/// such index (as `i64`). Launch with `block.x = BLOCK`, any `grid.x`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::scatter_add(DTypeKind::F16, DTypeKind::I32).unwrap();
/// assert!(k.ptx.contains(".entry tf_scatter_add_f16_i32("));
/// assert!(k.ptx.contains("red.global.add.f32"));
/// assert!(builtin::scatter_add(DTypeKind::F64, DTypeKind::I64).unwrap().ptx.contains("red.global.add.f64"));
/// assert!(builtin::scatter_add(DTypeKind::I32, DTypeKind::I64).is_err());
/// assert!(builtin::scatter_add(DTypeKind::F32, DTypeKind::F32).is_err());
/// ```
pub fn scatter_add(dtype: DTypeKind, index: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "scatter_add",
            message: format!("{dtype} values; scatter-add is for f32, f64, f16 and bf16"),
        });
    }
    if !matches!(index, DTypeKind::I64 | DTypeKind::I32) {
        return Err(Error::Unsupported {
            kernel: "scatter_add",
            message: format!("{index} indices; indices are i64 or i32"),
        });
    }
    let name = scatter_add_name(dtype, index);
    let ptx = ptx::scatter_add(&name, dtype, index);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention`]`(dtype)`.
///
/// ```
/// assert_eq!(tensorfn_kernels::builtin::attention_name(tensorfn_kernels::DTypeKind::BF16), "tf_attention_bf16");
/// ```
pub fn attention_name(dtype: DTypeKind) -> String {
    format!("tf_attention_{dtype}")
}

/// Scaled dot-product attention over tensors of `dtype` (a float; `Err`
/// otherwise), computed in f32 (f64 for f64) with an online softmax, one
/// warp per query row and no row of scores stored.
///
/// The entry `NAME` takes 64-bit parameters, in order: `out`, `q`, `k`,
/// `v`, `mask` (addresses), `l`, `s`, `e`, `ev` (the query count, key
/// count and head dims, `e` and `ev` at most
/// [`ATTENTION_MAX_HEAD`](crate::ptx::ATTENTION_MAX_HEAD)), the batch and
/// row strides in elements of `q`, `k`, `v` (`qb, qr, kb, kr, vb, vr`;
/// their last dims are contiguous), of the mask (`mb, mr`, and `mc`
/// between keys; 0 for a broadcast dim), `mode` (0: no mask, 1: `bool`,
/// true where the key takes part, 2: added to the scores, of `dtype`),
/// `causal` (non-zero: query `i` sees keys `0..=i`) and `scale` (an f64).
/// It writes the contiguous `[batch, l, ev]` output; a key whose score is
/// `-inf` takes no part and a row without keys is 0. Launch with `block.x
/// = BLOCK` (eight query rows a block), `grid.x = ceil(l / 8)` and
/// `grid.y` = the batch.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention(DTypeKind::F16).unwrap();
/// assert!(k.ptx.contains(".entry tf_attention_f16("));
/// assert!(builtin::attention(DTypeKind::I32).is_err());
/// ```
pub fn attention(dtype: DTypeKind) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "attention",
            message: format!("attention needs a floating-point dtype, found {dtype}"),
        });
    }
    let name = attention_name(dtype);
    let ptx = ptx::attention(&name, dtype);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_backward`]`(dtype, keys)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::attention_backward_name(DTypeKind::BF16, false), "tf_attention_bwd_q_bf16");
/// assert_eq!(builtin::attention_backward_name(DTypeKind::BF16, true), "tf_attention_bwd_kv_bf16");
/// ```
pub fn attention_backward_name(dtype: DTypeKind, keys: bool) -> String {
    let which = if keys { "kv" } else { "q" };
    format!("tf_attention_bwd_{which}_{dtype}")
}

/// The backward of [`attention`] over tensors of `dtype` (a float; `Err`
/// otherwise), in FlashAttention-2's two passes, each computed in f32
/// (f64 for f64) with one warp per row as the forward, the weights
/// recomputed from the forward's log-sum-exps: with `keys` false a warp
/// per query row `i` writes `D_i = dO_i . O_i` and `dQ_i`; with `keys`
/// true, launched after it, a warp per key row `j` writes `dK_j` and
/// `dV_j`. Each gradient row is one warp's sum in a fixed order (no
/// atomics: the same bits every run).
///
/// The entry `NAME` takes 64-bit parameters, in order: `dq`, `dk`, `dv`
/// (contiguous `[batch, l, e]`, `[batch, s, e]`, `[batch, s, ev]`
/// outputs), `delta` (`[batch, l]`, f32 or f64 for f64: written by the
/// query entry, read by the key entry), `lse` (the forward's `[batch,
/// l]` log-sum-exps, f32 or f64 for f64), `o`, `g` (the output and its gradient,
/// contiguous `[batch, l, ev]`), then `q`, `k`, `v`, `mask` and the
/// rest as [`attention`] takes them, from `l` on. Launch with `block.x =
/// BLOCK`, `grid.x = ceil(rows / 8)` (rows: `l` for the query entry, `s`
/// for the key entry) and `grid.y` = the batch.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_backward(DTypeKind::F32, true).unwrap();
/// assert!(k.ptx.contains(".entry tf_attention_bwd_kv_f32("));
/// assert!(builtin::attention_backward(DTypeKind::I64, false).is_err());
/// ```
pub fn attention_backward(dtype: DTypeKind, keys: bool) -> Result<Kernel> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "attention_backward",
            message: format!("attention needs a floating-point dtype, found {dtype}"),
        });
    }
    let name = attention_backward_name(dtype, keys);
    let ptx = ptx::attention_backward(&name, dtype, keys);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_mma`]`(dtype, d)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::attention_mma_name(DTypeKind::BF16, 128), "tf_attention_mma_bf16_d128");
/// ```
pub fn attention_mma_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_mma_{dtype}_d{d}")
}

/// Scaled dot-product attention on tensor cores, for sm_80 and newer:
/// `dtype` f16 or bf16, the head dim `d` of the queries, keys and values
/// one of [`ATTENTION_MMA_HEADS`](crate::ptx::ATTENTION_MMA_HEADS), no
/// mask; `Err` otherwise (older devices and the other cases take
/// [`attention`], which runs on every device). It is a
/// FlashAttention-2-style kernel: a block of warps owns
/// [`attention_mma_rows`](crate::ptx::attention_mma_rows)`(d)` query rows
/// (16 a warp at head dim 64, 32 at 128, their `Q` fragments in
/// registers) and walks the keys 64 at a time, each tile of `K` and `V` copied into shared memory with 16-byte
/// `cp.async` (overlapping the products) and read with `ldmatrix`; `S = Q
/// K^T` and `O += P V` are `mma.sync.aligned.m16n8k16` with f32
/// accumulation, `P` rounded to `dtype` in registers as FlashAttention
/// does, the online softmax on the fragments in f32. Under `causal` only
/// the diagonal tiles are masked and the tiles past a warp's rows are
/// skipped.
///
/// Accuracy: the exponentials are `ex2.approx.ftz.f32` of `S * scale *
/// log2(e)` (relative error about `2^-22`, results below `2^-126` flushed
/// to 0), as in FlashAttention and PyTorch's fused kernels; with `P`
/// rounded to `dtype`, the output's error is that of the dtype's roundoff
/// (`f16`: about `1e-3`, `bf16`: about `1e-2`, relative to the values'
/// magnitude).
///
/// The entry takes 64-bit parameters, in order: `out`, `q`, `k`, `v`
/// (addresses, 16-byte aligned), `l`, `s` (query and key counts), the
/// batch and row strides in elements of `q`, `k`, `v` (`qb, qr, kb, kr,
/// vb, vr`, multiples of 8; their last dims contiguous), `causal` and
/// `scale` (an f64), and writes the contiguous `[batch, l, d]` output. A
/// key past the causal diagonal takes no part, but within the diagonal's
/// step of keys a NaN in its value reaches the row (0 times NaN), as
/// in fused kernels. Launch with `block.x =`
/// [`attention_mma_threads`](crate::ptx::attention_mma_threads)`(d)`,
/// `grid.x = ceil(l / rows)` where `rows =`
/// [`attention_mma_rows`](crate::ptx::attention_mma_rows)`(d)`, and
/// `grid.y` = the batch.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_mma(DTypeKind::BF16, 64).unwrap();
/// assert!(k.ptx.contains(".target sm_80"));
/// assert!(k.ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
/// assert!(builtin::attention_mma(DTypeKind::F32, 64).is_err());
/// assert!(builtin::attention_mma(DTypeKind::F16, 80).is_err());
/// ```
pub fn attention_mma(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_mma", dtype, d)?;
    let name = attention_mma_name(dtype, d);
    let ptx = ptx::attention_mma(&name, dtype, d);
    Ok(Kernel { name, ptx })
}

/// `Err` naming `kernel` unless the tensor-core attention entries take
/// `dtype` and head dim `d` (f16 or bf16, one of
/// [`ATTENTION_MMA_HEADS`](crate::ptx::ATTENTION_MMA_HEADS)).
fn tensor_core_case(kernel: &'static str, dtype: DTypeKind, d: usize) -> Result<()> {
    if matches!(dtype, DTypeKind::F16 | DTypeKind::BF16) && ptx::ATTENTION_MMA_HEADS.contains(&d) {
        return Ok(());
    }
    Err(Error::Unsupported {
        kernel,
        message: format!(
            "tensor-core attention takes f16 or bf16 with a head dim of 64 or 128, found {dtype} with {d}"
        ),
    })
}

/// Name of [`attention_wgmma`]`(dtype, d)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::attention_wgmma_name(DTypeKind::F16, 64), "tf_attention_wgmma_f16_d64");
/// ```
pub fn attention_wgmma_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_wgmma_{dtype}_d{d}")
}

/// [`attention_mma`] in the Hopper form, for devices of compute
/// capability 9.0 only (its PTX targets `sm_90a`; every other device
/// takes [`attention_mma`]): the same parameters, output and log-sum-exps
/// (`p_lse`), the same cases (`dtype` f16 or bf16, head dim 64 or 128, no
/// mask; `Err` otherwise). A block of warpgroups owns
/// [`attention_wgmma_rows`](crate::ptx::attention_wgmma_rows)`(d)` query
/// rows, 64 each, which take turns issuing their products;
/// `S = Q K^T` and `O += P V` are `wgmma.mma_async` with f32
/// accumulation, `Q`, `K` and `V` read from shared memory in the 128-byte
/// swizzled layout (copied with `cp.async`, the next tile of keys while
/// the current one is computed on), `P` from registers. Launch with
/// `block.x =` [`attention_wgmma_threads`](crate::ptx::attention_wgmma_threads)`(d)`,
/// [`attention_wgmma_shared`](crate::ptx::attention_wgmma_shared)`(d)`
/// bytes of dynamic shared memory, `grid.x = ceil(l / rows)` and `grid.y`
/// the batch. Accuracy as [`attention_mma`]'s.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma(DTypeKind::BF16, 128).unwrap();
/// assert!(k.ptx.contains(".target sm_90a"));
/// assert!(k.ptx.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"));
/// assert!(builtin::attention_wgmma(DTypeKind::F32, 64).is_err());
/// assert!(builtin::attention_wgmma(DTypeKind::F16, 96).is_err());
/// ```
pub fn attention_wgmma(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_wgmma", dtype, d)?;
    let name = attention_wgmma_name(dtype, d);
    let ptx = ptx::attention_wgmma(&name, dtype, d);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_wgmma_ws`]`(dtype, d)`.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(builtin::attention_wgmma_ws_name(DTypeKind::BF16, 128), "tf_attention_ws_bf16_d128");
/// ```
pub fn attention_wgmma_ws_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_ws_{dtype}_d{d}")
}

/// [`attention_wgmma`] warp-specialised, for devices of compute
/// capability 9.0 only (FlashAttention-3's structure): the same
/// parameters, output, log-sum-exps and cases. A block of three
/// warpgroups owns [`ATTENTION_WS_ROWS`](crate::ptx::ATTENTION_WS_ROWS)
/// query rows: one copies `Q` and the tiles of `K` and `V` into shared
/// buffers and gives its registers up (`setmaxnreg`), two compute 64 rows
/// each, the buffers passed between them through `mbarrier`s; each
/// computing warpgroup issues the next tile's `S = Q K^T` with the
/// current one's `O += P V` and runs the softmax beside the latter, and
/// the two take turns issuing their products. Blocks take their rows in
/// sections of heads whose keys and values fit in L2, the last row block
/// of each of a section's heads first (see
/// [`attention_wgmma_ws_by_batch`] for the plain order). The runtime's
/// forward on compute capability 9.0 (head dims 64 and 128).
/// Launch with `block.x =`
/// [`ATTENTION_WS_THREADS`](crate::ptx::ATTENTION_WS_THREADS),
/// [`attention_ws_shared`](crate::ptx::attention_ws_shared)`(d)` bytes of
/// dynamic shared memory, `grid.x = ceil(l / rows)` and `grid.y` the
/// batch.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma_ws(DTypeKind::BF16, 128).unwrap();
/// assert!(k.ptx.contains("setmaxnreg.inc.sync.aligned.u32"));
/// assert!(k.ptx.contains("mbarrier.try_wait.parity.shared::cta.b64"));
/// assert!(builtin::attention_wgmma_ws(DTypeKind::F32, 128).is_err());
/// ```
pub fn attention_wgmma_ws(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_wgmma_ws", dtype, d)?;
    let name = attention_wgmma_ws_name(dtype, d);
    let ptx = ptx::attention_wgmma_ws(&name, dtype, d, false);
    Ok(Kernel { name, ptx })
}

/// [`attention_wgmma_ws`] with its blocks taken one batch after another
/// (each batch's row blocks last first, as `grid.x` counts them), the
/// order it had before the L2 sections; kept so that the two can be
/// measured against each other. Same launch and results.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma_ws_by_batch(DTypeKind::F16, 64).unwrap();
/// assert_eq!(k.name, "tf_attention_ws_by_batch_f16_d64");
/// assert!(!k.ptx.contains("%nctaid.y"));
/// assert!(builtin::attention_wgmma_ws(DTypeKind::F16, 64).unwrap().ptx.contains("%nctaid.y"));
/// ```
pub fn attention_wgmma_ws_by_batch(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_wgmma_ws_by_batch", dtype, d)?;
    let name = format!("tf_attention_ws_by_batch_{dtype}_d{d}");
    let ptx = ptx::attention_wgmma_ws(&name, dtype, d, true);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_mma_backward`]`(dtype, d)` (its main entry; the
/// preprocessing entry is this name with `_delta` appended).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(
///     builtin::attention_mma_backward_name(DTypeKind::BF16, 128),
///     "tf_attention_mma_bwd_bf16_d128"
/// );
/// ```
pub fn attention_mma_backward_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_mma_bwd_{dtype}_d{d}")
}

/// The backward of [`attention_mma`] on tensor cores, for sm_80 and newer
/// (`dtype` f16 or bf16, head dim `d` one of
/// [`ATTENTION_MMA_HEADS`](crate::ptx::ATTENTION_MMA_HEADS), no mask;
/// `Err` otherwise: older devices and the other cases take
/// [`attention_backward`]), FlashAttention-2's algorithm. The module has
/// two entries:
///
/// - `NAME_delta(delta, o, g, rows)`: `delta[i] = sum_c g[i, c] o[i, c]`
///   in f32 over contiguous `[rows, d]` `o` and `g`; launch with `block.x
///   =` [`MMA_BWD_THREADS`](crate::ptx::MMA_BWD_THREADS) and `grid.x =
///   ceil(rows / 4)` (a warp per row);
/// - `NAME(dqa, dk, dv, delta, lse, g, q, k, v, l, s, qb, qr, kb, kr, vb,
///   vr, causal, scale, b0, nh, qh, kh, vh)`: a block owns
///   [`MMA_BWD_KEYS`](crate::ptx::MMA_BWD_KEYS) keys, their `K` and `V`
///   resident in shared memory, and walks the blocks of queries (under
///   `causal` only those at or after its keys), recomputing `S = Q K^T`
///   and `P = exp(S scale - lse)` from the forward's f32 log-sum-exps
///   `lse`; it writes `dK` and `dV` (contiguous `[batch, s, d]`, f32
///   accumulation) and adds `dQ` into the zeroed f32 buffer `dqa`
///   (contiguous `[batch, l, d]`) with `red.global.add.f32`, which the
///   caller casts. `g` is the output's gradient, contiguous `[batch, l,
///   d]`; the rest as [`attention_mma`] takes them. Launch with `block.x
///   =` [`MMA_BWD_THREADS`](crate::ptx::MMA_BWD_THREADS), `grid.x =
///   ceil(s /` [`MMA_BWD_KEYS`](crate::ptx::MMA_BWD_KEYS)`)`, `grid.y` the
///   batch, and
///   [`attention_mma_backward_shared`](crate::ptx::attention_mma_backward_shared)`(d)`
///   bytes of dynamic shared memory (more than 48 KiB: the function's
///   limit must be raised first).
///
/// Accuracy: `P` is `ex2.approx.ftz.f32` and `P` and `dS` are rounded to
/// `dtype` before their products, as in FlashAttention; the additions
/// into `dQ` come in no fixed order, so its last bits may differ between
/// runs.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_mma_backward(DTypeKind::BF16, 128).unwrap();
/// assert!(k.ptx.contains(".entry tf_attention_mma_bwd_bf16_d128("));
/// assert!(k.ptx.contains(".entry tf_attention_mma_bwd_bf16_d128_delta("));
/// assert!(builtin::attention_mma_backward(DTypeKind::F32, 64).is_err());
/// ```
pub fn attention_mma_backward(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    if !matches!(dtype, DTypeKind::F16 | DTypeKind::BF16) || !ptx::ATTENTION_MMA_HEADS.contains(&d)
    {
        return Err(Error::Unsupported {
            kernel: "attention_mma_backward",
            message: format!(
                "the tensor-core attention backward takes f16 or bf16 with a head dim of 64 or 128, found {dtype} with {d}"
            ),
        });
    }
    let name = attention_mma_backward_name(dtype, d);
    let ptx = ptx::attention_mma_backward(&name, dtype, d);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_wgmma_backward`]`(dtype, d)` (its main entry; the
/// preprocessing entry is this name with `_delta` appended).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(
///     builtin::attention_wgmma_backward_name(DTypeKind::BF16, 64),
///     "tf_attention_wgmma_bwd_bf16_d64"
/// );
/// ```
pub fn attention_wgmma_backward_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_wgmma_bwd_{dtype}_d{d}")
}

/// [`attention_mma_backward`] in the Hopper form, for devices of compute
/// capability 9.0 only (its PTX targets `sm_90a`; every other device
/// takes [`attention_mma_backward`]): the same two entries with the same
/// parameters and outputs, the same cases (`dtype` f16 or bf16, head dim
/// 64 or 128, no mask; `Err` otherwise). A block is one warpgroup owning
/// [`WGMMA_BWD_KEYS`](crate::ptx::WGMMA_BWD_KEYS) keys, whose `K` and `V`
/// stay in shared memory while it walks the query tiles of 64; every
/// product (`S^T = K Q^T`, `dP^T = V dO^T`, `dV += P^T dO`, `dK += dS^T
/// Q`, `dQ = dS K`) is `wgmma.mma_async` with f32 accumulation, its
/// shared operands in the 128-byte swizzled layout of
/// [`attention_wgmma`]. Launch the main entry with `block.x =`
/// [`WGMMA_BWD_THREADS`](crate::ptx::WGMMA_BWD_THREADS), `grid.x = ceil(s
/// /` [`WGMMA_BWD_KEYS`](crate::ptx::WGMMA_BWD_KEYS)`)`, `grid.y` the
/// batch and
/// [`attention_wgmma_backward_shared`](crate::ptx::attention_wgmma_backward_shared)`(d)`
/// bytes of dynamic shared memory. Accuracy as [`attention_mma_backward`]'s.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma_backward(DTypeKind::F16, 128).unwrap();
/// assert!(k.ptx.contains(".target sm_90a"));
/// assert!(k.ptx.contains(".entry tf_attention_wgmma_bwd_f16_d128_delta("));
/// assert!(k.ptx.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"));
/// assert!(builtin::attention_wgmma_backward(DTypeKind::F32, 64).is_err());
/// ```
pub fn attention_wgmma_backward(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_wgmma_backward", dtype, d)?;
    let name = attention_wgmma_backward_name(dtype, d);
    let ptx = ptx::attention_wgmma_backward(&name, dtype, d);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_wgmma_backward2`]`(dtype, d, bulk)` (its main
/// entry; the preprocessing entry is this name with `_delta` appended).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(
///     builtin::attention_wgmma_backward2_name(DTypeKind::BF16, 128, false),
///     "tf_attention_wgmma_bwd2_bf16_d128"
/// );
/// assert_eq!(
///     builtin::attention_wgmma_backward2_name(DTypeKind::F16, 128, true),
///     "tf_attention_wgmma_bwd2_bulk_f16_d128"
/// );
/// ```
pub fn attention_wgmma_backward2_name(dtype: DTypeKind, d: usize, bulk: bool) -> String {
    let form = if bulk { "bulk_" } else { "" };
    format!("tf_attention_wgmma_bwd2_{form}{dtype}_d{d}")
}

/// [`attention_wgmma_backward`] with blocks of two warpgroups owning
/// [`WGMMA_BWD2_KEYS`](crate::ptx::WGMMA_BWD2_KEYS) keys, 64 each, that
/// share the query tiles' `Q` and `dO` and split `dQ = dS K`'s columns
/// between them, so that `dQ` is added to global memory once per 128
/// keys (half the atomics). Head dim 128 only (`Err` otherwise, and for
/// dtypes other than f16 and bf16); the same two entries, parameters and
/// outputs. Launch the main entry with `block.x =`
/// [`WGMMA_BWD2_THREADS`](crate::ptx::WGMMA_BWD2_THREADS), `grid.x =
/// ceil(s /` [`WGMMA_BWD2_KEYS`](crate::ptx::WGMMA_BWD2_KEYS)`)`,
/// `grid.y` the batch and
/// [`attention_wgmma_backward2_shared`](crate::ptx::attention_wgmma_backward2_shared)`(d)`
/// bytes of dynamic shared memory. With `bulk`, a warpgroup's `dQ` of a
/// query tile is staged in shared memory and added with one
/// `cp.reduce.async.bulk` per query row instead of `red.global.add.v4.f32`
/// from every thread.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma_backward2(DTypeKind::BF16, 128, false).unwrap();
/// assert!(k.ptx.contains(".target sm_90a"));
/// assert!(k.ptx.contains(".entry tf_attention_wgmma_bwd2_bf16_d128_delta("));
/// assert!(k.ptx.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
/// let k = builtin::attention_wgmma_backward2(DTypeKind::BF16, 128, true).unwrap();
/// assert!(k.ptx.contains("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
/// assert!(builtin::attention_wgmma_backward2(DTypeKind::BF16, 64, false).is_err());
/// ```
pub fn attention_wgmma_backward2(dtype: DTypeKind, d: usize, bulk: bool) -> Result<Kernel> {
    tensor_core_case("attention_wgmma_backward2", dtype, d)?;
    if d != 128 {
        return Err(Error::Unsupported {
            kernel: "attention_wgmma_backward2",
            message: format!("the two-warpgroup attention backward takes head dim 128, found {d}"),
        });
    }
    let name = attention_wgmma_backward2_name(dtype, d, bulk);
    let ptx = ptx::attention_wgmma_backward2(&name, dtype, d, bulk);
    Ok(Kernel { name, ptx })
}

/// Name of [`attention_wgmma_backward_ws`]`(dtype, d)` (its main entry;
/// the preprocessing entry is this name with `_delta` appended).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// assert_eq!(
///     builtin::attention_wgmma_backward_ws_name(DTypeKind::BF16, 128),
///     "tf_attention_wgmma_bwd_ws_bf16_d128"
/// );
/// ```
pub fn attention_wgmma_backward_ws_name(dtype: DTypeKind, d: usize) -> String {
    format!("tf_attention_wgmma_bwd_ws_{dtype}_d{d}")
}

/// [`attention_wgmma_backward2`] warp-specialised, FlashAttention-3's
/// way: blocks of [`WGMMA_BWD_WS_KEYS`](crate::ptx::WGMMA_BWD_WS_KEYS)
/// keys whose first warpgroup copies `Q` and `dO` into `mbarrier`-guarded
/// buffers and adds the staged `dQ` tiles with bulk reductions, while the
/// other two (with the registers the first gives up) own 64 keys each.
/// Head dim 128 only (`Err` otherwise, and for dtypes other than f16 and
/// bf16); the same two entries, parameters and outputs. Launch the main
/// entry with `block.x =`
/// [`WGMMA_BWD_WS_THREADS`](crate::ptx::WGMMA_BWD_WS_THREADS), `grid.x =
/// ceil(s /` [`WGMMA_BWD_WS_KEYS`](crate::ptx::WGMMA_BWD_WS_KEYS)`)`,
/// `grid.y` the batch and
/// [`attention_wgmma_backward_ws_shared`](crate::ptx::attention_wgmma_backward_ws_shared)`(d)`
/// bytes of dynamic shared memory.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let k = builtin::attention_wgmma_backward_ws(DTypeKind::BF16, 128).unwrap();
/// assert!(k.ptx.contains(".target sm_90a"));
/// assert!(k.ptx.contains(".entry tf_attention_wgmma_bwd_ws_bf16_d128_delta("));
/// assert!(k.ptx.contains("setmaxnreg.inc.sync.aligned.u32 224"));
/// assert!(k.ptx.contains("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
/// assert!(builtin::attention_wgmma_backward_ws(DTypeKind::BF16, 64).is_err());
/// ```
pub fn attention_wgmma_backward_ws(dtype: DTypeKind, d: usize) -> Result<Kernel> {
    tensor_core_case("attention_wgmma_backward_ws", dtype, d)?;
    if d != 128 {
        return Err(Error::Unsupported {
            kernel: "attention_wgmma_backward_ws",
            message: format!(
                "the warp-specialised attention backward takes head dim 128, found {d}"
            ),
        });
    }
    let name = attention_wgmma_backward_ws_name(dtype, d);
    let ptx = ptx::attention_wgmma_backward_ws(&name, dtype, d);
    Ok(Kernel { name, ptx })
}

fn unsupported(kernel: &'static str, e: Error) -> Error {
    match e {
        Error::Type { message, .. } => Error::Unsupported { kernel, message },
        other => other,
    }
}

fn expect_supported(r: Result<Kernel>) -> Kernel {
    match r {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    }
}

/// Elementwise `op` over one input; the output has the input's dtype.
///
/// # Panics
///
/// If `op` is not defined on `dtype` (see [`try_unary`]); the runtime's
/// typed API never asks for those.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, UnaryOp};
/// let k = builtin::unary(UnaryOp::Neg, DTypeKind::I32);
/// assert_eq!(k.name, "tf_unary_neg_i32");
/// ```
pub fn unary(op: UnaryOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_unary(op, dtype))
}

/// Elementwise `op` over two inputs of `dtype`.
///
/// # Panics
///
/// If `op` is not defined on `dtype` (see [`try_binary`]).
///
/// ```
/// use tensorfn_kernels::{builtin, BinaryOp, DTypeKind};
/// let k = builtin::binary(BinaryOp::Add, DTypeKind::F16);
/// assert!(k.ptx.contains("p_in1"));
/// ```
pub fn binary(op: BinaryOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_binary(op, dtype))
}

/// Elementwise conversion `from` -> `to` (Rust `as` semantics, one
/// rounding to nearest even; see [`ElementwiseBuilder::cast`]). `cast(t, t)`
/// is the strided copy behind `contiguous`, `cat` and `copy_into`. Defined
/// for every pair of dtypes.
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind};
/// let copy = builtin::cast(DTypeKind::F64, DTypeKind::F64);
/// assert_eq!(copy.name, "tf_cast_f64_f64");
/// ```
pub fn cast(from: DTypeKind, to: DTypeKind) -> Kernel {
    cast_for(from, to, Target::Sm70)
}

/// [`cast`] written for `target`.
///
/// ```
/// use tensorfn_kernels::{builtin, ptx::Target, DTypeKind};
/// let k = builtin::cast_for(DTypeKind::F32, DTypeKind::BF16, Target::Sm80);
/// assert!(k.ptx.contains("cvt.rn.bf16x2.f32"));
/// ```
pub fn cast_for(from: DTypeKind, to: DTypeKind, target: Target) -> Kernel {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(from);
    let y = k.cast(x, to);
    let name = cast_name(from, to);
    let text = k
        .output(y)
        .and_then(|kernel| ptx::elementwise_for(&kernel, &name, target));
    match text {
        Ok(ptx) => Kernel { name, ptx },
        Err(e) => unreachable!("casts are total: {e}"),
    }
}

/// Reduces each contiguous row to one element: `Sum`, `Mean` (floats),
/// `Max`, `Min` give `dtype` (f16/bf16 accumulate in f32), `ArgMax`/`ArgMin`
/// give `i64` (first occurrence; NaN counts as the extreme; `-1` for an
/// empty row). NaN propagates through `Max`/`Min`.
///
/// # Panics
///
/// For `bool`, and `Mean` of an integer dtype (see [`try_reduce`]).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, ReduceOp};
/// let k = builtin::reduce(ReduceOp::ArgMax, DTypeKind::BF16);
/// assert!(k.ptx.contains("shfl.sync.bfly.b32"));
/// ```
pub fn reduce(op: ReduceOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_reduce(op, dtype))
}

/// Row op `op` (`softmax`, ...) of each contiguous row, in f32 for
/// f16/bf16 (f64 for f64): one output per element, or one per row for an
/// op that removes its dim.
///
/// # Panics
///
/// Unless `dtype` is a float (see [`try_row`]).
///
/// ```
/// use tensorfn_kernels::{builtin, DTypeKind, RowOp};
/// let k = builtin::row(RowOp::Softmax, DTypeKind::F32);
/// assert!(k.ptx.contains(".entry tf_softmax_f32("));
/// ```
pub fn row(op: RowOp, dtype: DTypeKind) -> Kernel {
    expect_supported(try_row(op, dtype))
}

/// Every built-in kernel: each op with each dtype it is defined on, and
/// every cast.
///
/// ```
/// let all = tensorfn_kernels::builtin::all();
/// assert!(all.iter().any(|k| k.name == "tf_cast_bool_bf16"));
/// assert!(!all.iter().any(|k| k.name == "tf_unary_sin_i32"));
/// ```
pub fn all() -> Vec<Kernel> {
    let mut out = Vec::new();
    for dtype in DTypeKind::ALL {
        for op in UnaryOp::ALL {
            out.extend(try_unary(op, dtype).ok());
        }
        for op in BinaryOp::ALL {
            out.extend(try_binary(op, dtype).ok());
        }
        for to in DTypeKind::ALL {
            out.push(cast(dtype, to));
        }
        for op in REDUCE_OPS {
            out.extend(try_reduce(op, dtype).ok());
        }
        for op in RowOp::ALL {
            out.extend(try_row(op, dtype).ok());
        }
        for op in NormOp::ALL {
            out.extend(try_norm(op, dtype).ok());
            out.extend(try_norm_backward(op, dtype).ok());
        }
        out.extend(try_rope(dtype).ok());
        for index in [DTypeKind::I64, DTypeKind::I32] {
            out.extend(cross_entropy(dtype, index).ok());
        }
        for largest in [true, false] {
            out.extend(topk(dtype, largest).ok());
        }
        out.extend(cumsum(dtype).ok());
        out.extend(column_sum(dtype).ok());
        out.extend(pool2d(dtype).ok());
        out.extend(dropout(dtype).ok());
        out.extend(multinomial(dtype).ok());
        out.extend(conv2d(dtype).ok());
        out.extend(batch_norm(dtype).ok());
        out.extend(attention(dtype).ok());
        for keys in [false, true] {
            out.extend(attention_backward(dtype, keys).ok());
        }
        for d in ptx::ATTENTION_MMA_HEADS {
            out.extend(attention_mma(dtype, d).ok());
            out.extend(attention_wgmma(dtype, d).ok());
            out.extend(attention_wgmma_ws(dtype, d).ok());
            out.extend(attention_wgmma_ws_by_batch(dtype, d).ok());
            out.extend(attention_mma_backward(dtype, d).ok());
            out.extend(attention_wgmma_backward(dtype, d).ok());
            for bulk in [false, true] {
                out.extend(attention_wgmma_backward2(dtype, d, bulk).ok());
            }
            out.extend(attention_wgmma_backward_ws(dtype, d).ok());
        }
        for k in crate::optim::OptimKernel::ALL {
            // Master weights only for 16-bit parameters.
            let half = matches!(dtype, DTypeKind::F16 | DTypeKind::BF16);
            if half || !matches!(k, crate::optim::OptimKernel::AdamW { master: true, .. }) {
                out.extend(optim(k, dtype).ok());
            }
        }
    }
    out.extend(CAT_UNITS.iter().filter_map(|&u| cat_rows(u).ok()));
    for index in [DTypeKind::I64, DTypeKind::I32] {
        out.extend(GATHER_UNITS.iter().filter_map(|&u| gather(u, index).ok()));
        out.extend(
            [
                DTypeKind::F32,
                DTypeKind::F64,
                DTypeKind::F16,
                DTypeKind::BF16,
            ]
            .iter()
            .filter_map(|&d| scatter_add(d, index).ok()),
        );
    }
    out
}

/// Every reduction op.
pub(crate) const REDUCE_OPS: [ReduceOp; 6] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::ArgMax,
    ReduceOp::ArgMin,
];
