// A conv-net's head: `flatten` of [N, 16, 5, 5] gives 400 features, but the
// first linear layer's weight was sized for 256 (a 4x4 feature map).
use tensorfn::prelude::*;

tensor_fn! {
    fn head<const N: usize>(
        x: &Tensor<Cpu, f32, [N, 16, 10, 10]>,
        w: &Tensor<Cpu, f32, [256, 120]>,
        b: &Tensor<Cpu, f32, [120]>,
    ) -> Tensor<Cpu, f32, [N, 120]> {
        let x = max_pool2d(x, 2);
        relu(addmm(b, flatten(x, 1), w))
    }
}

fn main() {}
