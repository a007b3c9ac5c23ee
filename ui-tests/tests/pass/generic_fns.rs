//! One function for every device and float dtype: `tensor_fn!` checks it
//! once with `D` and `T` as symbols and builds its fused kernels for each
//! dtype `T: Float` admits; the call picks the body of its dtype.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn mlp<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        w: &Tensor<D, T, [4, 3]>,
        b: &Tensor<D, T, [3]>,
    ) -> Tensor<D, T, [B, 3]> {
        let h = relu(addmm(b, x, w)) * 0.5 + 1.0;
        h.softmax(1)
    }

    // Generic callers, a concrete caller, casts to and from `T`, a dtype
    // parameter for every dtype, and moves to the device parameter.
    pub fn both<D: Device, T: Float>(
        x: &Tensor<D, T, [2, 4]>,
        w: &Tensor<D, T, [4, 3]>,
        b: &Tensor<D, T, [3]>,
    ) -> (Tensor<D, T, [2, 3]>, Tensor<D, f32, [2, 3]>) {
        let y = mlp(x, w, b);
        (y, y.cast::<f32>() * 2.0)
    }
    pub fn on_bf16(x: &Tensor<Cpu, bf16, [2, 4]>, w: &Tensor<Cpu, bf16, [4, 3]>, b: &Tensor<Cpu, bf16, [3]>)
        -> Tensor<Cpu, bf16, [2, 3]> {
        mlp(x, w, b)
    }
    pub fn from_f32<D: Device, T: Float>(x: &Tensor<Cpu, f32, [3]>) -> Tensor<D, T, [3]> {
        x.cast::<T>().to_device::<D>()
    }
    pub fn rows<D: Device, T: DType>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [1, 3]> {
        x.unsqueeze(0)
    }
}

fn reference(x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let mut h = matmul_ref(x, w, 2, 4, 3);
    for (i, v) in h.iter_mut().enumerate() {
        *v = (*v + b[i % 3]).max(0.0) * 0.5 + 1.0;
    }
    for row in h.chunks_mut(3) {
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        row.iter_mut().for_each(|v| *v = (*v - m).exp() / s);
    }
    h
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 4]>::randn(1)?;
    let w = Tensor::<Cpu, f32, shape![4, 3]>::randn(2)?;
    let b = Tensor::<Cpu, f32, shape![3]>::randn(3)?;
    let want = reference(&f64s(&x), &f64s(&w), &f64s(&b));

    assert_close("f32", &f64s(&mlp(&x, &w, &b)?), &want, 1e-6);
    let (x64, w64, b64) = (x.cast::<f64>()?, w.cast::<f64>()?, b.cast::<f64>()?);
    let (y, y32) = both(&x64, &w64, &b64)?;
    assert_close("f64", &f64s(&y), &want, 1e-6);
    let twice: Vec<f64> = want.iter().map(|v| v * 2.0).collect();
    assert_close("f64 as f32", &f64s(&y32), &twice, 1e-6);
    let (xh, wh, bh) = (x.cast::<f16>()?, w.cast::<f16>()?, b.cast::<f16>()?);
    let want_h = reference(&f64s(&xh), &f64s(&wh), &f64s(&bh));
    assert_close("f16", &f64s(&mlp(&xh, &wh, &bh)?), &want_h, 1e-2);
    let (xb, wb, bb) = (x.cast::<bf16>()?, w.cast::<bf16>()?, b.cast::<bf16>()?);
    let want_b = reference(&f64s(&xb), &f64s(&wb), &f64s(&bb));
    assert_close("bf16", &f64s(&on_bf16(&xb, &wb, &bb)?), &want_b, 2e-2);

    // Each instance has its own memory plan: f64 intermediates take twice
    // the bytes of f32 ones.
    assert_eq!(mlp::peak_bytes::<f64, 2>(), 2 * mlp::peak_bytes::<f32, 2>());
    assert!(mlp::peak_bytes::<f32, 2>() > 0);

    let v = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1.5, -2.0, 0.25])?;
    let h: Tensor<Cpu, f16, shape![3]> = from_f32(&v)?;
    assert_eq!(f64s(&h), vec![1.5, -2.0, 0.25]);
    let ids = Tensor::<Cpu, i64, shape![3]>::from_vec(vec![7, 8, 9])?;
    assert_eq!(rows(&ids)?.to_vec()?, vec![7, 8, 9]);
    let flags = Tensor::<Cpu, bool, shape![3]>::from_vec(vec![true, false, true])?;
    assert_eq!(rows(&flags)?.to_vec()?, vec![true, false, true]);

    // The same function on the GPU when there is one.
    if let (Some(xg), Some(wg), Some(bg)) = (on_gpu(&x), on_gpu(&w), on_gpu(&b)) {
        assert_close("cuda f32", &f64s(&mlp(&xg, &wg, &bg)?), &want, 1e-5);
        let y = mlp(&xg.cast::<bf16>()?, &wg.cast()?, &bg.cast()?)?;
        assert_close("cuda bf16", &f64s(&y), &want_b, 2e-2);
    }
    Ok(())
}
