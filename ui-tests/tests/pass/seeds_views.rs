//! The cuBLAS seeds fixed: a view keeps the element count, `matmul` for a
//! matrix product, `dot` of two flattened tensors of equal length.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn flat(x: &Tensor<Cpu, f32, [1000, 1000]>) -> Tensor<Cpu, f32, [1000000]> {
        x.view([1000000])
    }

    pub fn product(a: &Tensor<Cpu, f32, [100, 200]>, b: &Tensor<Cpu, f32, [200, 300]>) -> Tensor<Cpu, f32, [100, 300]> {
        matmul(a, b)
    }

    pub fn inner(a: &Tensor<Cpu, f64, [100, 200]>, b: &Tensor<Cpu, f64, [200, 100]>) -> Tensor<Cpu, f64, []> {
        dot(a.view(-1), b.t().reshape([-1]))
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![1000, 1000]>::rand(31)?;
    let f = flat(&x)?;
    assert_eq!(f.shape(), &[1_000_000]);
    assert_eq!(f.to_vec()?, x.to_vec()?);

    let a = Tensor::<Cpu, f32, shape![100, 200]>::randn(32)?;
    let b = Tensor::<Cpu, f32, shape![200, 300]>::randn(33)?;
    let got = f64s(&product(&a, &b)?);
    assert_close(
        "matmul",
        &got,
        &matmul_ref(&f64s(&a), &f64s(&b), 100, 200, 300),
        1e-4,
    );

    let a = Tensor::<Cpu, f64, shape![100, 200]>::randn(34)?;
    let b = Tensor::<Cpu, f64, shape![200, 100]>::randn(35)?;
    let (av, bv) = (f64s(&a), f64s(&b));
    let mut want = 0.0;
    for i in 0..100 {
        for j in 0..200 {
            want += av[i * 200 + j] * bv[j * 100 + i];
        }
    }
    assert_close("dot", &[inner(&a, &b)?.item()?], &[want], 1e-10);
    Ok(())
}
