//! Row reductions and row ops, in the GPU's order (see `reduction`).

use super::eval::{run, Column};
use super::host::HostData;
use crate::error::{Error, Result};
use crate::ops::ReduceOp;
use crate::ops::{RowOp, RowShape};
use crate::prim::Program;
use crate::reduction::{float_bits, reduce_spec, row_spec, BUTTERFLY, NO_INDEX, WARP, WARPS};

const THREADS: usize = WARP * WARPS;

fn check_len(input: &HostData, rows: usize, cols: usize) -> Result<()> {
    let need = rows.checked_mul(cols).ok_or_else(|| Error::Buffer {
        operand: "in".into(),
        message: format!("{rows} rows of {cols} overflow usize"),
    })?;
    if input.len() != need {
        return Err(Error::Buffer {
            operand: "in".into(),
            message: format!(
                "holds {} elements, {rows} rows of {cols} need {need}",
                input.len()
            ),
        });
    }
    Ok(())
}

/// Per-thread state of a block: one column per state word (value, and
/// index for arg reductions), one lane per thread.
struct Block {
    state: Vec<Column>,
}

impl Block {
    fn new(identity: &[u64], lanes: usize) -> Block {
        Block {
            state: identity.iter().map(|&v| vec![v; lanes]).collect(),
        }
    }

    /// `state = combine(state, other)` on the lanes where `active`.
    fn combine(&mut self, prog: &Program, other: &[Column], active: &[bool]) {
        let mut args: Vec<&Column> = self.state.iter().collect();
        args.extend(other.iter());
        let lanes = active.len();
        let out = run(prog, &args, lanes);
        for (s, o) in self.state.iter_mut().zip(out) {
            for l in 0..lanes {
                if active[l] {
                    s[l] = o[l];
                }
            }
        }
    }

    /// Butterfly over groups of 32 lanes.
    fn butterfly(&mut self, prog: &Program) {
        let lanes = self.state[0].len();
        let all = vec![true; lanes];
        for off in BUTTERFLY {
            let other: Vec<Column> = self
                .state
                .iter()
                .map(|c| (0..lanes).map(|l| c[l ^ off as usize]).collect())
                .collect();
            self.combine(prog, &other, &all);
        }
    }
}

/// Reduces one row held by `load(c)` for c in 0..cols; returns the state
/// words of the final result (as lane 0 of warp 0 holds them).
fn block_reduce(
    prog: &Program,
    identity: &[u64],
    cols: usize,
    load: &dyn Fn(usize) -> Vec<u64>,
) -> Vec<u64> {
    let mut block = Block::new(identity, THREADS);
    let mut base = 0;
    while base < cols {
        let active: Vec<bool> = (0..THREADS).map(|t| base + t < cols).collect();
        let mut other: Vec<Column> = vec![Vec::with_capacity(THREADS); identity.len()];
        for (t, &on) in active.iter().enumerate() {
            let words = if on {
                load(base + t)
            } else {
                identity.to_vec()
            };
            for (o, w) in other.iter_mut().zip(words) {
                o.push(w);
            }
        }
        block.combine(prog, &other, &active);
        base += THREADS;
    }
    block.butterfly(prog);
    // Warp results to warp 0; lanes beyond WARPS hold the identity.
    let mut last = Block::new(identity, WARP);
    for w in 0..WARPS {
        for (s, c) in last.state.iter_mut().zip(&block.state) {
            s[w] = c[w * WARP];
        }
    }
    last.butterfly(prog);
    last.state.iter().map(|c| c[0]).collect()
}

/// Reduces each of `rows` contiguous rows of `cols` elements of `input`
/// to one element, exactly as the `reduce` built-in kernel does (same
/// order, same rounding). ArgMax/ArgMin give `i64` positions (first
/// occurrence; NaN counts as the extreme; `-1` for an empty row); Mean and
/// the sums of f16/bf16 accumulate in f32.
///
/// ```
/// use tensorfn_kernels::interp::{reduce, HostData};
/// use tensorfn_kernels::ReduceOp;
/// let x = HostData::F32(vec![1.0, 5.0, 2.0, -1.0, 0.5, 3.0]);
/// assert_eq!(reduce(ReduceOp::Sum, &x, 2, 3)?, HostData::F32(vec![8.0, 2.5]));
/// assert_eq!(reduce(ReduceOp::ArgMax, &x, 2, 3)?, HostData::I64(vec![1, 2]));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn reduce(op: ReduceOp, input: &HostData, rows: usize, cols: usize) -> Result<HostData> {
    let spec = reduce_spec(op, input.dtype())?;
    check_len(input, rows, cols)?;
    let mut out = HostData::zeros(spec.out, rows);
    let identity: Vec<u64> = if spec.with_index {
        vec![spec.identity, NO_INDEX as u64]
    } else {
        vec![spec.identity]
    };
    for row in 0..rows {
        let load = |c: usize| {
            let v = input.reg_bits(row * cols + c);
            if spec.with_index {
                vec![v, c as u64]
            } else {
                vec![v]
            }
        };
        let state = block_reduce(&spec.combine, &identity, cols, &load);
        let cols_col = vec![cols as u64];
        let cols_ref = [cols_col];
        let state_cols: Vec<Column> = state.iter().map(|&v| vec![v]).collect();
        let mut args: Vec<&Column> = state_cols.iter().collect();
        args.push(&cols_ref[0]);
        let r = run(&spec.finish, &args, 1);
        out.set_reg_bits(row, r[0][0]);
    }
    Ok(out)
}

/// Row op `op` of each of `rows` contiguous rows of `cols` elements,
/// exactly as its built-in kernel computes it: row max, sum of
/// `exp(x - max)` in the reduction order, then the op's finish (for
/// softmax `exp(x - max) / sum`, for log-softmax `x - max - log(sum)`), in
/// f32 for f16/bf16. An op that keeps its dim gives `rows * cols` values,
/// one that removes it `rows`.
///
/// ```
/// use tensorfn_kernels::interp::{row, HostData};
/// use tensorfn_kernels::RowOp;
/// let x = HostData::F64(vec![0.0, 0.0, 1.0, 1.0]);
/// let y = row(RowOp::Softmax, &x, 2, 2)?.to_f64_vec();
/// assert_eq!(y, vec![0.5, 0.5, 0.5, 0.5]);
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn row(op: RowOp, input: &HostData, rows: usize, cols: usize) -> Result<HostData> {
    let spec = row_spec(op, input.dtype())?;
    check_len(input, rows, cols)?;
    let per_row = op.shape() == RowShape::Reduce;
    let mut out = HostData::zeros(spec.dtype, if per_row { rows } else { rows * cols });
    let acc = spec.acc;
    for row in 0..rows {
        let x: Column = (0..cols).map(|c| input.reg_bits(row * cols + c)).collect();
        let max = block_reduce(
            &spec.max,
            &[float_bits(acc, f64::NEG_INFINITY)],
            cols,
            &|c| vec![x[c]],
        )[0];
        let m_col = vec![max; cols];
        let e = run(&spec.exp_shift, &[&x, &m_col], cols).remove(0);
        let sum = block_reduce(&spec.sum, &[float_bits(acc, -0.0)], cols, &|c| vec![e[c]])[0];
        let s = run(&spec.row_log, &[&vec![sum]], 1)[0][0];
        if per_row {
            let y = run(&spec.finish, &[&vec![max], &vec![s]], 1)[0][0];
            out.set_reg_bits(row, y);
            continue;
        }
        let s_col = vec![s; cols];
        let y = run(&spec.finish, &[&x, &m_col, &s_col], cols).remove(0);
        for (c, &bits) in y.iter().enumerate() {
            out.set_reg_bits(row * cols + c, bits);
        }
    }
    Ok(out)
}
