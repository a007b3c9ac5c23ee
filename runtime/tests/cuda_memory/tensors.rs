//! Tensors on the GPU through the public API: creation, transfers of every
//! dtype, memory accounting. Skips with a notice when no GPU is present.

use crate::gpu;
use gpu::{fresh, has_gpu};

use tensorfn_runtime::{
    bf16, cuda_empty_cache, cuda_memory_stats, f16, shape, Cpu, Cuda, DType, Tensor,
};

use crate::SERIAL;

fn round_trip<T: DType>(dims: &[usize]) {
    let n = dims.iter().product();
    let data: Vec<T> = fresh(n);
    let x = Tensor::<Cpu, T, shape![_, _]>::from_vec_dims(data.clone(), dims).unwrap();
    let g = x.to_device::<Cuda>().unwrap();
    assert_eq!(g.shape(), dims);
    assert_eq!(g.to_vec().unwrap(), data, "{} to_vec", T::KIND);
    let back = g.to_cpu().unwrap();
    assert_eq!(back.to_vec().unwrap(), data, "{} to_cpu", T::KIND);
}

#[test]
fn every_dtype_round_trips() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    for dims in [[3, 5], [0, 4], [1000, 1001]] {
        round_trip::<f32>(&dims);
        round_trip::<f64>(&dims);
        round_trip::<f16>(&dims);
        round_trip::<bf16>(&dims);
        round_trip::<i32>(&dims);
        round_trip::<i64>(&dims);
        round_trip::<u8>(&dims);
        round_trip::<bool>(&dims);
    }
}

#[test]
fn tensors_created_on_the_gpu_match_the_cpu() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    type S = shape![4, 3];
    let pairs: [(Vec<f32>, Vec<f32>); 4] = [
        (
            Tensor::<Cuda, f32, S>::rand(5).unwrap().to_vec().unwrap(),
            Tensor::<Cpu, f32, S>::rand(5).unwrap().to_vec().unwrap(),
        ),
        (
            Tensor::<Cuda, f32, S>::randn(6).unwrap().to_vec().unwrap(),
            Tensor::<Cpu, f32, S>::randn(6).unwrap().to_vec().unwrap(),
        ),
        (
            Tensor::<Cuda, f32, S>::full(-2.5)
                .unwrap()
                .to_vec()
                .unwrap(),
            vec![-2.5; 12],
        ),
        (
            Tensor::<Cuda, f32, S>::arange(1.0, 0.5)
                .unwrap()
                .to_vec()
                .unwrap(),
            Tensor::<Cpu, f32, S>::arange(1.0, 0.5)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
    ];
    for (gpu, cpu) in pairs {
        assert_eq!(gpu, cpu);
    }
    let i = Tensor::<Cuda, i64, shape![5]>::arange(-3, 7).unwrap();
    assert_eq!(i.to_vec().unwrap(), vec![-3, 4, 11, 18, 25]);
}

/// `full` fills on the device, in every dtype and at every element width.
#[test]
fn full_fills_on_the_device() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    fn check<T: DType>(n: usize) {
        let v = fresh::<T>(1)[0];
        let x = Tensor::<Cuda, T, shape![_]>::full_dims(v, &[n]).unwrap();
        assert_eq!(x.to_vec().unwrap(), vec![v; n], "full {} {v:?}", T::KIND);
        let z = Tensor::<Cuda, T, shape![_, _]>::zeros_dims(&[n, 2]).unwrap();
        assert!(z.to_vec().unwrap().iter().all(|e| *e == T::zero()));
    }
    for n in [0, 1, 7, 100_003] {
        check::<f32>(n);
        check::<f64>(n);
        check::<f16>(n);
        check::<bf16>(n);
        check::<i32>(n);
        check::<i64>(n);
        check::<u8>(n);
        check::<bool>(n);
    }
}

#[test]
fn freed_tensors_go_to_the_cache() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !has_gpu() {
        return;
    }
    // 37 MiB: a size class the other tests here do not use.
    let n = (37 << 20) / 4;
    let before = cuda_memory_stats(0).unwrap();
    let x = Tensor::<Cuda, f32, shape![_]>::zeros_dims(&[n]).unwrap();
    let during = cuda_memory_stats(0).unwrap();
    assert!(during.allocated_bytes >= before.allocated_bytes + 4 * n);
    drop(x);
    let after = cuda_memory_stats(0).unwrap();
    assert!(after.cached_bytes >= 4 * n, "{after:?}");
    // The next tensor of that size reuses the block.
    let y = Tensor::<Cuda, f32, shape![_]>::ones_dims(&[n]).unwrap();
    assert_eq!(
        cuda_memory_stats(0).unwrap().device_allocations,
        after.device_allocations
    );
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 1.0));
    drop(y);
    cuda_empty_cache(0).unwrap();
    let s = cuda_memory_stats(0).unwrap();
    assert!(s.peak_allocated_bytes >= 4 * n);
}
