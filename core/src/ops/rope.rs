//! Rotary position embedding, `rope(input, cos, sin)`, in the Hugging
//! Face Llama convention: `input * cos + rotate_half(input) * sin`, where
//! `rotate_half(x)` is `cat([-x2, x1], -1)` of the halves `x1`, `x2` of
//! the last dim. `input` is `[.., T, D]` (`D` even) and `cos`, `sin` are
//! `[T, D]`, broadcast over the leading dims (the heads and the batch).

/// One row of `rope`: `row`, `cos` and `sin` of one position, each of
/// `D` (even) elements; the reference every back-end is tested against.
///
/// ```
/// use tensorfn_core::ops::rope::rope_f64;
/// // A quarter turn of the pair (1, 0): (0, 1).
/// let y = rope_f64(&[1.0, 0.0], &[0.0, 0.0], &[1.0, 1.0]);
/// assert_eq!(y, vec![0.0, 1.0]);
/// ```
pub fn rope_f64(row: &[f64], cos: &[f64], sin: &[f64]) -> Vec<f64> {
    let half = row.len() / 2;
    (0..row.len())
        .map(|i| {
            let rotated = if i < half {
                -row[i + half]
            } else {
                row[i - half]
            };
            row[i] * cos[i] + rotated * sin[i]
        })
        .collect()
}
