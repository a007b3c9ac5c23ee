//! "Why is PyTorch crashing CUDA on a specific line of code?": the three
//! causes of the article (an index past the end, int mixed with float in
//! `addcmul`, running out of GPU memory) in tensorfn.
//!
//! An index known at compile time is checked at compile time; one known
//! only at run time returns `Err(Error::Index)`. Mixing `i32` and `f32` does
//! not compile. Running out of memory is `Err(Error::OutOfMemory)` with the
//! sizes, and the device keeps working.
//!
//! ```sh
//! cargo run --release --example cuda_crash_causes
//! ```

mod common;

use common::{check_close, matmul_entries_f64, on_best_device, seed, to_f64, AnyResult};
use tensorfn::prelude::*;
use tensorfn::{Device, DeviceKind};

/// Example 1: `for i in range(11)` over a tensor of 10 rows.
fn index_past_the_end<D: Device>(seed: u64) -> AnyResult {
    println!("1. indexing past the end");
    let x = Tensor::<Cpu, f32, shape![10, 10]>::randn(seed)?.to_device::<D>()?;

    // A constant index is checked against the type:
    // let row = x.at::<0, 10>()?;
    //   error[E0080]: evaluation panicked: constant index past the end of a
    //                 static dim (reported by `cargo build`)
    let last = x.at::<0, 9>()?;

    // The article's loop, off by one: a run-time index is checked when it
    // runs, so the eleventh row is an `Err`, not an illegal memory access
    // that poisons the GPU context.
    let mut doubled_rows = Vec::new();
    for i in 0..11 {
        match x.index::<0>(i) {
            Ok(row) => doubled_rows.push(row.mul_scalar(2.0)?),
            Err(Error::Index(message)) => {
                println!("  x.index::<0>({i}): {message}");
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if doubled_rows.len() != 10 || to_f64(&doubled_rows[9])? != to_f64(&last.mul_scalar(2.0)?)? {
        return Err("the loop did not stop at the eleventh row".into());
    }

    // The loop itself is better written as one elementwise operation.
    let y = x.mul_scalar(2.0)?;
    let want: Vec<f64> = to_f64(&x)?.iter().map(|v| 2.0 * v).collect();
    check_close("y = x * 2", &to_f64(&y)?, &want, 1e-6, 0.0)
}

/// Example 2: `torch.addcmul(y, x, x)` with `y` float and `x` int.
///
/// PyTorch promotes the int operand (the article calls it undefined
/// behaviour; it is type promotion). tensorfn promotes nothing: the
/// operand is cast where the program says so, and the result is
/// PyTorch's `y + value * x * x` in f32.
fn int_mixed_with_float<D: Device>(seed: u64) -> AnyResult {
    println!("2. addcmul with an int tensor and a float tensor");
    let ints: Vec<i32> = Tensor::<Cpu, f32, shape![25]>::rand(seed)?
        .to_vec()?
        .iter()
        .map(|v| (v * 10.0) as i32)
        .collect();
    let x = Tensor::<Cpu, i32, shape![5, 5]>::from_vec(ints)?.to_device::<D>()?;
    let y = Tensor::<Cpu, f32, shape![5, 5]>::randn(seed + 1)?.to_device::<D>()?;

    // let z = y.addcmul(&x, &x, 1.0)?;
    //   error[E0308]: arguments to this method are incorrect: expected
    //     `&Tensor<Cuda, f32, (Const<5>, Const<5>)>`, found `&Tensor<Cuda, i32, ..>`
    // The same line in a `tensor_fn!`:
    //   error: `x` is i32 but `addcmul` here is f32: cast with `x.cast::<f32>()`
    let xf = x.cast::<f32>()?;
    let z = y.addcmul(&xf, &xf, 0.5)?;

    let (xv, yv) = (to_f64(&x)?, to_f64(&y)?);
    let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| y + 0.5 * x * x).collect();
    check_close("y + 0.5 * x * x", &to_f64(&z)?, &want, 1e-6, 1e-6)
}

/// Example 3: tensors larger than the GPU.
///
/// On a GPU, asking for more memory than it has is
/// `Err(Error::OutOfMemory { requested, free, total })` and the next
/// operation works. On the CPU there is no device limit to show: host
/// memory is virtual and a request that large would only be refused by the
/// operating system, so that part runs on a GPU only.
fn out_of_memory<D: Device>(seed: u64) -> AnyResult {
    println!("3. more memory than the device has");
    if D::KIND == DeviceKind::Cpu {
        println!("  (shown on a GPU only)");
    } else {
        // 100k x 100k x 100 f32 = 4 TB: no GPU holds that. The input is a
        // broadcast view of a small tensor, so only the result is allocated.
        let small = Tensor::<Cpu, f32, shape![1, 1, 100]>::randn(seed)?.to_device::<D>()?;
        let huge = small.broadcast_to_dims::<shape![_, _, 100]>(&[100_000, 100_000, 100])?;
        match huge.mul_scalar(2.0) {
            Err(Error::OutOfMemory {
                requested,
                free,
                total,
            }) => println!("  OutOfMemory: {requested} bytes requested, {free} free of {total}"),
            Err(e) => return Err(e.into()),
            Ok(_) => return Err("a 4 TB tensor fit on the GPU".into()),
        }
    }

    // The device is still usable: a product runs and is right.
    let a = Tensor::<Cpu, f32, shape![_, _]>::randn_dims(seed + 1, &[1_000, 1_000])?
        .to_device::<D>()?;
    let b =
        Tensor::<Cpu, f32, shape![_, _]>::randn_dims(seed + 2, &[1_000, 300])?.to_device::<D>()?;
    let z = a.matmul(&b)?;
    println!(
        "  after that, a {:?} product works: sum = {:.3}",
        z.shape(),
        z.sum_all()?.item()?
    );
    let (av, bv, zv) = (to_f64(&a)?, to_f64(&b)?, to_f64(&z)?);
    let at = [(0, 0), (17, 123), (999, 299), (500, 7)];
    let got: Vec<f64> = at.iter().map(|&(i, j)| zv[i * 300 + j]).collect();
    let want = matmul_entries_f64(&av, &bv, 1_000, 300, &at);
    check_close("sampled entries of a @ b", &got, &want, 1e-4, 1e-3)
}

/// The three examples on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    index_past_the_end::<D>(seed)?;
    int_mixed_with_float::<D>(seed + 10)?;
    out_of_memory::<D>(seed + 20)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
