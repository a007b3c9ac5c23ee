// Seed: `torch.addmm(gpu_result, gpu_matrix, gpu_vector)` with a 1-D
// `gpu_vector` where `addmm` needs a matrix.
use tensorfn::prelude::*;

tensor_fn! {
    fn step(
        gpu_result: &Tensor<Cuda, f32, [10, 10]>,
        gpu_matrix: &Tensor<Cuda, f32, [10, 10]>,
        gpu_vector: &Tensor<Cuda, f32, [10]>,
    ) -> Tensor<Cuda, f32, [10, 10]> {
        addmm(gpu_result, gpu_matrix, gpu_vector)
    }
}

fn main() {}
