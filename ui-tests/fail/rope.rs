// Misuses of `rope`: tables of other positions, an odd head dim, a
// vector input, integers.
use tensorfn::prelude::*;

tensor_fn! {
    fn positions<const T: usize>(
        q: &Tensor<Cpu, f32, [2, 12, T, 64]>,
        cos: &Tensor<Cpu, f32, [2048, 64]>,
        sin: &Tensor<Cpu, f32, [2048, 64]>,
    ) -> Tensor<Cpu, f32, [2, 12, T, 64]> {
        rope(q, cos, sin)
    }

    fn odd(q: &Tensor<Cpu, f32, [4, 7]>, t: &Tensor<Cpu, f32, [4, 7]>) -> Tensor<Cpu, f32, [4, 7]> {
        rope(q, t, t)
    }

    fn vector(q: &Tensor<Cpu, f32, [8]>, t: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [8]> {
        rope(q, t, t)
    }

    fn ints(q: &Tensor<Cpu, i32, [4, 8]>, t: &Tensor<Cpu, i32, [4, 8]>) -> Tensor<Cpu, i32, [4, 8]> {
        rope(q, t, t)
    }
}

fn main() {}
