// Seed: `y = x.view(x.numel() + 1)` on a [1000, 1000] tensor, which later
// corrupts memory and fails in cuBLAS.
use tensorfn::prelude::*;

tensor_fn! {
    fn corrupt(x: &Tensor<Cuda, f32, [1000, 1000]>) -> Tensor<Cuda, f32, [1000001]> {
        x.view([1000001])
    }
}

fn main() {}
