//! The design's dense layer on the CPU, checked against a reference loop.
use tensorfn::prelude::*;

tensor_fn! {
    /// One dense layer.
    pub fn dense<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 4]>,
        w: &Tensor<Cpu, f32, [4, 3]>,
        b: &Tensor<Cpu, f32, [3]>,
    ) -> Tensor<Cpu, f32, [B, 3]> {
        relu(addmm(b, x, w))
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 4]>::randn(1)?;
    let w = Tensor::<Cpu, f32, shape![4, 3]>::randn(2)?;
    let b = Tensor::<Cpu, f32, shape![3]>::randn(3)?;
    let y = dense(&x, &w, &b)?;
    let (xv, wv, bv, yv) = (x.to_vec()?, w.to_vec()?, b.to_vec()?, y.to_vec()?);
    for i in 0..2 {
        for j in 0..3 {
            let mut acc = bv[j] as f64;
            for k in 0..4 {
                acc += xv[i * 4 + k] as f64 * wv[k * 3 + j] as f64;
            }
            let want = acc.max(0.0);
            assert!((yv[i * 3 + j] as f64 - want).abs() < 1e-5, "{i},{j}");
        }
    }
    // `relu(addmm(..))` is one `addmm_act` call: only the result lives.
    assert_eq!(dense::peak_bytes::<2>(), 2 * 3 * 4);
    Ok(())
}
