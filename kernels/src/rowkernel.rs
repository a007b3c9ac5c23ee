//! Row kernels written in `tensor_fn!` (`#[kernel]` functions over
//! `Row<T>` parameters): a row of the last dim, reductions over it and
//! elementwise math between rows and per-row statistics.
//!
//! A [`RowProgram`] is a list of element programs ([`Kernel`]s) run over
//! one row at a time:
//!
//! - each statistic ([`RowStat`]) is a reduction over the row's columns of
//!   its element program, whose inputs are the kernel's parameters (a row
//!   parameter's element at the column, a scalar parameter's value) then
//!   the statistics before it;
//! - the output is one more element program over the parameters and every
//!   statistic, stored per column (a `Row<T>` result) or once per row (a
//!   `T` result).
//!
//! Rows of `f16` and `bf16` are computed in `f32` (loaded, widened, every
//! statistic and intermediate in `f32`, rounded once when stored), those
//! of `f32` in `f32` and of `f64` in `f64`: the built-in norms' precision.
//! The GPU runs a program as [`ptx::row_kernel`](crate::ptx::row_kernel)
//! writes it (a block per row, a pass over the row per statistic, the
//! threads' partial results combined as the built-in norm kernels
//! combine theirs); the CPU runs the Rust loop `tensor_fn!` prints from
//! the same programs.
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::rowkernel::{RowParam, RowProgram, RowReduce, RowStat};
//! use tensorfn_kernels::{BinaryOp, DTypeKind::F32};
//! // mean(x * x) then x * that
//! let mut b = ElementwiseBuilder::new();
//! let x = b.input(F32);
//! let sq = b.binary(BinaryOp::Mul, x, x);
//! let stat = b.clone().output(sq)?;
//! let ms = b.input(F32);
//! let y = b.binary(BinaryOp::Mul, x, ms);
//! let prog = RowProgram {
//!     dtype: F32,
//!     params: vec![RowParam::Row],
//!     stats: vec![RowStat { reduce: RowReduce::Mean, program: stat }],
//!     output: b.output(y)?,
//!     per_row: false,
//! };
//! assert_eq!(prog.eval_row(&[&[1.0, 3.0]], &[]), vec![5.0, 15.0]);
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```

use crate::ir::{ElementwiseBuilder, Kernel};
use crate::ops::BinaryOp;
use tensorfn_core::DTypeKind;

/// A reduction over a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowReduce {
    /// The sum (0 for an empty row).
    Sum,
    /// The largest element, NaN if any is (-inf for an empty row).
    Max,
    /// The smallest element, NaN if any is (+inf for an empty row).
    Min,
    /// The sum over the row's length (NaN for an empty row).
    Mean,
}

impl RowReduce {
    /// The reduction named `name` in a kernel body.
    ///
    /// ```
    /// use tensorfn_kernels::rowkernel::RowReduce;
    /// assert_eq!(RowReduce::from_name("mean"), Some(RowReduce::Mean));
    /// assert_eq!(RowReduce::from_name("prod"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<RowReduce> {
        match name {
            "sum" => Some(RowReduce::Sum),
            "max" => Some(RowReduce::Max),
            "min" => Some(RowReduce::Min),
            "mean" => Some(RowReduce::Mean),
            _ => None,
        }
    }

    /// Its name.
    ///
    /// ```
    /// use tensorfn_kernels::rowkernel::RowReduce;
    /// assert_eq!(RowReduce::Sum.name(), "sum");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            RowReduce::Sum => "sum",
            RowReduce::Max => "max",
            RowReduce::Min => "min",
            RowReduce::Mean => "mean",
        }
    }

    /// The operation combining two partial results.
    ///
    /// ```
    /// use tensorfn_kernels::rowkernel::RowReduce;
    /// use tensorfn_kernels::BinaryOp;
    /// assert_eq!(RowReduce::Mean.combine(), BinaryOp::Add);
    /// ```
    pub fn combine(self) -> BinaryOp {
        match self {
            RowReduce::Sum | RowReduce::Mean => BinaryOp::Add,
            RowReduce::Max => BinaryOp::Max,
            RowReduce::Min => BinaryOp::Min,
        }
    }

    /// The value of an empty partial result.
    ///
    /// ```
    /// use tensorfn_kernels::rowkernel::RowReduce;
    /// assert_eq!(RowReduce::Max.identity(), f64::NEG_INFINITY);
    /// ```
    pub fn identity(self) -> f64 {
        match self {
            RowReduce::Sum | RowReduce::Mean => 0.0,
            RowReduce::Max => f64::NEG_INFINITY,
            RowReduce::Min => f64::INFINITY,
        }
    }

    /// The element program `combine(a, b)` over `dtype`.
    ///
    /// ```
    /// use tensorfn_kernels::rowkernel::RowReduce;
    /// use tensorfn_kernels::DTypeKind;
    /// let k = RowReduce::Max.combine_kernel(DTypeKind::F32);
    /// assert!(k.eval_f64(&[1.0, f64::NAN]).is_nan());
    /// ```
    pub fn combine_kernel(self, dtype: DTypeKind) -> Kernel {
        let mut b = ElementwiseBuilder::new();
        let x = b.input(dtype);
        let y = b.input(dtype);
        let z = b.binary(self.combine(), x, y);
        b.output(z).expect("a float combine is well typed")
    }
}

/// A parameter of a row kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowParam {
    /// A row (`Row<T>`) of the program's dtype: per row, or one row
    /// broadcast to every row.
    Row,
    /// One value (`eps: f32`) of this dtype for every row.
    Scalar(DTypeKind),
}

/// One statistic of a row.
#[derive(Clone, Debug, PartialEq)]
pub struct RowStat {
    /// How the row's values are combined.
    pub reduce: RowReduce,
    /// The value per column: inputs are the parameters then the earlier
    /// statistics; the output is of the compute dtype.
    pub program: Kernel,
}

/// A row kernel (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct RowProgram {
    /// The dtype of every row parameter and of the result.
    pub dtype: DTypeKind,
    /// The parameters, in order.
    pub params: Vec<RowParam>,
    /// The statistics, in order.
    pub stats: Vec<RowStat>,
    /// The result: inputs are the parameters then every statistic; output
    /// of [`dtype`](Self::dtype).
    pub output: Kernel,
    /// One value per row (a `T` result) rather than one per column.
    pub per_row: bool,
}

/// The dtype rows of `dtype` are computed in: `f32` for `f16` and `bf16`.
///
/// ```
/// use tensorfn_kernels::rowkernel::compute_dtype;
/// use tensorfn_kernels::DTypeKind;
/// assert_eq!(compute_dtype(DTypeKind::BF16), DTypeKind::F32);
/// assert_eq!(compute_dtype(DTypeKind::F64), DTypeKind::F64);
/// ```
pub fn compute_dtype(dtype: DTypeKind) -> DTypeKind {
    match dtype {
        DTypeKind::F16 | DTypeKind::BF16 => DTypeKind::F32,
        d => d,
    }
}

impl RowProgram {
    /// The dtype of the statistics and intermediates.
    pub fn compute_dtype(&self) -> DTypeKind {
        compute_dtype(self.dtype)
    }

    /// Indices of the row parameters among the parameters.
    pub fn rows(&self) -> Vec<usize> {
        (0..self.params.len())
            .filter(|&i| self.params[i] == RowParam::Row)
            .collect()
    }

    /// Indices of the scalar parameters and their dtypes.
    pub fn scalars(&self) -> Vec<(usize, DTypeKind)> {
        self.params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                RowParam::Scalar(d) => Some((i, *d)),
                RowParam::Row => None,
            })
            .collect()
    }

    /// The program on one row, in `f64` with each operation's exact
    /// result (a reference for tests): `rows` are the row parameters'
    /// elements (all of one length), `scalars` the scalar parameters'
    /// values, in parameter order.
    pub fn eval_row(&self, rows: &[&[f64]], scalars: &[f64]) -> Vec<f64> {
        let cols = rows.first().map_or(0, |r| r.len());
        let args = |j: usize, stats: &[f64]| -> Vec<f64> {
            let (mut r, mut s) = (0, 0);
            let mut a: Vec<f64> = self
                .params
                .iter()
                .map(|p| match p {
                    RowParam::Row => {
                        r += 1;
                        rows[r - 1].get(j).copied().unwrap_or(0.0)
                    }
                    RowParam::Scalar(_) => {
                        s += 1;
                        scalars[s - 1]
                    }
                })
                .collect();
            a.extend_from_slice(stats);
            a
        };
        let mut stats = Vec::new();
        for st in &self.stats {
            let mut acc = st.reduce.identity();
            for j in 0..cols {
                let v = st.program.eval_f64(&args(j, &stats));
                acc = st.reduce.combine().eval_f64(acc, v);
            }
            if st.reduce == RowReduce::Mean {
                acc /= cols as f64;
            }
            stats.push(acc);
        }
        if self.per_row {
            vec![self.output.eval_f64(&args(0, &stats))]
        } else {
            (0..cols)
                .map(|j| self.output.eval_f64(&args(j, &stats)))
                .collect()
        }
    }
}

/// What the runtime needs of a row kernel `tensor_fn!` generated: its
/// entry's name and PTX ([`ptx::row_kernel`](crate::ptx::row_kernel)),
/// and whether it writes one value per row.
///
/// ```
/// use tensorfn_kernels::rowkernel::RowKernelDef;
/// static K: RowKernelDef = RowKernelDef { name: "tf_rows_demo", ptx: "", per_row: false };
/// assert!(!K.per_row);
/// ```
#[derive(Debug)]
pub struct RowKernelDef {
    /// The entry's name, unique per program (it holds a hash of it).
    pub name: &'static str,
    /// The PTX module holding the entry.
    pub ptx: &'static str,
    /// One value per row (a `T` result) rather than a row.
    pub per_row: bool,
}

/// Normalisation `op` over rows of `dtype` written as a row program, as a
/// user writes it in `tensor_fn!`: parameters `x`, `weight`, (`bias`,)
/// rows, and `eps` of the compute dtype.
///
/// ```text
/// layer_norm: mean = mean(x); var = mean((x - mean) * (x - mean));
///             (x - mean) * (1 / sqrt(var + eps)) * weight + bias
/// rms_norm:   x * (1 / sqrt(mean(x * x) + eps)) * weight
/// ```
///
/// ```
/// use tensorfn_kernels::rowkernel::norm_program;
/// use tensorfn_kernels::{DTypeKind, NormOp};
/// let p = norm_program(NormOp::LayerNorm, DTypeKind::F64);
/// let y = p.eval_row(&[&[1.0, 3.0], &[1.0, 1.0], &[0.0, 0.5]], &[0.0]);
/// assert_eq!(y, vec![-1.0, 1.5]);
/// ```
pub fn norm_program(op: crate::ops::NormOp, dtype: DTypeKind) -> RowProgram {
    let c = compute_dtype(dtype);
    let mut b = ElementwiseBuilder::new();
    let widen = |b: &mut ElementwiseBuilder, v| if c != dtype { b.cast(v, c) } else { v };
    let x = b.input(dtype);
    let x = widen(&mut b, x);
    let w = b.input(dtype);
    let w = widen(&mut b, w);
    let bias = op.has_bias().then(|| {
        let v = b.input(dtype);
        widen(&mut b, v)
    });
    let eps = b.input(c);
    let mut stats = Vec::new();
    let mut stat = |b: &mut ElementwiseBuilder, reduce, v| {
        let program = b.clone().output(v).expect("a well-typed statistic");
        stats.push(RowStat { reduce, program });
        b.input(c)
    };
    let centred = match bias {
        Some(_) => {
            let mean = stat(&mut b, RowReduce::Mean, x);
            let d = b.binary(BinaryOp::Sub, x, mean);
            let sq = b.binary(BinaryOp::Mul, d, d);
            let var = stat(&mut b, RowReduce::Mean, sq);
            (d, var)
        }
        None => {
            let sq = b.binary(BinaryOp::Mul, x, x);
            let ms = stat(&mut b, RowReduce::Mean, sq);
            (x, ms)
        }
    };
    let (d, s) = centred;
    let one = b.constant(1.0, c);
    let se = b.binary(BinaryOp::Add, s, eps);
    let root = b.unary(crate::ops::UnaryOp::Sqrt, se);
    let inv = b.binary(BinaryOp::Div, one, root);
    let y = b.binary(BinaryOp::Mul, d, inv);
    let y = b.binary(BinaryOp::Mul, y, w);
    let y = match bias {
        Some(bv) => b.binary(BinaryOp::Add, y, bv),
        None => y,
    };
    let y = if c != dtype { b.cast(y, dtype) } else { y };
    let mut params = vec![RowParam::Row, RowParam::Row];
    if op.has_bias() {
        params.push(RowParam::Row);
    }
    params.push(RowParam::Scalar(c));
    RowProgram {
        dtype,
        params,
        stats,
        output: b.output(y).expect("a well-typed norm"),
        per_row: false,
    }
}
