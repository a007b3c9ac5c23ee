//! `stream_map`: chunked runs equal the one-shot run, whatever the chunk
//! size, the input layout or the retries after running out of memory.

use ndarray::{s, Array1, Array2, Array3, ArrayView2, Axis};
use tensorfn_runtime::{
    shape, stream_map, Const, Cpu, Cuda, Device, Dyn, Error, Result, StreamMap, Tensor,
};

/// Fresh random values in `[-2, 2)`, never all zero; the seed is printed.
fn random_array(test: &str, rows: usize, cols: usize) -> Array2<f32> {
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    eprintln!("{test}: seed {state}");
    Array2::from_shape_simple_fn((rows, cols), || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    })
}

type Rows4 = (Dyn, Const<4>);

/// `sin(x) * 2 + 5` per element, computed in f64 on the host: a stand-in
/// for a device function that any device can run.
fn sin_affine<D: Device>(x: Tensor<D, f32, Rows4>) -> Result<Tensor<D, f32, Rows4>> {
    let v = x
        .to_vec()?
        .iter()
        .map(|&v| ((v as f64).sin() * 2.0 + 5.0) as f32)
        .collect();
    Tensor::from_vec_dims(v, x.shape())
}

/// Row sums of squares in f64: a function that changes the row dims.
fn row_energy<D: Device>(x: Tensor<D, f32, Rows4>) -> Result<Tensor<D, f64, shape![_]>> {
    let rows = x.shape()[0];
    let v: Vec<f64> = x
        .to_vec()?
        .chunks(4)
        .map(|r| r.iter().map(|&v| (v as f64) * (v as f64)).sum())
        .collect();
    Tensor::from_vec_dims(v, &[rows])
}

fn reference_sin_affine(a: ArrayView2<f32>) -> Array2<f32> {
    a.mapv(|v| ((v as f64).sin() * 2.0 + 5.0) as f32)
}

#[test]
fn every_chunk_size_gives_the_one_shot_result() {
    let a = random_array("every_chunk_size", 1_037, 4);
    let one_shot = sin_affine::<Cpu>(Tensor::from_ndarray(&a).unwrap()).unwrap();
    let one_shot: Array2<f32> = one_shot.to_ndarray().unwrap();
    assert_eq!(one_shot, reference_sin_affine(a.view()));
    for rows in [1, 2, 3, 64, 1_036, 1_037, 5_000] {
        let mut out = Array2::<f32>::zeros((1_037, 4));
        let stats = StreamMap::new()
            .chunk_rows(rows)
            .run_into(&a, &mut out, sin_affine::<Cpu>)
            .unwrap();
        assert_eq!(out, one_shot, "chunk_rows({rows})");
        assert_eq!(
            stats.chunks,
            1_037usize.div_ceil(rows),
            "chunk_rows({rows})"
        );
        assert_eq!(stats.rows, 1_037);
    }
    assert_eq!(stream_map(&a, sin_affine::<Cpu>).unwrap(), one_shot);
}

#[test]
fn chunks_arrive_in_order_with_the_planned_sizes() {
    let a = random_array("chunks_arrive_in_order", 100, 4);
    let mut seen = Vec::new();
    let out = StreamMap::new()
        .chunk_rows(30)
        .run(&a, |x: Tensor<Cpu, f32, Rows4>| {
            seen.push(x.to_vec()?[0]);
            assert!(x.shape()[0] <= 30);
            Ok(x)
        })
        .unwrap();
    assert_eq!(out, a);
    assert_eq!(seen, vec![a[[0, 0]], a[[30, 0]], a[[60, 0]], a[[90, 0]]]);
}

#[test]
fn results_may_change_dtype_and_row_dims() {
    let a = random_array("results_may_change_dtype_and_row_dims", 513, 4);
    let energy: Array1<f64> = StreamMap::new()
        .chunk_rows(100)
        .run(&a, row_energy::<Cpu>)
        .unwrap();
    assert_eq!(energy.len(), 513);
    for (i, row) in a.axis_iter(Axis(0)).enumerate() {
        let want: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum();
        assert!((energy[i] - want).abs() <= 1e-12 * want.max(1.0), "row {i}");
    }
}

#[test]
fn rank_three_inputs_are_cut_along_dim_zero() {
    let flat = random_array("rank_three_inputs", 40, 12);
    let a: Array3<f32> = flat.into_shape_with_order((40, 3, 4)).unwrap();
    let out: Array2<f32> = StreamMap::new()
        .chunk_rows(7)
        .run(&a, |x: Tensor<Cpu, f32, shape![_, 3, 4]>| {
            let rows = x.shape()[0];
            // Column means over the middle dim: [n, 3, 4] -> [n, 4].
            let v = x.to_vec()?;
            let mut out = vec![0.0f32; rows * 4];
            for r in 0..rows {
                for k in 0..4 {
                    let s: f64 = (0..3).map(|m| v[r * 12 + m * 4 + k] as f64).sum();
                    out[r * 4 + k] = (s / 3.0) as f32;
                }
            }
            Tensor::<Cpu, f32, shape![_, 4]>::from_vec_dims(out, &[rows, 4])
        })
        .unwrap();
    let want = a.mapv(|v| v as f64).mean_axis(Axis(1)).unwrap();
    assert_eq!(out.shape(), &[40, 4]);
    for (x, y) in out.iter().zip(want.iter()) {
        assert!((*x as f64 - y).abs() < 1e-6);
    }
}

#[test]
fn strided_inputs_and_outputs() {
    let a = random_array("strided_inputs_and_outputs", 4, 301);
    // [301, 4] as a transposed view of a [4, 301] array.
    let t = a.t();
    let out = StreamMap::new()
        .chunk_rows(50)
        .run(&t, sin_affine::<Cpu>)
        .unwrap();
    assert_eq!(out, reference_sin_affine(t));

    // Every other row of a larger array, written into a transposed output.
    let big = random_array("strided_inputs_and_outputs", 600, 4);
    let every_other = big.slice(s![..;2, ..]);
    let mut out_t = Array2::<f32>::zeros((4, 300));
    StreamMap::new()
        .chunk_rows(64)
        .run_into(
            &every_other,
            &mut out_t.view_mut().reversed_axes(),
            sin_affine::<Cpu>,
        )
        .unwrap();
    assert_eq!(out_t.t(), reference_sin_affine(every_other));
}

#[test]
fn in_place_runs_replace_each_chunk() {
    let mut a = random_array("in_place_runs_replace_each_chunk", 777, 4);
    let want = reference_sin_affine(a.view());
    let stats = StreamMap::new()
        .chunk_rows(100)
        .run_in_place(&mut a, sin_affine::<Cpu>)
        .unwrap();
    assert_eq!(a, want);
    assert_eq!(stats.chunks, 8);
}

#[test]
fn out_of_memory_halves_automatic_chunks_and_still_matches() {
    let a = random_array("out_of_memory_halves", 1_000, 4);
    let limit = 100;
    let mut calls = 0;
    let mut device_with_room_for_100_rows = |x: Tensor<Cpu, f32, Rows4>| {
        calls += 1;
        if x.shape()[0] > limit {
            return Err(Error::OutOfMemory {
                requested: x.shape()[0] * 16,
                free: limit * 16,
                total: 1 << 20,
            });
        }
        sin_affine(x)
    };
    let mut out = Array2::<f32>::zeros((1_000, 4));
    let stats = StreamMap::new()
        .run_into(&a, &mut out, &mut device_with_room_for_100_rows)
        .unwrap();
    assert_eq!(out, reference_sin_affine(a.view()));
    assert!(stats.retries > 0, "{stats:?}");
    assert!(stats.chunk_rows <= limit, "{stats:?}");
    assert_eq!(stats.rows, 1_000);

    // With an explicit chunk size the error is the caller's to handle.
    let e = StreamMap::new()
        .chunk_rows(500)
        .run(&a, &mut device_with_room_for_100_rows)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
}

#[test]
fn errors_name_what_is_wrong() {
    let a = random_array("errors_name_what_is_wrong", 20, 4);

    // The function must keep one row per input row.
    let e = StreamMap::new()
        .chunk_rows(8)
        .run(&a, |x: Tensor<Cpu, f32, Rows4>| {
            let v = x.to_vec()?;
            Tensor::<Cpu, f32, Rows4>::from_vec_dims(v[..4].to_vec(), &[1, 4])
        })
        .unwrap_err();
    assert!(e.to_string().contains("map rows independently"), "{e}");

    // The input's row dims must fit the chunk type.
    let e = stream_map(&a, |x: Tensor<Cpu, f32, shape![_, 5]>| Ok(x)).unwrap_err();
    assert!(e.to_string().contains("dim 1 is 4, not 5"), "{e}");

    // The output must have one row per input row.
    let mut short = Array2::<f32>::zeros((19, 4));
    let e = StreamMap::new()
        .run_into(&a, &mut short, |x: Tensor<Cpu, f32, Rows4>| Ok(x))
        .unwrap_err();
    assert!(e.to_string().contains("20 rows"), "{e}");

    // The function's own errors come back unchanged, the first one only.
    let mut calls = 0;
    let e = StreamMap::new()
        .chunk_rows(5)
        .run(
            &a,
            |_: Tensor<Cpu, f32, Rows4>| -> Result<Tensor<Cpu, f32, Rows4>> {
                calls += 1;
                Err(Error::Index("chunk failed".into()))
            },
        )
        .unwrap_err();
    assert_eq!(e, Error::Index("chunk failed".into()));
    assert_eq!(calls, 1);

    let e = StreamMap::new()
        .chunk_rows(0)
        .run(&a, |x: Tensor<Cpu, f32, Rows4>| Ok(x))
        .unwrap_err();
    assert!(e.to_string().contains("at least one row"), "{e}");
    let e = StreamMap::new()
        .memory_fraction(1.5)
        .run(&a, |x: Tensor<Cpu, f32, Rows4>| Ok(x))
        .unwrap_err();
    assert!(e.to_string().contains("(0, 1]"), "{e}");
}

#[test]
fn empty_inputs_give_empty_results() {
    let a = Array2::<f32>::zeros((0, 4));
    let out: Array1<f64> = stream_map(&a, row_energy::<Cpu>).unwrap();
    assert_eq!(out.shape(), &[0]);
    let out: Array2<f32> = stream_map(&a, sin_affine::<Cpu>).unwrap();
    assert_eq!(out.shape(), &[0, 4]);
}

#[test]
fn gpu_results_equal_cpu_results_or_cuda_is_unavailable() {
    let a = random_array("gpu_results_equal_cpu_results", 2_000, 4);
    let cpu = StreamMap::new()
        .chunk_rows(300)
        .run(&a, sin_affine::<Cpu>)
        .unwrap();
    for plan in [StreamMap::new(), StreamMap::new().chunk_rows(300)] {
        match plan.run(&a, sin_affine::<Cuda>) {
            Ok(gpu) => assert_eq!(gpu, cpu),
            Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e:?}"),
        }
    }
}

/// A row-wise chain of real operations: `softmax(relu(x @ w + b) * 2)`.
fn dense_softmax<D: Device>(
    x: &Tensor<D, f32, Rows4>,
    w: &Tensor<D, f32, shape![4, 3]>,
    b: &Tensor<D, f32, shape![3]>,
) -> Result<Tensor<D, f32, shape![_, 3]>> {
    Tensor::addmm(b, x, w)?
        .relu()?
        .mul_scalar(2.0)?
        .softmax::<1>()
}

#[test]
fn operations_in_chunks_equal_the_one_shot_run() {
    let a = random_array("operations_in_chunks", 1_001, 4);
    let w = Tensor::<Cpu, f32, shape![4, 3]>::try_from(random_array("w", 4, 3)).unwrap();
    let b = Tensor::<Cpu, f32, shape![3]>::try_from(
        random_array("b", 1, 3).into_shape_with_order(3).unwrap(),
    )
    .unwrap();

    let whole = Tensor::<Cpu, f32, Rows4>::from_ndarray(&a).unwrap();
    let one_shot: Array2<f32> = dense_softmax(&whole, &w, &b).unwrap().to_ndarray().unwrap();

    // The f64 reference of the same chain.
    let (wv, bv) = (w.to_vec().unwrap(), b.to_vec().unwrap());
    for (r, row) in a.axis_iter(Axis(0)).enumerate() {
        let z: Vec<f64> = (0..3)
            .map(|j| {
                let s: f64 = (0..4).map(|k| row[k] as f64 * wv[k * 3 + j] as f64).sum();
                (s + bv[j] as f64).max(0.0) * 2.0
            })
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: f64 = z.iter().map(|v| (v - m).exp()).sum();
        for j in 0..3 {
            let want = (z[j] - m).exp() / e;
            assert!((one_shot[[r, j]] as f64 - want).abs() < 1e-6, "row {r}");
        }
    }

    for rows in [1, 10, 333, 1_000, 2_000] {
        let chunked = StreamMap::new()
            .chunk_rows(rows)
            .run(&a, |x: Tensor<Cpu, f32, Rows4>| dense_softmax(&x, &w, &b))
            .unwrap();
        // A product of one row may take another kernel than one of many:
        // the same numbers up to f32 rounding.
        for (x, y) in chunked.iter().zip(one_shot.iter()) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs() + 1e-7,
                "chunk_rows({rows}): {x} vs {y}"
            );
        }
    }
}

#[test]
fn elementwise_chains_in_chunks_are_bit_identical() {
    let a = random_array("elementwise_chains_in_chunks", 999, 4);
    let chain = |x: Tensor<Cpu, f32, Rows4>| x.sin()?.mul_scalar(2.0)?.add_scalar(5.0)?.exp();
    let one_shot = chain(Tensor::from_ndarray(&a).unwrap()).unwrap();
    let one_shot: Array2<f32> = one_shot.to_ndarray().unwrap();
    for rows in [1, 7, 500, 999] {
        let chunked = StreamMap::new().chunk_rows(rows).run(&a, chain).unwrap();
        assert_eq!(chunked, one_shot, "chunk_rows({rows})");
    }
    // In place, with the in-place operations of the library.
    let mut b = a.clone();
    StreamMap::new()
        .chunk_rows(100)
        .run_in_place(&mut b, |mut x: Tensor<Cpu, f32, Rows4>| {
            x = x.sin()?;
            x.mul_scalar_(2.0)?;
            x.add_scalar_(5.0)?;
            x.exp()
        })
        .unwrap();
    assert_eq!(b, one_shot);
}

#[test]
fn a_panicking_function_unwinds_without_hanging_the_pipeline() {
    let a = random_array("a_panicking_function_unwinds", 100, 4);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut calls = 0;
        StreamMap::new()
            .chunk_rows(10)
            .run(&a, |x: Tensor<Cpu, f32, Rows4>| {
                calls += 1;
                if calls == 3 {
                    panic!("the function failed on its third chunk");
                }
                Ok(x)
            })
    }));
    assert!(outcome.is_err());
    // The library still works afterwards.
    assert_eq!(
        stream_map(&a, sin_affine::<Cpu>).unwrap(),
        reference_sin_affine(a.view())
    );
}

#[test]
fn device_operations_in_chunks_on_a_gpu_match_the_one_shot_run() {
    let a = random_array("device_operations_in_chunks_on_a_gpu", 5_003, 4);
    let w = Tensor::<Cpu, f32, shape![4, 3]>::try_from(random_array("w", 4, 3)).unwrap();
    let b = Tensor::<Cpu, f32, shape![3]>::try_from(
        random_array("b", 1, 3).into_shape_with_order(3).unwrap(),
    )
    .unwrap();
    let (gw, gb) = match (w.to_device::<Cuda>(), b.to_device::<Cuda>()) {
        (Ok(gw), Ok(gb)) => (gw, gb),
        (Err(Error::CudaUnavailable { reason }), _) => {
            eprintln!("no GPU: {reason}");
            return;
        }
        (Err(e), _) | (_, Err(e)) => panic!("{e:?}"),
    };
    let whole = Tensor::<Cuda, f32, Rows4>::from_ndarray(&a).unwrap();
    let one_shot: Array2<f32> = dense_softmax(&whole, &gw, &gb)
        .unwrap()
        .to_ndarray()
        .unwrap();
    let on_cpu: Array2<f32> = dense_softmax(&Tensor::from_ndarray(&a).unwrap(), &w, &b)
        .unwrap()
        .to_ndarray()
        .unwrap();
    for (x, y) in one_shot.iter().zip(on_cpu.iter()) {
        assert!((x - y).abs() <= 1e-5 * y.abs() + 1e-6, "GPU {x} vs CPU {y}");
    }
    for plan in [
        StreamMap::new(),
        StreamMap::new().chunk_rows(1_000),
        StreamMap::new().chunk_rows(1),
    ] {
        let chunked = plan
            .run(&a, |x: Tensor<Cuda, f32, Rows4>| {
                dense_softmax(&x, &gw, &gb)
            })
            .unwrap();
        for (x, y) in chunked.iter().zip(one_shot.iter()) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs() + 1e-7,
                "{plan:?}: {x} vs {y}"
            );
        }
    }
}
