// Masks of `scaled_dot_product_attention`: one that does not broadcast to
// the scores `[.., L, S]`, one given with `is_causal = true` (PyTorch
// refuses the pair too), one of another float dtype, and a flag that is
// not a literal.
use tensorfn::prelude::*;

tensor_fn! {
    fn mask_shape<const L: usize, const S: usize>(
        q: &Tensor<Cpu, f32, [2, 4, L, 16]>,
        k: &Tensor<Cpu, f32, [2, 4, S, 16]>,
        v: &Tensor<Cpu, f32, [2, 4, S, 16]>,
        m: &Tensor<Cpu, bool, [S, L]>,
    ) -> Tensor<Cpu, f32, [2, 4, L, 16]> {
        scaled_dot_product_attention(q, k, v, attn_mask = m)
    }

    fn mask_and_causal(
        q: &Tensor<Cpu, f32, [4, 8, 16]>,
        m: &Tensor<Cpu, bool, [8, 8]>,
    ) -> Tensor<Cpu, f32, [4, 8, 16]> {
        scaled_dot_product_attention(q, q, q, attn_mask = m, is_causal = true)
    }

    fn mask_dtype(
        q: &Tensor<Cpu, f32, [4, 8, 16]>,
        m: &Tensor<Cpu, f16, [8, 8]>,
    ) -> Tensor<Cpu, f32, [4, 8, 16]> {
        scaled_dot_product_attention(q, q, q, m, scale = 0.125)
    }

    fn flag(
        q: &Tensor<Cpu, f32, [4, 8, 16]>,
        c: f32,
    ) -> Tensor<Cpu, f32, [4, 8, 16]> {
        scaled_dot_product_attention(q, q, q, is_causal = c)
    }
}

fn main() {}
