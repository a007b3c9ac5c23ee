// `scaled_dot_product_attention` with a key whose head dim is not the
// query's (the error is on `key`, naming both), and a value with fewer
// rows than there are keys.
use tensorfn::prelude::*;

tensor_fn! {
    fn head_dims<const B: usize, const T: usize>(
        query: &Tensor<Cuda, bf16, [B, 12, T, 64]>,
        key: &Tensor<Cuda, bf16, [B, 12, T, 32]>,
        value: &Tensor<Cuda, bf16, [B, 12, T, 64]>,
    ) -> Tensor<Cuda, bf16, [B, 12, T, 64]> {
        scaled_dot_product_attention(query, key, value, is_causal = true)
    }

    fn too_few_values<const T: usize>(
        q: &Tensor<Cpu, f32, [4, T, 16]>,
        k: &Tensor<Cpu, f32, [4, T, 16]>,
        v: &Tensor<Cpu, f32, [4, 7, 16]>,
    ) -> Tensor<Cpu, f32, [4, T, 16]> {
        scaled_dot_product_attention(q, k, v)
    }

    fn int_query(
        q: &Tensor<Cpu, i64, [4, 8]>,
        k: &Tensor<Cpu, i64, [4, 8]>,
    ) -> Tensor<Cpu, i64, [4, 8]> {
        scaled_dot_product_attention(q, k, k)
    }
}

fn main() {}
