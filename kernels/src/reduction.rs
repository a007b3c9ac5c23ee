//! The pieces of the row kernels (reductions and row ops) as lowered
//! programs, shared by the PTX emitter and the interpreter so both combine
//! the same values in the same order with the same rounding.
//!
//! Order of a row reduction (block of [`BLOCK`] threads, one row per block
//! at a time): thread `t` folds columns `t, t + BLOCK, ...` in turn; each
//! warp then combines its 32 partials by butterfly (`shfl.sync.bfly` with
//! offsets 16, 8, 4, 2, 1); warp 0 combines the 8 warp results the same
//! way (lanes 8..32 holding the identity).

use crate::abi::BLOCK;
use crate::error::{Error, Result};
use crate::lower::{nan_max_min, round_to};
use crate::mathfn;
use crate::ops::{CmpOp, ReduceOp, RowOp, RowShape};
use crate::prim::{Builder, Program, Ty};
use tensorfn_core::DTypeKind;

/// Threads per warp.
pub(crate) const WARP: usize = 32;
/// Warps per block.
pub(crate) const WARPS: usize = BLOCK as usize / WARP;
/// The butterfly offsets, in order.
pub(crate) const BUTTERFLY: [u32; 5] = [16, 8, 4, 2, 1];

/// How a `(op, dtype)` reduction runs.
#[derive(Clone, Debug)]
pub(crate) struct ReduceSpec {
    /// Element dtype.
    pub(crate) dtype: DTypeKind,
    /// Output dtype (`i64` for arg reductions).
    pub(crate) out: DTypeKind,
    /// Accumulator register type (the element's register type).
    pub(crate) acc: Ty,
    /// True for ArgMax/ArgMin: the state is (value, index as i64).
    pub(crate) with_index: bool,
    /// Identity of the accumulator, as register bits.
    pub(crate) identity: u64,
    /// `(acc[, idx], x[, idx]) -> acc[, idx]`.
    pub(crate) combine: Program,
    /// `(acc[, idx], cols: i64) -> output register value`.
    pub(crate) finish: Program,
}

/// Checks that `op` is defined on `dtype` and builds its pieces.
pub(crate) fn reduce_spec(op: ReduceOp, dtype: DTypeKind) -> Result<ReduceSpec> {
    if dtype == DTypeKind::Bool {
        return Err(Error::Unsupported {
            kernel: "reduce",
            message: format!(
                "{} is not defined on bool; cast to u8 or i64 first",
                op.name()
            ),
        });
    }
    if op == ReduceOp::Mean && !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "reduce",
            message: format!("mean needs a floating-point dtype, found {dtype}; cast to f32 first"),
        });
    }
    let acc = Ty::of(dtype);
    let with_index = op.returns_index();
    let identity = identity(op, acc);
    let combine = combine_program(op, acc);
    let finish = finish_program(op, dtype, acc);
    Ok(ReduceSpec {
        dtype,
        out: if with_index { DTypeKind::I64 } else { dtype },
        acc,
        with_index,
        identity,
        combine,
        finish,
    })
}

/// The pieces of `topk`'s pass over rows of `dtype`: `argmax`'s for the
/// largest (NaN first, then larger values, ties by lower index), and for
/// the smallest (`largest = false`) smaller values first, ties by lower
/// index, NaN last (PyTorch counts NaN as larger than every number).
/// `argmin`'s combine would pick NaN first, so floats get their own
/// combine, whose identity is a NaN at [`NO_INDEX`]: every element, NaN
/// included, beats it.
pub(crate) fn topk_spec(dtype: DTypeKind, largest: bool) -> Result<ReduceSpec> {
    if largest {
        return reduce_spec(ReduceOp::ArgMax, dtype);
    }
    let mut spec = reduce_spec(ReduceOp::ArgMin, dtype)?;
    if spec.acc.is_float() {
        spec.combine = smallest_nan_last(spec.acc);
        spec.identity = match spec.acc {
            Ty::F32 => f32::NAN.to_bits() as u64,
            _ => f64::NAN.to_bits(),
        };
    }
    Ok(spec)
}

/// `(va, ia, vb, ib) -> (v, i)`: `b` if it comes first in the order
/// "smaller first, NaN last, ties by lower index", else `a`.
fn smallest_nan_last(acc: Ty) -> Program {
    let mut b = Builder::new();
    let va = b.param(acc);
    let ia = b.param(Ty::I64);
    let vb = b.param(acc);
    let ib = b.param(Ty::I64);
    let smaller = b.cmp(CmpOp::Lt, vb, va);
    let equal = b.cmp(CmpOp::Eq, vb, va);
    let earlier = b.cmp(CmpOp::Lt, ib, ia);
    let tie = b.and(equal, earlier);
    let numbers = b.or(smaller, tie);
    // A number beats a NaN; of two NaNs the earlier wins.
    let na = b.is_nan(va);
    let nb = b.is_nan(vb);
    let not_nb = b.not(nb);
    let number_over_nan = b.and(na, not_nb);
    let both = b.and(na, nb);
    let nan_tie = b.and(both, earlier);
    let take = b.or(numbers, number_over_nan);
    let take = b.or(take, nan_tie);
    let v = b.select(take, vb, va);
    let i = b.select(take, ib, ia);
    b.finish(vec![v, i])
}

fn identity(op: ReduceOp, acc: Ty) -> u64 {
    let float = |v: f64| match acc {
        Ty::F32 => (v as f32).to_bits() as u64,
        _ => v.to_bits(),
    };
    let int = |v32: i32, v64: i64| match acc {
        Ty::I32 => v32 as u32 as u64,
        _ => v64 as u64,
    };
    let is_float = acc.is_float();
    match op {
        // -0 is the identity of IEEE addition (x + -0 = x, even for -0).
        ReduceOp::Sum | ReduceOp::Mean if is_float => float(-0.0),
        ReduceOp::Sum | ReduceOp::Mean => 0,
        ReduceOp::Max | ReduceOp::ArgMax if is_float => float(f64::NEG_INFINITY),
        ReduceOp::Max | ReduceOp::ArgMax => int(i32::MIN, i64::MIN),
        ReduceOp::Min | ReduceOp::ArgMin if is_float => float(f64::INFINITY),
        ReduceOp::Min | ReduceOp::ArgMin => int(i32::MAX, i64::MAX),
    }
}

/// Index of "no element yet" in arg reductions (any real index is smaller).
pub(crate) const NO_INDEX: i64 = i64::MAX;

fn combine_program(op: ReduceOp, acc: Ty) -> Program {
    let mut b = Builder::new();
    if op.returns_index() {
        let va = b.param(acc);
        let ia = b.param(Ty::I64);
        let vb = b.param(acc);
        let ib = b.param(Ty::I64);
        let better = if op == ReduceOp::ArgMax {
            CmpOp::Gt
        } else {
            CmpOp::Lt
        };
        let strictly = b.cmp(better, vb, va);
        let equal = b.cmp(CmpOp::Eq, vb, va);
        let earlier = b.cmp(CmpOp::Lt, ib, ia);
        let tie = b.and(equal, earlier);
        let mut take = b.or(strictly, tie);
        if acc.is_float() {
            // NaN wins (first NaN), like torch.argmax / argmin.
            let nb = b.is_nan(vb);
            let na = b.is_nan(va);
            let not_na = b.not(na);
            let first = b.or(not_na, earlier);
            let nan_take = b.and(nb, first);
            take = b.or(take, nan_take);
        }
        let v = b.select(take, vb, va);
        let i = b.select(take, ib, ia);
        return b.finish(vec![v, i]);
    }
    let a = b.param(acc);
    let x = b.param(acc);
    let r = match (op, acc.is_float()) {
        (ReduceOp::Sum | ReduceOp::Mean, true) => b.add(a, x),
        (ReduceOp::Sum | ReduceOp::Mean, false) => b.iadd(a, x),
        (ReduceOp::Max, true) | (ReduceOp::Min, true) => {
            nan_max_min(&mut b, op == ReduceOp::Max, a, x)
        }
        (ReduceOp::Max, false) => b.imax(a, x),
        (ReduceOp::Min, false) => b.imin(a, x),
        _ => unreachable!("arg reductions handled above"),
    };
    b.finish(vec![r])
}

fn finish_program(op: ReduceOp, dtype: DTypeKind, acc: Ty) -> Program {
    let mut b = Builder::new();
    let a = b.param(acc);
    let idx = if op.returns_index() {
        Some(b.param(Ty::I64))
    } else {
        None
    };
    let cols = b.param(Ty::I64);
    if let Some(i) = idx {
        let none = b.ci(Ty::I64, NO_INDEX);
        let empty = b.cmp(CmpOp::Eq, i, none);
        let m1 = b.ci(Ty::I64, -1);
        let r = b.select(empty, m1, i);
        return b.finish(vec![r]);
    }
    let mut r = a;
    if acc.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
        // The fold starts from -0 (the identity of +); the result, like
        // PyTorch's, is +0 for an empty row or a row of -0s.
        let zero = b.cf(acc, 0.0);
        r = b.add(r, zero);
    }
    if op == ReduceOp::Mean {
        let n = b.itof(cols, acc, crate::prim::Round::Nearest);
        r = b.div(r, n);
    }
    let r = match dtype {
        DTypeKind::F16 | DTypeKind::BF16 if op != ReduceOp::Max && op != ReduceOp::Min => {
            round_to(&mut b, r, dtype)
        }
        DTypeKind::U8 => {
            let m = b.ci(Ty::I32, 0xff);
            b.and(r, m)
        }
        _ => r,
    };
    b.finish(vec![r])
}

/// The pieces of a row op over rows of `dtype`: a max pass, a pass
/// summing `exp_shift(x, max)`, `row_log` of the sum, then `finish` per
/// element (an op that keeps its dim) or once per row (one that removes
/// it).
#[derive(Clone, Debug)]
pub(crate) struct RowSpec {
    /// The op.
    pub(crate) op: RowOp,
    /// Element dtype.
    pub(crate) dtype: DTypeKind,
    /// Computation register type (f32, or f64 for f64).
    pub(crate) acc: Ty,
    /// `(a, b) -> max(a, b)` propagating NaN.
    pub(crate) max: Program,
    /// `(a, b) -> a + b`.
    pub(crate) sum: Program,
    /// `(x, m) -> exp(x - m)`.
    pub(crate) exp_shift: Program,
    /// `(s) -> log(s)` where the op needs the log of the sum; identity
    /// otherwise.
    pub(crate) row_log: Program,
    /// `(x, m, s_or_log_s) -> output register value` for an op that keeps
    /// its dim; `(m, s_or_log_s) -> output register value` for one that
    /// removes it.
    pub(crate) finish: Program,
    /// Softmax only: `(e, s) -> output register value` with
    /// `e = exp_shift(x, m)`, the same bits as `finish(x, m, s)` (which
    /// computes `e` with the same instructions first), for a kernel that
    /// keeps the exponentials of the sum.
    pub(crate) scale: Option<Program>,
}

/// Builds the pieces of `op`; floats only.
pub(crate) fn row_spec(op: RowOp, dtype: DTypeKind) -> Result<RowSpec> {
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: op.name(),
            message: format!(
                "{} needs a floating-point dtype, found {dtype}; cast to f32 first",
                op.name()
            ),
        });
    }
    let acc = Ty::of(dtype);
    // Whether the op takes the log of the sum, and whether an infinite
    // max shifts the exponentials by 0 instead (logsumexp, as PyTorch:
    // `x - max` would be NaN where the row is all -inf or has a +inf).
    let (log, finite_shift) = match op {
        RowOp::Softmax => (false, false),
        RowOp::LogSoftmax => (true, false),
        RowOp::LogSumExp => (true, true),
    };
    let shift = |b: &mut Builder, m| {
        if !finite_shift {
            return m;
        }
        let a = b.fabs(m);
        let inf = b.cf(acc, f64::INFINITY);
        let infinite = b.cmp(CmpOp::Eq, a, inf);
        let zero = b.cf(acc, 0.0);
        b.select(infinite, zero, m)
    };
    let max = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let y = b.param(acc);
        let r = nan_max_min(&mut b, true, x, y);
        b.finish(vec![r])
    };
    let sum = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let y = b.param(acc);
        let r = b.add(x, y);
        b.finish(vec![r])
    };
    let exp_shift = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let m = b.param(acc);
        let m = shift(&mut b, m);
        let d = b.sub(x, m);
        let e = mathfn::exp(&mut b, d);
        b.finish(vec![e])
    };
    let row_log = {
        let mut b = Builder::new();
        let s = b.param(acc);
        let r = if log { mathfn::log(&mut b, s) } else { s };
        b.finish(vec![r])
    };
    // The output from a value of `acc`: rounded to a 16-bit dtype.
    let out = |b: &mut Builder, r| match dtype {
        DTypeKind::F16 | DTypeKind::BF16 => round_to(b, r, dtype),
        _ => r,
    };
    let finish = {
        let mut b = Builder::new();
        let r = if op.shape() == RowShape::Reduce {
            // One value per row: `log(s) + shift`.
            let m = b.param(acc);
            let ls = b.param(acc);
            let m = shift(&mut b, m);
            b.add(ls, m)
        } else {
            let x = b.param(acc);
            let m = b.param(acc);
            let s = b.param(acc);
            let d = b.sub(x, m);
            if log {
                b.sub(d, s)
            } else {
                let e = mathfn::exp(&mut b, d);
                b.div(e, s)
            }
        };
        let r = out(&mut b, r);
        b.finish(vec![r])
    };
    let scale = (!log).then(|| {
        let mut b = Builder::new();
        let e = b.param(acc);
        let s = b.param(acc);
        let r = b.div(e, s);
        let r = out(&mut b, r);
        b.finish(vec![r])
    });
    Ok(RowSpec {
        op,
        dtype,
        acc,
        max,
        sum,
        exp_shift,
        row_log,
        finish,
        scale,
    })
}

/// Identity of `max` and `sum` in `acc`, as bits.
pub(crate) fn float_bits(acc: Ty, v: f64) -> u64 {
    match acc {
        Ty::F32 => (v as f32).to_bits() as u64,
        _ => v.to_bits(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::eval::run;

    /// `scale(exp_shift(x, m), s)` is `finish(x, m, s)` bit for bit, on
    /// ordinary values and on infinities, NaN, zeros and subnormals.
    #[test]
    fn softmax_scale_of_the_exponential_is_finish() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for dtype in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            let spec = row_spec(RowOp::Softmax, dtype).unwrap();
            assert!(row_spec(RowOp::LogSoftmax, dtype).unwrap().scale.is_none());
            let scale = spec.scale.as_ref().expect("softmax has a scale");
            let bits = |v: f64| float_bits(spec.acc, v);
            let special = [
                0.0,
                -0.0,
                1.0,
                -1.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e-40,
                88.0,
                -104.0,
                1e30,
            ];
            let mut xs = Vec::new();
            let mut ms = Vec::new();
            let mut ss = Vec::new();
            for &a in &special {
                for &b in &special {
                    for &c in &[1.0, 3.5, 1e-30, 0.0, f64::INFINITY, f64::NAN, 4096.0] {
                        xs.push(bits(a));
                        ms.push(bits(b));
                        ss.push(bits(c));
                    }
                }
            }
            for _ in 0..20_000 {
                let u = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64;
                let x = -30.0 + 60.0 * u(next());
                let m = x + 20.0 * u(next());
                xs.push(bits(x));
                ms.push(bits(m));
                ss.push(bits(1.0 + 4000.0 * u(next())));
            }
            let n = xs.len();
            let want = run(&spec.finish, &[&xs, &ms, &ss], n).remove(0);
            let e = run(&spec.exp_shift, &[&xs, &ms], n).remove(0);
            let got = run(scale, &[&e, &ss], n).remove(0);
            for i in 0..n {
                assert_eq!(got[i], want[i], "{dtype} case {i}");
            }
        }
    }

    /// `topk_spec`'s combine picks the first of two `(value, index)`
    /// pairs in `topk`'s order (the largest: NaN, then larger, then lower
    /// index; the smallest: smaller, then NaN, then lower index), and
    /// every element beats the identity.
    #[test]
    fn topk_combine_follows_the_order() {
        use std::cmp::Ordering;
        let values = [
            f64::NAN,
            f64::NEG_INFINITY,
            -1.5,
            -0.0,
            0.0,
            2.0,
            f64::INFINITY,
        ];
        // `a` before `b` in the order, as the CPU sorts.
        let before = |largest: bool, a: (f64, i64), b: (f64, i64)| -> bool {
            let key = |v: f64| if largest { -v } else { v };
            let o = match (a.0.is_nan(), b.0.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) if largest => Ordering::Less,
                (true, false) => Ordering::Greater,
                (false, true) if largest => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => key(a.0).partial_cmp(&key(b.0)).unwrap(),
            };
            o.then(a.1.cmp(&b.1)) == Ordering::Less
        };
        for dtype in [DTypeKind::F32, DTypeKind::F64, DTypeKind::BF16] {
            for largest in [true, false] {
                let spec = topk_spec(dtype, largest).unwrap();
                let bits = |v: f64| float_bits(spec.acc, v);
                let (mut va, mut ia, mut vb, mut ib) = (vec![], vec![], vec![], vec![]);
                let mut pairs = vec![];
                for &a in &values {
                    for &b in &values {
                        for (x, y) in [(0i64, 1i64), (1, 0), (2, 2)] {
                            pairs.push(((a, x), (b, y)));
                        }
                    }
                    // Against the identity.
                    pairs.push(((f64::NAN, NO_INDEX), (a, 3)));
                }
                for &((a, x), (b, y)) in &pairs {
                    va.push(bits(a));
                    ia.push(x as u64);
                    vb.push(bits(b));
                    ib.push(y as u64);
                }
                // The identity's bits, not a NaN of our own making.
                let n = pairs.len();
                for (k, p) in pairs.iter().enumerate() {
                    if p.0 .1 == NO_INDEX {
                        va[k] = spec.identity;
                    }
                }
                let out = run(&spec.combine, &[&va, &ia, &vb, &ib], n);
                for (k, &((a, x), (b, y))) in pairs.iter().enumerate() {
                    let want = if x == NO_INDEX || before(largest, (b, y), (a, x)) {
                        y
                    } else {
                        x
                    };
                    assert_eq!(
                        out[1][k] as i64, want,
                        "{dtype} largest={largest}: ({a}, {x}) against ({b}, {y})"
                    );
                }
            }
        }
    }
}
