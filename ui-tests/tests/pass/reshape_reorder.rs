//! The reshapes of `fail/reshape_reorder.rs` written correctly: dims are
//! moved with `transpose`/`permute` and only then merged or split; the
//! rare reshape that means to mix dims says so with `reshape_unordered`.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn merge_heads<const B: usize, const H: usize, const T: usize, const DH: usize>(
        y: &Tensor<Cpu, f32, [B, H, T, DH]>,
    ) -> Tensor<Cpu, f32, [B, T, H * DH]> {
        y.transpose(1, 2).reshape([B, T, H * DH])
    }

    pub fn split_heads<const B: usize, const H: usize, const T: usize, const DH: usize>(
        x: &Tensor<Cpu, f32, [B, T, H * DH]>,
    ) -> Tensor<Cpu, f32, [B, H, T, DH]> {
        x.view([B, T, H, DH]).transpose(1, 2)
    }

    pub fn heads_last<const H: usize, const B: usize, const L: usize, const D: usize>(
        x: &Tensor<Cpu, f32, [H, B, L, D]>,
    ) -> Tensor<Cpu, f32, [B, L, H * D]> {
        x.permute([1, 2, 0, 3]).reshape([B, L, -1])
    }

    pub fn literal_heads<const B: usize, const T: usize>(
        y: &Tensor<Cpu, f32, [B, 12, T, 64]>,
    ) -> Tensor<Cpu, f32, [B, T, 768]> {
        y.transpose(1, 2).reshape([B, T, 768])
    }

    /// Regrouping the flat elements on purpose.
    pub fn rechunk<const B: usize, const H: usize, const T: usize, const DH: usize>(
        y: &Tensor<Cpu, f32, [B, H, T, DH]>,
    ) -> Tensor<Cpu, f32, [B, T, H * DH]> {
        y.reshape_unordered([B, T, H * DH])
    }
}

#[test]
fn runs() -> Result<()> {
    const B: usize = 2;
    const H: usize = 3;
    const T: usize = 4;
    const DH: usize = 5;
    let y = Tensor::<Cpu, f32, shape![B, H, T, DH]>::randn(91)?;
    let v = f64s(&y);
    let at = |b: usize, h: usize, t: usize, d: usize| v[((b * H + h) * T + t) * DH + d];
    // out[b, t, h * DH + d] = y[b, h, t, d]
    let merged = merge_heads(&y)?;
    let want: Vec<f64> = (0..B * T * H * DH)
        .map(|n| {
            let (b, t, c) = (n / (T * H * DH), n / (H * DH) % T, n % (H * DH));
            at(b, c / DH, t, c % DH)
        })
        .collect();
    assert_close("merge_heads", &f64s(&merged), &want, 0.0);
    // Splitting the merged heads gives `y` back.
    let back = split_heads::<B, H, T, DH>(&merged)?;
    assert_close("split_heads", &f64s(&back), &v, 0.0);
    // The flat order is kept where mixing is meant.
    assert_close("rechunk", &f64s(&rechunk(&y)?), &v, 0.0);

    let x = Tensor::<Cpu, f32, shape![H, B, T, DH]>::randn(92)?;
    let xv = f64s(&x);
    let got = heads_last(&x)?;
    let want: Vec<f64> = (0..B * T * H * DH)
        .map(|n| {
            let (b, l, c) = (n / (T * H * DH), n / (H * DH) % T, n % (H * DH));
            xv[((c / DH * B + b) * T + l) * DH + c % DH]
        })
        .collect();
    assert_close("heads_last", &f64s(&got), &want, 0.0);

    let z = Tensor::<Cpu, f32, shape![1, 12, 2, 64]>::randn(93)?;
    let zv = f64s(&z);
    let got = literal_heads(&z)?;
    let want: Vec<f64> = (0..2 * 768)
        .map(|n| {
            let (t, c) = (n / 768, n % 768);
            zv[((c / 64) * 2 + t) * 64 + c % 64]
        })
        .collect();
    assert_close("literal_heads", &f64s(&got), &want, 0.0);
    Ok(())
}
