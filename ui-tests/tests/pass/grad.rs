//! The fixed counterparts of `fail/grad_*.rs`: gradients through
//! differentiable ops only, of parameters the loss depends on, of a 0-d
//! loss; a comparison used as a mask beside a differentiable path is fine.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn masked(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        where_(x.gt(0.0), x * 2.0, x * 0.5).sum()
    }

    #[grad(w, b)]
    fn linear(x: &Tensor<Cpu, f32, [4, 3]>, w: &Tensor<Cpu, f32, [3, 2]>, b: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, []> {
        addmm(b, x, w).sum()
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![4, 3]>::from_vec(vec![
        1., -2., 3., -4., 5., -6., 7., -8., 9., -1., 2., -3.,
    ])?;
    let (v, g) = masked::value_and_grad(&x)?;
    assert_eq!(v.to_vec()?, masked(&x)?.to_vec()?);
    let want: Vec<f32> = x
        .to_vec()?
        .iter()
        .map(|&v| if v > 0.0 { 2.0 } else { 0.5 })
        .collect();
    assert_eq!(g.to_vec()?, want);
    let w = Tensor::<Cpu, f32, shape![3, 2]>::randn(1)?;
    let b = Tensor::<Cpu, f32, shape![2]>::randn(2)?;
    let (_, (gw, gb)) = linear::value_and_grad(&x, &w, &b)?;
    assert_eq!(gb.to_vec()?, vec![4.0, 4.0]);
    // d/dw of sum(x w) is the column sums of x, repeated.
    let xv = x.to_vec()?;
    let col: Vec<f32> = (0..3)
        .map(|k| (0..4).map(|i| xv[i * 3 + k]).sum())
        .collect();
    assert_eq!(
        gw.to_vec()?,
        vec![col[0], col[0], col[1], col[1], col[2], col[2]]
    );
    Ok(())
}
