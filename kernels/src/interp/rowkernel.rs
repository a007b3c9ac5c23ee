//! Row kernels ([`RowProgram`]s, the catalogue's norms among them) on the
//! host, operation for operation as their PTX entries
//! ([`ptx::row_kernel`](crate::ptx::row_kernel)) compute them: the same
//! split of a row among threads ([`crate::norm`]), each thread's partial
//! result combined in the order it visits its columns (slots past the row
//! left out), the threads' results combined by the same butterfly and the
//! warps' in order, and every element program run through the same
//! lowered program with the same rounding.

use super::eval::{self, Column};
use super::HostData;
use crate::error::{Error, Result};
use crate::lower::lower;
use crate::norm::{self, NormEntry, WARPS};
use crate::prim::Program;
use crate::rowkernel::{RowParam, RowProgram, RowReduce};
use tensorfn_core::DTypeKind;

/// Runs `prog` over `rows` rows of `cols` elements as the entry
/// [`norm::entry`]`(prog.dtype, cols, aligned)` computes it on a GPU.
/// `inputs` holds each row parameter's buffer and the elements between
/// its rows (`cols`, or 0 for one row read by every row); `scalars` each
/// scalar parameter's value (converted to its dtype as the entry converts
/// it). The result has `rows * cols` elements, or `rows` for a per-row
/// program.
///
/// ```
/// use tensorfn_kernels::interp::{self, HostData};
/// use tensorfn_kernels::rowkernel::norm_program;
/// use tensorfn_kernels::{DTypeKind, NormOp};
/// let prog = norm_program(NormOp::RmsNorm, DTypeKind::F32);
/// let x = HostData::F32(vec![3.0, 4.0, 6.0, 8.0]);
/// let w = HostData::F32(vec![1.0, 2.0]);
/// let y = interp::row_kernel(&prog, &[(&x, 2), (&w, 0)], &[0.0], 2, 2, true)?;
/// // x * (1 / sqrt(mean(x * x) + eps)) * w, each operation rounded to f32.
/// let inv = |a: f32, b: f32| 1.0 / ((a * a + b * b) / 2.0).sqrt();
/// let (i0, i1) = (inv(3.0, 4.0), inv(6.0, 8.0));
/// assert_eq!(y, HostData::F32(vec![3.0 * i0, 4.0 * i0 * 2.0, 6.0 * i1, 8.0 * i1 * 2.0]));
/// // A row parameter shorter than the rows need is an error, not a panic.
/// assert!(interp::row_kernel(&prog, &[(&w, 2), (&w, 0)], &[0.0], 2, 2, true).is_err());
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn row_kernel(
    prog: &RowProgram,
    inputs: &[(&HostData, usize)],
    scalars: &[f64],
    rows: usize,
    cols: usize,
    aligned: bool,
) -> Result<HostData> {
    let dtype = prog.dtype;
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "row_kernel",
            message: format!("rows of {}; row kernels take float dtypes", dtype.name()),
        });
    }
    if inputs.len() != prog.rows().len() || scalars.len() != prog.scalars().len() {
        return Err(Error::Buffer {
            operand: "inputs".into(),
            message: format!(
                "{} rows and {} scalars given, the program takes {} and {}",
                inputs.len(),
                scalars.len(),
                prog.rows().len(),
                prog.scalars().len()
            ),
        });
    }
    for (k, (data, step)) in inputs.iter().enumerate() {
        let need = match step {
            0 => Some(cols),
            &s if s == cols => rows.checked_mul(cols),
            _ => None,
        };
        let ok = data.dtype() == dtype && need.is_some_and(|n| data.len() >= n);
        if !ok {
            return Err(Error::Buffer {
                operand: format!("row argument {k}"),
                message: format!(
                    "holds {} {} elements with {step} between rows; rows of {cols} {} needed, {cols} or 0 apart",
                    data.len(),
                    data.dtype().name(),
                    dtype.name()
                ),
            });
        }
    }
    let width = if prog.per_row { 1 } else { cols };
    let total = rows.checked_mul(width).ok_or_else(|| Error::Buffer {
        operand: "out".into(),
        message: format!("{rows} rows of {cols} overflow usize"),
    })?;
    let mut out = HostData::zeros(dtype, total);
    if total == 0 {
        return Ok(out);
    }
    let run = Run::new(prog, scalars, cols, aligned);
    for r in 0..rows {
        let row: Vec<Column> = inputs
            .iter()
            .map(|(data, step)| (0..cols).map(|j| data.reg_bits(r * step + j)).collect())
            .collect();
        let y = run.row(&row);
        for (j, bits) in y.into_iter().enumerate() {
            out.set_reg_bits(r * width + j, bits);
        }
    }
    Ok(out)
}

/// One program's lowered pieces and the row's plan.
struct Run<'a> {
    prog: &'a RowProgram,
    /// Statistics in f64 (else f32).
    wide: bool,
    cols: usize,
    /// Each scalar parameter's register bits.
    scalars: Vec<u64>,
    /// The columns thread `t` visits, in order (`None`: a slot past the row).
    plan: Vec<Vec<Option<usize>>>,
    stats: Vec<(Program, Program)>,
    output: Program,
}

impl<'a> Run<'a> {
    fn new(prog: &'a RowProgram, scalars: &[f64], cols: usize, aligned: bool) -> Run<'a> {
        let entry = norm::entry(prog.dtype, cols, aligned);
        let c = prog.compute_dtype();
        Run {
            prog,
            wide: c == DTypeKind::F64,
            cols,
            scalars: prog
                .scalars()
                .iter()
                .zip(scalars)
                .map(|(&(_, d), &v)| scalar_bits(v, d))
                .collect(),
            plan: (0..entry.threads())
                .map(|t| thread_cols(entry, prog.dtype, cols, t))
                .collect(),
            stats: prog
                .stats
                .iter()
                .map(|s| (lower(&s.program), lower(&s.reduce.combine_kernel(c))))
                .collect(),
            output: lower(&prog.output),
        }
    }

    /// A compute-dtype value's register bits.
    fn bits(&self, v: f64) -> u64 {
        if self.wide {
            v.to_bits()
        } else {
            (v as f32).to_bits() as u64
        }
    }

    /// The arguments of an element program over `lanes` lanes: the row
    /// parameters' columns (`row`), the scalars, then `stats`.
    fn args(&self, row: &[Column], stats: &[u64], lanes: usize) -> Vec<Column> {
        let (mut r, mut s) = (0, 0);
        let mut out = Vec::with_capacity(self.prog.params.len() + stats.len());
        for p in &self.prog.params {
            match p {
                RowParam::Row => {
                    let mut c = row[r].clone();
                    c.resize(lanes, 0);
                    out.push(c);
                    r += 1;
                }
                RowParam::Scalar(_) => {
                    out.push(vec![self.scalars[s]; lanes]);
                    s += 1;
                }
            }
        }
        out.extend(stats.iter().map(|&b| vec![b; lanes]));
        out
    }

    /// The result of one row (register bits): a value per column, or one.
    fn row(&self, row: &[Column]) -> Vec<u64> {
        let mut stats: Vec<u64> = Vec::with_capacity(self.stats.len());
        for (k, (program, combine)) in self.stats.iter().enumerate() {
            let args = self.args(row, &stats, self.cols);
            let refs: Vec<&Column> = args.iter().collect();
            let values = eval::run(program, &refs, self.cols).swap_remove(0);
            let reduce = self.prog.stats[k].reduce;
            let total = self.reduce(combine, reduce, &values);
            stats.push(if reduce == RowReduce::Mean {
                if self.wide {
                    (f64::from_bits(total) / self.cols as f64).to_bits()
                } else {
                    (f32::from_bits(total as u32) / self.cols as f32).to_bits() as u64
                }
            } else {
                total
            });
        }
        // A per-row result reads no row parameter; its lane reads zeros.
        let lanes = if self.prog.per_row { 1 } else { self.cols };
        let args = self.args(row, &stats, lanes);
        let refs: Vec<&Column> = args.iter().collect();
        eval::run(&self.output, &refs, lanes).swap_remove(0)
    }

    /// `values` (one per column) combined as the entry combines them:
    /// each thread's in its order, then across the threads.
    fn reduce(&self, combine: &Program, reduce: RowReduce, values: &[u64]) -> u64 {
        let threads = self.plan.len();
        let mut part: Column = vec![self.bits(reduce.identity()); threads];
        let longest = self.plan.iter().map(Vec::len).max().unwrap_or(0);
        for s in 0..longest {
            let at: Vec<Option<usize>> = self
                .plan
                .iter()
                .map(|p| p.get(s).copied().flatten())
                .collect();
            let v: Column = at.iter().map(|c| c.map_or(0, |c| values[c])).collect();
            let next = eval::run(combine, &[&part, &v], threads).swap_remove(0);
            for (t, c) in at.iter().enumerate() {
                if c.is_some() {
                    part[t] = next[t];
                }
            }
        }
        // The butterfly within each warp.
        for off in [16usize, 8, 4, 2, 1] {
            let other: Column = (0..threads).map(|i| part[i ^ off]).collect();
            part = eval::run(combine, &[&part, &other], threads).swap_remove(0);
        }
        if threads == 32 {
            return part[0];
        }
        // The warps' results in order.
        let mut total = part[0];
        for w in 1..WARPS {
            total = eval::run(combine, &[&vec![total], &vec![part[32 * w]]], 1)[0][0];
        }
        total
    }
}

/// A scalar parameter's register bits in dtype `d`, converted as the
/// entry converts its `f64` parameter.
fn scalar_bits(v: f64, d: DTypeKind) -> u64 {
    match d {
        DTypeKind::F32 => (v as f32).to_bits() as u64,
        DTypeKind::I32 => (v as i32) as u32 as u64,
        DTypeKind::I64 => (v as i64) as u64,
        _ => v.to_bits(),
    }
}

/// The columns thread `t` visits, in order (`None` for a slot past the
/// row, which takes no part in a statistic).
fn thread_cols(entry: NormEntry, dtype: DTypeKind, cols: usize, t: usize) -> Vec<Option<usize>> {
    let threads = entry.threads();
    match entry {
        NormEntry::Long => (t..cols).step_by(threads).map(Some).collect(),
        _ => {
            let v = entry.width(dtype);
            let accesses = norm::slots(dtype) / v;
            let nvec = cols / v;
            let mut out = Vec::with_capacity(accesses * v);
            for j in 0..accesses {
                let a = t + j * threads;
                for k in 0..v {
                    out.push((a < nvec).then_some(a * v + k));
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ElementwiseBuilder;
    use crate::ops::{BinaryOp, UnaryOp};
    use crate::rowkernel::RowStat;

    /// `log(sum(exp(x - max(x)))) + max(x)`, one value per row: a `Max`
    /// statistic, a `Sum` reading it, and a per-row result.
    fn logsumexp(dtype: DTypeKind) -> RowProgram {
        let c = crate::rowkernel::compute_dtype(dtype);
        let mut b = ElementwiseBuilder::new();
        let x = b.input(dtype);
        let x = if c != dtype { b.cast(x, c) } else { x };
        let max = b.clone().output(x).unwrap();
        let m = b.input(c);
        let d = b.binary(BinaryOp::Sub, x, m);
        let e = b.unary(UnaryOp::Exp, d);
        let sum = b.clone().output(e).unwrap();
        let s = b.input(c);
        let l = b.unary(UnaryOp::Log, s);
        let y = b.binary(BinaryOp::Add, l, m);
        let y = if c != dtype { b.cast(y, dtype) } else { y };
        RowProgram {
            dtype,
            params: vec![RowParam::Row],
            stats: vec![
                RowStat {
                    reduce: RowReduce::Max,
                    program: max,
                },
                RowStat {
                    reduce: RowReduce::Sum,
                    program: sum,
                },
            ],
            output: b.output(y).unwrap(),
            per_row: true,
        }
    }

    /// Every entry's split of the row (warp, block, long; 16-byte and
    /// one-element accesses) gives the f64 reference within a few
    /// roundings, NaN spreads through `max`, and an empty row gives the
    /// reference's value.
    #[test]
    fn a_per_row_program_follows_the_reference_on_every_entry() {
        for dtype in [DTypeKind::F32, DTypeKind::F64, DTypeKind::BF16] {
            let prog = logsumexp(dtype);
            let tol = match dtype {
                DTypeKind::F64 => 1e-12,
                DTypeKind::F32 => 1e-5,
                _ => 1e-2,
            };
            for cols in [1, 7, 64, 1000, 4096, 9000] {
                for aligned in [true, false] {
                    let rows = 3;
                    let xs: Vec<f64> = (0..rows * cols)
                        .map(|i| ((i * 7919 % 1013) as f64 / 1013.0) * 8.0 - 4.0)
                        .collect();
                    let x = HostData::from_f64(dtype, &xs);
                    let y = row_kernel(&prog, &[(&x, cols)], &[], rows, cols, aligned)
                        .unwrap()
                        .to_f64_vec();
                    let xf = x.to_f64_vec();
                    for r in 0..rows {
                        let want = prog.eval_row(&[&xf[r * cols..(r + 1) * cols]], &[])[0];
                        assert!(
                            (y[r] - want).abs() <= tol * want.abs().max(1.0),
                            "{dtype} cols {cols} aligned {aligned}: {} vs {want}",
                            y[r]
                        );
                    }
                }
            }
            let x = HostData::from_f64(dtype, &[1.0, f64::NAN, 2.0]);
            let y = row_kernel(&prog, &[(&x, 3)], &[], 1, 3, true).unwrap();
            assert!(y.to_f64_vec()[0].is_nan());
        }
        let empty = HostData::F32(vec![]);
        let y = row_kernel(&logsumexp(DTypeKind::F32), &[(&empty, 0)], &[], 2, 0, true).unwrap();
        assert_eq!(y.to_f64_vec(), vec![f64::NEG_INFINITY; 2]);
    }

    /// Wrong arguments name the operand instead of panicking.
    #[test]
    fn bad_arguments_are_errors() {
        let prog = logsumexp(DTypeKind::F32);
        let x = HostData::F32(vec![1.0; 6]);
        let wrong = HostData::F64(vec![1.0; 6]);
        let short = row_kernel(&prog, &[(&x, 4)], &[], 2, 4, true).unwrap_err();
        assert!(short.to_string().contains("row argument 0"), "{short}");
        assert!(row_kernel(&prog, &[(&x, 3)], &[], 3, 3, true).is_err());
        assert!(row_kernel(&prog, &[(&wrong, 3)], &[], 2, 3, true).is_err());
        assert!(row_kernel(&prog, &[], &[], 2, 3, true).is_err());
        assert!(row_kernel(&prog, &[(&x, 3)], &[1.0], 2, 3, true).is_err());
    }
}
