//! Undeclared dims are bound at run time from the first parameter that
//! names them; a mismatch is an `Err` naming the dim and both parameters.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn scores(x: &Tensor<Cpu, f32, [B, 4]>, w: &Tensor<Cpu, f32, [4, C]>, bias: &Tensor<Cpu, f32, [C]>, mask: &Tensor<Cpu, f32, [B, C]>) -> Tensor<Cpu, f32, [B, C]> {
        (addmm(bias, x, w) * mask).softmax(-1)
    }

    pub fn pairs(x: &Tensor<Cpu, f32, [N]>, y: &Tensor<Cpu, f32, [2 * N]>) -> Tensor<Cpu, f32, [2, N]> {
        y.reshape([2, N]) + x
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![_, 4]>::randn_dims(41, &[3, 4])?;
    let w = Tensor::<Cpu, f32, shape![4, _]>::randn_dims(42, &[4, 5])?;
    let b = Tensor::<Cpu, f32, shape![_]>::randn_dims(43, &[5])?;
    let m = Tensor::<Cpu, f32, shape![_, _]>::rand_dims(44, &[3, 5])?;
    let s = scores(&x, &w, &b, &m)?;
    assert_eq!(s.shape(), &[3, 5]);
    let z = matmul_ref(&f64s(&x), &f64s(&w), 3, 4, 5);
    let (bv, mv) = (f64s(&b), f64s(&m));
    let mut want = vec![0.0; 15];
    for i in 0..3 {
        let row: Vec<f64> = (0..5)
            .map(|j| (z[i * 5 + j] + bv[j]) * mv[i * 5 + j])
            .collect();
        let mx = row.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for j in 0..5 {
            want[i * 5 + j] = (row[j] - mx).exp() / sum;
        }
    }
    assert_close("softmax", &f64s(&s), &want, 1e-5);

    // `B` is 3 in `x` but the mask has 4 rows.
    let bad = Tensor::<Cpu, f32, shape![_, _]>::rand_dims(45, &[4, 5])?;
    let e = scores(&x, &w, &b, &bad).unwrap_err().to_string();
    assert!(
        e.contains("dim 0 of `mask` to be B = 3 (B is dim 0 of `x`)") && e.contains("found 4"),
        "{e}"
    );

    let p = Tensor::<Cpu, f32, shape![_]>::randn_dims(46, &[3])?;
    let q = Tensor::<Cpu, f32, shape![_]>::randn_dims(47, &[6])?;
    let r = pairs(&p, &q)?;
    let (pv, qv) = (f64s(&p), f64s(&q));
    let want: Vec<f64> = (0..6).map(|i| qv[i] + pv[i % 3]).collect();
    assert_close("pairs", &f64s(&r), &want, 1e-6);
    let q7 = Tensor::<Cpu, f32, shape![_]>::randn_dims(48, &[7])?;
    let e = pairs(&p, &q7).unwrap_err().to_string();
    assert!(
        e.contains("dim 0 of `y` to be 2 * N = 6 (N is dim 0 of `x`)"),
        "{e}"
    );
    Ok(())
}
