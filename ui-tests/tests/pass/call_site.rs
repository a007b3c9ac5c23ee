//! The calls of `fail/call_site.rs` written correctly: each argument is
//! brought to the parameter's type first (`.cast`, `.reshape`,
//! `.to_device`, `.into_shape`), the mistakes that rustc reports there.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn logits(x: &Tensor<Cpu, f32, [B, 784]>) -> Tensor<Cpu, f32, [B]> {
        x.sum(1)
    }

    pub fn on_gpu0(x: &Tensor<Cuda, f32, [8]>) -> Tensor<Cuda, f32, [8]> {
        x * 2.0
    }

    pub fn rows(x: &Tensor<Cpu, f64, [M, H]>) -> Tensor<Cpu, f64, [M]> {
        x.sum(1)
    }

    pub fn scale<D: Device, T: Float, const B: usize>(x: &Tensor<D, T, [B, 3]>) -> Tensor<D, T, [B]> {
        twice(x).mean(1)
    }

    fn twice<D: Device, T: Float, const B: usize>(x: &Tensor<D, T, [B, 3]>) -> Tensor<D, T, [B, 3]> {
        x + x
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f64, shape![_, 784]>::randn_dims(1, &[2, 784])?;
    let y = logits(&x.cast::<f32>()?)?;
    let want: Vec<f64> = f64s(&x)
        .chunks(784)
        .map(|r| r.iter().map(|&v| v as f32 as f64).sum())
        .collect();
    assert_close("logits", &f64s(&y), &want, 1e-4);

    let flat = Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[2 * 784])?;
    let y = logits(&flat.reshape_dims::<shape![_, 784]>(&[2, 784])?)?;
    assert_eq!(y.dims(), [2]);

    if let Some(g) = on_gpu(&Tensor::<Cpu, f32, shape![8]>::ones()?) {
        let y = on_gpu0(&g)?;
        assert_eq!(y.to_vec()?, vec![2.0; 8]);
    }

    let s = Tensor::<Cpu, f64, shape![5, 2]>::ones()?;
    let y = rows(&s.into_shape::<shape![_, _]>()?)?;
    assert_eq!(y.to_vec()?, vec![2.0; 5]);

    let d = Tensor::<Cpu, f32, shape![_, _]>::zeros_dims(&[2, 784])?;
    let y = logits(&d.into_shape::<shape![_, 784]>()?)?;
    assert_eq!(y.dims(), [2]);

    // Parameters are `&impl TensorArg<..>`: a reference to a reference
    // fits, an argument built in place and a conversion whose target the
    // call decides are inferred, and so are the device, dtype and const
    // generics of a generic function.
    let r = &x.cast::<f32>()?;
    assert_eq!(logits(&r)?.dims(), [2]);
    assert_eq!(logits(&Tensor::zeros_dims(&[3, 784])?)?.dims(), [3]);
    assert_eq!(logits(&x.cast()?)?.dims(), [2]);
    let y = scale(&Tensor::<Cpu, f64, shape![4, 3]>::ones()?)?;
    assert_eq!(y.to_vec()?, vec![2.0; 4]);
    let y = scale::<Cpu, f32, 2>(&Tensor::ones()?)?;
    assert_eq!(y.to_vec()?, vec![2.0; 2]);
    Ok(())
}
