// Seed: `torch.addcmul(y, 1, x, x)` with `x` i32 and `y` f32.
use tensorfn::prelude::*;

tensor_fn! {
    fn update(
        y: &Tensor<Cuda, f32, [5, 5]>,
        x: &Tensor<Cuda, i32, [5, 5]>,
    ) -> Tensor<Cuda, f32, [5, 5]> {
        addcmul(y, x, x, 1)
    }

    // The seed's argument order (the deprecated `addcmul(input, value, t1, t2)`).
    fn old_order(
        y: &Tensor<Cuda, f32, [5, 5]>,
        x: &Tensor<Cuda, f32, [5, 5]>,
    ) -> Tensor<Cuda, f32, [5, 5]> {
        addcmul(y, 1, x, x)
    }
}

fn main() {}
