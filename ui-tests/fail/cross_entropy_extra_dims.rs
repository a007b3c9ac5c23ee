// PyTorch's K-dimensional `cross_entropy`: logits [N, C, d1, .., dk]
// against targets [N, d1, .., dk]. Targets whose extra dims differ from
// the logits', or that keep the class dim, are spanned errors naming the
// dim.
use tensorfn::prelude::*;

tensor_fn! {
    fn extra_dim(x: &Tensor<Cpu, f32, [8, 10, 5, 6]>, y: &Tensor<Cpu, i64, [8, 5, 7]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y)
    }

    fn class_dim_kept(x: &Tensor<Cpu, f32, [8, 10, 5]>, y: &Tensor<Cpu, i64, [8, 10, 5]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y)
    }

    fn run_time_dim(x: &Tensor<Cpu, f32, [N, 10, L]>, y: &Tensor<Cpu, i64, [N, M]>) -> Tensor<Cpu, f32, [N, L]> {
        cross_entropy(x, y, reduction = "none")
    }
}

fn main() {}
