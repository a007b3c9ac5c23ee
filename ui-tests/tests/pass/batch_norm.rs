// `batch_norm` in a `tensor_fn!`: a convolution-free block normalised with
// the batch statistics in training (the running statistics updated beside
// it by `BatchNorm::update_running_stats`) and, over `[N, C, L]` without
// weight and bias, with the running ones in inference; its gradients
// through `#[grad]`.
use tensorfn::params::BatchNorm;
use tensorfn::prelude::*;

tensor_fn! {
    fn block(
        x: &Tensor<Cpu, f32, [N, 3, 2, 2]>,
        m: &Tensor<Cpu, f32, [3]>,
        v: &Tensor<Cpu, f32, [3]>,
        w: &Tensor<Cpu, f32, [3]>,
        b: &Tensor<Cpu, f32, [3]>,
    ) -> Tensor<Cpu, f32, [N, 3, 2, 2]> {
        relu(batch_norm(x, m, v, w, b, training = true))
    }

    fn block_eval(
        x: &Tensor<Cpu, f32, [N, 3, L]>,
        m: &Tensor<Cpu, f32, [3]>,
        v: &Tensor<Cpu, f32, [3]>,
    ) -> Tensor<Cpu, f32, [N, 3, L]> {
        batch_norm(x, m, v)
    }

    #[grad(w, b)]
    fn loss(
        x: &Tensor<Cpu, f32, [4, 3]>,
        m: &Tensor<Cpu, f32, [3]>,
        w: &Tensor<Cpu, f32, [3]>,
        b: &Tensor<Cpu, f32, [3]>,
    ) -> Tensor<Cpu, f32, []> {
        (batch_norm(x, m, m * 2.0, w, b, true, 0.1, 1e-5) * x).sum()
    }
}

#[test]
fn runs() -> Result<()> {
    let bn = BatchNorm::<Cpu, f32, Const<3>>::new()?;
    let x = Tensor::<Cpu, f32, shape![_, 3, 2, 2]>::from_vec_dims(
        (0..24).map(|i| i as f32).collect(),
        &[2, 3, 2, 2],
    )?;
    let s = bn.stats();
    let y = block(&x, &s.running_mean, &s.running_var, &bn.weight, &bn.bias)?;
    bn.update_running_stats(&x)?;
    assert_eq!(bn.stats().num_batches_tracked, 1);
    // The same as the module's own training forward.
    let fresh = BatchNorm::<Cpu, f32, Const<3>>::new()?;
    let want = fresh.forward(&x, true)?.relu()?.to_vec()?;
    for (a, b) in y.to_vec()?.iter().zip(&want) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    // Inference, without weight and bias, over [N, C, L].
    let s = bn.stats();
    let xl = Tensor::<Cpu, f32, shape![_, 3, _]>::from_vec_dims(
        (0..30).map(|i| i as f32 / 4.0).collect(),
        &[2, 3, 5],
    )?;
    let (rm, rv) = (s.running_mean.to_vec()?, s.running_var.to_vec()?);
    let got = block_eval(&xl, &s.running_mean, &s.running_var)?.to_vec()?;
    for (i, (a, x)) in got.iter().zip(xl.to_vec()?).enumerate() {
        let c = i / 5 % 3;
        let want = (x - rm[c]) / (rv[c] + 1e-5).sqrt();
        assert!((a - want).abs() < 1e-5, "{a} vs {want}");
    }
    let x2 =
        Tensor::<Cpu, f32, shape![4, 3]>::from_vec((0..12).map(|i| (i * i % 7) as f32).collect())?;
    let (_, (gw, gb)) = loss::value_and_grad(&x2, &s.running_mean, &bn.weight, &bn.bias)?;
    assert_eq!(gw.shape(), &[3]);
    assert_eq!(gb.shape(), &[3]);
    Ok(())
}
