// The shape mistakes of a transformer block that must not compile.
use tensorfn::prelude::*;

tensor_fn! {
    // A head split whose element count is wrong: 768 is 12 heads of 64,
    // not of 63.
    fn heads(qkv: &Tensor<Cuda, f32, [B, T, 768]>) -> Tensor<Cuda, f32, [B, T, 12, 63]> {
        qkv.reshape([B, T, 12, 63])
    }

    // Key-value heads shared by query heads: repeat_interleave makes 2
    // heads 8, not 6.
    fn shared(k: &Tensor<Cuda, f32, [B, 2, T, 64]>) -> Tensor<Cuda, f32, [B, 6, T, 64]> {
        k.repeat_interleave(4, 1)
    }

    // Only a dim of size 1 expands.
    fn widened(x: &Tensor<Cuda, f32, [B, 2, 64]>) -> Tensor<Cuda, f32, [B, 8, 64]> {
        x.expand([B, 8, 64])
    }

    // stack needs tensors of one shape.
    fn stacked(a: &Tensor<Cuda, f32, [4, 64]>, b: &Tensor<Cuda, f32, [4, 32]>) -> Tensor<Cuda, f32, [2, 4, 64]> {
        stack([a, b])
    }

    // The sample variance over a run-time dim has no static count.
    fn spread(x: &Tensor<Cuda, f32, [N, C]>) -> Tensor<Cuda, f32, [N]> {
        x.var(1)
    }

    // keepdim is a flag.
    fn kept(x: &Tensor<Cuda, f32, [N, 8]>) -> Tensor<Cuda, f32, [N, 1]> {
        x.sum(1, keepdim = 1)
    }
}

fn main() {}
