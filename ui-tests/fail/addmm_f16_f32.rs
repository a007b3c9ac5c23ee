// Seed: f16 GPU tensors mixed with an f32 tensor in `addmm`.
use tensorfn::prelude::*;

tensor_fn! {
    fn step(
        gpu_result: &Tensor<Cuda, f16, [10, 10]>,
        gpu_matrix: &Tensor<Cuda, f16, [10, 10]>,
        gpu_tensor: &Tensor<Cuda, f32, [10, 10]>,
    ) -> Tensor<Cuda, f16, [10, 10]> {
        addmm(gpu_result, gpu_matrix, gpu_tensor)
    }
}

fn main() {}
