// Misuses of `cross_entropy`: targets of another batch, float targets,
// integer logits, logits without a class dim, a reduction PyTorch does
// not have, a label smoothing outside [0, 1], targets on another device.
use tensorfn::prelude::*;

tensor_fn! {
    fn batch<const B: usize>(x: &Tensor<Cpu, f32, [B, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y)
    }

    fn float_targets(x: &Tensor<Cpu, f32, [8, 10]>, y: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y)
    }

    fn int_logits(x: &Tensor<Cpu, i64, [8, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, i64, []> {
        cross_entropy(x, y)
    }

    fn no_classes(x: &Tensor<Cpu, f32, [8]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y)
    }

    fn reduction(x: &Tensor<Cpu, f32, [8, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y, reduction = "avg")
    }

    fn smoothing(x: &Tensor<Cpu, f32, [8, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y, label_smoothing = 1.5)
    }

    fn device(x: &Tensor<Cuda, f32, [8, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cuda, f32, []> {
        cross_entropy(x, y)
    }

    fn rows_kept(x: &Tensor<Cpu, f32, [8, 10]>, y: &Tensor<Cpu, i64, [8]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x, y, reduction = "none")
    }
}

fn main() {}
