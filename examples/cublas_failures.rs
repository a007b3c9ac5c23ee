//! "What caused the CUDA runtime error in PyTorch at THCBlas.cu:450?": the
//! article's three programs in tensorfn.
//!
//! cuBLAS fails late in PyTorch because a mistake made earlier went
//! unnoticed. Here each mistake is caught where it is made: a `view` to
//! the wrong element count does not compile (or is an `Err` with run-time
//! dims), an allocation larger than the GPU is `Err(OutOfMemory)` at once
//! and later products work, and `dot` of vectors of different lengths does
//! not compile.
//!
//! ```sh
//! cargo run --release --example cublas_failures
//! ```

mod common;

use common::{check_close, matmul_entries_f64, on_best_device, seed, to_f64, AnyResult};
use tensorfn::prelude::*;
use tensorfn::{Device, DeviceKind};

/// Example 1: `x.view(x.numel() + 1)`.
///
/// The article reads it as silent memory corruption; PyTorch actually
/// refuses the view at run time. tensorfn refuses it at compile time, so
/// no later product can meet a bad buffer.
fn view_to_a_wrong_count<D: Device>(seed: u64) -> AnyResult {
    println!("1. view to a wrong element count");
    let x = Tensor::<Cpu, f32, shape![1000, 1000]>::randn(seed)?.to_device::<D>()?;

    // let y = x.view::<shape![1_000_001]>()?;
    //   error[E0080]: evaluation panicked: view between static shapes with
    //                 different element counts (reported by `cargo build`)
    // The same line in a `tensor_fn!` (`x.reshape([1000001])`):
    //   error: `reshape` of `x` from [1000, 1000] (1000000 elements) to
    //          [1000001] (1000001 elements): the element counts must match
    let flat = x.view::<shape![1_000_000]>()?;

    // With a run-time dim the same check is an `Err`.
    match x.reshape_dims::<shape![_]>(&[x.numel() + 1]) {
        Err(e) => println!("  run-time view: {e}"),
        Ok(_) => return Err("a view of 1000001 elements over 1000000 succeeded".into()),
    }

    // The article's product, with shapes that fit.
    let w = Tensor::<Cpu, f32, shape![1000, 64]>::randn(seed + 1)?.to_device::<D>()?;
    let z = x.matmul(&w)?;
    println!(
        "  x @ w: {:?}, flat view of x: {:?}",
        z.shape(),
        flat.shape()
    );
    let (xv, wv, zv) = (to_f64(&x)?, to_f64(&w)?, to_f64(&z)?);
    let at = [(0, 0), (999, 63), (123, 45)];
    let got: Vec<f64> = at.iter().map(|&(i, j)| zv[i * 64 + j]).collect();
    check_close(
        "sampled entries of x @ w",
        &got,
        &matmul_entries_f64(&xv, &wv, 1000, 64, &at),
        1e-4,
        1e-3,
    )
}

/// Example 2: `torch.randn((int(1e10), 10), device='cuda')`.
///
/// In PyTorch a failed allocation can surface later as a cuBLAS error.
/// Here it is `Err(Error::OutOfMemory)` where it happens, with the sizes;
/// the device stays usable and the next product runs. On the CPU a 400 GB
/// request would only meet the operating system's limit, not a device's:
/// that part runs on a GPU only.
fn allocation_too_large<D: Device>(seed: u64) -> AnyResult {
    println!("2. an allocation larger than the device");
    if D::KIND == DeviceKind::Cpu {
        println!("  (shown on a GPU only)");
    } else {
        let row = Tensor::<Cpu, f32, shape![1, 10]>::randn(seed)?.to_device::<D>()?;
        // A zero-copy broadcast of one row to 1e10 rows; `contiguous`
        // asks the device for the 400 GB.
        let huge = row.broadcast_to_dims::<shape![_, 10]>(&[10_000_000_000, 10])?;
        match huge.contiguous() {
            Err(Error::OutOfMemory {
                requested,
                free,
                total,
            }) => println!("  OutOfMemory: {requested} bytes requested, {free} free of {total}"),
            Err(e) => return Err(e.into()),
            Ok(_) => return Err("400 GB fit on the GPU".into()),
        }
    }
    let x = Tensor::<Cpu, f32, shape![1000, 1000]>::randn(seed + 1)?.to_device::<D>()?;
    let y = Tensor::<Cpu, f32, shape![1000, 1000]>::randn(seed + 2)?.to_device::<D>()?;
    let z = x.matmul(&y)?;
    println!("  then x @ y works: sum = {:.3}", z.sum_all()?.item()?);
    let (xv, yv, zv) = (to_f64(&x)?, to_f64(&y)?, to_f64(&z)?);
    let at = [(0, 0), (999, 999), (321, 654)];
    let got: Vec<f64> = at.iter().map(|&(i, j)| zv[i * 1000 + j]).collect();
    check_close(
        "sampled entries of x @ y",
        &got,
        &matmul_entries_f64(&xv, &yv, 1000, 1000, &at),
        1e-4,
        1e-3,
    )
}

/// Example 3: `torch.dot(a.view(-1), b.view(-1))` for a [100, 200] and a
/// [200, 300] matrix: vectors of 20000 and 60000 elements.
fn dot_instead_of_matmul<D: Device>(seed: u64) -> AnyResult {
    println!("3. dot of flattened matrices, matmul of the matrices");
    let a = Tensor::<Cpu, f32, shape![100, 200]>::randn(seed)?.to_device::<D>()?;
    let b = Tensor::<Cpu, f32, shape![200, 300]>::randn(seed + 1)?.to_device::<D>()?;

    // let flat_b = b.view::<shape![60_000]>()?;
    // let z = a.view::<shape![20_000]>()?.dot(&flat_b)?;
    //   error[E0308]: mismatched types: expected `20000`, found `60000`
    // The same line in a `tensor_fn!` (`dot(a.reshape([20000]), b.reshape([60000]))`):
    //   error: `dot` needs equal lengths: `a.reshape([20000])` has 20000
    //          elements and `b.reshape([60000])` has 60000
    // let z = a.matmul(&a)?;
    //   error[E0277]: `matmul` cannot multiply a `(Const<100>, Const<200>)`
    //                 tensor by a `(Const<100>, Const<200>)` tensor
    let z = a.matmul(&b)?;
    println!(
        "  a @ b: {:?}, sum = {:.3}",
        z.shape(),
        z.sum_all()?.item()?
    );

    // `dot` is for two vectors of the same length:
    let u = a.view::<shape![20_000]>()?;
    let v = Tensor::<Cpu, f32, shape![20_000]>::randn(seed + 2)?.to_device::<D>()?;
    let d = u.dot(&v)?.item()? as f64;
    let want: f64 = to_f64(&u)?
        .iter()
        .zip(to_f64(&v)?)
        .map(|(x, y)| x * y)
        .sum();
    check_close("dot of two [20000] vectors", &[d], &[want], 1e-4, 1e-2)?;

    let (av, bv, zv) = (to_f64(&a)?, to_f64(&b)?, to_f64(&z)?);
    let want = common::matmul_f64(&av, &bv, 100, 200, 300);
    check_close("a @ b", &zv, &want, 1e-4, 1e-3)
}

/// The three examples on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    view_to_a_wrong_count::<D>(seed)?;
    allocation_too_large::<D>(seed + 10)?;
    dot_instead_of_matmul::<D>(seed + 20)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
