//! Pinned host tensors, copies into existing host tensors, reserved device
//! memory, `synchronize` and `stream_map`'s copy streams, through the
//! public API. Skips with a notice when no GPU is present (the CPU halves
//! of these APIs are tested in the crate's unit tests).

use crate::gpu;
use gpu::{fresh, has_gpu};

use ndarray::{s, Array2};
use tensorfn_runtime::{
    bf16, cuda_empty_cache, cuda_memory_stats, cuda_reserve, f16, shape, synchronize, Cpu, Cuda,
    DType, Error, StreamMap, Tensor,
};

use crate::SERIAL;

fn pinned_round_trip<T: DType>(dims: &[usize]) {
    let n = dims.iter().product();
    let data: Vec<T> = fresh(n);
    let x = Tensor::<Cpu, T, shape![_, _]>::from_vec_dims(data.clone(), dims).unwrap();
    let p = x.pin().unwrap();
    assert!(p.is_pinned() && !x.is_pinned());
    assert_eq!(p.to_vec().unwrap(), data, "{} pin", T::KIND);
    // Up by one DMA from the pinned buffer.
    let g = p.to_device::<Cuda>().unwrap();
    assert_eq!(g.to_vec().unwrap(), data, "{} pinned upload", T::KIND);
    // Down into a pinned tensor, then into a pageable one, reusing both.
    let mut into_pinned = Tensor::<Cpu, T, shape![_, _]>::zeros_pinned_dims(dims).unwrap();
    let mut into_pageable = Tensor::<Cpu, T, shape![_, _]>::zeros_dims(dims).unwrap();
    for _ in 0..2 {
        g.to_cpu_into(&mut into_pinned).unwrap();
        g.to_cpu_into(&mut into_pageable).unwrap();
        assert!(into_pinned.is_pinned());
        assert_eq!(
            into_pinned.to_vec().unwrap(),
            data,
            "{} into pinned",
            T::KIND
        );
        assert_eq!(
            into_pageable.to_vec().unwrap(),
            data,
            "{} into pageable",
            T::KIND
        );
    }
    // A transposed (strided) pinned view goes up as its elements.
    if dims.len() == 2 && n > 0 {
        let t = p.t().unwrap();
        let want = t.to_vec().unwrap();
        assert_eq!(t.to_device::<Cuda>().unwrap().to_vec().unwrap(), want);
        // And a transposed device tensor comes down into a pinned one.
        let mut out =
            Tensor::<Cpu, T, shape![_, _]>::zeros_pinned_dims(&[dims[1], dims[0]]).unwrap();
        g.t().unwrap().to_cpu_into(&mut out).unwrap();
        assert_eq!(out.to_vec().unwrap(), want);
    }
}

#[test]
fn every_dtype_round_trips_through_pinned_tensors() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    for dims in [[0, 3], [1, 1], [37, 53], [1024, 1031], [3000, 3001]] {
        pinned_round_trip::<f32>(&dims);
        pinned_round_trip::<f64>(&dims);
        pinned_round_trip::<f16>(&dims);
        pinned_round_trip::<bf16>(&dims);
        pinned_round_trip::<i32>(&dims);
        pinned_round_trip::<i64>(&dims);
        pinned_round_trip::<u8>(&dims);
        pinned_round_trip::<bool>(&dims);
    }
}

#[test]
fn cpu_operations_read_pinned_tensors_like_any_other() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    let a = Tensor::<Cpu, f32, shape![64, 33]>::from_vec(fresh(64 * 33)).unwrap();
    let b = Tensor::<Cpu, f32, shape![64, 33]>::from_vec(fresh(64 * 33)).unwrap();
    let (pa, pb) = (a.pin().unwrap(), b.pin().unwrap());
    assert_eq!(
        (&pa + &pb).unwrap().to_vec().unwrap(),
        (&a + &b).unwrap().to_vec().unwrap()
    );
    assert_eq!(
        pa.t().unwrap().matmul(&pb).unwrap().to_vec().unwrap(),
        a.t().unwrap().matmul(&b).unwrap().to_vec().unwrap()
    );
    assert_eq!(
        pa.sum::<1>().unwrap().to_vec().unwrap(),
        a.sum::<1>().unwrap().to_vec().unwrap()
    );
    // In place on an unshared pinned tensor: written where it is, still pinned.
    let mut pc = pa.pin().unwrap();
    pc.add_scalar_(1.5).unwrap();
    assert!(pc.is_pinned());
    let want: Vec<f32> = a.to_vec().unwrap().iter().map(|v| v + 1.5).collect();
    assert_eq!(pc.to_vec().unwrap(), want);
    assert_eq!(pc.to_device::<Cuda>().unwrap().to_vec().unwrap(), want);
}

#[test]
fn to_cpu_into_rejects_other_dims_from_a_gpu() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    let g = Tensor::<Cuda, f32, shape![_, 4]>::ones_dims(&[5, 4]).unwrap();
    let mut out = Tensor::<Cpu, f32, shape![_, 4]>::zeros_pinned_dims(&[6, 4]).unwrap();
    let e = g.to_cpu_into(&mut out).unwrap_err();
    assert!(matches!(e, Error::Rule(_)), "{e:?}");
    assert!(e.to_string().contains("out"), "{e}");
    assert_eq!(out.to_vec().unwrap(), vec![0.0; 24]);
}

#[test]
fn reserved_memory_serves_a_loop_without_new_allocations() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    cuda_empty_cache(0).unwrap();
    let x = Tensor::<Cuda, f32, shape![256, 1000]>::from_vec(fresh(256_000)).unwrap();
    let w = Tensor::<Cuda, f32, shape![256, 1000]>::from_vec(fresh(256_000)).unwrap();
    // One step: three temporaries of 1 MB alive at most; reserve 8.
    let step = |x: &Tensor<Cuda, f32, shape![256, 1000]>| -> Tensor<Cuda, f32, shape![256, 1000]> {
        let a = (x * &w).unwrap();
        let b = a.exp().unwrap();
        (&b - &a).unwrap()
    };
    let want = step(&x).to_vec().unwrap();
    cuda_empty_cache(0).unwrap();
    cuda_reserve(0, 8 << 20).unwrap();
    let before = cuda_memory_stats(0).unwrap();
    assert!(before.cached_bytes >= 8 << 20, "{before:?}");
    // Reserving again while the range is free is a no-op.
    cuda_reserve(0, 8 << 20).unwrap();
    assert_eq!(cuda_memory_stats(0).unwrap(), before);
    for _ in 0..20 {
        let y = step(&x);
        assert_eq!(y.to_vec().unwrap(), want);
    }
    let after = cuda_memory_stats(0).unwrap();
    assert_eq!(
        after.device_allocations, before.device_allocations,
        "the loop called cuMemAlloc: {before:?} -> {after:?}"
    );
    // Once unused, the reservation goes back with the cache.
    cuda_empty_cache(0).unwrap();
    assert_eq!(cuda_memory_stats(0).unwrap().cached_bytes, 0);
}

#[test]
fn an_impossible_reservation_is_an_error_and_the_device_stays_usable() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    for bytes in [usize::MAX, 1 << 50] {
        match cuda_reserve(0, bytes) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, bytes),
            other => panic!("expected OutOfMemory for {bytes} bytes, got {other:?}"),
        }
    }
    let data: Vec<f32> = fresh(1000);
    let x = Tensor::<Cpu, f32, shape![1000]>::from_vec(data.clone()).unwrap();
    assert_eq!(x.to_device::<Cuda>().unwrap().to_vec().unwrap(), data);
    synchronize::<Cuda>().unwrap();
}

#[test]
fn overlapped_stream_map_equals_the_one_shot_run() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    let rows = 10_007;
    let a = Array2::from_shape_vec((rows, 24), fresh::<f32>(rows * 24)).unwrap();
    let f = |x: Tensor<Cuda, f32, shape![_, 24]>| x.mul_scalar(0.5)?.tanh()?.add_scalar(1.0);
    let one_shot: Array2<f32> = f(Tensor::from_ndarray(&a).unwrap())
        .unwrap()
        .to_ndarray()
        .unwrap();
    for chunk in [1, 7, 1000, 5000, rows, 3 * rows] {
        // Contiguous input, result as a new array.
        let out = StreamMap::new().chunk_rows(chunk).run(&a, f).unwrap();
        assert_eq!(out, one_shot, "chunks of {chunk}");
        // Strided input (every other column of a wider array) into a
        // strided output.
        let wide = ndarray::concatenate![ndarray::Axis(1), a.view(), a.view()];
        let mut wide_out = Array2::<f32>::zeros((rows, 48));
        let stats = StreamMap::new()
            .chunk_rows(chunk)
            .run_into(
                &wide.slice(s![.., ..24]),
                &mut wide_out.slice_mut(s![.., 24..]),
                f,
            )
            .unwrap();
        assert_eq!(wide_out.slice(s![.., 24..]), one_shot);
        assert_eq!(stats.rows, rows);
        assert_eq!(stats.chunks, rows.div_ceil(chunk));
        // In place, returning the chunk itself.
        let mut b = a.clone();
        StreamMap::new()
            .chunk_rows(chunk)
            .run_in_place(&mut b, |x: Tensor<Cuda, f32, shape![_, 24]>| Ok(x))
            .unwrap();
        assert_eq!(b, a);
    }
    // Other dtypes and row dims: f64 row sums of an f32 input.
    let sums = StreamMap::new()
        .chunk_rows(999)
        .run(&a, |x: Tensor<Cuda, f32, shape![_, 24]>| {
            x.cast::<f64>()?.sum::<1>()
        })
        .unwrap();
    for (i, row) in a.rows().into_iter().enumerate() {
        let want: f64 = row.iter().map(|&v| v as f64).sum();
        assert!(
            (sums[i] - want).abs() <= 1e-9 * want.abs().max(1.0),
            "row {i}"
        );
    }
    // Automatic chunk sizes and empty inputs.
    assert_eq!(stream_map_auto(&a), one_shot);
    let empty = Array2::<f32>::zeros((0, 24));
    assert_eq!(StreamMap::new().run(&empty, f).unwrap().dim(), (0, 24));
}

fn stream_map_auto(a: &Array2<f32>) -> Array2<f32> {
    tensorfn_runtime::stream_map(a, |x: Tensor<Cuda, f32, shape![_, 24]>| {
        x.mul_scalar(0.5)?.tanh()?.add_scalar(1.0)
    })
    .unwrap()
}

#[test]
fn a_failing_chunk_stops_the_overlapped_run_and_the_device_stays_usable() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    let a = Array2::from_shape_vec((1000, 8), fresh::<f32>(8000)).unwrap();
    let mut calls = 0;
    let e = StreamMap::new()
        .chunk_rows(100)
        .run(&a, |x: Tensor<Cuda, f32, shape![_, 8]>| {
            calls += 1;
            if calls == 4 {
                return Err(Error::shape("step", "no failure", "a failure"));
            }
            x.exp()
        })
        .unwrap_err();
    assert!(e.to_string().contains("step"), "{e}");
    // The next run works and is right.
    let out = StreamMap::new()
        .chunk_rows(100)
        .run(&a, |x: Tensor<Cuda, f32, shape![_, 8]>| x.neg())
        .unwrap();
    assert_eq!(out, a.mapv(|v| -v));
}

#[test]
fn boolean_results_take_the_threaded_path_and_match() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    let a = Array2::from_shape_vec((500, 4), fresh::<u8>(2000)).unwrap();
    let out = StreamMap::new()
        .chunk_rows(64)
        .run(&a, |x: Tensor<Cuda, u8, shape![_, 4]>| x.cast::<bool>())
        .unwrap();
    assert_eq!(out, a.mapv(|v| v != 0));
    let _ = Cpu;
}
