// Reductions along a dim of static size 1 compute nothing: `argmax` of a
// single logit is always 0, `softmax` over the batch dim of a [1, C]
// tensor is all ones. The right programs are in `tests/pass/reduce_size_one.rs`.
use tensorfn::prelude::*;

tensor_fn! {
    fn predict<const B: usize>(logits: &Tensor<Cpu, f32, [B, 1]>) -> Tensor<Cpu, i64, [B]> {
        logits.argmax(1)
    }

    fn probs(logits: &Tensor<Cpu, f32, [1, 10]>) -> Tensor<Cpu, f32, [1, 10]> {
        logits.softmax(0)
    }

    fn total<const N: usize>(x: &Tensor<Cpu, f32, [N, 1]>) -> Tensor<Cpu, f32, [N]> {
        x.sum(-1)
    }
}

fn main() {}
