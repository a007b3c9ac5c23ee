// Grouped-query `scaled_dot_product_attention`: 12 query heads cannot be
// shared out among 8 key and value heads (the error is on `key`), a value
// with other heads than the key is refused, and heads that differ without
// `enable_gqa = true` name the keyword.
use tensorfn::prelude::*;

tensor_fn! {
    fn uneven_groups<const B: usize, const T: usize>(
        query: &Tensor<Cuda, bf16, [B, 12, T, 64]>,
        key: &Tensor<Cuda, bf16, [B, 8, T, 64]>,
        value: &Tensor<Cuda, bf16, [B, 8, T, 64]>,
    ) -> Tensor<Cuda, bf16, [B, 12, T, 64]> {
        scaled_dot_product_attention(query, key, value, is_causal = true, enable_gqa = true)
    }

    fn value_heads<const T: usize>(
        q: &Tensor<Cpu, f32, [1, 8, T, 16]>,
        k: &Tensor<Cpu, f32, [1, 2, T, 16]>,
        v: &Tensor<Cpu, f32, [1, 4, T, 16]>,
    ) -> Tensor<Cpu, f32, [1, 8, T, 16]> {
        scaled_dot_product_attention(q, k, v, enable_gqa = true)
    }

    fn without_the_keyword<const T: usize>(
        q: &Tensor<Cpu, f32, [1, 8, T, 16]>,
        k: &Tensor<Cpu, f32, [1, 2, T, 16]>,
        v: &Tensor<Cpu, f32, [1, 2, T, 16]>,
    ) -> Tensor<Cpu, f32, [1, 8, T, 16]> {
        scaled_dot_product_attention(q, k, v)
    }
}

fn main() {}
