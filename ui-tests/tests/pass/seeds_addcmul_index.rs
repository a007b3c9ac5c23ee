//! The crash-on-a-line seeds fixed: the int tensor cast before `addcmul`,
//! indices inside the tensor (a run-time index past the end is an `Err`).
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn update(y: &Tensor<Cpu, f32, [5, 5]>, x: &Tensor<Cpu, i32, [5, 5]>) -> Tensor<Cpu, f32, [5, 5]> {
        let xf = x.cast::<f32>();
        addcmul(y, xf, xf, 0.5)
    }

    pub fn last_row(x: &Tensor<Cpu, f32, [10, 10]>) -> (Tensor<Cpu, f32, [10]>, Tensor<Cpu, f32, []>) {
        (x[9] * 2.0, x[-1, -1])
    }

    pub fn row(x: &Tensor<Cpu, f32, [10, 10]>, i: usize) -> Tensor<Cpu, f32, [10]> {
        x[i] * 2.0
    }

    pub fn window(x: &Tensor<Cpu, f32, [10, 10]>, start: usize, n: usize) -> Tensor<Cpu, f32, [10, n]> {
        x.narrow(1, start, n)
    }
}

#[test]
fn runs() -> Result<()> {
    let y = Tensor::<Cpu, f32, shape![5, 5]>::randn(21)?;
    let x =
        Tensor::<Cpu, i32, shape![5, 5]>::from_vec((0..25).map(|i| (i * 7 % 11) - 5).collect())?;
    let got = f64s(&update(&y, &x)?);
    let want: Vec<f64> = f64s(&y)
        .iter()
        .zip(f64s(&x))
        .map(|(a, b)| a + 0.5 * b * b)
        .collect();
    assert_close("addcmul", &got, &want, 1e-6);

    let m = Tensor::<Cpu, f32, shape![10, 10]>::randn(22)?;
    let mv = f64s(&m);
    let (r, corner) = last_row(&m)?;
    let want: Vec<f64> = mv[90..].iter().map(|v| v * 2.0).collect();
    assert_close("x[9] * 2", &f64s(&r), &want, 0.0);
    assert_eq!(corner.item()? as f64, mv[99]);

    let r3 = row(&m, 3)?;
    let want: Vec<f64> = mv[30..40].iter().map(|v| v * 2.0).collect();
    assert_close("x[i] * 2", &f64s(&r3), &want, 0.0);
    let err = row(&m, 10).unwrap_err();
    assert!(err.to_string().contains("10"), "{err}");

    let w = window(&m, 2, 3)?;
    assert_eq!(w.shape(), &[10, 3]);
    let want: Vec<f64> = (0..10)
        .flat_map(|i| (2..5).map(move |j| (i, j)))
        .map(|(i, j)| mv[i * 10 + j])
        .collect();
    assert_close("narrow", &f64s(&w), &want, 0.0);
    assert!(window(&m, 8, 3).is_err());
    Ok(())
}
