//! Runs on every machine: without a usable GPU, moving a tensor to CUDA is
//! `Err(CudaUnavailable)` (never a panic) and the CPU keeps working; with
//! one, an ordinal past the last device is `CudaUnavailable` too.
//!
//! `CUDA_VISIBLE_DEVICES= cargo test -p tensorfn-runtime --test cuda unavailable::`
//! exercises the first branch on a GPU machine.

use tensorfn_runtime::{
    cuda_device_count, cuda_empty_cache, cuda_memory_stats, shape, Cpu, Cuda, Error, Tensor,
};

fn cpu_still_works() {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
    let r = Tensor::<Cpu, f64, shape![_]>::randn_dims(11, &[1000]).unwrap();
    let mean = r.to_vec().unwrap().iter().sum::<f64>() / 1000.0;
    assert!(mean.abs() < 0.2);
    let back: Tensor<Cpu, f32, shape![2, 3]> = x.to_device::<Cpu>().unwrap();
    assert_eq!(back.to_vec().unwrap()[5], 6.0);
}

fn assert_unavailable<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    match r {
        Err(Error::CudaUnavailable { reason }) => {
            assert!(!reason.is_empty(), "{what}: empty reason");
            let text = Error::CudaUnavailable { reason }.to_string();
            assert!(text.contains("CUDA is unavailable"), "{what}: {text}");
        }
        other => panic!("{what}: expected Err(CudaUnavailable), got {other:?}"),
    }
}

#[test]
fn cuda_is_unavailable_without_a_gpu_and_the_cpu_keeps_working() {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    match cuda_device_count() {
        Err(e) => {
            eprintln!("no CUDA device here ({e}): checking the CudaUnavailable paths");
            assert_unavailable("cuda_device_count", Err::<(), _>(e));
            assert_unavailable("to_device::<Cuda>", x.to_device::<Cuda>());
            // The failure is remembered, asked again, and for other ordinals.
            assert_unavailable("to_device::<Cuda> again", x.to_device::<Cuda>());
            assert_unavailable("to_device::<Cuda<1>>", x.to_device::<Cuda<1>>());
            assert_unavailable("zeros on Cuda", Tensor::<Cuda, f32, shape![4]>::zeros());
            assert_unavailable("cuda_memory_stats", cuda_memory_stats(0));
            assert_unavailable("cuda_empty_cache", cuda_empty_cache(0));
        }
        Ok(n) => {
            eprintln!("{n} CUDA device(s) here: checking a missing ordinal");
            assert_unavailable("to_device::<Cuda<64>>", x.to_device::<Cuda<64>>());
            let g = x.to_device::<Cuda>().unwrap();
            assert_eq!(g.to_cpu().unwrap().to_vec().unwrap(), x.to_vec().unwrap());
        }
    }
    cpu_still_works();
}
