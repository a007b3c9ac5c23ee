//! Row reductions and row ops, run by the interpreter in the GPU's order,
//! against f64 references: random row counts and lengths around the block
//! size (0, 1, 255, 256, 257, thousands), every dtype, NaN and infinities.

#[path = "../src/test_support.rs"]
mod test_support;
use tensorfn_kernels::builtin::SOFTMAX_REGISTER_COLS;
use tensorfn_kernels::interp::{reduce, row, HostData};
use tensorfn_kernels::{DTypeKind, ReduceOp, RowOp, RowShape};
use test_support::Rng;

const NUMERIC: [DTypeKind; 7] = [
    DTypeKind::F32,
    DTypeKind::F64,
    DTypeKind::F16,
    DTypeKind::BF16,
    DTypeKind::I32,
    DTypeKind::I64,
    DTypeKind::U8,
];
const COLS: [usize; 9] = [0, 1, 7, 255, 256, 257, 1000, 4099, 20_000];

fn data(rng: &mut Rng, dt: DTypeKind, n: usize, specials: bool) -> HostData {
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            if specials && rng.below(200) == 0 {
                [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][rng.below(3)]
            } else if dt.is_float() {
                (rng.unit() - 0.5) * 20.0
            } else if dt == DTypeKind::U8 {
                rng.below(256) as f64
            } else {
                rng.below(2_000_001) as f64 - 1_000_000.0
            }
        })
        .collect();
    let mut d = HostData::from_f64(dt, &vals);
    if dt == DTypeKind::I32 || dt == DTypeKind::I64 {
        // large values so that sums wrap
        if let HostData::I32(v) = &mut d {
            for x in v.iter_mut().step_by(3) {
                *x = x.wrapping_mul(2111);
            }
        }
        if let HostData::I64(v) = &mut d {
            for x in v.iter_mut().step_by(3) {
                *x = x.wrapping_mul(9_000_000_000_017);
            }
        }
    }
    d
}

fn as_i128(d: &HostData, i: usize) -> i128 {
    match d {
        HostData::I32(v) => v[i] as i128,
        HostData::I64(v) => v[i] as i128,
        HostData::U8(v) => v[i] as i128,
        _ => unreachable!(),
    }
}

fn wrap(v: i128, dt: DTypeKind) -> i128 {
    match dt {
        DTypeKind::I32 => v as i32 as i128,
        DTypeKind::I64 => v as i64 as i128,
        _ => v as u8 as i128,
    }
}

/// Half the smallest subnormal of the output dtype (absolute rounding
/// error of tiny results).
fn tiny(dt: DTypeKind) -> f64 {
    match dt {
        DTypeKind::F16 => 2f64.powi(-25),
        DTypeKind::F64 => 2f64.powi(-1075),
        _ => 2f64.powi(-150),
    }
}

/// Unit roundoff of the accumulator and of the output dtype.
fn eps(dt: DTypeKind) -> (f64, f64) {
    match dt {
        DTypeKind::F64 => (f64::EPSILON / 2.0, f64::EPSILON / 2.0),
        DTypeKind::F32 => (f32::EPSILON as f64 / 2.0, f32::EPSILON as f64 / 2.0),
        DTypeKind::F16 => (f32::EPSILON as f64 / 2.0, 2f64.powi(-11)),
        _ => (f32::EPSILON as f64 / 2.0, 2f64.powi(-8)),
    }
}

#[test]
fn reductions_match_f64_references() {
    let mut rng = Rng(0xabcdef);
    for dt in NUMERIC {
        for &cols in &COLS {
            let rows = 1 + rng.below(3);
            let x = data(&mut rng, dt, rows * cols, dt.is_float() && cols > 300);
            let xf = x.to_f64_vec();
            for op in [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::ArgMax,
                ReduceOp::ArgMin,
            ] {
                if op == ReduceOp::Mean && !dt.is_float() {
                    assert!(reduce(op, &x, rows, cols).is_err());
                    continue;
                }
                let got = reduce(op, &x, rows, cols).unwrap();
                assert_eq!(got.len(), rows);
                let got_f = got.to_f64_vec();
                for r in 0..rows {
                    let row = &xf[r * cols..(r + 1) * cols];
                    let what = format!("{} {dt} row {r} of {cols}", op.name());
                    let has_nan = row.iter().any(|v| v.is_nan());
                    match op {
                        ReduceOp::Sum | ReduceOp::Mean if !dt.is_float() => {
                            let s: i128 = (0..cols).map(|c| as_i128(&x, r * cols + c)).sum();
                            assert_eq!(as_i128(&got, r), wrap(s, dt), "{what}");
                        }
                        ReduceOp::Sum | ReduceOp::Mean => {
                            let s: f64 = row.iter().sum();
                            let abs: f64 = row.iter().map(|v| v.abs()).sum();
                            let (n, want, scale) = if op == ReduceOp::Mean {
                                (cols as f64, s / cols as f64, abs / cols as f64)
                            } else {
                                (1.0, s, abs)
                            };
                            let _ = n;
                            if want.is_nan() || has_nan {
                                assert!(got_f[r].is_nan() || cols == 0, "{what}");
                                continue;
                            }
                            if want.is_infinite() {
                                assert_eq!(got_f[r], want, "{what}");
                                continue;
                            }
                            let (acc, out) = eps(dt);
                            // pairwise-ish: per-thread runs of cols/256, then 13 levels
                            let depth = (cols / 256 + 14) as f64;
                            let tol = depth * acc * scale + out * want.abs() + tiny(dt);
                            assert!(
                                (got_f[r] - want).abs() <= tol,
                                "{what}: {} vs {want}",
                                got_f[r]
                            );
                        }
                        ReduceOp::Max | ReduceOp::Min => {
                            if cols == 0 {
                                continue;
                            }
                            if has_nan {
                                assert!(got_f[r].is_nan(), "{what}");
                                continue;
                            }
                            let want = if op == ReduceOp::Max {
                                row.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                            } else {
                                row.iter().cloned().fold(f64::INFINITY, f64::min)
                            };
                            assert_eq!(got_f[r], want, "{what}");
                        }
                        ReduceOp::ArgMax | ReduceOp::ArgMin => {
                            let got_i = got_f[r] as i64;
                            if cols == 0 {
                                assert_eq!(got_i, -1, "{what}");
                                continue;
                            }
                            let want = if has_nan {
                                row.iter().position(|v| v.is_nan()).unwrap()
                            } else {
                                let mut best = 0;
                                for c in 1..cols {
                                    let better = if op == ReduceOp::ArgMax {
                                        row[c] > row[best]
                                    } else {
                                        row[c] < row[best]
                                    };
                                    if better {
                                        best = c;
                                    }
                                }
                                best
                            };
                            assert_eq!(got_i, want as i64, "{what}");
                        }
                    }
                }
            }
        }
    }
}

/// Row lengths around the warp and the end of the softmax's register path.
const SOFTMAX_COLS: [usize; 8] = [
    1,
    31,
    32,
    33,
    4096,
    SOFTMAX_REGISTER_COLS - 1,
    SOFTMAX_REGISTER_COLS,
    SOFTMAX_REGISTER_COLS + 1,
];

/// Sum with Neumaier's compensation: error about one unit of the result.
fn neumaier_sum(xs: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    for x in xs {
        let t = sum + x;
        c += if sum.abs() >= x.abs() {
            (sum - t) + x
        } else {
            (x - t) + sum
        };
        sum = t;
    }
    sum + c
}

#[test]
fn softmax_matches_f64_reference() {
    let mut rng = Rng(0x5157);
    for dt in [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ] {
        for &cols in COLS.iter().chain(&SOFTMAX_COLS) {
            let rows = 1 + rng.below(3);
            let x = data(&mut rng, dt, rows * cols, false);
            let xf = x.to_f64_vec();
            for log in [false, true] {
                let op = if log {
                    RowOp::LogSoftmax
                } else {
                    RowOp::Softmax
                };
                let got = row(op, &x, rows, cols).unwrap().to_f64_vec();
                for r in 0..rows {
                    let row = &xf[r * cols..(r + 1) * cols];
                    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    // Compensated: a plain f64 sum of thousands of terms
                    // is less accurate than the f64 kernel under test.
                    let s = neumaier_sum(row.iter().map(|v| (v - m).exp()));
                    let (acc, out) = eps(dt);
                    for c in 0..cols {
                        let g = got[r * cols + c];
                        let what = format!("softmax(log={log}) {dt} [{r}, {c}] of {cols}");
                        if log {
                            let want = row[c] - m - s.ln();
                            let tol = 8.0 * acc * (want.abs() + m.abs() + 1.0) + out * want.abs();
                            assert!((g - want).abs() <= tol, "{what}: {g} vs {want}");
                        } else {
                            let want = (row[c] - m).exp() / s;
                            let depth = (cols / 256 + 14) as f64;
                            // Rounding `x - max` is amplified by exp:
                            // a relative error of |x - max| units.
                            let shift = (row[c] - m).abs();
                            let tol = (depth + 8.0 + shift) * acc * want + out * want + tiny(dt);
                            assert!((g - want).abs() <= tol, "{what}: {g} vs {want}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn softmax_edge_rows() {
    // a NaN poisons its row only; an all -inf row is NaN (0/0), like PyTorch
    let x = HostData::F32(vec![
        1.0,
        f32::NAN,
        2.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        0.0,
        f32::NEG_INFINITY,
        0.0,
    ]);
    let y = row(RowOp::Softmax, &x, 3, 3).unwrap().to_f64_vec();
    assert!(y[..6].iter().all(|v| v.is_nan()));
    assert_eq!(&y[6..], &[0.5, 0.0, 0.5]);
    // huge logits do not overflow
    let big = HostData::F32(vec![1e30, 1e30]);
    assert_eq!(
        row(RowOp::Softmax, &big, 1, 2).unwrap().to_f64_vec(),
        vec![0.5, 0.5]
    );
    // an empty row sums to +0 (PyTorch), its mean is NaN, its argmax -1
    let empty = HostData::F32(vec![]);
    let s = reduce(ReduceOp::Sum, &empty, 2, 0).unwrap().to_f64_vec();
    assert!(s.iter().all(|v| *v == 0.0 && v.is_sign_positive()));
    assert!(reduce(ReduceOp::Mean, &empty, 1, 0).unwrap().to_f64_vec()[0].is_nan());
    assert_eq!(
        reduce(ReduceOp::ArgMax, &empty, 1, 0).unwrap(),
        HostData::I64(vec![-1])
    );
    let negz = HostData::F16(vec![half::f16::NEG_ZERO; 3]);
    assert!(reduce(ReduceOp::Sum, &negz, 1, 3).unwrap().to_f64_vec()[0].is_sign_positive());
    // non-float dtypes and wrong sizes are errors
    for op in RowOp::ALL {
        assert!(row(op, &HostData::I32(vec![1]), 1, 1).is_err());
        assert!(row(op, &HostData::F32(vec![1.0]), 1, 2).is_err());
    }
    assert!(reduce(ReduceOp::Sum, &HostData::Bool(vec![true]), 1, 1).is_err());
}

/// Every row op of the table against its `f64` reference
/// ([`RowOp::eval_f64`]): random rows with NaN and infinities, empty rows,
/// and zeros of both signs, in every float dtype. The bound is loose (a
/// few units of the accumulator in the row's maximum and the result, and
/// one rounding to the output dtype); each op's own test above is tight.
/// Non-finite references must come out the same: the same infinity, or NaN.
#[test]
fn every_row_op_matches_its_reference() {
    let mut rng = Rng(0x20e5);
    for op in RowOp::ALL {
        for dt in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            for &cols in &[0, 1, 2, 7, 33, 257, 1000, SOFTMAX_REGISTER_COLS + 1] {
                let rows = 1 + rng.below(4);
                let mut x = data(&mut rng, dt, rows * cols, true).to_f64_vec();
                // Rows of specials: ±0, all -inf, -inf with one finite value.
                let specials: [&[f64]; 4] = [
                    &[0.0, -0.0],
                    &[-0.0, -0.0],
                    &[f64::NEG_INFINITY, f64::NEG_INFINITY],
                    &[f64::NEG_INFINITY, 1.5],
                ];
                if cols > 0 {
                    let s = specials[rng.below(specials.len())];
                    for (c, v) in x[..cols].iter_mut().enumerate() {
                        *v = s[c % s.len()];
                    }
                }
                let input = HostData::from_f64(dt, &x);
                let x = input.to_f64_vec();
                let got = row(op, &input, rows, cols).unwrap().to_f64_vec();
                let per_row = match op.shape() {
                    RowShape::Keep => cols,
                    RowShape::Reduce => 1,
                };
                assert_eq!(got.len(), rows * per_row, "{} {dt}", op.name());
                let (acc, out) = eps(dt);
                for r in 0..rows {
                    let lane = &x[r * cols..(r + 1) * cols];
                    let want = op.eval_f64(lane);
                    let m = lane
                        .iter()
                        .filter(|v| v.is_finite())
                        .fold(0.0f64, |a, v| a.max(v.abs()));
                    for (i, &w) in want.iter().enumerate() {
                        let g = got[r * per_row + i];
                        let what = format!("{} {dt} row {r} of {cols}: [{i}]", op.name());
                        if !w.is_finite() {
                            assert!(
                                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                                "{what}: {g} vs {w}"
                            );
                            continue;
                        }
                        let depth = (cols / 256 + 14) as f64;
                        let tol = (depth + 8.0 + 2.0 * m) * acc * (w.abs() + m + 1.0)
                            + out * w.abs()
                            + tiny(dt);
                        assert!((g - w).abs() <= tol, "{what}: {g} vs {w}");
                    }
                }
            }
        }
    }
}
