//! "How can I resolve device mismatches between CUDA and NumPy tensors?":
//! host arrays (`ndarray`, Rust's NumPy) to the device and back.
//!
//! 1. An `Array2<f32>` goes to the device and comes back as an
//!    `Array2<f32>`: the dtype is in both types, so it cannot drift to f64
//!    (NumPy's default) or back on the way. Converting is one visible step.
//! 2. Work stays on the device between one upload and one download; the
//!    in-place operations (`mul_scalar_`, `add_scalar_`) allocate nothing.
//! 3. An array larger than a chunk (or than the GPU) goes through
//!    `stream_map` / `StreamMap`: chunks of rows, copies overlapping compute,
//!    the result identical to the one-shot run.
//!
//! ```sh
//! cargo run --release --example numpy_pipelines
//! ```

mod common;

use common::{check_close, on_best_device, seed, AnyResult};
use ndarray::Array2;
use tensorfn::prelude::*;
use tensorfn::{Device, StreamMap};

/// A random host array, like `np.random.rand(rows, cols)`: f64.
fn random_array(seed: u64, rows: usize, cols: usize) -> Result<Array2<f64>> {
    Tensor::<Cpu, f64, shape![_, _]>::rand_dims(seed, &[rows, cols])?.to_ndarray()
}

/// The elements of a host array as f64, in logical order.
fn flat(a: &Array2<f32>) -> Vec<f64> {
    a.iter().map(|&v| v as f64).collect()
}

/// Example 1: to the device, `sin`, back.
fn round_trip<D: Device>(seed: u64) -> AnyResult {
    println!("1. host array -> device -> host, without dtype drift");
    let numpy_array = random_array(seed, 1024, 1024)?;

    // let x = Tensor::<D, f32, shape![1024, 1024]>::from_ndarray(&numpy_array)?;
    //   error[E0271]: type mismatch resolving `<OwnedRepr<f64> as RawData>::Elem == f32`:
    //                 expected `f32`, found `f64`
    // The array is f64; choosing f32 is explicit, on the host (half the
    // bytes to copy) or on the device (`.cast::<f32>()` after the copy).
    let as_f32 = numpy_array.mapv(|v| v as f32);
    let x = Tensor::<D, f32, shape![1024, 1024]>::from_ndarray(&as_f32)?;
    let result: Array2<f32> = x.sin()?.to_ndarray()?;

    let want: Vec<f64> = as_f32.iter().map(|&v| (v as f64).sin()).collect();
    check_close("sin", &flat(&result), &want, 1e-6, 1e-7)
}

/// Example 2: in-place operations between one upload and one download.
fn in_place<D: Device>(seed: u64) -> AnyResult {
    println!("2. in-place operations on the device");
    let numpy_array = random_array(seed, 1024, 1024)?.mapv(|v| v as f32);
    let mut x = Tensor::<D, f32, shape![1024, 1024]>::from_ndarray(&numpy_array)?;
    x.mul_scalar_(2.0)?;
    x.add_scalar_(5.0)?;
    let result: Array2<f32> = x.to_ndarray()?;

    let want: Vec<f64> = numpy_array.iter().map(|&v| v as f64 * 2.0 + 5.0).collect();
    check_close("x * 2 + 5", &flat(&result), &want, 1e-6, 0.0)
}

/// The per-chunk work of example 3, written once for every device:
/// `sin(x)` on a chunk of rows.
fn sin_rows<D: Device>(
    x: Tensor<D, f32, shape![_, 256]>,
) -> Result<Tensor<D, f32, shape![_, 256]>> {
    x.sin()
}

/// Example 3: an array larger than the chunk the device gets at a time.
fn chunked<D: Device>(seed: u64) -> AnyResult {
    println!("3. an array processed in chunks of rows");
    // The article's array is 1M rows of 1024 (4 GB); 16k rows of 256
    // (16 MB) keep the example quick and still span 8 chunks of 2048 rows.
    let mut numpy_array = random_array(seed, 16 * 1024, 256)?.mapv(|v| v as f32);
    let want: Vec<f64> = numpy_array.iter().map(|&v| (v as f64).sin()).collect();

    // One call, chunk size from the device's free memory:
    let out: Array2<f32> = tensorfn::stream_map(&numpy_array, sin_rows::<D>)?;

    // The article's loop, writing each chunk back into the array, with a
    // chosen chunk size:
    let stats = StreamMap::new()
        .chunk_rows(2048)
        .run_in_place(&mut numpy_array, sin_rows::<D>)?;
    println!(
        "  {} rows in {} chunks of {} rows",
        stats.rows, stats.chunks, stats.chunk_rows
    );
    if out != numpy_array {
        return Err("the chunked runs differ".into());
    }
    check_close("chunked sin", &flat(&numpy_array), &want, 1e-6, 1e-7)
}

/// The three examples on device `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    round_trip::<D>(seed)?;
    in_place::<D>(seed + 10)?;
    chunked::<D>(seed + 20)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
