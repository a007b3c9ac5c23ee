// Declared results that do not match what the body computes.
use tensorfn::prelude::*;

tensor_fn! {
    fn shape(x: &Tensor<Cpu, f32, [4, 3]>, w: &Tensor<Cpu, f32, [3, 5]>) -> Tensor<Cpu, f32, [4, 3]> {
        matmul(x, w)
    }

    fn dtype(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f16, [4]> {
        sin(x)
    }

    fn device(x: &Tensor<Cuda, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
        x * 2.0
    }
}

fn main() {}
