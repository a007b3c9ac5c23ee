// Pooling options checked at compile time: an output size below 1, padding
// over half the window, the wrong rank, an integer dtype, `ceil_mode` over
// a symbolic size (only a number says where the last window starts), a bad
// literal.
use tensorfn::prelude::*;

tensor_fn! {
    fn too_small(x: &Tensor<Cpu, f32, [8, 3, 4, 4]>) -> Tensor<Cpu, f32, [8, 3, 1, 1]> {
        max_pool2d(x, 5)
    }

    fn too_much_padding(x: &Tensor<Cpu, f32, [8, 3, 9, 9]>) -> Tensor<Cpu, f32, [8, 3, 5, 5]> {
        avg_pool2d(x, 2, padding = 2)
    }

    fn wrong_rank(x: &Tensor<Cpu, f32, [8, 9]>) -> Tensor<Cpu, f32, [4, 4]> {
        max_pool2d(x, 2)
    }

    fn integers(x: &Tensor<Cpu, i64, [8, 3, 4, 4]>) -> Tensor<Cpu, i64, [8, 3, 2, 2]> {
        max_pool2d(x, 2)
    }

    fn symbolic<const H: usize>(x: &Tensor<Cpu, f32, [8, 3, H, 4]>) -> Tensor<Cpu, f32, [8, 3, 2, 2]> {
        max_pool2d(x, 2, ceil_mode = true)
    }

    fn bad_literal(x: &Tensor<Cpu, f32, [8, 3, 4, 4]>) -> Tensor<Cpu, f32, [8, 3, 2, 2]> {
        max_pool2d(x, 2.5)
    }

    fn zero_output(x: &Tensor<Cpu, f32, [8, 3, 4, 4]>) -> Tensor<Cpu, f32, [8, 3, 1, 1]> {
        adaptive_avg_pool2d(x, [1, 0])
    }

    fn too_small_ceil(x: &Tensor<Cpu, f32, [8, 3, 4, 2]>) -> Tensor<Cpu, f32, [8, 3, 1, 1]> {
        max_pool2d(x, 3, stride = 2, dilation = 2, ceil_mode = true)
    }
}

fn main() {}
