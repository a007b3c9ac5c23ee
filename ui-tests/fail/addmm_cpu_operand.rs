// Seed: `torch.addmm(gpu_result, gpu_matrix, cpu_tensor)` with one operand
// left on the CPU fails late with cudaErrorInvalidValue.
use tensorfn::prelude::*;

tensor_fn! {
    fn step(
        gpu_result: &Tensor<Cuda, f32, [10, 10]>,
        gpu_matrix: &Tensor<Cuda, f32, [10, 10]>,
        cpu_tensor: &Tensor<Cpu, f32, [10, 10]>,
    ) -> Tensor<Cuda, f32, [10, 10]> {
        addmm(gpu_result, gpu_matrix, cpu_tensor)
    }

    fn bias_left_behind(
        bias: &Tensor<Cpu, f32, [10]>,
        m1: &Tensor<Cuda, f32, [4, 10]>,
        m2: &Tensor<Cuda, f32, [10, 10]>,
    ) -> Tensor<Cuda, f32, [4, 10]> {
        addmm(bias, m1, m2)
    }
}

fn main() {}
