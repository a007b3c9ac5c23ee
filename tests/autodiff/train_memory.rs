//! The memory of a training step: `GRAD_PEAK_BYTES` (the joint graph's
//! static peak) and `#[grad(.., recompute = true)]`, which lowers it and
//! leaves the gradients' bits unchanged.
// The plans' figures are constants: checked as a test, so that a failure
// names them, rather than as a const-evaluation error.
#![allow(clippy::assertions_on_constants)]

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
