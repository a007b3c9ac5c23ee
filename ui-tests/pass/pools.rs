// Pooling and `flatten` in a small conv-net head: every output size is
// computed at compile time.
use tensorfn::prelude::*;

tensor_fn! {
    fn head<D: Device, const N: usize>(
        x: &Tensor<D, f32, [N, 16, 10, 10]>,
        w: &Tensor<D, f32, [400, 10]>,
        b: &Tensor<D, f32, [10]>,
    ) -> (Tensor<D, f32, [N, 10]>, Tensor<D, f32, [N, 16]>) {
        let x = max_pool2d(x, kernel_size = 3, stride = 2, padding = 1, ceil_mode = true);
        let y = avg_pool2d(x, 2, stride = 1, count_include_pad = false);
        let z = adaptive_avg_pool2d(y, 1).flatten(1);
        (addmm(b, flatten(y, 1), w), z)
    }
}

fn main() {}
