//! The normalisation kernels (`layer_norm`, `rms_norm`) on the host,
//! operation for operation as their PTX entries compute them (see
//! [`norm`](crate::norm)): the same split of a row among threads, the same
//! order of the sums, every operation rounded once in the accumulation
//! precision.

use super::HostData;
use crate::error::{Error, Result};
use crate::norm::{self, NormEntry, WARPS};
use crate::ops::NormOp;
use tensorfn_core::DTypeKind;

/// Arithmetic in the accumulation precision (f32, or f64 for f64), on
/// values held as `f64`.
#[derive(Clone, Copy)]
struct Acc {
    wide: bool,
}

impl Acc {
    fn r(self, v: f64) -> f64 {
        if self.wide {
            v
        } else {
            v as f32 as f64
        }
    }
    fn add(self, a: f64, b: f64) -> f64 {
        self.r(a + b)
    }
    fn sub(self, a: f64, b: f64) -> f64 {
        self.r(a - b)
    }
    fn mul(self, a: f64, b: f64) -> f64 {
        if self.wide {
            a * b
        } else {
            (a as f32 * b as f32) as f64
        }
    }
    fn div(self, a: f64, b: f64) -> f64 {
        if self.wide {
            a / b
        } else {
            (a as f32 / b as f32) as f64
        }
    }
    fn fma(self, a: f64, b: f64, c: f64) -> f64 {
        if self.wide {
            a.mul_add(b, c)
        } else {
            (a as f32).mul_add(b as f32, c as f32) as f64
        }
    }
    fn sqrt(self, a: f64) -> f64 {
        if self.wide {
            a.sqrt()
        } else {
            (a as f32).sqrt() as f64
        }
    }
}

/// `op` of `rows` contiguous rows of `cols` elements of `input`, with
/// `weight` (and for `layer_norm`, `bias`) of `cols` elements, as the
/// entry [`norm::entry`]`(dtype, cols, aligned)` computes it on a GPU.
///
/// ```
/// use tensorfn_kernels::interp::{self, HostData};
/// use tensorfn_kernels::{DTypeKind, NormOp};
/// let x = HostData::F32(vec![1.0, 3.0]);
/// let w = HostData::F32(vec![1.0, 1.0]);
/// let b = HostData::F32(vec![0.0, 0.0]);
/// let y = interp::norm(NormOp::LayerNorm, &x, &w, Some(&b), 1, 2, 0.0, true)?;
/// assert_eq!(y, HostData::F32(vec![-1.0, 1.0]));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn norm(
    op: NormOp,
    input: &HostData,
    weight: &HostData,
    bias: Option<&HostData>,
    rows: usize,
    cols: usize,
    eps: f64,
    aligned: bool,
) -> Result<HostData> {
    let dtype = input.dtype();
    if !dtype.is_float() {
        return Err(Error::Unsupported {
            kernel: "norm",
            message: format!("{} input; normalisations take float dtypes", dtype.name()),
        });
    }
    let buffer = |operand: &str, d: &HostData, n: usize| -> Result<()> {
        if d.dtype() != dtype || d.len() != n {
            return Err(Error::Buffer {
                operand: operand.into(),
                message: format!(
                    "holds {} {} elements, {n} {} needed",
                    d.len(),
                    d.dtype().name(),
                    dtype.name()
                ),
            });
        }
        Ok(())
    };
    let total = rows.checked_mul(cols).ok_or_else(|| Error::Buffer {
        operand: "in".into(),
        message: format!("{rows} rows of {cols} overflow usize"),
    })?;
    buffer("in", input, total)?;
    buffer("weight", weight, cols)?;
    if op.has_bias() {
        let b = bias.ok_or_else(|| Error::Buffer {
            operand: "bias".into(),
            message: "missing; layer_norm takes a bias".into(),
        })?;
        buffer("bias", b, cols)?;
    }
    let acc = Acc {
        wide: dtype == DTypeKind::F64,
    };
    let entry = norm::entry(dtype, cols, aligned);
    let w: Vec<f64> = weight.to_f64_vec();
    let b: Vec<f64> = match (op.has_bias(), bias) {
        (true, Some(b)) => b.to_f64_vec(),
        _ => vec![0.0; cols],
    };
    let x_all = input.to_f64_vec();
    let n = acc.r(cols as f64);
    let eps = acc.r(eps);
    let mut out = vec![0.0; total];
    for r in 0..rows {
        let x = &x_all[r * cols..(r + 1) * cols];
        let o = &mut out[r * cols..(r + 1) * cols];
        row(op, acc, entry, dtype, x, &w, &b, n, eps, o);
    }
    Ok(HostData::from_f64(dtype, &out))
}

/// The columns thread `t` visits, in order (`None` for a slot past the
/// row, which holds zeros).
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

/// Sums the threads' values as the kernels do: a butterfly within each
/// warp, then the warps' sums in order.
fn combine(acc: Acc, mut s: Vec<f64>) -> f64 {
    for off in [16usize, 8, 4, 2, 1] {
        let prev = s.clone();
        for (i, v) in s.iter_mut().enumerate() {
            *v = acc.add(prev[i], prev[i ^ off]);
        }
    }
    if s.len() == 32 {
        return s[0];
    }
    let mut total = s[0];
    for w in 1..WARPS {
        total = acc.add(total, s[32 * w]);
    }
    total
}

#[allow(clippy::too_many_arguments)]
fn row(
    op: NormOp,
    acc: Acc,
    entry: NormEntry,
    dtype: DTypeKind,
    x: &[f64],
    w: &[f64],
    b: &[f64],
    n: f64,
    eps: f64,
    out: &mut [f64],
) {
    let cols = x.len();
    let plan: Vec<Vec<Option<usize>>> = (0..entry.threads())
        .map(|t| thread_cols(entry, dtype, cols, t))
        .collect();
    let value = |c: Option<usize>| c.map_or(0.0, |c| x[c]);
    let (shift, stat) = match op {
        NormOp::LayerNorm => {
            let sums = plan
                .iter()
                .map(|cs| cs.iter().fold(0.0, |s, &c| acc.add(s, value(c))))
                .collect();
            let mean = acc.div(combine(acc, sums), n);
            let squares = plan
                .iter()
                .map(|cs| {
                    cs.iter().fold(0.0, |s, &c| {
                        // Slots past the row hold 0, not `0 - mean`.
                        let d = match c {
                            Some(c) => acc.sub(x[c], mean),
                            None => 0.0,
                        };
                        acc.fma(d, d, s)
                    })
                })
                .collect();
            (Some(mean), acc.div(combine(acc, squares), n))
        }
        NormOp::RmsNorm => {
            let squares = plan
                .iter()
                .map(|cs| {
                    cs.iter().fold(0.0, |s, &c| {
                        let v = value(c);
                        acc.fma(v, v, s)
                    })
                })
                .collect();
            (None, acc.div(combine(acc, squares), n))
        }
    };
    let inv = acc.div(1.0, acc.sqrt(acc.add(stat, eps)));
    for (c, o) in out.iter_mut().enumerate() {
        let d = match shift {
            Some(m) => acc.sub(x[c], m),
            None => x[c],
        };
        let y = acc.mul(d, inv);
        *o = match op {
            NormOp::LayerNorm => acc.fma(y, w[c], b[c]),
            NormOp::RmsNorm => acc.mul(y, w[c]),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64, shift: f64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0 + shift
            })
            .collect()
    }

    /// Every entry's order of operations stays within a few roundings of
    /// the f64 reference, a large mean included.
    #[test]
    fn every_entry_follows_the_reference() {
        let floats = [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ];
        for op in NormOp::ALL {
            for dtype in floats {
                let tol = match dtype {
                    DTypeKind::F64 => 1e-12,
                    DTypeKind::F32 => 1e-4,
                    DTypeKind::F16 => 2e-3,
                    _ => 1.6e-2,
                };
                for cols in [1, 8, 31, 64, 768, 1000, 4096, 8192, 9000] {
                    for aligned in [true, false] {
                        for shift in [0.0, 300.0] {
                            let rows = 3;
                            let x = HostData::from_f64(dtype, &values(rows * cols, 1, shift));
                            let w = HostData::from_f64(dtype, &values(cols, 2, 0.0));
                            let b = HostData::from_f64(dtype, &values(cols, 3, 0.0));
                            let y = norm(op, &x, &w, Some(&b), rows, cols, 1e-5, aligned)
                                .unwrap()
                                .to_f64_vec();
                            let (xf, wf, bf) = (x.to_f64_vec(), w.to_f64_vec(), b.to_f64_vec());
                            for r in 0..rows {
                                let want =
                                    op.eval_f64(&xf[r * cols..(r + 1) * cols], &wf, &bf, 1e-5);
                                for (c, (g, e)) in
                                    y[r * cols..(r + 1) * cols].iter().zip(&want).enumerate()
                                {
                                    // The output's scale: |w| * (|x - m| / s) + |b| <= ~2 * 2 * sqrt(cols).
                                    let scale = (wf[c].abs() * 4.0 + bf[c].abs()).max(1.0);
                                    assert!(
                                        (g - e).abs() <= tol * scale,
                                        "{} {dtype} cols {cols} aligned {aligned} shift {shift}: {g} vs {e}",
                                        op.name()
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nan_and_infinity_spread_as_in_pytorch() {
        let x = HostData::F32(vec![1.0, f32::INFINITY, 2.0, 3.0]);
        let w = HostData::F32(vec![1.0; 4]);
        let b = HostData::F32(vec![0.0; 4]);
        let y = norm(NormOp::LayerNorm, &x, &w, Some(&b), 1, 4, 1e-5, true).unwrap();
        assert!(y.to_f64_vec().iter().all(|v| v.is_nan()));
        let y = norm(NormOp::RmsNorm, &x, &w, None, 1, 4, 1e-5, true)
            .unwrap()
            .to_f64_vec();
        assert!(y[1].is_nan() && y[0] == 0.0 && y[3] == 0.0, "{y:?}");
        assert!(norm(NormOp::RmsNorm, &x, &w, None, 1, 3, 1e-5, true).is_err());
    }
}
