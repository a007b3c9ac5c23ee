// Misuses of `layer_norm` and `rms_norm`: a weight or a bias that is not
// of the input's last dim, an integer input, a scalar input, a negative
// eps, and a weight on another device.
use tensorfn::prelude::*;

tensor_fn! {
    fn wrong_weight<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 768]>,
        w: &Tensor<Cpu, f32, [B]>,
        b: &Tensor<Cpu, f32, [768]>,
    ) -> Tensor<Cpu, f32, [B, 768]> {
        layer_norm(x, w, b, eps = 1e-5)
    }

    fn wrong_bias(
        x: &Tensor<Cpu, f32, [4, 8, 64]>,
        w: &Tensor<Cpu, f32, [64]>,
        b: &Tensor<Cpu, f32, [8, 64]>,
    ) -> Tensor<Cpu, f32, [4, 8, 64]> {
        x.layer_norm(w, b)
    }

    fn ints(x: &Tensor<Cpu, i64, [4, 8]>, w: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, i64, [4, 8]> {
        rms_norm(x, w)
    }

    fn scalar(x: &Tensor<Cpu, f32, []>, w: &Tensor<Cpu, f32, [1]>) -> Tensor<Cpu, f32, []> {
        x.rms_norm(w)
    }

    fn negative_eps(x: &Tensor<Cpu, f32, [4, 8]>, w: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [4, 8]> {
        rms_norm(x, w, eps = -1e-6)
    }

    fn elsewhere(x: &Tensor<Cuda, bf16, [4, 8]>, w: &Tensor<Cpu, bf16, [8]>) -> Tensor<Cuda, bf16, [4, 8]> {
        x.rms_norm(w, 1e-6)
    }
}

fn main() {}
