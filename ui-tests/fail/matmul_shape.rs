// `matmul` of [100, 200] and [300, 400]: the inner dims differ.
use tensorfn::prelude::*;

tensor_fn! {
    fn product(
        a: &Tensor<Cuda, f32, [100, 200]>,
        b: &Tensor<Cuda, f32, [300, 400]>,
    ) -> Tensor<Cuda, f32, [100, 400]> {
        matmul(a, b)
    }
}

fn main() {}
