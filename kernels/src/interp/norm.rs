//! The normalisation kernels (`layer_norm`, `rms_norm`) on the host: the
//! row programs [`norm_program`] writes, run as their PTX entries run
//! them ([`row_kernel`]).

use super::rowkernel::row_kernel;
use super::HostData;
use crate::error::{Error, Result};
use crate::ops::NormOp;
use crate::rowkernel::norm_program;
#[cfg(test)]
use tensorfn_core::DTypeKind;

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
    let prog = norm_program(op, dtype);
    let mut rows_in = vec![(input, cols), (weight, 0)];
    if let (true, Some(b)) = (op.has_bias(), bias) {
        rows_in.push((b, 0));
    }
    row_kernel(&prog, &rows_in, &[eps], rows, cols, aligned)
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
