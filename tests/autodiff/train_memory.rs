//! The memory of a training step: `GRAD_PEAK_BYTES` (the joint graph's
//! static peak), `#[grad(.., recompute = true)]`, which lowers it and
//! leaves the gradients' bits unchanged, and the same figures over
//! run-time dims (`peak_bytes(dims..)` and its siblings).
// The plans' figures are constants: checked as a test, so that a failure
// names them, rather than as a const-evaluation error.
#![allow(clippy::assertions_on_constants)]
// The attention blocks take their weights one by one.
#![allow(clippy::too_many_arguments)]

use crate::common::rand_vec;
use tensorfn::prelude::*;

// `recompute = true`: the elementwise values the backward reads (here
// `tanh(a)`, `sigmoid(a)` and their product) are computed again in the
// backward from the kept product `a`, instead of kept from the forward.
macro_rules! gated_mlp {
    ($name:ident, $($recompute:tt)*) => {
        tensor_fn! {
            #[grad(w1, w2, ln_w $($recompute)*)]
            fn $name(
                x: &Tensor<Cpu, f32, [16, 8]>,
                ln_w: &Tensor<Cpu, f32, [8]>,
                w1: &Tensor<Cpu, f32, [8, 32]>,
                w2: &Tensor<Cpu, f32, [32, 8]>,
            ) -> Tensor<Cpu, f32, []> {
                let a = rms_norm(x, ln_w, 1e-5).matmul(w1);
                let h = tanh(a) * sigmoid(a);
                let y = h.matmul(w2);
                (y * y).mean()
            }
        }
    };
}
gated_mlp!(gated_kept,);
gated_mlp!(gated_recomputed, , recompute = true);
gated_mlp!(gated_kept_explicitly, , recompute = false);

#[test]
fn recompute_gives_the_same_bits_in_less_memory() {
    let t = |n: usize, seed: u64| -> Vec<f32> {
        rand_vec(n, seed, -1.5, 1.5)
            .into_iter()
            .map(|v| v as f32)
            .collect()
    };
    for seed in 0..3u64 {
        let x = Tensor::<Cpu, f32, shape![16, 8]>::from_vec(t(128, seed * 7 + 1)).unwrap();
        let ln_w = Tensor::<Cpu, f32, shape![8]>::from_vec(t(8, seed * 7 + 2)).unwrap();
        let w1 = Tensor::<Cpu, f32, shape![8, 32]>::from_vec(t(256, seed * 7 + 3)).unwrap();
        let w2 = Tensor::<Cpu, f32, shape![32, 8]>::from_vec(t(256, seed * 7 + 4)).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (v0, (a0, b0, c0)) = gated_kept::value_and_grad(&x, &ln_w, &w1, &w2).unwrap();
        let (v1, (a1, b1, c1)) = gated_recomputed::value_and_grad(&x, &ln_w, &w1, &w2).unwrap();
        assert_eq!(bits(&v0.to_vec().unwrap()), bits(&v1.to_vec().unwrap()));
        assert_eq!(
            bits(&a0.to_vec().unwrap()),
            bits(&a1.to_vec().unwrap()),
            "dw1"
        );
        assert_eq!(
            bits(&b0.to_vec().unwrap()),
            bits(&b1.to_vec().unwrap()),
            "dw2"
        );
        assert_eq!(
            bits(&c0.to_vec().unwrap()),
            bits(&c1.to_vec().unwrap()),
            "dln_w"
        );
    }
    // The forward is the same function either way.
    assert_eq!(gated_kept::PEAK_BYTES, gated_recomputed::PEAK_BYTES);
    assert_eq!(
        gated_kept::GRAD_PEAK_BYTES,
        gated_kept_explicitly::GRAD_PEAK_BYTES
    );
    // Kept: `tanh(a)`, `sigmoid(a)` and `h` (2 KiB each) live into the
    // backward; recomputed: `a` alone.
    assert!(
        gated_recomputed::GRAD_PEAK_BYTES < gated_kept::GRAD_PEAK_BYTES,
        "{} vs {}",
        gated_recomputed::GRAD_PEAK_BYTES,
        gated_kept::GRAD_PEAK_BYTES
    );
    assert!(gated_kept::GRAD_PEAK_BYTES > gated_kept::PEAK_BYTES);
    assert!(gated_kept::VJP_PEAK_BYTES > gated_kept::PEAK_BYTES);
}

// What a pullback keeps between `forward` and `backward`: the values the
// backward reads, alive across the cut. Both keep the norm's result,
// which `w1`'s gradient reads, and `y` (512 bytes each); recomputed: the
// product `a` (2 KiB), from which the backward computes the rest again;
// kept: `tanh(a)`, `sigmoid(a)` and `h` (2 KiB each) instead, whose rules
// need no `a`.
#[test]
fn pullback_keeps_what_the_backward_reads() {
    assert_eq!(gated_recomputed::PULLBACK_BYTES, 2048 + 512 + 512);
    assert_eq!(gated_kept::PULLBACK_BYTES, 3 * 2048 + 512 + 512);
    assert!(gated_kept::PULLBACK_BYTES <= gated_kept::VJP_PEAK_BYTES);
}

// `GRAD_PEAK_BYTES` of a small step, static and generic: at least the
// forward's peak, and the same for the generic one at `N = 4`.
tensor_fn! {
    #[grad(x)]
    fn square_sum(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, []> {
        (x * x).sum()
    }

    #[grad(x)]
    fn square_sum_generic<const N: usize>(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, []> {
        (x * x).sum()
    }
}

#[test]
fn grad_peak_bytes_counts_the_joint_graph() {
    assert!(square_sum::GRAD_PEAK_BYTES >= square_sum::PEAK_BYTES);
    // The loss and the 16-byte gradient are both returned.
    assert!(square_sum::GRAD_PEAK_BYTES >= 20);
    assert_eq!(
        square_sum_generic::peak_bytes::<4>(),
        square_sum::PEAK_BYTES
    );
    assert_eq!(
        square_sum_generic::grad_peak_bytes::<4>(),
        square_sum::GRAD_PEAK_BYTES
    );
}

// A plan's peak over run-time dims: the same candidates as the static
// plan, evaluated at the call's dims. One attention block written three
// ways (static dims, run-time dims, run-time dims with a dtype
// parameter) states the same figures at the same sizes.
macro_rules! attention_block {
    ($name:ident, [$($generics:tt)*], $t:ty, [$($sizes:tt)*], $b:tt, $s:tt, $nh:tt, $hd:tt) => {
        tensor_fn! {
            #[grad(x, ln_w, ln_b, attn_w, fc_w, proj_w)]
            fn $name $($generics)* (
                x: &Tensor<Cpu, $t, [$b, $s, $nh * $hd]>,
                $($sizes)*
                ln_w: &Tensor<Cpu, $t, [$nh * $hd]>,
                ln_b: &Tensor<Cpu, $t, [$nh * $hd]>,
                attn_w: &Tensor<Cpu, $t, [$nh * $hd, 3 * $nh * $hd]>,
                fc_w: &Tensor<Cpu, $t, [$nh * $hd, 4 * $nh * $hd]>,
                proj_w: &Tensor<Cpu, $t, [4 * $nh * $hd, $nh * $hd]>,
            ) -> Tensor<Cpu, $t, [$b, $s, $nh * $hd]> {
                let h = layer_norm(x, ln_w, ln_b, 1e-5).reshape([$b * $s, $nh * $hd]);
                let qkv = matmul(h, attn_w).reshape([$b, $s, 3, $nh, $hd]);
                let q = qkv.narrow(2, 0, 1).reshape([$b, $s, $nh, $hd]).permute([0, 2, 1, 3]);
                let k = qkv.narrow(2, 1, 1).reshape([$b, $s, $nh, $hd]).permute([0, 2, 1, 3]);
                let v = qkv.narrow(2, 2, 1).reshape([$b, $s, $nh, $hd]).permute([0, 2, 1, 3]);
                let heads = scaled_dot_product_attention(q, k, v, is_causal = true);
                let a = heads.permute([0, 2, 1, 3]).reshape([$b * $s, $nh * $hd]);
                let up = gelu(matmul(a, fc_w));
                x + matmul(up, proj_w).reshape([$b, $s, $nh * $hd])
            }
        }
    };
}
attention_block!(block_static, [], f32, [], 2, 3, 2, 4);
attention_block!(block_runtime, [], f32, [nh: usize, hd: usize,], B, S, nh, hd);
attention_block!(block_generic, [<T: Float>], T, [nh: usize, hd: usize,], B, S, nh, hd);

#[test]
fn run_time_peaks_equal_the_static_plan_at_the_same_dims() {
    // Arguments in the order the signature names the dims: `B`, `S`, `nh`, `hd`.
    let (b, s, nh, hd) = (2, 3, 2, 4);
    let figures = |name: &str, dynamic: usize, generic: usize, fixed: usize| {
        assert_eq!(dynamic, fixed, "{name}: run-time dims against static");
        assert_eq!(generic, fixed, "{name}: dtype parameter against static");
        assert!(fixed > 0, "{name}");
    };
    figures(
        "peak_bytes",
        block_runtime::peak_bytes(b, s, nh, hd),
        block_generic::peak_bytes::<f32>(b, s, nh, hd),
        block_static::PEAK_BYTES,
    );
    figures(
        "vjp_peak_bytes",
        block_runtime::vjp_peak_bytes(b, s, nh, hd),
        block_generic::vjp_peak_bytes::<f32>(b, s, nh, hd),
        block_static::VJP_PEAK_BYTES,
    );
    figures(
        "pullback_bytes",
        block_runtime::pullback_bytes(b, s, nh, hd),
        block_generic::pullback_bytes::<f32>(b, s, nh, hd),
        block_static::PULLBACK_BYTES,
    );
    // The dtype's size scales every tensor the plan allocates; the
    // attention's f32 log-sum-exps (`B * nh * S` of them) stay f32.
    let lse = 4 * b * nh * s;
    assert_eq!(
        block_generic::pullback_bytes::<f64>(b, s, nh, hd) - lse,
        2 * (block_generic::pullback_bytes::<f32>(b, s, nh, hd) - lse)
    );
    // Evaluated at each call's dims, not fixed at one: the block's
    // figures grow with the batch, and are usable in constants.
    const AT_B8: usize = block_runtime::vjp_peak_bytes(8, 3, 2, 4);
    assert!(AT_B8 > block_runtime::vjp_peak_bytes(2, 3, 2, 4));
}

// `GRAD_PEAK_BYTES` (a 0-d result) over a run-time batch.
tensor_fn! {
    #[grad(w)]
    fn gated_loss_batch(x: &Tensor<Cpu, f32, [B, 8]>, w: &Tensor<Cpu, f32, [8, 32]>) -> Tensor<Cpu, f32, []> {
        let a = x.matmul(w);
        (tanh(a) * sigmoid(a)).mean()
    }

    #[grad(w)]
    fn gated_loss_16(x: &Tensor<Cpu, f32, [16, 8]>, w: &Tensor<Cpu, f32, [8, 32]>) -> Tensor<Cpu, f32, []> {
        let a = x.matmul(w);
        (tanh(a) * sigmoid(a)).mean()
    }
}

#[test]
fn run_time_grad_peak_equals_the_static_one() {
    assert_eq!(
        gated_loss_batch::grad_peak_bytes(16),
        gated_loss_16::GRAD_PEAK_BYTES
    );
    assert_eq!(gated_loss_batch::peak_bytes(16), gated_loss_16::PEAK_BYTES);
    assert!(gated_loss_batch::grad_peak_bytes(32) > gated_loss_16::GRAD_PEAK_BYTES);
}

// A hand-counted case: `layer_norm` writes an `R x N` f32 buffer and
// the `sin` kernel reading it a second one; both are live at that step.
tensor_fn! {
    fn norm_sin(x: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [R, N]> {
        sin(layer_norm(x, w, b, 1e-5))
    }
}

#[test]
fn run_time_peak_counts_the_planned_buffers() {
    for (r, n) in [(0, 4), (1, 1), (3, 5), (64, 768)] {
        assert_eq!(
            norm_sin::peak_bytes(r, n),
            2 * r * n * 4,
            "R = {r}, N = {n}"
        );
    }
}
