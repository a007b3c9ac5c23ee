// Seed: `cat` of [2, 3, 4] and [2, 5, 4]. Along dim 1 that is valid (see
// tests/pass/seeds_cat.rs); along dim 0 the other dims must agree.
use tensorfn::prelude::*;

tensor_fn! {
    fn join(
        tensor_a: &Tensor<Cuda, f32, [2, 3, 4]>,
        tensor_b: &Tensor<Cuda, f32, [2, 5, 4]>,
    ) -> Tensor<Cuda, f32, [4, 3, 4]> {
        cat([tensor_a, tensor_b], 0)
    }
}

fn main() {}
