// Row kernels (`#[kernel]` over `Row<T>`): the RMS norm on the GPU
// (compiled, with its PTX) and on the CPU (run), a `[N]` weight broadcast
// to every row, statistics that depend on earlier ones, a per-row result,
// and generic functions calling them.
use tensorfn::prelude::*;

tensor_fn! {
    #[kernel]
    pub fn my_rms_norm(x: Row<bf16>, w: Row<bf16>, eps: f32) -> Row<bf16> {
        let ms = mean(x * x);
        x * rsqrt(ms + eps) * w
    }

    #[kernel]
    fn my_layer_norm(x: Row<f32>, w: Row<f32>, b: Row<f32>, eps: f32) -> Row<f32> {
        let mean = x.mean();
        let centred = x - mean;
        let var = mean(centred * centred);
        centred / sqrt(var + eps) * w + b
    }

    /// One value per row: the largest deviation from the row's mean.
    #[kernel]
    fn spread(x: Row<f64>) -> f64 {
        let m = mean(x);
        max(abs(x - m))
    }

    pub fn f<const B: usize>(x: &Tensor<Cuda, bf16, [B, 768]>, w: &Tensor<Cuda, bf16, [768]>) -> Tensor<Cuda, bf16, [B, 768]> {
        my_rms_norm(x, w, 1e-6) + 1.0
    }

    pub fn f_cpu<const B: usize>(x: &Tensor<Cpu, bf16, [B, 768]>, w: &Tensor<Cpu, bf16, [768]>) -> Tensor<Cpu, bf16, [B, 768]> {
        my_rms_norm(x, w, 1e-6) + 1.0
    }

    pub fn ln<D: Device>(x: &Tensor<D, f32, [B, T, N]>, w: &Tensor<D, f32, [N]>, b: &Tensor<D, f32, [N]>) -> Tensor<D, f32, [B, T, N]> {
        my_layer_norm(x, w, b, 1e-5)
    }

    pub fn spreads(x: &Tensor<Cpu, f64, [R, N]>) -> Tensor<Cpu, f64, [R]> {
        spread(x)
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, bf16, shape![2, 768]>::randn(1)?;
    let w = Tensor::<Cpu, bf16, shape![768]>::randn(2)?;
    let y = f_cpu(&x, &w)?;
    let want = x.rms_norm(&w, Some(1e-6))?;
    for (a, b) in y.to_vec()?.iter().zip(want.to_vec()?) {
        assert!((a.to_f32() - (b.to_f32() + 1.0)).abs() < 0.05, "{a} {b}");
    }

    let x = Tensor::<Cpu, f32, shape![_, _, _]>::randn_dims(3, &[2, 3, 10])?;
    let w = Tensor::<Cpu, f32, shape![_]>::randn_dims(4, &[10])?;
    let b = Tensor::<Cpu, f32, shape![_]>::randn_dims(5, &[10])?;
    let y = ln(&x, &w, &b)?;
    let want = x.layer_norm(&w, &b, 1e-5)?;
    for (a, b) in y.to_vec()?.iter().zip(want.to_vec()?) {
        assert!((a - b).abs() < 1e-5, "{a} {b}");
    }

    let x = Tensor::<Cpu, f64, shape![_, _]>::from_vec_dims(
        vec![1.0, 2.0, 6.0, -1.0, -1.0, -1.0],
        &[2, 3],
    )?;
    assert_eq!(spreads(&x)?.to_vec()?, vec![3.0, 0.0]);
    Ok(())
}
