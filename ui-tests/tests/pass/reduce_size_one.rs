//! The programs of `fail/reduce_size_one.rs` written correctly: a single
//! logit is thresholded, softmax runs over the classes, and a size-1 dim
//! is dropped with `squeeze`.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn predict<const B: usize>(logits: &Tensor<Cpu, f32, [B, 1]>) -> Tensor<Cpu, bool, [B]> {
        logits.squeeze(1).gt(0.0)
    }

    pub fn probs(logits: &Tensor<Cpu, f32, [1, 10]>) -> Tensor<Cpu, f32, [1, 10]> {
        logits.softmax(1)
    }

    pub fn total<const N: usize>(x: &Tensor<Cpu, f32, [N, 1]>) -> Tensor<Cpu, f32, [N]> {
        x.squeeze(-1)
    }
}

#[test]
fn runs() -> Result<()> {
    let logits = Tensor::<Cpu, f32, shape![3, 1]>::from_vec(vec![-1., 2., 0.5])?;
    assert_eq!(predict(&logits)?.to_vec()?, vec![false, true, true]);
    assert_close("total", &f64s(&total(&logits)?), &[-1., 2., 0.5], 0.0);
    let l = Tensor::<Cpu, f32, shape![1, 10]>::randn(61)?;
    let p = f64s(&probs(&l)?);
    assert_close("sum of probs", &[p.iter().sum()], &[1.0], 1e-5);
    Ok(())
}
