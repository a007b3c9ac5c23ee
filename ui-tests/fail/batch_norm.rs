// Misuses of `batch_norm`: a running statistic, a weight or a bias that
// is not `[C]` for the input's dim 1, an input of rank 1, an integer
// input, and a negative eps.
use tensorfn::prelude::*;

tensor_fn! {
    fn wrong_stat(
        x: &Tensor<Cpu, f32, [8, 64, 7, 7]>,
        m: &Tensor<Cpu, f32, [32]>,
        v: &Tensor<Cpu, f32, [64]>,
    ) -> Tensor<Cpu, f32, [8, 64, 7, 7]> {
        batch_norm(x, m, v)
    }

    fn wrong_bias<const N: usize>(
        x: &Tensor<Cpu, f32, [N, 16]>,
        m: &Tensor<Cpu, f32, [16]>,
        w: &Tensor<Cpu, f32, [16]>,
        b: &Tensor<Cpu, f32, [N, 16]>,
    ) -> Tensor<Cpu, f32, [N, 16]> {
        batch_norm(x, m, m, weight = w, bias = b, training = true)
    }

    fn rank_one(x: &Tensor<Cpu, f32, [64]>, m: &Tensor<Cpu, f32, [64]>) -> Tensor<Cpu, f32, [64]> {
        batch_norm(x, m, m)
    }

    fn ints(x: &Tensor<Cpu, i64, [4, 8]>, m: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, i64, [4, 8]> {
        batch_norm(x, m, m, None, None, true)
    }

    fn negative_eps(x: &Tensor<Cpu, f32, [4, 8]>, m: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [4, 8]> {
        batch_norm(x, m, m, eps = -1e-5)
    }
}

fn main() {}
