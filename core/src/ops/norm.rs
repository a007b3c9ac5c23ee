//! Normalisations over the last dim: `layer_norm` and `rms_norm`, as
//! PyTorch's `F.layer_norm(x, (N,), weight, bias, eps)` and
//! `F.rms_norm(x, (N,), weight, eps)` with `N` the input's last dim.
//!
//! Each row of the last dim is normalised on its own: its statistics
//! (the mean and the biased variance for `layer_norm`, the mean of the
//! squares for `rms_norm`) are taken over the row, then every element is
//! scaled by `1 / sqrt(statistic + eps)` and by `weight` (and shifted by
//! `bias`). The back-ends accumulate in f32 for f16/bf16 (f64 for f64);
//! [`NormOp::eval_f64`] is the reference they are tested against.

use crate::DTypeKind;

op_enum! {
    /// A normalisation over the last dim (see the [module docs](self)).
    ///
    /// ```
    /// use tensorfn_core::ops::NormOp;
    /// assert_eq!(NormOp::LayerNorm.name(), "layer_norm");
    /// assert_eq!(NormOp::from_name("rms_norm"), Some(NormOp::RmsNorm));
    /// ```
    NormOp {
        /// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim
        /// (the biased variance, as PyTorch's `layer_norm`).
        LayerNorm => layer_norm,
        /// `x / sqrt(mean(x^2) + eps) * weight` over the last dim
        /// (PyTorch's `rms_norm`).
        RmsNorm => rms_norm,
    }
}

impl NormOp {
    /// True when the op takes a `bias` after its `weight`.
    ///
    /// ```
    /// use tensorfn_core::ops::NormOp;
    /// assert!(NormOp::LayerNorm.has_bias());
    /// assert!(!NormOp::RmsNorm.has_bias());
    /// ```
    pub const fn has_bias(self) -> bool {
        matches!(self, NormOp::LayerNorm)
    }

    /// The `eps` used when the call gives none: `1e-5` for `layer_norm`
    /// (PyTorch's default), and for `rms_norm` the machine epsilon of the
    /// precision the statistics are computed in, as PyTorch's `rms_norm`
    /// with `eps=None` takes it (`f32`'s for f32, f16 and bf16, `f64`'s
    /// for f64).
    ///
    /// ```
    /// use tensorfn_core::{ops::NormOp, DTypeKind};
    /// assert_eq!(NormOp::LayerNorm.default_eps(DTypeKind::F16), 1e-5);
    /// assert_eq!(NormOp::RmsNorm.default_eps(DTypeKind::BF16), f32::EPSILON as f64);
    /// assert_eq!(NormOp::RmsNorm.default_eps(DTypeKind::F64), f64::EPSILON);
    /// ```
    pub const fn default_eps(self, dtype: DTypeKind) -> f64 {
        match (self, dtype) {
            (NormOp::LayerNorm, _) => 1e-5,
            (NormOp::RmsNorm, DTypeKind::F64) => f64::EPSILON,
            (NormOp::RmsNorm, _) => f32::EPSILON as f64,
        }
    }

    /// The op on one row in `f64`, the reference every back-end is tested
    /// against: `weight` (and `bias`, used by `layer_norm` only) have one
    /// value per element of the row. An empty row gives an empty result;
    /// a NaN in a row makes the whole row NaN, and so does an infinity
    /// for `layer_norm`; `rms_norm` of a row with an infinity gives NaN
    /// there and 0 elsewhere (`x / inf`), as in PyTorch.
    ///
    /// ```
    /// use tensorfn_core::ops::NormOp;
    /// let y = NormOp::LayerNorm.eval_f64(&[1.0, 3.0], &[1.0, 2.0], &[0.0, 1.0], 0.0);
    /// assert_eq!(y, vec![-1.0, 3.0]);
    /// let y = NormOp::RmsNorm.eval_f64(&[3.0, 4.0], &[1.0, 1.0], &[], 0.0);
    /// let r = 12.5f64.sqrt();
    /// assert_eq!(y, vec![3.0 / r, 4.0 / r]);
    /// ```
    pub fn eval_f64(self, row: &[f64], weight: &[f64], bias: &[f64], eps: f64) -> Vec<f64> {
        let n = row.len() as f64;
        match self {
            NormOp::LayerNorm => {
                let mean = row.iter().sum::<f64>() / n;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let inv = 1.0 / (var + eps).sqrt();
                row.iter()
                    .zip(weight)
                    .zip(bias)
                    .map(|((v, w), b)| (v - mean) * inv * w + b)
                    .collect()
            }
            NormOp::RmsNorm => {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / n;
                let inv = 1.0 / (ms + eps).sqrt();
                row.iter().zip(weight).map(|(v, w)| v * inv * w).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_norm_has_zero_mean_and_unit_variance() {
        let row = [1e6 + 1.0, 1e6 + 2.0, 1e6 + 3.0, 1e6 + 4.0];
        let y = NormOp::LayerNorm.eval_f64(&row, &[1.0; 4], &[0.0; 4], 0.0);
        let mean: f64 = y.iter().sum::<f64>() / 4.0;
        let var: f64 = y.iter().map(|v| v * v).sum::<f64>() / 4.0;
        assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-12, "{y:?}");
    }

    #[test]
    fn non_finite_values_make_the_row_nan() {
        for op in NormOp::ALL {
            for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let y = op.eval_f64(&[1.0, bad, 2.0], &[1.0; 3], &[0.0; 3], 1e-5);
                if op == NormOp::RmsNorm && !bad.is_nan() {
                    assert!(y[1].is_nan() && y[0] == 0.0 && y[2] == 0.0, "{y:?}");
                } else {
                    assert!(y.iter().all(|v| v.is_nan()), "{} {bad}: {y:?}", op.name());
                }
            }
            assert!(op.eval_f64(&[], &[], &[], 1e-5).is_empty());
        }
    }
}
