// Seed: `for i in range(11): y[i, j] = x[i, j] * 2` reads x[10, j] of a
// [10, 10] GPU tensor: an out-of-bounds access.
use tensorfn::prelude::*;

tensor_fn! {
    fn last_row(x: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, [10]> {
        x[10] * 2.0
    }

    fn element(x: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, []> {
        x[3, 10] * 2.0
    }
}

fn main() {}
