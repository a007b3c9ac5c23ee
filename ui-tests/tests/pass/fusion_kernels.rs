//! Elementwise chains, broadcasts, casts, scalar parameters and `#[kernel]`s
//! fuse into one kernel per group; the CPU closure computes the same numbers
//! as an f64 reference.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    /// GELU (tanh form), written per element.
    #[kernel]
    pub fn gelu(x: f32) -> f32 {
        0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
    }

    #[kernel]
    fn leaky(x: f32, slope: f32) -> f32 {
        if x > 0.0 { x } else { x * slope }
    }

    pub fn chain(x: &Tensor<Cpu, f32, [4, 6]>) -> Tensor<Cpu, f32, [4, 6]> {
        sin(x) * 2.0 + 5.0
    }

    pub fn mixed(a: &Tensor<Cpu, f16, [4, 1]>, b: &Tensor<Cpu, f32, [1, 6]>, s: f32) -> Tensor<Cpu, f16, [4, 6]> {
        (leaky(a.cast::<f32>() + b, 0.1) * s).cast::<f16>()
    }

    pub fn activation(h: &Tensor<Cpu, f32, [3, 5]>, bias: &Tensor<Cpu, f32, [5]>) -> Tensor<Cpu, f32, [3, 5]> {
        gelu(h + bias) - exp(neg(abs(h))) / 2.0
    }

    /// The built-in GELU (a method, since the kernel above takes the name),
    /// with SiLU and sigmoid, accurate far into the negative range.
    pub fn builtin(x: &Tensor<Cpu, f32, [9]>) -> Tensor<Cpu, f32, [9]> {
        x.gelu() + silu(x) * sigmoid(x)
    }

    pub fn ints(x: &Tensor<Cpu, i32, [8]>, y: &Tensor<Cpu, i32, [8]>) -> Tensor<Cpu, i32, [8]> {
        relu(x) * 3 - y / 2 + maximum(x, y)
    }
}

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978846 * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![4, 6]>::randn(51)?;
    let want: Vec<f64> = f64s(&x).iter().map(|v| v.sin() * 2.0 + 5.0).collect();
    assert_close("chain", &f64s(&chain(&x)?), &want, 1e-6);

    let a = Tensor::<Cpu, f32, shape![4, 1]>::randn(52)?.cast::<f16>()?;
    let b = Tensor::<Cpu, f32, shape![1, 6]>::randn(53)?;
    let got = f64s(&mixed(&a, &b, 3.0)?);
    let (av, bv) = (f64s(&a), f64s(&b));
    let want: Vec<f64> = (0..24)
        .map(|i| {
            let v = av[i / 6] + bv[i % 6];
            (if v > 0.0 { v } else { v * 0.1 }) * 3.0
        })
        .collect();
    assert_close("mixed f16", &got, &want, 2e-3);

    let h = Tensor::<Cpu, f32, shape![3, 5]>::randn(54)?;
    let bias = Tensor::<Cpu, f32, shape![5]>::randn(55)?;
    let (hv, bv) = (f64s(&h), f64s(&bias));
    let want: Vec<f64> = (0..15)
        .map(|i| gelu_ref(hv[i] + bv[i % 5]) - (-hv[i].abs()).exp() / 2.0)
        .collect();
    assert_close("activation", &f64s(&activation(&h, &bias)?), &want, 1e-5);
    assert!((gelu(1.5) as f64 - gelu_ref(1.5)).abs() < 1e-6);

    let xs = Tensor::<Cpu, f32, shape![9]>::from_vec(vec![
        -30.0, -12.0, -5.0, -1.0, -0.1, 0.0, 0.5, 3.0, 20.0,
    ])?;
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let want: Vec<f64> = f64s(&xs)
        .iter()
        .map(|&v| {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            v * sig(2.0 * u) + v * sig(v) * sig(v)
        })
        .collect();
    let got = f64s(&builtin(&xs)?);
    for (g, w) in got.iter().zip(&want) {
        // Relative to the value itself: tiny negative results stay accurate.
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1e-30), "{g} vs {w}");
    }

    let xi = Tensor::<Cpu, i32, shape![8]>::from_vec(vec![-7, -3, 0, 1, 5, 9, -11, 4])?;
    let yi = Tensor::<Cpu, i32, shape![8]>::from_vec(vec![3, -4, 8, -9, 2, 7, 5, -1])?;
    let want: Vec<i32> = xi
        .to_vec()?
        .iter()
        .zip(yi.to_vec()?)
        .map(|(&x, y)| x.max(0) * 3 - y / 2 + x.max(y))
        .collect();
    assert_eq!(ints(&xi, &yi)?.to_vec()?, want);
    Ok(())
}
