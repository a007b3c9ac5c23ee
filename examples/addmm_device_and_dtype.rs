//! "Why is a CPU tensor causing an addmm GPU error?": the same three
//! programs in tensorfn.
//!
//! In PyTorch, an `addmm` whose operands live on different devices or have
//! different dtypes fails when it runs on the GPU (`cudaErrorInvalidValue`,
//! "Expected all tensors to be on the same device", "expected scalar type
//! Half but found Float"). Here the device and the dtype are part of each
//! tensor's type, so those programs do not compile; the lines that would
//! fail are kept below as comments, with the compiler's message.
//!
//! ```sh
//! cargo run --release --example addmm_device_and_dtype
//! ```

mod common;

use common::{check_close, matmul_f64, on_best_device, seed, to_f64, AnyResult};
use tensorfn::prelude::*;
use tensorfn::Device;

/// Example 1: one operand left on the CPU.
///
/// PyTorch: `torch.addmm(gpu_result, gpu_matrix, cpu_tensor)` fails on the
/// GPU. The fix is the same (move it), but here forgetting it is a compile
/// error.
fn operand_on_the_wrong_device<D: Device>(seed: u64) -> AnyResult {
    println!("1. every operand of addmm on the same device");
    let cpu_tensor = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed)?;
    let matrix = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed + 1)?.to_device::<D>()?;
    let bias = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed + 2)?.to_device::<D>()?;

    // let out = Tensor::addmm(&bias, &matrix, &cpu_tensor)?;
    //   error[E0308]: mismatched types: expected `&Tensor<Cuda, f32, (Const<10>, ...)>`,
    //                 found `&Tensor<Cpu, f32, (Const<10>, ...)>`
    // The same line in a `tensor_fn!`:
    //   error: `b` is on Cpu but `addmm` runs on Cuda (a: Cuda):
    //          move it with `b.to_device::<Cuda>()`
    //
    // The article's first call, `addmm(gpu_result, gpu_matrix, gpu_vector)`,
    // is a shape error too: mat2 must be a matrix, not a [10] vector.
    // let out = Tensor::addmm(&bias, &matrix, &vector)?;
    //   error[E0308]: mismatched types: expected a tuple with 2 elements,
    //                 found one with 1 element
    let on_device = cpu_tensor.to_device::<D>()?;
    let out = Tensor::addmm(&bias, &matrix, &on_device)?;

    let mut want = matmul_f64(&to_f64(&matrix)?, &to_f64(&cpu_tensor)?, 10, 10, 10);
    for (w, b) in want.iter_mut().zip(to_f64(&bias)?) {
        *w += b;
    }
    check_close("bias + matrix @ moved", &to_f64(&out)?, &want, 1e-5, 1e-5)
}

/// Example 2: an `f32` operand among `f16` ones.
///
/// PyTorch: `.cuda()` keeps the dtype, and the `addmm` fails at run time
/// ("expected scalar type Half but found Float"). tensorfn never converts
/// silently: the cast is written, where it is wanted.
fn operand_of_the_wrong_dtype<D: Device>(seed: u64) -> AnyResult {
    println!("2. every operand of addmm of the same dtype");
    let matrix = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed)?
        .cast::<f16>()?
        .to_device::<D>()?;
    let bias = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed + 1)?
        .cast::<f16>()?
        .to_device::<D>()?;
    let cpu_f32 = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed + 2)?;
    let moved = cpu_f32.to_device::<D>()?;

    // let out = Tensor::addmm(&bias, &matrix, &moved)?;
    //   error[E0308]: mismatched types: expected `&Tensor<Cuda, f16, (Const<10>, ...)>`,
    //                 found `&Tensor<Cuda, f32, (Const<10>, ...)>`
    // The same line in a `tensor_fn!`:
    //   error: `b` is f32 but `addmm` here is f16: cast with `b.cast::<f16>()`
    let half = moved.cast::<f16>()?;
    let out = Tensor::addmm(&bias, &matrix, &half)?;

    // f16 keeps ~3 decimal digits: compare with the f64 product of the
    // f16 values, at f16 tolerance.
    let mut want = matmul_f64(&to_f64(&matrix)?, &to_f64(&half)?, 10, 10, 10);
    for (w, b) in want.iter_mut().zip(to_f64(&bias)?) {
        *w += b;
    }
    check_close("f16 addmm", &to_f64(&out)?, &want, 1e-2, 2e-2)
}

/// Example 3: a preallocated output, reused.
///
/// The article's failing call is a shape error again (a [10] vector as
/// mat2), which tensorfn rejects at compile time; preallocating the result
/// is about speed. `addmm_into` writes into an existing tensor, so a loop
/// over batches reuses one output, and a [10] vector is a bias (broadcast
/// over the rows, as in PyTorch) or the right operand of `matmul`.
fn preallocated_output<D: Device>(seed: u64) -> AnyResult {
    println!("3. addmm into a preallocated output, and matrix @ vector");
    let matrix = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed)?.to_device::<D>()?;
    let vector = Tensor::<Cpu, f32, shape![10]>::randn(seed + 1)?.to_device::<D>()?;
    let (m, v) = (to_f64(&matrix)?, to_f64(&vector)?);

    let mut result = Tensor::<D, f32, shape![10, 10]>::zeros()?;
    for step in 0..3 {
        let batch = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed + 2 + step)?.to_device::<D>()?;
        // result = vector + batch @ matrix, written into `result`.
        Tensor::addmm_into(&vector, &batch, &matrix, &mut result)?;
        let want: Vec<f64> = matmul_f64(&to_f64(&batch)?, &m, 10, 10, 10)
            .iter()
            .enumerate()
            .map(|(i, x)| x + v[i % 10])
            .collect();
        check_close(
            &format!("batch {step}: vector + batch @ matrix"),
            &to_f64(&result)?,
            &want,
            1e-5,
            1e-5,
        )?;
    }

    // PyTorch's beta and alpha, with a transposed view (no copy) as mat1:
    // 0.5 * vector + 2 * matrix.t() @ matrix.
    let scaled = Tensor::addmm_scaled(&vector, &matrix.t()?, &matrix, 0.5, 2.0)?;
    let want: Vec<f64> = matmul_f64(&transpose(&m, 10, 10), &m, 10, 10, 10)
        .iter()
        .enumerate()
        .map(|(i, x)| 0.5 * v[i % 10] + 2.0 * x)
        .collect();
    check_close("addmm_scaled", &to_f64(&scaled)?, &want, 1e-4, 1e-4)?;

    // What the article's vector call computes: matrix @ vector, plus a bias.
    let mv = matrix.matmul(&vector)?.add(&vector)?;
    let want: Vec<f64> = matmul_f64(&m, &v, 10, 10, 1)
        .iter()
        .zip(&v)
        .map(|(a, b)| a + b)
        .collect();
    check_close("matrix @ vector + vector", &to_f64(&mv)?, &want, 1e-4, 1e-5)
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|i| a[(i % rows) * cols + i / rows])
        .collect()
}

/// The three examples on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    operand_on_the_wrong_device::<D>(seed)?;
    operand_of_the_wrong_dtype::<D>(seed + 10)?;
    preallocated_output::<D>(seed + 20)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
