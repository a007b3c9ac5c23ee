// Tensors on cuda:0 and cuda:1 in one operation.
use tensorfn::prelude::*;

tensor_fn! {
    fn add(a: &Tensor<Cuda, f32, [8]>, b: &Tensor<Cuda<1>, f32, [8]>) -> Tensor<Cuda, f32, [8]> {
        a + b
    }
}

fn main() {}
