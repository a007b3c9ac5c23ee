//! Tensors moving between two GPUs (cuda:0 and cuda:1): copies of every
//! dtype and of strided views, and work on the second GPU afterwards.
//! Skips with a notice unless two GPUs are present.

use crate::gpu;
use gpu::fresh;

use tensorfn_runtime::{bf16, f16, shape, Cpu, Cuda, DType, Tensor};

fn across<T: DType>(dims: [usize; 2]) {
    let data: Vec<T> = fresh(dims[0] * dims[1]);
    let x = Tensor::<Cpu, T, shape![_, _]>::from_vec_dims(data.clone(), &dims).unwrap();
    let on0 = x.to_device::<Cuda<0>>().unwrap();
    let on1 = on0.to_device::<Cuda<1>>().unwrap();
    assert_eq!(on1.to_vec().unwrap(), data, "{} cuda:0 -> cuda:1", T::KIND);
    let back = on1.to_device::<Cuda<0>>().unwrap();
    assert_eq!(back.to_vec().unwrap(), data, "{} cuda:1 -> cuda:0", T::KIND);

    // A transposed view is gathered on the way.
    let t = on0.t().unwrap().to_device::<Cuda<1>>().unwrap();
    let want = x.t().unwrap().contiguous().unwrap().to_vec().unwrap();
    assert_eq!(t.to_vec().unwrap(), want, "{} transposed view", T::KIND);
}

#[test]
fn every_dtype_crosses_between_gpus() {
    if !gpu::has_gpus(2) {
        return;
    }
    for dims in [[3, 5], [0, 4], [1000, 1001]] {
        across::<f32>(dims);
        across::<f64>(dims);
        across::<f16>(dims);
        across::<bf16>(dims);
        across::<i32>(dims);
        across::<i64>(dims);
        across::<u8>(dims);
        across::<bool>(dims);
    }
}

#[test]
fn work_continues_on_the_second_gpu() {
    if !gpu::has_gpus(2) {
        return;
    }
    let a = Tensor::<Cpu, f32, shape![64, 32]>::from_vec(fresh(64 * 32)).unwrap();
    let b = Tensor::<Cpu, f32, shape![32, 16]>::from_vec(fresh(32 * 16)).unwrap();
    let want = a.matmul(&b).unwrap().relu().unwrap().to_vec().unwrap();
    let a1 = a
        .to_device::<Cuda<0>>()
        .unwrap()
        .to_device::<Cuda<1>>()
        .unwrap();
    let b1 = b.to_device::<Cuda<1>>().unwrap();
    let got = a1.matmul(&b1).unwrap().relu().unwrap().to_vec().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "GPU {g}, CPU {w}");
    }
}
