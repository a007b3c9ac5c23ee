//! `name::forward` and `Pullback::backward`: `vjp` split where its
//! backward starts. On seeded random inputs (several seeds per case), the
//! value and every gradient are the bits `vjp` gives, for a parameter
//! struct layer with products, a norm and GELU, attention, `recompute =
//! true`, a dtype- and batch-generic layer in two dtypes, dims known only
//! at run time, and a loss with a 0-d `grad_output`; a chain of layers run
//! forward once with its pullbacks kept, then backward in reverse, against
//! the chain of `vjp`s; and the bytes a pullback keeps.

use crate::common::*;
use tensorfn::prelude::*;
use tensorfn::{Params, Shape};

fn tensor_dims<S: Shape>(v: &[f64], dims: &[usize]) -> Tensor<Cpu, f64, S> {
    Tensor::from_vec_dims(v.to_vec(), dims).unwrap()
}

/// Every tensor of `p` by name, as its little-endian bytes.
fn bits<P: Params>(p: &P) -> Vec<(String, Vec<u8>)> {
    p.tensors()
        .into_iter()
        .map(|(n, t)| (n, t.to_le_bytes().unwrap()))
        .collect()
}

/// Asserts that `a` and `b` hold the same bits, tensor by tensor.
fn same_bits<P: Params>(what: &str, a: &P, b: &P) {
    let (a, b) = (bits(a), bits(b));
    assert_eq!(a.len(), b.len(), "{what}: tensor count");
    for ((na, ba), (nb, bb)) in a.iter().zip(&b) {
        assert_eq!(na, nb, "{what}: names");
        assert!(ba == bb, "{what}: `{na}` differs from `vjp`'s");
    }
}

tensor_fn! {
    /// A pre-norm residual MLP block, as in a transformer.
    #[grad(x, p)]
    fn block(x: &Tensor<Cpu, f64, [2, 3, 8]>, p: &Block<Cpu, f64>) -> Tensor<Cpu, f64, [2, 3, 8]> {
        let h = layer_norm(x, p.ln_w, p.ln_b, 1e-5);
        let h = gelu(matmul(h, p.fc) + p.fc_b);
        x + matmul(h, p.proj) + p.proj_b
    }

    /// The same block recomputing its elementwise values in the backward.
    #[grad(x, p, recompute = true)]
    fn block_recomputed(x: &Tensor<Cpu, f64, [2, 3, 8]>, p: &Block<Cpu, f64>) -> Tensor<Cpu, f64, [2, 3, 8]> {
        let h = layer_norm(x, p.ln_w, p.ln_b, 1e-5);
        let h = gelu(matmul(h, p.fc) + p.fc_b);
        x + matmul(h, p.proj) + p.proj_b
    }

    /// Causal self-attention over projections of `x`.
    #[grad(x, wq, wk, wv)]
    fn attention(x: &Tensor<Cpu, f64, [2, 5, 4]>, wq: &Tensor<Cpu, f64, [4, 4]>, wk: &Tensor<Cpu, f64, [4, 4]>, wv: &Tensor<Cpu, f64, [4, 4]>) -> Tensor<Cpu, f64, [2, 5, 4]> {
        let q = matmul(x, wq);
        let k = matmul(x, wk);
        let v = matmul(x, wv);
        scaled_dot_product_attention(q, k, v, is_causal = true) * x
    }

    /// A layer generic over its device, dtype and batch.
    #[grad(x, p)]
    fn linear<D: Device, T: Float, const B: usize>(x: &Tensor<D, T, [B, 4]>, p: &Lin<D, T>) -> Tensor<D, T, [B, 3]> {
        tanh(addmm(p.b, x, p.w))
    }

    /// A norm over dims known only at run time.
    #[grad(x, w, b)]
    fn ln_runtime(x: &Tensor<Cpu, f64, [R, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [R, N]> {
        sin(layer_norm(x, w, b, 1e-5))
    }

    /// A loss: its `grad_output` is 0-d.
    #[grad(x)]
    fn loss(x: &Tensor<Cpu, f64, [3, 4]>) -> Tensor<Cpu, f64, []> {
        (sin(x) * x).sum()
    }

    /// One layer of a chain.
    #[grad(x, p)]
    fn dense(x: &Tensor<Cpu, f64, [5, 4]>, p: &Dense<Cpu, f64>) -> Tensor<Cpu, f64, [5, 4]> {
        tanh(addmm(p.b, x, p.w))
    }

    /// Attention alone: its backward reads the value and the rows'
    /// log-sum-exps; the arguments are borrowed.
    #[grad(q, k, v)]
    fn attention_only(q: &Tensor<Cpu, f64, [2, 3, 4]>, k: &Tensor<Cpu, f64, [2, 5, 4]>, v: &Tensor<Cpu, f64, [2, 5, 4]>) -> Tensor<Cpu, f64, [2, 3, 4]> {
        scaled_dot_product_attention(q, k, v)
    }

    /// `tanh` of a product: its backward reads the value.
    #[grad(x, s)]
    fn scaled(x: &Tensor<Cpu, f64, [3, 4]>, s: &Tensor<Cpu, f64, [4]>) -> Tensor<Cpu, f64, [3, 4]> {
        tanh(x * s)
    }
}

fn block_params(seed: u64) -> Block<Cpu, f64> {
    Block {
        ln_w: tensor(&rand_vec(8, seed + 1, 0.5, 1.5)),
        ln_b: tensor(&rand_vec(8, seed + 2, -0.5, 0.5)),
        fc: tensor(&rand_vec(128, seed + 3, -0.5, 0.5)),
        fc_b: tensor(&rand_vec(16, seed + 4, -0.5, 0.5)),
        proj: tensor(&rand_vec(128, seed + 5, -0.5, 0.5)),
        proj_b: tensor(&rand_vec(8, seed + 6, -0.5, 0.5)),
    }
}

#[test]
fn block_forward_then_backward_is_vjp() {
    for seed in 0..3u64 {
        let p = block_params(seed * 10);
        let x: Tensor<Cpu, f64, shape![2, 3, 8]> = tensor(&rand_vec(48, seed + 50, -2.0, 2.0));
        let go: Tensor<Cpu, f64, shape![2, 3, 8]> = tensor(&rand_vec(48, seed + 60, -1.0, 1.0));
        let (want_y, (want_gx, want_gp)) = block::vjp(&x, &p, &go).unwrap();
        let (y, pullback) = block::forward(&x, &p).unwrap();
        same_bits("block value", &y, &want_y);
        let (gx, gp) = pullback.backward(&go).unwrap();
        same_bits("block x", &gx, &want_gx);
        same_bits("block p", &gp, &want_gp);

        let (want_y, (want_gx, want_gp)) = block_recomputed::vjp(&x, &p, &go).unwrap();
        let (y, pullback) = block_recomputed::forward(&x, &p).unwrap();
        same_bits("recomputed value", &y, &want_y);
        let (gx, gp) = pullback.backward(&go).unwrap();
        same_bits("recomputed x", &gx, &want_gx);
        same_bits("recomputed p", &gp, &want_gp);
    }
}

#[test]
fn attention_forward_then_backward_is_vjp() {
    for seed in 0..3u64 {
        let x: Tensor<Cpu, f64, shape![2, 5, 4]> = tensor(&rand_vec(40, seed, -1.5, 1.5));
        let w = |k: u64| -> Tensor<Cpu, f64, shape![4, 4]> {
            tensor(&rand_vec(16, seed * 7 + k, -1.0, 1.0))
        };
        let (wq, wk, wv) = (w(1), w(2), w(3));
        let go: Tensor<Cpu, f64, shape![2, 5, 4]> = tensor(&rand_vec(40, seed + 9, -1.0, 1.0));
        let (want_y, want) = attention::vjp(&x, &wq, &wk, &wv, &go).unwrap();
        let (y, pullback) = attention::forward(&x, &wq, &wk, &wv).unwrap();
        same_bits("attention value", &y, &want_y);
        let got = pullback.backward(&go).unwrap();
        same_bits("attention x", &got.0, &want.0);
        same_bits("attention wq", &got.1, &want.1);
        same_bits("attention wk", &got.2, &want.2);
        same_bits("attention wv", &got.3, &want.3);
    }
}

tensor_fn! {
    /// A tuple result: `backward` takes one gradient per element.
    #[grad(x, w)]
    fn heads(x: &Tensor<Cpu, f64, [4, 3]>, w: &Tensor<Cpu, f64, [3, 2]>) -> (Tensor<Cpu, f64, [4, 2]>, Tensor<Cpu, f64, [4]>, Tensor<Cpu, i64, [4]>) {
        let h = matmul(x, w);
        (gelu(h), sin(x).sum(1), h.argmax(1))
    }
}

#[test]
fn tuple_forward_then_backward_is_vjp() {
    for seed in 0..3u64 {
        let x: Tensor<Cpu, f64, shape![4, 3]> = tensor(&rand_vec(12, seed, -1.5, 1.5));
        let w: Tensor<Cpu, f64, shape![3, 2]> = tensor(&rand_vec(6, seed + 3, -1.0, 1.0));
        let g0: Tensor<Cpu, f64, shape![4, 2]> = tensor(&rand_vec(8, seed + 5, -1.0, 1.0));
        let g1: Tensor<Cpu, f64, shape![4]> = tensor(&rand_vec(4, seed + 7, -1.0, 1.0));
        let (want_y, want) = heads::vjp(&x, &w, (&g0, &g1, ())).unwrap();
        let (y, pullback) = heads::forward(&x, &w).unwrap();
        same_bits("heads value 0", &y.0, &want_y.0);
        same_bits("heads value 1", &y.1, &want_y.1);
        assert_eq!(y.2.to_vec().unwrap(), want_y.2.to_vec().unwrap());
        let got = pullback.backward((&g0, &g1, ())).unwrap();
        same_bits("heads x", &got.0, &want.0);
        same_bits("heads w", &got.1, &want.1);
    }
}

/// The generic layer in `f32` and `f64`, with two batch sizes.
#[test]
fn generic_forward_then_backward_is_vjp() {
    fn check<T: Float, const B: usize>(seed: u64) {
        let p: Lin<Cpu, T> = Lin {
            w: tensor_as(&rand_vec(12, seed + 1, -1.0, 1.0)),
            b: tensor_as(&rand_vec(3, seed + 2, -0.5, 0.5)),
        };
        let x: Tensor<Cpu, T, shape![B, 4]> = tensor_as(&rand_vec(4 * B, seed + 3, -2.0, 2.0));
        let go: Tensor<Cpu, T, shape![B, 3]> = tensor_as(&rand_vec(3 * B, seed + 4, -1.0, 1.0));
        let (want_y, (want_gx, want_gp)) = linear::vjp(&x, &p, &go).unwrap();
        let (y, pullback) = linear::forward(&x, &p).unwrap();
        same_bits("linear value", &y, &want_y);
        let (gx, gp) = pullback.backward(&go).unwrap();
        same_bits("linear x", &gx, &want_gx);
        same_bits("linear p", &gp, &want_gp);
    }
    for seed in 0..3u64 {
        check::<f32, 2>(seed);
        check::<f64, 2>(seed);
        check::<f32, 7>(seed + 20);
        check::<f64, 7>(seed + 20);
    }
}

/// Run-time dims: the pullback checks `grad_output` against the dims the
/// forward bound, and names it when they differ.
#[test]
fn run_time_dims_forward_then_backward_is_vjp() {
    type M = shape![_, _];
    type V = shape![_];
    for (seed, (r, n)) in [(3, 5), (1, 1), (4, 9)].into_iter().enumerate() {
        let seed = seed as u64;
        let x: Tensor<Cpu, f64, M> = tensor_dims(&rand_vec(r * n, seed, -2.0, 2.0), &[r, n]);
        let w: Tensor<Cpu, f64, V> = tensor_dims(&rand_vec(n, seed + 1, 0.5, 1.5), &[n]);
        let b: Tensor<Cpu, f64, V> = tensor_dims(&rand_vec(n, seed + 2, -0.5, 0.5), &[n]);
        let go: Tensor<Cpu, f64, M> = tensor_dims(&rand_vec(r * n, seed + 3, -1.0, 1.0), &[r, n]);
        let (want_y, want) = ln_runtime::vjp(&x, &w, &b, &go).unwrap();
        let (y, pullback) = ln_runtime::forward(&x, &w, &b).unwrap();
        same_bits("ln value", &y, &want_y);
        let got = pullback.backward(&go).unwrap();
        same_bits("ln x", &got.0, &want.0);
        same_bits("ln w", &got.1, &want.1);
        same_bits("ln b", &got.2, &want.2);

        let wrong: Tensor<Cpu, f64, M> = tensor_dims(&vec![0.0; (r + 1) * n], &[r + 1, n]);
        let (_, pullback) = ln_runtime::forward(&x, &w, &b).unwrap();
        let err = pullback.backward(&wrong).unwrap_err().to_string();
        assert!(err.contains("grad_output"), "{err}");
    }
}

/// A loss: the pullback of a 0-d value, seeded with any 0-d gradient.
#[test]
fn loss_forward_then_backward_is_vjp() {
    for seed in 0..3u64 {
        let x: Tensor<Cpu, f64, shape![3, 4]> = tensor(&rand_vec(12, seed, -2.0, 2.0));
        for g in [1.0, -0.25, 0.0] {
            let go: Tensor<Cpu, f64, shape![]> = tensor(&[g]);
            let (want_v, want_g) = loss::vjp(&x, &go).unwrap();
            let (v, pullback) = loss::forward(&x).unwrap();
            same_bits("loss value", &v, &want_v);
            same_bits("loss x", &pullback.backward(&go).unwrap(), &want_g);
        }
    }
}

/// A model whose layers are a `Vec`: each forward runs once, its pullback
/// kept; the backward goes through the pullbacks in reverse, each giving
/// the gradient of its input to the layer below. The same bits as the
/// chain of `vjp`s, which runs each forward again.
#[test]
fn chain_of_pullbacks_is_the_chain_of_vjps() {
    for seed in 0..3u64 {
        let layers: Vec<Dense<Cpu, f64>> = (0..4)
            .map(|k| Dense {
                w: tensor(&rand_vec(16, seed * 11 + k, -1.0, 1.0)),
                b: tensor(&rand_vec(4, seed * 11 + k + 100, -0.5, 0.5)),
            })
            .collect();
        let x: Tensor<Cpu, f64, shape![5, 4]> = tensor(&rand_vec(20, seed + 70, -2.0, 2.0));

        // Forward once, keeping the pullbacks.
        let mut h = x.clone();
        let mut pullbacks = Vec::new();
        for p in &layers {
            let (y, pb) = dense::forward(&h, p).unwrap();
            pullbacks.push(pb);
            h = y;
        }
        // d(0.5 sum(y^2))/dy = y.
        let mut g = h.clone();
        let mut grads = Vec::new();
        for pb in pullbacks.into_iter().rev() {
            let (gx, gp) = pb.backward(&g).unwrap();
            grads.push(gp);
            g = gx;
        }
        grads.reverse();

        // The chain of `vjp`s from the kept inputs.
        let mut inputs = vec![x.clone()];
        for p in &layers {
            inputs.push(dense(inputs.last().unwrap(), p).unwrap());
        }
        let y = inputs.pop().unwrap();
        same_bits("chain value", &h, &y);
        let mut want_g = y;
        let mut want = Vec::new();
        for (p, input) in layers.iter().zip(&inputs).rev() {
            let (_, (gx, gp)) = dense::vjp(input, p, &want_g).unwrap();
            want.push(gp);
            want_g = gx;
        }
        want.reverse();
        same_bits("chain x", &g, &want_g);
        same_bits("chain layers", &grads, &want);
    }
}

/// What a pullback keeps: `scaled`'s backward reads its value,
/// `tanh(x * s)` (`1 - y²`), and the arguments, which are borrowed; the
/// block keeps more than its value and less than `vjp`'s peak.
#[test]
fn pullback_bytes() {
    assert_eq!(scaled::PULLBACK_BYTES, 3 * 4 * 8);
    const { assert!(block::PULLBACK_BYTES > 2 * 3 * 8 * 8) };
    const { assert!(block::PULLBACK_BYTES <= block::VJP_PEAK_BYTES) };
    const { assert!(block_recomputed::PULLBACK_BYTES < block::PULLBACK_BYTES) };
    assert_eq!(linear::pullback_bytes::<f32, 5>(), 5 * 3 * 4);
    assert_eq!(linear::pullback_bytes::<f64, 5>(), 5 * 3 * 8);
    const { assert!(loss::PULLBACK_BYTES <= loss::VJP_PEAK_BYTES) };
    // The value (2 * 3 * 4 f64s) and one f32 log-sum-exp per query row.
    assert_eq!(attention_only::PULLBACK_BYTES, 2 * 3 * 4 * 8 + 2 * 3 * 4);
}

/// A pullback is `Send`: the backward may run on another thread (the
/// assertion is a compile-time bound; the run checks the bits).
#[test]
fn pullback_runs_on_another_thread() {
    fn send<T: Send>(t: T) -> T {
        t
    }
    let p = block_params(7);
    let x = tensor::<shape![2, 3, 8]>(&rand_vec(48, 8, -1.0, 1.0));
    let go = tensor::<shape![2, 3, 8]>(&rand_vec(48, 9, -1.0, 1.0));
    let (_, (want_gx, want_gp)) = block::vjp(&x, &p, &go).unwrap();
    let (_, pullback) = block::forward(&x, &p).unwrap();
    let pullback = send(pullback);
    let go = &go;
    let (gx, gp) = std::thread::scope(|s| s.spawn(move || pullback.backward(go)).join())
        .unwrap()
        .unwrap();
    same_bits("block x on another thread", &gx, &want_gx);
    same_bits("block p on another thread", &gp, &want_gp);
}
