// The catalogue's newer ops, written correctly: comparisons giving `bool`
// tensors, `where_`, `masked_fill`, `clamp`, parameters by default and by
// keyword, and the new math fused with its neighbours.
use tensorfn::prelude::*;

tensor_fn! {
    fn pick(x: &Tensor<Cpu, f32, [8]>, c: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [8]> {
        where_(c > 0.0, x, 0.0)
    }

    fn mixed(a: &Tensor<Cpu, f16, [8]>, b: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, bool, [8]> {
        a.cast::<f32>() < b
    }

    fn ints(x: &Tensor<Cpu, i32, [8]>) -> Tensor<Cpu, f32, [8]> {
        erf(x.cast::<f32>()) + sign(x).cast::<f32>()
    }

    fn grow(x: &Tensor<Cpu, f32, [3, 4]>, m: &Tensor<Cpu, bool, [4]>) -> Tensor<Cpu, f32, [3, 4]> {
        x.masked_fill(m, 0.0)
    }

    fn bounded(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
        x.clamp(min = 0.0) + elu(x) + leaky_relu(x, negative_slope = 0.2)
    }

    fn spelt(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
        x.softplus() * gelu_erf(x) - floor(x * 2.0)
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![8]>::from_vec(vec![-2., -1., 0., 1., 2., 3., 4., 5.])?;
    let c = Tensor::<Cpu, f32, shape![8]>::from_vec(vec![1., -1., 1., -1., 1., -1., 1., -1.])?;
    assert_eq!(
        pick(&x, &c)?.to_vec()?,
        vec![-2., 0., 0., 0., 2., 0., 4., 0.]
    );
    assert!(mixed(&x.cast::<f16>()?, &c)?.to_vec()?[0]);
    let i = Tensor::<Cpu, i32, shape![8]>::from_vec(vec![-3, 0, 2, 5, -1, 1, 0, 7])?;
    assert_eq!(ints(&i)?.to_vec()?[1], 0.0);
    let m = Tensor::<Cpu, bool, shape![4]>::from_vec(vec![true, false, false, true])?;
    let g = grow(&Tensor::<Cpu, f32, shape![3, 4]>::ones()?, &m)?.to_vec()?;
    assert_eq!(&g[..4], &[0., 1., 1., 0.]);
    let b = bounded(&Tensor::<Cpu, f32, shape![4]>::from_vec(vec![
        -1., 0., 1., 2.,
    ])?)?
    .to_vec()?;
    assert!((b[3] - (2. + 2. + 2.)).abs() < 1e-6);
    let s = spelt(&Tensor::<Cpu, f32, shape![4]>::from_vec(vec![
        -1., 0., 1., 2.,
    ])?)?
    .to_vec()?;
    assert_eq!(s[1], 0.0);
    Ok(())
}
