// `conv2d`/`conv1d` shape errors, each on the operand at fault: an output
// size below 1 (with how it was computed), input channels that do not
// match the weight times `groups`, channels `groups` does not divide, a
// bias of another length, a missing batch dim, and the flatten of a size
// a stride of 2 rounds down at run time into a literal `in_features`.
use tensorfn::prelude::*;

tensor_fn! {
    fn kernel_too_big(
        x: &Tensor<Cpu, f32, [1, 3, 5, 5]>,
        w: &Tensor<Cpu, f32, [8, 3, 7, 7]>,
    ) -> Tensor<Cpu, f32, [1, 8, 1, 1]> {
        conv2d(x, w)
    }

    fn channels(
        x: &Tensor<Cpu, f32, [2, 4, 8, 8]>,
        w: &Tensor<Cpu, f32, [8, 3, 3, 3]>,
    ) -> Tensor<Cpu, f32, [2, 8, 6, 6]> {
        conv2d(x, w, groups = 2)
    }

    fn groups_divide(
        x: &Tensor<Cpu, f32, [2, 6, 8, 8]>,
        w: &Tensor<Cpu, f32, [8, 1, 3, 3]>,
    ) -> Tensor<Cpu, f32, [2, 8, 6, 6]> {
        conv2d(x, w, groups = 6)
    }

    fn bias_length(
        x: &Tensor<Cpu, f32, [2, 3, 8]>,
        w: &Tensor<Cpu, f32, [4, 3, 3]>,
        b: &Tensor<Cpu, f32, [3]>,
    ) -> Tensor<Cpu, f32, [2, 4, 6]> {
        conv1d(x, w, b)
    }

    fn no_batch(
        x: &Tensor<Cpu, f32, [3, 8, 8]>,
        w: &Tensor<Cpu, f32, [4, 3, 3, 3]>,
    ) -> Tensor<Cpu, f32, [4, 6, 6]> {
        conv2d(x, w, padding = (1, 1))
    }

    fn symbolic_stride(
        x: &Tensor<Cpu, f32, [B, 3, H, 8]>,
        w: &Tensor<Cpu, f32, [4, 3, 3, 3]>,
        fc: &Tensor<Cpu, f32, [64, 10]>,
    ) -> Tensor<Cpu, f32, [B, 10]> {
        matmul(conv2d(x, w, stride = 2, padding = 1).flatten(1), fc)
    }

    fn bad_options(
        x: &Tensor<Cpu, f32, [1, 3, 8, 8]>,
        w: &Tensor<Cpu, f32, [4, 3, 2, 2]>,
    ) -> Tensor<Cpu, f32, [1, 4, 8, 8]> {
        conv2d(x, w, stride = (1, 1, 1), padding = "same")
    }
}

fn main() {}
