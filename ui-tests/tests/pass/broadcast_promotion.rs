//! The broadcasts of `fail/broadcast_promotion.rs` written correctly, and
//! the broadcasts that stay legal: outer products with every 1 written
//! (as rotary embeddings do), one side growing (a bias, a scalar).
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn mse<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> (Tensor<Cpu, f32, []>, Tensor<Cpu, f32, []>) {
        let d = pred - target.unsqueeze(1);
        let e = pred.squeeze(1) - target;
        ((d * d).mean(), (e * e).mean())
    }

    pub fn masked<const B: usize>(mask: &Tensor<Cpu, f32, [B, 1, 8, 8]>, img: &Tensor<Cpu, f32, [B, 8, 8]>) -> Tensor<Cpu, f32, [B, 1, 8, 8]> {
        mask * img.unsqueeze(1)
    }

    /// Every pairwise difference, meant: the new dim is written.
    pub fn pairwise<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N, N]> {
        pred - target.unsqueeze(0)
    }

    pub fn rotary<const B: usize, const T: usize>(freq: &Tensor<Cpu, f32, [1, 4, 1]>, pos: &Tensor<Cpu, f32, [B, 1, T]>) -> Tensor<Cpu, f32, [B, 4, T]> {
        freq * pos
    }

    pub fn dense<const B: usize>(x: &Tensor<Cpu, f32, [B, 3]>, bias: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [B, 3]> {
        x + bias + 1.0
    }
}

#[test]
fn runs() -> Result<()> {
    let pred = Tensor::<Cpu, f32, shape![3, 1]>::from_vec(vec![1., 2., 4.])?;
    let target = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 1., 1.])?;
    let (a, b) = mse(&pred, &target)?;
    assert_close(
        "mse",
        &[a.item()? as f64, b.item()? as f64],
        &[10. / 3., 10. / 3.],
        1e-6,
    );
    let p = pairwise(&pred, &target)?;
    assert_close(
        "pairwise",
        &f64s(&p),
        &[0., 0., 0., 1., 1., 1., 3., 3., 3.],
        0.0,
    );

    let mask = Tensor::<Cpu, f32, shape![2, 1, 8, 8]>::randn(81)?;
    let img = Tensor::<Cpu, f32, shape![2, 8, 8]>::randn(82)?;
    let (mv, iv) = (f64s(&mask), f64s(&img));
    let want: Vec<f64> = mv.iter().zip(&iv).map(|(m, i)| m * i).collect();
    assert_close("masked", &f64s(&masked(&mask, &img)?), &want, 1e-6);

    let freq = Tensor::<Cpu, f32, shape![1, 4, 1]>::from_vec(vec![1., 2., 3., 4.])?;
    let pos = Tensor::<Cpu, f32, shape![2, 1, 3]>::from_vec(vec![0., 1., 2., 3., 4., 5.])?;
    let want: Vec<f64> = (0..24)
        .map(|n| ((n / 3 % 4) + 1) as f64 * ((n / 12) * 3 + n % 3) as f64)
        .collect();
    assert_close("rotary", &f64s(&rotary(&freq, &pos)?), &want, 0.0);

    let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros()?;
    let bias = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.])?;
    assert_close(
        "dense",
        &f64s(&dense(&x, &bias)?),
        &[2., 3., 4., 2., 3., 4.],
        0.0,
    );
    Ok(())
}
