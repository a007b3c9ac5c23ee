// Seed: `torch.cat((cpu_tensor, gpu_tensor), dim=0)` ends in an illegal
// memory access.
use tensorfn::prelude::*;

tensor_fn! {
    fn join(
        cpu_tensor: &Tensor<Cpu, f32, [2, 3]>,
        gpu_tensor: &Tensor<Cuda, f32, [2, 3]>,
    ) -> Tensor<Cuda, f32, [4, 3]> {
        cat([cpu_tensor, gpu_tensor], 0)
    }
}

fn main() {}
