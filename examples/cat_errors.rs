//! "Why am I getting a CUDA illegal memory access error when using
//! torch.cat?": the article's three cases in tensorfn.
//!
//! A CPU tensor concatenated with a GPU tensor does not compile. A result
//! too large for the GPU is `Err(Error::OutOfMemory)`, after which smaller
//! tensors concatenate fine. And the article's "shape mismatch" is not one:
//! `cat` of [2, 3, 4] and [2, 5, 4] along dim 1 is valid and gives
//! [2, 8, 4] (as in PyTorch); what does not compile is a `cat` along a dim
//! where the other dims differ.
//!
//! ```sh
//! cargo run --release --example cat_errors
//! ```

mod common;

use common::{on_best_device, seed, to_f64, AnyResult};
use tensorfn::prelude::*;
use tensorfn::{Device, DeviceKind};

/// Example 1: a CPU tensor and a GPU tensor.
fn cat_across_devices<D: Device>(seed: u64) -> AnyResult {
    println!("1. cat of tensors on two devices");
    let cpu_tensor = Tensor::<Cpu, f32, shape![2, 3]>::randn(seed)?;
    let gpu_tensor = Tensor::<Cpu, f32, shape![2, 3]>::randn(seed + 1)?.to_device::<D>()?;

    // let result = gpu_tensor.cat::<0, shape![4, 3]>(&cpu_tensor)?;
    //   error[E0308]: mismatched types: expected `&Tensor<Cuda, f32, _>`,
    //                 found `&Tensor<Cpu, f32, (Const<2>, Const<3>)>`
    // The same line in a `tensor_fn!` (`cat([a, b], 0)`):
    //   error: `b` is on Cpu but `cat` runs on Cuda (a: Cuda): move it with
    //          `b.to_device::<Cuda>()`
    let moved = cpu_tensor.to_device::<D>()?;
    let result = moved.cat::<0, shape![4, 3]>(&gpu_tensor)?;
    println!("{result}");

    let mut want = to_f64(&cpu_tensor)?;
    want.extend(to_f64(&gpu_tensor)?);
    if to_f64(&result)? != want {
        return Err("cat along dim 0 is not the rows of both tensors".into());
    }
    Ok(())
}

/// Example 2: a result larger than the GPU.
///
/// The article's tensors (two [1000, 1000, 1000] f32, 4 GB each) fit on a
/// current GPU, so the inputs here are broadcast views of one row (no
/// memory) to [100000, 1000, 1000]: the [200000, 1000, 1000] result
/// (800 GB) is what fails. Nothing is half-written, and the device stays
/// usable: the article's smaller [500, 1000, 1000] tensors concatenate
/// next. On the CPU, host memory has no such limit to show: that part runs
/// on a GPU only.
fn cat_too_large<D: Device>(seed: u64) -> AnyResult {
    println!("2. cat whose result does not fit");
    if D::KIND == DeviceKind::Cpu {
        println!("  (shown on a GPU only)");
        return Ok(());
    }
    let row = Tensor::<Cpu, f32, shape![1, 1, 1000]>::randn(seed)?.to_device::<D>()?;
    let big = row.broadcast_to_dims::<shape![_, 1000, 1000]>(&[100_000, 1000, 1000])?;
    match big.cat::<0, shape![_, 1000, 1000]>(&big) {
        Err(Error::OutOfMemory {
            requested,
            free,
            total,
        }) => println!("  OutOfMemory: {requested} bytes requested, {free} free of {total}"),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("an 800 GB tensor fit on the GPU".into()),
    }

    let a = Tensor::<Cpu, f32, shape![500, 1000, 1000]>::randn(seed + 1)?.to_device::<D>()?;
    let b = Tensor::<Cpu, f32, shape![500, 1000, 1000]>::randn(seed + 2)?.to_device::<D>()?;
    let result = a.cat::<0, shape![1000, 1000, 1000]>(&b)?;
    let first_ok = result.at::<0, 0>()?.to_vec()? == a.at::<0, 0>()?.to_vec()?;
    let last_ok = result.at::<0, 999>()?.to_vec()? == b.at::<0, 499>()?.to_vec()?;
    if !(first_ok && last_ok) {
        return Err("the concatenation lost rows".into());
    }
    println!(
        "  then [500, 1000, 1000] + [500, 1000, 1000] -> {:?}",
        result.shape()
    );
    Ok(())
}

/// Example 3: [2, 3, 4] and [2, 5, 4] along dim 1.
fn cat_along_dim_one<D: Device>(seed: u64) -> AnyResult {
    println!("3. cat of [2, 3, 4] and [2, 5, 4]");
    let a = Tensor::<Cpu, f32, shape![2, 3, 4]>::randn(seed)?.to_device::<D>()?;
    let b = Tensor::<Cpu, f32, shape![2, 5, 4]>::randn(seed + 1)?.to_device::<D>()?;

    // Valid, as in PyTorch: only dim 1 differs, and that is the cat dim.
    let along_1 = a.cat::<1, shape![2, 8, 4]>(&b)?;
    println!("  along dim 1: {:?}", along_1.shape());

    // let along_0 = a.cat::<0, shape![4, 3, 4]>(&b)?;
    // let wrong = a.cat::<1, shape![2, 9, 4]>(&b)?;
    //   error[E0080]: evaluation panicked: cat: the static shapes do not
    //                 concatenate along this axis into the result shape
    //                 (reported by `cargo build`)
    // The first line in a `tensor_fn!` (`cat([a, b], 0)`), in `cargo check` too:
    //   error: `cat` along dim 0 needs equal dims elsewhere: dim 1 is 3 in `a` and 5 in `b`

    // With run-time dims the same rule returns an `Err`.
    let ad = a.clone().into_shape::<shape![_, _, _]>()?;
    let bd = b.clone().into_shape::<shape![_, _, _]>()?;
    match ad.cat::<0, shape![_, _, _]>(&bd) {
        Err(e) => println!("  along dim 0 with run-time dims: {e}"),
        Ok(_) => return Err("cat along dim 0 of [2, 3, 4] and [2, 5, 4] succeeded".into()),
    }

    let (av, bv, cv) = (to_f64(&a)?, to_f64(&b)?, to_f64(&along_1)?);
    for i in 0..2 {
        for j in 0..8 {
            for k in 0..4 {
                let want = if j < 3 {
                    av[(i * 3 + j) * 4 + k]
                } else {
                    bv[(i * 5 + j - 3) * 4 + k]
                };
                if cv[(i * 8 + j) * 4 + k] != want {
                    return Err(format!("cat[{i}, {j}, {k}] is wrong").into());
                }
            }
        }
    }
    println!("  every element is where PyTorch puts it");
    Ok(())
}

/// The three examples on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    cat_across_devices::<D>(seed)?;
    cat_too_large::<D>(seed + 10)?;
    cat_along_dim_one::<D>(seed + 20)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
