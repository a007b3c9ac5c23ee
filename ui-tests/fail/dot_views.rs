// Seed: `torch.dot(a.view(-1), b.view(-1))` with a [100, 200] and b
// [200, 300]: 20000 against 60000 elements.
use tensorfn::prelude::*;

tensor_fn! {
    fn wrong_product(
        a: &Tensor<Cuda, f32, [100, 200]>,
        b: &Tensor<Cuda, f32, [200, 300]>,
    ) -> Tensor<Cuda, f32, []> {
        dot(a.view(-1), b.view(-1))
    }
}

fn main() {}
