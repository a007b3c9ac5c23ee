// Implicit rank promotion meeting a size-1 dim: one operand gets a leading
// dim, then both grow, and the result is larger than either. The right
// programs are in `tests/pass/broadcast_promotion.rs`.
use tensorfn::prelude::*;

tensor_fn! {
    // A regression loss: `pred` is [N, 1], `target` is [N]; the difference
    // would be [N, N] and its mean a wrong number.
    fn mse<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, []> {
        let d = pred - target;
        (d * d).mean()
    }

    // A [B, 1, H, W] mask on a [B, H, W] image would give [B, B, H, W].
    fn masked<const B: usize>(mask: &Tensor<Cpu, f32, [B, 1, 8, 8]>, img: &Tensor<Cpu, f32, [B, 8, 8]>) -> Tensor<Cpu, f32, [B, B, 8, 8]> {
        mask * img
    }
}

fn main() {}
