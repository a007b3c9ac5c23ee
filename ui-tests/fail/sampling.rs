// Sampling's mistakes: `topk` with a `k` past the dim (PyTorch: "selected
// index k out of range" at run time; here it does not build), draws from
// integer weights (PyTorch: "multinomial only supports floating-point
// dtypes for input"), more draws than categories without replacement, no
// seed, a `largest` that is not a `true`/`false` literal, and a gradient
// through `topk`'s indices.
use tensorfn::prelude::*;

tensor_fn! {
    fn too_many(logits: &Tensor<Cpu, f32, [4, 10]>) -> (Tensor<Cpu, f32, [4, 11]>, Tensor<Cpu, i64, [4, 11]>) {
        logits.topk(11)
    }

    fn along_rows(x: &Tensor<Cpu, f32, [3, 10]>) -> (Tensor<Cpu, f32, [5, 10]>, Tensor<Cpu, i64, [5, 10]>) {
        topk(x, 5, dim = 0)
    }

    fn int_weights(counts: &Tensor<Cpu, i64, [4, 10]>, seed: usize) -> Tensor<Cpu, i64, [4, 1]> {
        multinomial(counts, 1, seed = seed)
    }

    fn without_replacement(p: &Tensor<Cpu, f32, [4, 10]>) -> Tensor<Cpu, i64, [4, 12]> {
        p.multinomial(12, seed = 3)
    }

    fn no_seed(p: &Tensor<Cpu, f32, [4, 10]>) -> Tensor<Cpu, i64, [4, 2]> {
        p.multinomial(2, replacement = true)
    }

    fn smallest(x: &Tensor<Cpu, f32, [4, 10]>) -> (Tensor<Cpu, f32, [4, 2]>, Tensor<Cpu, i64, [4, 2]>) {
        x.topk(2, largest = 0)
    }

    #[grad(x)]
    fn through_topk(x: &Tensor<Cpu, f32, [4, 10]>) -> Tensor<Cpu, f32, []> {
        let (_, i) = x.topk(3);
        i.cast::<f32>().sum()
    }
}

fn main() {}
