// A reshape keeps the elements in order: a target that lists the dims in
// another order mixes them instead of moving them. The right programs are
// in `tests/pass/reshape_reorder.rs`.
use tensorfn::prelude::*;

tensor_fn! {
    // The attention output [B, H, T, Dh] flattened to [B, T, C] without
    // moving the heads next to the head dim first.
    fn merge_heads<const B: usize, const H: usize, const T: usize, const Dh: usize>(
        y: &Tensor<Cpu, f32, [B, H, T, Dh]>,
    ) -> Tensor<Cpu, f32, [B, T, H * Dh]> {
        y.reshape([B, T, H * Dh])
    }

    // [B, T, C] viewed as [B, H, T, Dh]: the heads have to be split off
    // C first.
    fn split_heads<const B: usize, const H: usize, const T: usize, const Dh: usize>(
        x: &Tensor<Cpu, f32, [B, T, H * Dh]>,
    ) -> Tensor<Cpu, f32, [B, H, T, Dh]> {
        x.view([B, H, T, Dh])
    }

    // [H, B, L, d] viewed as [B, L, -1].
    fn heads_last<const H: usize, const B: usize, const L: usize, const D: usize>(
        x: &Tensor<Cpu, f32, [H, B, L, D]>,
    ) -> Tensor<Cpu, f32, [B, L, H * D]> {
        x.view([B, L, -1])
    }

    // The same bug with literal heads (12 x 64 = 768).
    fn literal_heads<const B: usize, const T: usize>(
        y: &Tensor<Cpu, f32, [B, 12, T, 64]>,
    ) -> Tensor<Cpu, f32, [B, T, 768]> {
        y.reshape([B, T, 768])
    }
}

fn main() {}
