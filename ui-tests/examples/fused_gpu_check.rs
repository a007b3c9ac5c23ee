//! Runs the same `tensor_fn!` functions on the CPU and on cuda:0 and
//! compares the results: the fused PTX kernels against their CPU closures,
//! contiguous and strided inputs, every float width and integers.
//! Without a GPU it says so and exits successfully.
//!
//! `cargo run -p tensorfn-ui-tests --example fused_gpu_check`

use tensorfn::prelude::*;
use tensorfn::{DType, Device, Shape};

macro_rules! functions {
    ($module:ident, $dev:ident) => {
        mod $module {
            use tensorfn::prelude::*;

            tensor_fn! {
                #[kernel]
                pub fn leaky(x: f32, slope: f32) -> f32 {
                    if x > 0.0 { x } else { x * slope }
                }

                pub fn chain(x: &Tensor<$dev, f32, [64, 33]>) -> Tensor<$dev, f32, [64, 33]> {
                    sin(x) * 2.0 + 5.0
                }

                pub fn mixed(a: &Tensor<$dev, f16, [40, 1]>, b: &Tensor<$dev, f32, [1, 70]>, s: f32) -> Tensor<$dev, f16, [40, 70]> {
                    (leaky(a.cast::<f32>() + b, 0.1) * s).cast::<f16>() + a
                }

                pub fn half_math(x: &Tensor<$dev, bf16, [1000]>, y: &Tensor<$dev, f16, [1000]>) -> (Tensor<$dev, bf16, [1000]>, Tensor<$dev, f16, [1000]>) {
                    (gelu(x) * 0.5 + tanh(x), sigmoid(y) - silu(y) / 3.0)
                }

                pub fn ints(x: &Tensor<$dev, i32, [257]>, y: &Tensor<$dev, i32, [257]>) -> Tensor<$dev, i32, [257]> {
                    relu(x) * 3 - y / 2 + maximum(x, y)
                }

                pub fn update(y: &Tensor<$dev, f32, [31, 17]>, x: &Tensor<$dev, i32, [31, 17]>, v: f32) -> Tensor<$dev, f32, [31, 17]> {
                    addcmul(y, x.cast::<f32>(), x.cast::<f32>(), v)
                }

                pub fn strided(x: &Tensor<$dev, f64, [48, 80]>) -> Tensor<$dev, f64, [80, 48]> {
                    exp(x.t()) * x.t().narrow(1, 0, 48) - log(abs(x.t()) + 1.0)
                }

                pub fn dense(x: &Tensor<$dev, f32, [B, 96]>, w: &Tensor<$dev, f32, [96, 40]>, b: &Tensor<$dev, f32, [40]>) -> Tensor<$dev, f32, [B, 40]> {
                    relu(addmm(b, x, w)).softmax(-1)
                }
            }
        }
    };
}

functions!(cpu, Cpu);
functions!(gpu, Cuda);

fn f64s<D: Device, T: DType, S: Shape>(t: &Tensor<D, T, S>) -> Vec<f64> {
    t.to_vec()
        .expect("readable")
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

fn compare<T: DType, S: Shape>(
    what: &str,
    c: &Tensor<Cpu, T, S>,
    g: &Tensor<Cuda, T, S>,
    tol: f64,
) -> f64 {
    let (a, b) = (f64s(c), f64s(&g.to_cpu().expect("copied back")));
    assert_eq!(a.len(), b.len());
    let mut worst: f64 = 0.0;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let err = (x - y).abs() / 1.0f64.max(x.abs());
        assert!(err <= tol, "{what}[{i}]: cpu {x}, gpu {y}");
        worst = worst.max(err);
    }
    println!(
        "{what:>10}: {} elements, worst relative difference {worst:.3e}",
        a.len()
    );
    worst
}

fn up<T: DType, S: Shape>(x: &Tensor<Cpu, T, S>) -> Tensor<Cuda, T, S> {
    x.to_device::<Cuda>().expect("on the GPU")
}

fn main() -> Result<()> {
    let probe = Tensor::<Cpu, f32, shape![1]>::ones()?;
    if let Err(e) = probe.to_device::<Cuda>() {
        println!("no GPU: {e}");
        return Ok(());
    }

    let x = Tensor::<Cpu, f32, shape![64, 33]>::randn(1)?;
    compare("chain", &cpu::chain(&x)?, &gpu::chain(&up(&x))?, 1e-6);

    let a = Tensor::<Cpu, f32, shape![40, 1]>::randn(2)?.cast::<f16>()?;
    let b = Tensor::<Cpu, f32, shape![1, 70]>::randn(3)?;
    compare(
        "mixed",
        &cpu::mixed(&a, &b, 1.5)?,
        &gpu::mixed(&up(&a), &up(&b), 1.5)?,
        1e-3,
    );

    let h = Tensor::<Cpu, f32, shape![1000]>::randn(4)?;
    let (hb, hf) = (h.cast::<bf16>()?, h.cast::<f16>()?);
    let (c1, c2) = cpu::half_math(&hb, &hf)?;
    let (g1, g2) = gpu::half_math(&up(&hb), &up(&hf))?;
    compare("bf16 math", &c1, &g1, 8e-3);
    compare("f16 math", &c2, &g2, 1e-3);

    let xi =
        Tensor::<Cpu, i32, shape![257]>::from_vec((0..257).map(|i| (i * 37 % 101) - 50).collect())?;
    let yi =
        Tensor::<Cpu, i32, shape![257]>::from_vec((0..257).map(|i| (i * 53 % 97) - 48).collect())?;
    compare(
        "ints",
        &cpu::ints(&xi, &yi)?,
        &gpu::ints(&up(&xi), &up(&yi))?,
        0.0,
    );

    let y = Tensor::<Cpu, f32, shape![31, 17]>::randn(5)?;
    let xi = Tensor::<Cpu, i32, shape![31, 17]>::from_vec((0..527).map(|i| i % 13 - 6).collect())?;
    compare(
        "addcmul",
        &cpu::update(&y, &xi, 0.25)?,
        &gpu::update(&up(&y), &up(&xi), 0.25)?,
        1e-6,
    );

    let s = Tensor::<Cpu, f64, shape![48, 80]>::randn(6)?;
    compare(
        "strided",
        &cpu::strided(&s)?,
        &gpu::strided(&up(&s))?,
        1e-12,
    );

    let xd = Tensor::<Cpu, f32, shape![_, 96]>::randn_dims(7, &[300, 96])?;
    let w = Tensor::<Cpu, f32, shape![96, 40]>::randn(8)?;
    let bias = Tensor::<Cpu, f32, shape![40]>::randn(9)?;
    compare(
        "dense",
        &cpu::dense(&xd, &w, &bias)?,
        &gpu::dense(&up(&xd), &up(&w), &up(&bias))?,
        1e-4,
    );

    println!("all GPU results match the CPU");
    Ok(())
}
