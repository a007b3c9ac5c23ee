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
//! writes it, with the built-in norms' row strategies (a row held in the
//! registers of a warp or a block and read once, or a pass over a long
//! row per statistic; the threads' partial results combined as the
//! built-in norm kernels combine theirs); the CPU runs the Rust loop
//! `tensor_fn!` prints from the same programs. Elementwise work around a
//! row kernel folds into its program
//! ([`fuse_producer`](RowProgram::fuse_producer),
//! [`fuse_consumer`](RowProgram::fuse_consumer)).
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

use crate::ir::{ElementwiseBuilder, Kernel, Value};
use crate::ops::BinaryOp;
use crate::{Error, Result};
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
/// rows, and `eps` of the compute dtype. The catalogue's norms on the GPU
/// are these programs ([`builtin::norm`](crate::builtin::norm)), and
/// [`interp::norm`](crate::interp::norm) runs them as the GPU does.
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

/// The element program over inputs of `dtypes` whose result
/// `f(builder, inputs)` gives.
fn build(
    dtypes: &[DTypeKind],
    f: impl FnOnce(&mut ElementwiseBuilder, &[Value]) -> Value,
) -> Result<Kernel> {
    let mut b = ElementwiseBuilder::new();
    let inputs: Vec<Value> = dtypes.iter().map(|&d| b.input(d)).collect();
    let y = f(&mut b, &inputs);
    b.output(y)
}

/// `kernel` over new inputs of `dtypes`: `args(builder, inputs)` gives
/// the values its own inputs take.
fn remap(
    kernel: &Kernel,
    dtypes: &[DTypeKind],
    args: impl FnOnce(&mut ElementwiseBuilder, &[Value]) -> Vec<Value>,
) -> Result<Kernel> {
    build(dtypes, |b, v| {
        let a = args(b, v);
        b.inline(kernel, &a)
    })
}

impl RowProgram {
    /// The parameters' dtypes as the element programs see them: a row's
    /// is the program's dtype.
    fn param_dtypes(&self, params: &[RowParam]) -> Vec<DTypeKind> {
        params
            .iter()
            .map(|p| match p {
                RowParam::Row => self.dtype,
                RowParam::Scalar(d) => *d,
            })
            .collect()
    }

    /// Every element program with the parameters `params` in place of the
    /// old ones: `args(builder, new params)` gives the old parameters'
    /// values (the statistics follow either way).
    fn map_params(
        &self,
        params: Vec<RowParam>,
        args: &dyn Fn(&mut ElementwiseBuilder, &[Value]) -> Vec<Value>,
    ) -> Result<RowProgram> {
        let c = self.compute_dtype();
        let mut dtypes = self.param_dtypes(&params);
        let old = self.params.len();
        let new = params.len();
        let mut stats = Vec::with_capacity(self.stats.len());
        for st in &self.stats {
            let program = remap(&st.program, &dtypes, |b, v| {
                let mut a = args(b, &v[..new]);
                a.extend_from_slice(&v[new..]);
                a
            })?;
            stats.push(RowStat {
                reduce: st.reduce,
                program,
            });
            dtypes.push(c);
        }
        debug_assert_eq!(self.output.inputs().len(), old + self.stats.len());
        let output = remap(&self.output, &dtypes, |b, v| {
            let mut a = args(b, &v[..new]);
            a.extend_from_slice(&v[new..]);
            a
        })?;
        Ok(RowProgram {
            dtype: self.dtype,
            params,
            stats,
            output,
            per_row: self.per_row,
        })
    }

    /// The program with row parameter `param` (its place among all the
    /// parameters) computed by the elementwise `producer` from new
    /// parameters `inputs` (rows of the program's dtype and scalars, in
    /// `producer`'s input order), which take its place: the producer runs
    /// as the row is loaded, and its result is never stored.
    ///
    /// ```
    /// use tensorfn_kernels::ir::ElementwiseBuilder;
    /// use tensorfn_kernels::rowkernel::{norm_program, RowParam};
    /// use tensorfn_kernels::{BinaryOp, DTypeKind::F64, NormOp};
    /// // rms_norm(x + r, w, eps)
    /// let mut b = ElementwiseBuilder::new();
    /// let (x, r) = (b.input(F64), b.input(F64));
    /// let s = b.binary(BinaryOp::Add, x, r);
    /// let add = b.output(s)?;
    /// let p = norm_program(NormOp::RmsNorm, F64);
    /// let fused = p.fuse_producer(0, &add, &[RowParam::Row, RowParam::Row])?;
    /// assert_eq!(fused.params.len(), 4);
    /// let want = p.eval_row(&[&[4.0, 0.0], &[1.0, 1.0]], &[0.0]);
    /// assert_eq!(fused.eval_row(&[&[1.0, 0.0], &[3.0, 0.0], &[1.0, 1.0]], &[0.0]), want);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn fuse_producer(
        &self,
        param: usize,
        producer: &Kernel,
        inputs: &[RowParam],
    ) -> Result<RowProgram> {
        if self.params.get(param) != Some(&RowParam::Row)
            || producer.output_dtype() != self.dtype
            || producer.inputs() != self.param_dtypes(inputs).as_slice()
        {
            return Err(Error::Unsupported {
                kernel: "row",
                message: format!(
                "a producer of {} from {:?} cannot feed row parameter {param} of a row kernel over {} with parameters {:?}",
                producer.output_dtype(),
                producer.inputs(),
                self.dtype,
                self.params
                ),
            });
        }
        let mut params = self.params[..param].to_vec();
        params.extend_from_slice(inputs);
        params.extend_from_slice(&self.params[param + 1..]);
        let k = inputs.len();
        self.map_params(params, &|b, v| {
            let x = b.inline(producer, &v[param..param + k]);
            let mut a = v[..param].to_vec();
            a.push(x);
            a.extend_from_slice(&v[param + k..]);
            a
        })
    }

    /// The program with its result passed through the elementwise
    /// `consumer` as input `at`, its other inputs new parameters
    /// `inputs` (in `consumer`'s input order, without `at`) after the
    /// old ones: the consumer runs before the row is stored, and the row
    /// kernel's own result is never stored.
    ///
    /// ```
    /// use tensorfn_kernels::ir::ElementwiseBuilder;
    /// use tensorfn_kernels::rowkernel::{norm_program, RowParam};
    /// use tensorfn_kernels::{BinaryOp, DTypeKind::F64, NormOp};
    /// // rms_norm(x, w, eps) * g
    /// let mut b = ElementwiseBuilder::new();
    /// let (y, g) = (b.input(F64), b.input(F64));
    /// let s = b.binary(BinaryOp::Mul, y, g);
    /// let mul = b.output(s)?;
    /// let p = norm_program(NormOp::RmsNorm, F64);
    /// let fused = p.fuse_consumer(&mul, 0, &[RowParam::Row])?;
    /// let y = p.eval_row(&[&[4.0, 0.0], &[1.0, 1.0]], &[0.0]);
    /// let got = fused.eval_row(&[&[4.0, 0.0], &[1.0, 1.0], &[2.0, 3.0]], &[0.0]);
    /// assert_eq!(got, vec![y[0] * 2.0, y[1] * 3.0]);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn fuse_consumer(
        &self,
        consumer: &Kernel,
        at: usize,
        inputs: &[RowParam],
    ) -> Result<RowProgram> {
        let mut want = self.param_dtypes(inputs);
        if at <= want.len() {
            want.insert(at, self.dtype);
        }
        if self.per_row
            || consumer.output_dtype() != self.dtype
            || consumer.inputs() != want.as_slice()
        {
            return Err(Error::Unsupported {
                kernel: "row",
                message: format!(
                "a consumer from {:?} to {} cannot take the result of a row kernel over {} as its input {at}{}",
                consumer.inputs(),
                consumer.output_dtype(),
                self.dtype,
                if self.per_row { " (one value per row)" } else { "" }
                ),
            });
        }
        let old = self.params.len();
        let mut params = self.params.clone();
        params.extend_from_slice(inputs);
        // The statistics ignore the new parameters.
        let mut out = self.map_params(params.clone(), &|_, v| v[..old].to_vec())?;
        let mut dtypes = self.param_dtypes(&params);
        dtypes.extend(self.stats.iter().map(|_| self.compute_dtype()));
        let new = params.len();
        out.output = build(&dtypes, |b, v| {
            let mut a = v[..old].to_vec();
            a.extend_from_slice(&v[new..]);
            let y = b.inline(&self.output, &a);
            let mut c = v[old..new].to_vec();
            c.insert(at, y);
            b.inline(consumer, &c)
        })?;
        Ok(out)
    }
}
