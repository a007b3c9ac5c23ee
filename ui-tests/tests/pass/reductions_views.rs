//! Reductions, softmax and view operations against f64 references.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn stats(x: &Tensor<Cpu, f64, [3, 4, 5]>) -> (Tensor<Cpu, f64, [3, 5]>, Tensor<Cpu, f64, [4, 5]>, Tensor<Cpu, f64, [3, 4]>, Tensor<Cpu, i64, [3, 5]>, Tensor<Cpu, f64, []>) {
        (x.sum(1), x.mean(0), x.max(-1), x.argmin(1), x.sum())
    }

    pub fn shuffle(x: &Tensor<Cpu, f32, [2, 3, 4]>) -> (Tensor<Cpu, f32, [4, 2, 3]>, Tensor<Cpu, f32, [4, 3, 2]>, Tensor<Cpu, f32, [3, 2, 4]>) {
        (x.permute([2, 0, 1]), x.transpose(0, 2), x.transpose(0, 1).log_softmax(2))
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f64, shape![3, 4, 5]>::randn(71)?;
    let v = f64s(&x);
    let at = |i: usize, j: usize, k: usize| v[(i * 4 + j) * 5 + k];
    let (s1, m0, mx, am, total) = stats(&x)?;
    let want: Vec<f64> = (0..15)
        .map(|n| (0..4).map(|j| at(n / 5, j, n % 5)).sum())
        .collect();
    assert_close("sum(1)", &f64s(&s1), &want, 1e-12);
    let want: Vec<f64> = (0..20)
        .map(|n| (0..3).map(|i| at(i, n / 5, n % 5)).sum::<f64>() / 3.0)
        .collect();
    assert_close("mean(0)", &f64s(&m0), &want, 1e-12);
    let want: Vec<f64> = (0..12)
        .map(|n| (0..5).map(|k| at(n / 4, n % 4, k)).fold(f64::MIN, f64::max))
        .collect();
    assert_close("max(-1)", &f64s(&mx), &want, 0.0);
    let want: Vec<i64> = (0..15)
        .map(|n| {
            (0..4)
                .min_by(|&a, &b| {
                    at(n / 5, a, n % 5)
                        .partial_cmp(&at(n / 5, b, n % 5))
                        .unwrap()
                })
                .unwrap() as i64
        })
        .collect();
    assert_eq!(am.to_vec()?, want);
    assert_close("sum()", &[total.item()?], &[v.iter().sum()], 1e-12);

    let y = Tensor::<Cpu, f32, shape![2, 3, 4]>::randn(72)?;
    let yv = f64s(&y);
    let yat = |i: usize, j: usize, k: usize| yv[(i * 3 + j) * 4 + k];
    let (p, t, ls) = shuffle(&y)?;
    let want: Vec<f64> = (0..24).map(|n| yat(n / 3 % 2, n % 3, n / 6)).collect();
    assert_close("permute", &f64s(&p), &want, 0.0);
    let want: Vec<f64> = (0..24).map(|n| yat(n % 2, n / 2 % 3, n / 6)).collect();
    assert_close("transpose", &f64s(&t), &want, 0.0);
    let mut want = vec![0.0; 24];
    for j in 0..3 {
        for i in 0..2 {
            let row: Vec<f64> = (0..4).map(|k| yat(i, j, k)).collect();
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            for k in 0..4 {
                want[(j * 2 + i) * 4 + k] = row[k] - lse;
            }
        }
    }
    assert_close("log_softmax", &f64s(&ls), &want, 1e-5);
    Ok(())
}
