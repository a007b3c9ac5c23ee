//! Trains a GPT-2 (Hugging Face's `GPT2LMHeadModel` layout and names) at
//! character level on tiny Shakespeare, shipped in `examples/data/`.
//! Every gradient comes from `#[grad]`: one block's backward is derived by
//! the macro and the blocks are chained through their pullbacks
//! (`block::forward`, then `Pullback::backward` in reverse). AdamW (weight
//! decay on the matrices and embeddings only, as GPT-2's training), a
//! cosine schedule with warmup and global-norm clipping come from the
//! library. On the GPU the model computes in bf16 and AdamW keeps f32
//! master weights; on the CPU everything is f32.
//!
//! ```sh
//! cargo run --release --example train_gpt2                       # ~1 min on a CPU
//! cargo run --release --example train_gpt2 -- --steps 2000 --layers 6 --width 384 --heads 6 \
//!     --ctx 256 --batch 32 --device cuda
//! cargo run --release --example train_gpt2 -- --resume train_gpt2_ckpt --steps 400   # go on from a checkpoint
//! cargo run --release --example train_gpt2 -- --bench --device cuda       # one GPT-2 124M step, timed
//! cargo run --release --example train_gpt2 -- --bench --gpus 2            # the same, data-parallel
//! ```
//!
//! It prints a progress line (step, loss, tokens per second, learning
//! rate), the loss on held-out text (the last 10% of the file) every
//! `--eval-every` steps, writes the train and validation losses to
//! `--plot FILE` (an SVG), a checkpoint to `--save DIR` (`model.safetensors`
//! with the model's Hugging Face names, `optim.safetensors` with AdamW's
//! moments, master weights and step count, and `losses.txt` for the curve
//! of a resumed run) and, at the end, a sample of
//! generated text (`--temperature`, `--top-k`, `--seed`).
//!
//! Options: `--layers L` (4), `--width C` (128), `--heads H` (4), `--ctx T`
//! (64), `--batch B` (16), `--steps N` (200), `--lr LR` (3e-3),
//! `--warmup N` (steps/10), `--weight-decay W` (0.1), `--clip X` (1.0),
//! `--eval-every N` (40), `--device cpu|cuda` (cuda when present),
//! `--dtype f32|bf16` (bf16 on the GPU, f32 on the CPU), `--seed S`,
//! `--save DIR` (`train_gpt2_ckpt`), `--resume DIR`, `--stop-after N`
//! (stop and save after `N` steps, the schedule still planned for
//! `--steps`: training in several sittings), `--plot FILE`
//! (`train_gpt2_loss.svg`), `--sample N` (characters, 300),
//! `--temperature X` (0.8), `--top-k K` (20), `--recompute-blocks` (keep
//! each block's input rather than its pullback and run its forward again
//! in the backward: less memory, one more forward), `--gpus N` (data-parallel
//! over cuda:0 to cuda:N-1, N = 1 or 2, and 4 or 8 when built with
//! `--features many-gpus`: `--batch` is the global batch, split among the
//! GPUs; with `--bench`, `--batch` is per GPU).
//!
//! GPT-2 124M (12 layers, 768 wide, 12 heads, vocabulary 50257 with the
//! output projection padded to 50304 rows as the `gpt2` example does,
//! context 1024):
//!
//! - `--bench [--steps N]`: a training step at B 8, T 1024 on random
//!   tokens and randomly initialised weights (bf16, AdamW with f32 master
//!   weights): 2 warm-up steps, then the median of `N` (10) steps timed
//!   between synchronisations, tokens per second and the allocator's peak,
//!   with one line setting it beside the peak predicted from the macro's
//!   memory plans at the step's dims (`train_gpt2/peak.rs`).
//! - `--profile` (implies `--bench`): then 3 more steps with a
//!   synchronisation after each phase (forward, head and loss, the head's
//!   gradient slice, each block's backward, the embedding's `vjp`, `wte`'s
//!   two gradients added, clipping and AdamW, AdamW alone), printing the
//!   last one's time per phase and, on a GPU, its kernel launches,
//!   library calls, allocations (cache hits and `cuMemAlloc`s), copies
//!   and host waits (`tensorfn::cuda_counters`).
//! - `--weights FILE.safetensors`: starts from a checkpoint with Hugging
//!   Face's names (as `GPT2LMHeadModel.save_pretrained` writes it, keys
//!   under `transformer.`, or without the prefix).
//! - `--grads-out FILE.safetensors --tokens FILE.safetensors`: one forward
//!   and backward on the file's `input_ids` and `labels` (i64 `[B, T]`),
//!   with the loss `GPT2LMHeadModel(input_ids, labels=labels)` computes
//!   (position `t` predicts `labels[t + 1]`, labels `-100` ignored, the
//!   mean), then writes `loss` (f32, 0-d) and every parameter's gradient
//!   as f32 under its name without prefix (`wte.weight`, which holds the
//!   tied `lm_head`'s part too, `wpe.weight`, `h.0.ln_1.weight`, ...,
//!   `ln_f.bias`). It computes in `--dtype` (f32 unless given).

// `block` takes its twelve parameters as tensors (see below).
#![allow(clippy::too_many_arguments)]

mod common;
// `--gpus N`: the data-parallel driver.
#[path = "train_gpt2/dp.rs"]
pub mod dp;
// `--bench`: the step's peak memory predicted from the plans' figures.
#[path = "train_gpt2/peak.rs"]
mod peak;

use common::{hf_gpt2, AnyResult};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tensorfn::optim::CosineWithWarmup;
use tensorfn::prelude::*;
use tensorfn::CrossEntropyArgs;

/// `LayerNorm(C)`: keys `weight`, `bias`.
#[derive(Params)]
pub struct LayerNorm<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![_]>,
    pub bias: Tensor<D, T, shape![_]>,
}

/// A `Conv1D` of Hugging Face's GPT-2: `x @ weight + bias`, the weight
/// stored `[in, out]`.
#[derive(Params)]
pub struct Conv1D<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![_, _]>,
    pub bias: Tensor<D, T, shape![_]>,
}

/// Attention: `c_attn` makes the queries, keys and values (`[C, 3C]`),
/// `c_proj` mixes the heads.
#[derive(Params)]
pub struct Attention<D: Device, T: Float> {
    pub c_attn: Conv1D<D, T>,
    pub c_proj: Conv1D<D, T>,
}

/// The MLP: `C -> 4C -> C` with GELU (tanh form, GPT-2's `gelu_new`).
#[derive(Params)]
pub struct Mlp<D: Device, T: Float> {
    pub c_fc: Conv1D<D, T>,
    pub c_proj: Conv1D<D, T>,
}

/// One block: keys `ln_1`, `attn`, `ln_2`, `mlp`.
#[derive(Params)]
pub struct Block<D: Device, T: Float> {
    pub ln_1: LayerNorm<D, T>,
    pub attn: Attention<D, T>,
    pub ln_2: LayerNorm<D, T>,
    pub mlp: Mlp<D, T>,
}

/// An embedding table: key `weight`, `[N, C]`.
#[derive(Params)]
pub struct Embedding<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![_, _]>,
}

/// The model: keys `wte.weight`, `wpe.weight`, `h.N.*`, `ln_f.*`; the
/// output projection is `wte` (tied, as GPT-2's `lm_head`). Its gradients
/// are a `Gpt2` too.
#[derive(Params)]
pub struct Gpt2<D: Device, T: Float> {
    pub wte: Embedding<D, T>,
    pub wpe: Embedding<D, T>,
    pub h: Vec<Block<D, T>>,
    pub ln_f: LayerNorm<D, T>,
}

// The sizes are run-time values (`--width`, `--heads`, the vocabulary of
// the text), so the functions take the tensors they use with named dims
// rather than the structs, whose fields can only have `_` dims here: the
// width is `nh * hd` (heads times head size), which the reshapes into
// heads need, and the names tie every operand's dims together, checked
// when a function is entered.
//
// Why a backward per block rather than one `#[grad]` function over the
// whole model: a `tensor_fn!` body has no loops, so it cannot run a
// number of blocks known only at run time. The step therefore runs the
// embedding, each block and the head as separate `#[grad]` functions.
// Each block runs `block::forward`, which returns its output and a
// `block::Pullback` holding what its backward reads; the step goes back
// through the pullbacks in reverse, each giving its parameters' gradients
// and the gradient of its input for the block below; the tied `wte` gets
// the sum of the embedding's and the head's gradients
// (`Params::accumulate`). Every block's forward runs once, as in one
// `#[grad]` function over the model, and the memory between the passes is
// the blocks' `PULLBACK_BYTES` (their intermediates). `--recompute-blocks`
// keeps only each block's input instead and calls its `vjp`, which runs
// the block's forward again before its backward: one more forward of the
// blocks per step, for the memory of the inputs alone, like activation
// checkpointing. Both give the same bits.
tensor_fn! {
    /// Token plus position embeddings.
    #[grad(wte, wpe)]
    pub fn embed<D: Device, T: Float>(
        ids: &Tensor<D, i64, [B, S]>,
        positions: &Tensor<D, i64, [S]>,
        wte: &Tensor<D, T, [V, C]>,
        wpe: &Tensor<D, T, [P, C]>,
    ) -> Tensor<D, T, [B, S, C]> {
        embedding(ids, wte) + embedding(positions, wpe)
    }

    /// One block: `x + attn(ln_1(x))`, then `+ mlp(ln_2(..))`, with causal
    /// attention over `nh` heads of `hd`.
    #[grad(x, ln_1_w, ln_1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b)]
    pub fn block<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, nh * hd]>,
        nh: usize,
        hd: usize,
        ln_1_w: &Tensor<D, T, [nh * hd]>,
        ln_1_b: &Tensor<D, T, [nh * hd]>,
        attn_w: &Tensor<D, T, [nh * hd, 3 * nh * hd]>,
        attn_b: &Tensor<D, T, [3 * nh * hd]>,
        attn_proj_w: &Tensor<D, T, [nh * hd, nh * hd]>,
        attn_proj_b: &Tensor<D, T, [nh * hd]>,
        ln_2_w: &Tensor<D, T, [nh * hd]>,
        ln_2_b: &Tensor<D, T, [nh * hd]>,
        fc_w: &Tensor<D, T, [nh * hd, 4 * nh * hd]>,
        fc_b: &Tensor<D, T, [4 * nh * hd]>,
        proj_w: &Tensor<D, T, [4 * nh * hd, nh * hd]>,
        proj_b: &Tensor<D, T, [nh * hd]>,
    ) -> Tensor<D, T, [B, S, nh * hd]> {
        let h = layer_norm(x, ln_1_w, ln_1_b, 1e-5).reshape([B * S, nh * hd]);
        // `c_attn`'s columns are the queries, keys and values, each
        // `nh` heads of `hd`.
        let qkv = addmm(attn_b, h, attn_w).reshape([B, S, 3, nh, hd]);
        let q = qkv.narrow(2, 0, 1).reshape([B, S, nh, hd]).permute([0, 2, 1, 3]);
        let k = qkv.narrow(2, 1, 1).reshape([B, S, nh, hd]).permute([0, 2, 1, 3]);
        let v = qkv.narrow(2, 2, 1).reshape([B, S, nh, hd]).permute([0, 2, 1, 3]);
        let heads = scaled_dot_product_attention(q, k, v, is_causal = true);
        let a = heads.permute([0, 2, 1, 3]).reshape([B * S, nh * hd]);
        let x = x + addmm(attn_proj_b, a, attn_proj_w).reshape([B, S, nh * hd]);
        let h = layer_norm(x, ln_2_w, ln_2_b, 1e-5).reshape([B * S, nh * hd]);
        let up = gelu(addmm(fc_b, h, fc_w));
        x + addmm(proj_b, up, proj_w).reshape([B, S, nh * hd])
    }

    /// The logits of every position: the final layer norm, then the tied
    /// output projection.
    pub fn logits<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, C]>,
        ln_w: &Tensor<D, T, [C]>,
        ln_b: &Tensor<D, T, [C]>,
        wte: &Tensor<D, T, [V, C]>,
    ) -> Tensor<D, T, [B * S, V]> {
        matmul(layer_norm(x, ln_w, ln_b, 1e-5).reshape([B * S, C]), wte.t())
    }

    /// The padded head's logits of every position: the final layer norm,
    /// then the product with `head`, which is `wte`, or `wte` with zero
    /// rows appended to a multiple of 64 (16-bit logits rows of a
    /// multiple of 8 keep cuBLASLt on its tensor-core kernels; llm.c's
    /// `padded_vocab_size`); `mask` is 0 for the vocabulary and `-inf`
    /// for the padding, whose logits then have no probability and no
    /// gradient. The loss is the cross-entropy of these against the
    /// targets ([`head_loss`]); the step takes it and its gradient in one
    /// pass (`cross_entropy_with_grad`) between this function's forward
    /// and its pullback.
    #[grad(x, ln_w, ln_b, head)]
    pub fn head_logits<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, C]>,
        ln_w: &Tensor<D, T, [C]>,
        ln_b: &Tensor<D, T, [C]>,
        head: &Tensor<D, T, [V, C]>,
        mask: &Tensor<D, T, [V]>,
    ) -> Tensor<D, T, [B * S, V]> {
        // The mask is the product's bias: the matrix product adds it as
        // it writes the logits (cuBLASLt's epilogue on the GPU) instead
        // of a second pass over all `B * S * V` of them.
        let h = layer_norm(x, ln_w, ln_b, 1e-5).reshape([B * S, C]);
        addmm(mask, h, head.t())
    }
}

/// The loss's options: the mean over the positions, `-100` ignored.
fn loss_args() -> CrossEntropyArgs {
    CrossEntropyArgs {
        ignore_index: -100,
        ..Default::default()
    }
}

/// The mean cross-entropy of the head's logits of `x` (see
/// [`head_logits`]) against `targets` (`-100` ignored).
pub fn head_loss<D: Device, T: Float>(
    x: &Hidden<D, T>,
    targets: &Ids<D>,
    ln_f: &LayerNorm<D, T>,
    head: &Tensor<D, T, shape![_, _]>,
    mask: &Tensor<D, T, shape![_]>,
) -> Result<Loss<D, T>> {
    let logits = head_logits(x, &ln_f.weight, &ln_f.bias, head, mask)?;
    logits.cross_entropy(&rows_of(targets)?, loss_args())
}

/// `targets` `[B, S]` as the logits' `[B * S]` rows.
fn rows_of<D: Device>(targets: &Ids<D>) -> Result<Tensor<D, i64, shape![_]>> {
    targets.reshape_dims(&[targets.dims().iter().product()])
}

/// A `[B, S]` tensor of token ids.
type Ids<D> = Tensor<D, i64, shape![_, _]>;
/// Hidden states `[B, S, C]`.
type Hidden<D, T> = Tensor<D, T, shape![_, _, _]>;
/// What the forward keeps for the blocks' backward, in block order.
enum Kept<D: Device, T: Float> {
    /// Each block's input (`--recompute-blocks`, or nothing kept).
    Inputs(Vec<Hidden<D, T>>),
    /// Each block's pullback.
    Pullbacks(Vec<block::Pullback<'static, D, T>>),
}
/// The gradients `block::vjp` and `block::Pullback::backward` give: the
/// input's, then each parameter's in the order `block` takes them.
type BlockGrads<D, T> = (
    Hidden<D, T>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_, _]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_, _]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_, _]>,
    Tensor<D, T, shape![_]>,
    Tensor<D, T, shape![_, _]>,
    Tensor<D, T, shape![_]>,
);
/// A loss.
type Loss<D, T> = Tensor<D, T, shape![]>;

/// The sizes of a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub layers: usize,
    pub width: usize,
    pub heads: usize,
    /// Positions (rows of `wpe`).
    pub ctx: usize,
    pub vocab: usize,
}

impl Config {
    /// GPT-2 small (124M).
    pub const GPT2: Config = Config {
        layers: 12,
        width: 768,
        heads: 12,
        ctx: 1024,
        vocab: 50257,
    };

    fn check(&self) -> AnyResult {
        if self.heads == 0 || self.width % self.heads != 0 {
            return Err(format!(
                "--width {} is not a multiple of --heads {}",
                self.width, self.heads
            )
            .into());
        }
        Ok(())
    }

    /// The sizes of a model's tensors, with the heads given.
    fn of<D: Device, T: Float>(m: &Gpt2<D, T>, heads: usize) -> Config {
        let (vocab, width) = (m.wte.weight.dims()[0], m.wte.weight.dims()[1]);
        Config {
            layers: m.h.len(),
            width,
            heads,
            ctx: m.wpe.weight.dims()[0],
            vocab,
        }
    }
}

/// A small, seeded generator (the data must not depend on a crate's
/// stream).
struct Lcg(u64);

impl Lcg {
    fn new(seed: u64) -> Lcg {
        let mut r = Lcg(seed ^ 0x9e37_79b9_7f4a_7c15);
        r.uniform();
        r
    }

    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n.max(1)
    }
}

/// GPT-2's initialisation, as `GPT2PreTrainedModel._init_weights` (with
/// its scaled residual projections): matrices and embeddings normal with
/// std 0.02, the two projections into the residual stream
/// `0.02 / sqrt(2 * layers)`, biases 0, layer norms 1 and 0.
pub fn init(c: &Config, seed: u64) -> Result<Gpt2<Cpu, f32>> {
    let normal = |s: u64, dims: &[usize], std: f32| -> Result<Tensor<Cpu, f32, shape![_, _]>> {
        Tensor::randn_dims(s, dims)?.mul_scalar(std)
    };
    let w = c.width;
    let ln = || -> Result<LayerNorm<Cpu, f32>> {
        Ok(LayerNorm {
            weight: Tensor::ones_dims(&[w])?,
            bias: Tensor::zeros_dims(&[w])?,
        })
    };
    let conv = |s: u64, i: usize, o: usize, std: f32| -> Result<Conv1D<Cpu, f32>> {
        Ok(Conv1D {
            weight: normal(s, &[i, o], std)?,
            bias: Tensor::zeros_dims(&[o])?,
        })
    };
    let proj = 0.02 / (2.0 * c.layers as f32).sqrt();
    let mut h = Vec::new();
    for i in 0..c.layers as u64 {
        let s = seed.wrapping_add(16 * (i + 1));
        h.push(Block {
            ln_1: ln()?,
            attn: Attention {
                c_attn: conv(s, w, 3 * w, 0.02)?,
                c_proj: conv(s + 1, w, w, proj)?,
            },
            ln_2: ln()?,
            mlp: Mlp {
                c_fc: conv(s + 2, w, 4 * w, 0.02)?,
                c_proj: conv(s + 3, 4 * w, w, proj)?,
            },
        });
    }
    Ok(Gpt2 {
        wte: Embedding {
            weight: normal(seed, &[c.vocab, w], 0.02)?,
        },
        wpe: Embedding {
            weight: normal(seed + 1, &[c.ctx, w], 0.02)?,
        },
        h,
        ln_f: ln()?,
    })
}

/// What a step needs besides the parameters and the tokens: the
/// positions and the output projection's padding.
pub struct Inputs<D: Device, T: Float> {
    positions: Tensor<D, i64, shape![_]>,
    /// Zero rows appended to `wte` in the output projection.
    pad: Option<Tensor<D, T, shape![_, _]>>,
    /// 0 for each token of the vocabulary, `-inf` for each padding row.
    mask: Tensor<D, T, shape![_]>,
    /// What the forward of a training step keeps for the blocks'
    /// backward: their pullbacks, or their inputs with
    /// `--recompute-blocks`.
    keep: Keep,
}

impl<D: Device, T: Float> Inputs<D, T> {
    /// For sequences of `s` tokens; with `pad`, the projection is padded
    /// to a multiple of 64 rows.
    pub fn new(s: usize, c: &Config, pad: bool) -> Result<Self> {
        let rows = if pad {
            c.vocab.next_multiple_of(64) - c.vocab
        } else {
            0
        };
        let mask = (0..c.vocab + rows)
            .map(|i| T::from_f64(if i < c.vocab { 0.0 } else { f64::NEG_INFINITY }))
            .collect();
        Ok(Inputs {
            positions: positions(s)?,
            pad: match rows {
                0 => None,
                _ => Some(Tensor::zeros_dims(&[rows, c.width])?),
            },
            mask: Tensor::<Cpu, T, shape![_]>::from_vec_dims(mask, &[c.vocab + rows])?
                .to_device::<D>()?,
            keep: Keep::Pullbacks,
        })
    }

    /// With `recompute`, a training step keeps only each block's input
    /// and its backward (`block::vjp`) runs the block's forward again:
    /// less memory between the passes, one more forward of every block
    /// (`--recompute-blocks`). Without, the forward runs once and keeps
    /// each block's `block::Pullback`.
    pub fn recompute_blocks(mut self, recompute: bool) -> Self {
        self.keep = match recompute {
            true => Keep::Inputs,
            false => Keep::Pullbacks,
        };
        self
    }

    /// The output projection: `wte`, padded.
    fn head(&self, wte: &Tensor<D, T, shape![_, _]>) -> Result<Tensor<D, T, shape![_, _]>> {
        match &self.pad {
            Some(pad) => wte.cat::<0, _>(pad),
            None => Ok(wte.clone()),
        }
    }
}

/// The positions `0..s`.
fn positions<D: Device>(s: usize) -> Result<Tensor<D, i64, shape![_]>> {
    Tensor::<Cpu, i64, shape![_]>::from_vec_dims((0..s as i64).collect(), &[s])?.to_device::<D>()
}

/// Calls `$f` (`block`, `block::forward` or `block::vjp`) with the input
/// `$x` of block `$b`, its head counts and parameters, and (for `vjp`)
/// the gradient `$g` of its output.
macro_rules! with_block {
    ($f:path, $x:expr, $b:expr, $heads:expr $(, $g:expr)?) => {{
        let (x, b, heads): (&Hidden<_, _>, &Block<_, _>, usize) = ($x, $b, $heads);
        let hd = x.dims()[2] / heads;
        $f(
            x,
            heads,
            hd,
            &b.ln_1.weight,
            &b.ln_1.bias,
            &b.attn.c_attn.weight,
            &b.attn.c_attn.bias,
            &b.attn.c_proj.weight,
            &b.attn.c_proj.bias,
            &b.ln_2.weight,
            &b.ln_2.bias,
            &b.mlp.c_fc.weight,
            &b.mlp.c_fc.bias,
            &b.mlp.c_proj.weight,
            &b.mlp.c_proj.bias,
            $($g,)?
        )
    }};
}

/// One block, forward.
fn block_forward<D: Device, T: Float>(
    x: &Hidden<D, T>,
    b: &Block<D, T>,
    heads: usize,
) -> Result<Hidden<D, T>> {
    with_block!(block, x, b, heads)
}

/// What the forward keeps for the blocks' backward.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Keep {
    /// Nothing: no backward follows.
    Nothing,
    /// Each block's input; its backward (`vjp`) runs its forward again
    /// (`--recompute-blocks`).
    Inputs,
    /// Each block's pullback: the forward runs once.
    Pullbacks,
}

/// The hidden states after the last block (before `ln_f`), and what
/// `keep` asks for.
fn forward<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    heads: usize,
    ids: &Ids<D>,
    positions: &Tensor<D, i64, shape![_]>,
    keep: Keep,
) -> Result<(Hidden<D, T>, Kept<D, T>)> {
    let mut x = embed(ids, positions, &m.wte.weight, &m.wpe.weight)?;
    let mut kept = match keep {
        Keep::Pullbacks => Kept::Pullbacks(Vec::with_capacity(m.h.len())),
        _ => Kept::Inputs(Vec::with_capacity(m.h.len())),
    };
    for b in &m.h {
        match &mut kept {
            Kept::Pullbacks(pullbacks) => {
                let (y, pullback) = with_block!(block::forward, &x, b, heads)?;
                pullbacks.push(pullback);
                x = y;
            }
            Kept::Inputs(inputs) => {
                let y = block_forward(&x, b, heads)?;
                if keep == Keep::Inputs {
                    inputs.push(x);
                }
                x = y;
            }
        }
    }
    Ok((x, kept))
}

impl<D: Device, T: Float> Kept<D, T> {
    /// The backward of block `l` (the last not yet gone back through,
    /// `b`) from the gradient `g` of its output: the gradient of its
    /// input and its parameters' gradients. What was kept for it is
    /// freed.
    /// How many blocks have something kept.
    fn len(&self) -> usize {
        match self {
            Kept::Inputs(v) => v.len(),
            Kept::Pullbacks(v) => v.len(),
        }
    }

    fn block_backward(
        &mut self,
        l: usize,
        b: &Block<D, T>,
        heads: usize,
        g: &Hidden<D, T>,
    ) -> Result<(Hidden<D, T>, Block<D, T>)> {
        let missing = || Error::InvalidArgument {
            op: "train_gpt2".into(),
            message: format!("nothing was kept for block {l}'s backward"),
        };
        match self {
            Kept::Inputs(inputs) => {
                let x = inputs.pop().ok_or_else(missing)?;
                block_grads(with_block!(block::vjp, &x, b, heads, g)?.1)
            }
            Kept::Pullbacks(pullbacks) => {
                let pullback = pullbacks.pop().ok_or_else(missing)?;
                block_grads(pullback.backward(g)?)
            }
        }
    }
}

/// The mean loss of `ids` predicting `targets` (`-100` ignored), without
/// gradients.
pub fn loss<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    heads: usize,
    ids: &Ids<D>,
    targets: &Ids<D>,
    inputs: &Inputs<D, T>,
) -> Result<f64> {
    let (x, _) = forward(m, heads, ids, &inputs.positions, Keep::Nothing)?;
    let head = inputs.head(&m.wte.weight)?;
    let l = head_loss(&x, targets, &m.ln_f, &head, &inputs.mask)?;
    Ok(l.to_vec()?[0].to_f64())
}

/// The loss and the gradient of every parameter (a `Gpt2` of the same
/// dims): the forward keeps each block's pullback (or input, with
/// `--recompute-blocks`), the head's `value_and_grad` starts the
/// backward, each block's pullback (or `vjp`) continues it in reverse,
/// and the embedding's `vjp` ends it; `wte`'s gradient is the
/// sum of the head's and the embedding's.
pub fn loss_and_grads<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    heads: usize,
    ids: &Ids<D>,
    targets: &Ids<D>,
    inputs: &Inputs<D, T>,
) -> Result<(Loss<D, T>, Gpt2<D, T>)> {
    loss_and_grads_phased(m, heads, ids, targets, inputs, &mut Phases::off())
}

/// [`loss_and_grads`], marking the end of each phase in `phases`.
fn loss_and_grads_phased<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    heads: usize,
    ids: &Ids<D>,
    targets: &Ids<D>,
    inputs: &Inputs<D, T>,
    phases: &mut Phases,
) -> Result<(Loss<D, T>, Gpt2<D, T>)> {
    let (x, mut kept) = forward(m, heads, ids, &inputs.positions, inputs.keep)?;
    phases.mark::<D>(|| "forward (embedding and blocks)".into())?;
    let (value, mut g, ln_f, mut wte) = head_backward(m, &x, targets, inputs)?;
    phases.mark::<D>(|| "head, loss and head gradient".into())?;
    let mut h = Vec::with_capacity(m.h.len());
    for (i, b) in m.h.iter().enumerate().rev() {
        let (gx, grads) = kept.block_backward(i, b, heads, &g)?;
        h.push(grads);
        g = gx;
        phases.mark::<D>(|| format!("block {i} backward"))?;
    }
    h.reverse();
    let (_, (wte_in, wpe)) = embed::vjp(ids, &inputs.positions, &m.wte.weight, &m.wpe.weight, &g)?;
    phases.mark::<D>(|| "embedding vjp".into())?;
    wte.accumulate(&wte_in)?;
    phases.mark::<D>(|| "wte: head + embedding gradients".into())?;
    let grads = Gpt2 {
        wte: Embedding { weight: wte },
        wpe: Embedding { weight: wpe },
        h,
        ln_f,
    };
    Ok((value, grads))
}

/// What the head's backward gives: the loss, the gradient of the last
/// hidden states, `ln_f`'s gradients and the head's part of `wte`'s.
type HeadGrads<D, T> = (
    Loss<D, T>,
    Hidden<D, T>,
    LayerNorm<D, T>,
    Tensor<D, T, shape![_, _]>,
);

/// The start of the backward from the last hidden states `x` (the
/// padding rows of the head's gradient left out of `wte`'s).
fn head_backward<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    x: &Hidden<D, T>,
    targets: &Ids<D>,
    inputs: &Inputs<D, T>,
) -> Result<HeadGrads<D, T>> {
    let head = inputs.head(&m.wte.weight)?;
    let (logits, pullback) =
        head_logits::forward(x, &m.ln_f.weight, &m.ln_f.bias, &head, &inputs.mask)?;
    // The loss and its gradient from one read of the logits, the
    // gradient written over them (llm.c's fused classifier).
    let (value, dlogits) = logits.cross_entropy_with_grad(&rows_of(targets)?, loss_args())?;
    let (g, weight, bias, head) = pullback.backward(&dlogits)?;
    // The padding rows' gradient is zero: `wte`'s is the rest.
    let wte = match &inputs.pad {
        Some(_) => head
            .narrow::<0, shape![_, _]>(0, m.wte.weight.dims()[0])?
            .contiguous()?,
        None => head,
    };
    Ok((value, g, LayerNorm { weight, bias }, wte))
}

/// The gradients of a block's `vjp` or pullback: the gradient of its
/// input and its parameters' gradients as a `Block`.
fn block_grads<D: Device, T: Float>(
    grads: BlockGrads<D, T>,
) -> Result<(Hidden<D, T>, Block<D, T>)> {
    let (gx, l1w, l1b, aw, ab, apw, apb, l2w, l2b, fw, fb, pw, pb) = grads;
    let block = Block {
        ln_1: LayerNorm {
            weight: l1w,
            bias: l1b,
        },
        attn: Attention {
            c_attn: Conv1D {
                weight: aw,
                bias: ab,
            },
            c_proj: Conv1D {
                weight: apw,
                bias: apb,
            },
        },
        ln_2: LayerNorm {
            weight: l2w,
            bias: l2b,
        },
        mlp: Mlp {
            c_fc: Conv1D {
                weight: fw,
                bias: fb,
            },
            c_proj: Conv1D {
                weight: pw,
                bias: pb,
            },
        },
    };
    Ok((gx, block))
}

/// The text as character ids: the vocabulary is the text's characters in
/// order, the first 90% trains and the rest validates.
pub struct Data {
    chars: Vec<char>,
    train: Vec<u32>,
    val: Vec<u32>,
}

impl Data {
    /// Tiny Shakespeare, shipped with the examples.
    pub fn shakespeare() -> AnyResult<Data> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/tinyshakespeare.txt");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Data::new(&text))
    }

    pub fn new(text: &str) -> Data {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let ids: Vec<u32> = text
            .chars()
            .map(|c| chars.binary_search(&c).unwrap_or(0) as u32)
            .collect();
        let split = ids.len() * 9 / 10;
        Data {
            chars,
            val: ids[split..].to_vec(),
            train: ids[..split].to_vec(),
        }
    }

    pub fn vocab(&self) -> usize {
        self.chars.len()
    }

    /// `b` windows of `s + 1` characters from `ids` at offsets drawn from
    /// `seed`: the ids and the targets (the ids shifted by one).
    fn batch<D: Device>(ids: &[u32], b: usize, s: usize, seed: u64) -> Result<(Ids<D>, Ids<D>)> {
        let mut rng = Lcg::new(seed);
        let (mut x, mut y) = (Vec::with_capacity(b * s), Vec::with_capacity(b * s));
        for _ in 0..b {
            let at = rng.below(ids.len() - s - 1);
            x.extend(ids[at..at + s].iter().map(|&i| i as i64));
            y.extend(ids[at + 1..at + s + 1].iter().map(|&i| i as i64));
        }
        let up = |v: Vec<i64>| {
            Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(v, &[b, s])?.to_device::<D>()
        };
        Ok((up(x)?, up(y)?))
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct Options {
    pub model: Config,
    pub batch: usize,
    pub steps: usize,
    /// Stops (and saves) after this many steps, the schedule still
    /// running to `steps`: training in several sittings.
    pub stop_after: Option<usize>,
    pub lr: f64,
    pub warmup: Option<usize>,
    pub weight_decay: f64,
    pub clip: f64,
    pub eval_every: usize,
    pub eval_batches: usize,
    pub device: Option<String>,
    pub dtype: Option<String>,
    pub seed: u64,
    pub save: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub sample: usize,
    pub temperature: f64,
    pub top_k: usize,
    pub bench: bool,
    /// With `bench`: time and count each phase of a few more steps.
    pub profile: bool,
    pub weights: Option<PathBuf>,
    pub grads_out: Option<PathBuf>,
    pub tokens: Option<PathBuf>,
    /// `--gpus N`: data-parallel over cuda:0 to cuda:N-1 (see [`dp`]).
    pub gpus: Option<usize>,
    /// `--recompute-blocks`: keep each block's input rather than its
    /// pullback, and run its forward again in the backward.
    pub recompute_blocks: bool,
    /// Prints the progress line.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            model: Config {
                layers: 4,
                width: 128,
                heads: 4,
                ctx: 64,
                vocab: 0,
            },
            batch: 16,
            steps: 200,
            stop_after: None,
            lr: 3e-3,
            warmup: None,
            weight_decay: 0.1,
            clip: 1.0,
            eval_every: 40,
            eval_batches: 4,
            device: None,
            dtype: None,
            seed: 1337,
            save: Some("train_gpt2_ckpt".into()),
            resume: None,
            plot: Some("train_gpt2_loss.svg".into()),
            sample: 300,
            temperature: 0.8,
            top_k: 20,
            bench: false,
            profile: false,
            weights: None,
            grads_out: None,
            tokens: None,
            gpus: None,
            recompute_blocks: false,
            verbose: true,
        }
    }
}

impl Options {
    fn from_args() -> AnyResult<Options> {
        let mut o = Options::default();
        let mut sized = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "--layers" => o.model.layers = value()?.parse()?,
                "--width" => o.model.width = value()?.parse()?,
                "--heads" => o.model.heads = value()?.parse()?,
                "--ctx" => o.model.ctx = value()?.parse()?,
                "--batch" => o.batch = value()?.parse()?,
                "--steps" => o.steps = value()?.parse()?,
                "--stop-after" => o.stop_after = Some(value()?.parse()?),
                "--lr" => o.lr = value()?.parse()?,
                "--warmup" => o.warmup = Some(value()?.parse()?),
                "--weight-decay" => o.weight_decay = value()?.parse()?,
                "--clip" => o.clip = value()?.parse()?,
                "--eval-every" => o.eval_every = value()?.parse()?,
                "--device" => o.device = Some(value()?),
                "--dtype" => o.dtype = Some(value()?),
                "--seed" => o.seed = value()?.parse()?,
                "--save" => o.save = Some(value()?.into()),
                "--resume" => o.resume = Some(value()?.into()),
                "--plot" => o.plot = Some(value()?.into()),
                "--sample" => o.sample = value()?.parse()?,
                "--temperature" => o.temperature = value()?.parse()?,
                "--top-k" => o.top_k = value()?.parse()?,
                "--bench" => o.bench = true,
                "--profile" => (o.bench, o.profile) = (true, true),
                "--weights" => o.weights = Some(value()?.into()),
                "--grads-out" => o.grads_out = Some(value()?.into()),
                "--tokens" => o.tokens = Some(value()?.into()),
                "--gpus" => o.gpus = Some(value()?.parse()?),
                "--recompute-blocks" => o.recompute_blocks = true,
                other => {
                    return Err(format!("unknown option {other} (see the example's docs)").into())
                }
            }
            if [
                "--layers", "--width", "--heads", "--ctx", "--batch", "--steps",
            ]
            .contains(&a.as_str())
            {
                sized.push(a);
            }
        }
        if o.bench || o.grads_out.is_some() {
            // GPT-2 124M unless a size is given.
            let given = |f: &str| sized.iter().any(|a| a == f);
            let g = Config::GPT2;
            let m = &mut o.model;
            for (flag, field, v) in [
                ("--layers", &mut m.layers, g.layers),
                ("--width", &mut m.width, g.width),
                ("--heads", &mut m.heads, g.heads),
                ("--ctx", &mut m.ctx, g.ctx),
            ] {
                if !given(flag) {
                    *field = v;
                }
            }
            m.vocab = g.vocab;
            if !given("--batch") {
                o.batch = 8;
            }
            if !given("--steps") {
                o.steps = 10;
            }
        }
        Ok(o)
    }

    fn warmup(&self) -> usize {
        self.warmup.unwrap_or(self.steps / 10)
    }
}

/// What a training run gives back.
#[derive(Default)]
pub struct Report {
    /// `(step, loss)` of every step taken (with a resumed run's earlier
    /// steps when its checkpoint has them).
    pub train: Vec<(usize, f64)>,
    /// `(step, loss)` of every evaluation on held-out text.
    pub val: Vec<(usize, f64)>,
    pub sample: String,
}

/// The loss on `o.eval_batches` fixed batches of the held-out text.
fn evaluate<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    o: &Options,
    data: &Data,
    inputs: &Inputs<D, T>,
) -> Result<f64> {
    let mut total = 0.0;
    for i in 0..o.eval_batches {
        let (x, y) = Data::batch::<D>(
            &data.val,
            o.batch,
            o.model.ctx,
            o.seed ^ (0xe7a1 + i as u64),
        )?;
        total += loss(m, o.model.heads, &x, &y, inputs)?;
    }
    Ok(total / o.eval_batches as f64)
}

/// The optimizer: weight decay on the matrices and embeddings, not on the
/// biases and norms (rank 1), as GPT-2's training.
fn optimizer<D: Device, T: Float>(
    m: &Gpt2<D, T>,
    o: &Options,
    from: Option<&Path>,
) -> Result<AdamW<Gpt2<D, T>>> {
    let config = AdamWConfig {
        lr: o.lr,
        betas: (0.9, 0.95),
        eps: 1e-8,
        weight_decay: o.weight_decay,
        // f32 master weights of bf16 parameters (no effect in f32).
        master_weights: true,
        ..Default::default()
    };
    let opt = match from {
        Some(path) => AdamW::load_safetensors(path, m, config)?,
        None => AdamW::new(m, config)?,
    };
    Ok(opt.without_weight_decay(|_, dims| dims.len() < 2))
}

/// Writes the model (Hugging Face's names), the optimizer's state
/// (moments, master weights, step count) and the losses so far (for the
/// loss curve of a resumed run, `losses.txt`) to `dir`.
fn save<D: Device, T: Float>(
    dir: &Path,
    m: &Gpt2<D, T>,
    opt: &AdamW<Gpt2<D, T>>,
    report: &Report,
) -> AnyResult {
    std::fs::create_dir_all(dir)?;
    m.to_device::<Cpu>()?
        .save_safetensors(dir.join("model.safetensors"))?;
    opt.save_safetensors(dir.join("optim.safetensors"))?;
    let mut text = String::new();
    for (what, points) in [("train", &report.train), ("val", &report.val)] {
        for (step, l) in points {
            text += &format!("{what} {step} {l:e}\n");
        }
    }
    std::fs::write(dir.join("losses.txt"), text)?;
    Ok(())
}

/// The losses of the steps before `start` that `save` wrote to `dir`
/// (none when the file is absent).
fn saved_losses(dir: &Path, start: usize) -> Report {
    let mut r = Report::default();
    let text = std::fs::read_to_string(dir.join("losses.txt")).unwrap_or_default();
    for line in text.lines() {
        let mut f = line.split(' ');
        let (Some(what), Some(Ok(step)), Some(Ok(l))) = (
            f.next(),
            f.next().map(str::parse::<usize>),
            f.next().map(str::parse::<f64>),
        ) else {
            continue;
        };
        match what {
            "train" if step < start => r.train.push((step, l)),
            "val" if step <= start => r.val.push((step, l)),
            _ => {}
        }
    }
    r
}

/// Trains on `data` as `o` says; returns the losses and a sample.
pub fn train<D: Device, T: Float>(o: &Options, data: &Data) -> AnyResult<Report> {
    let mut o = o.clone();
    o.model.vocab = data.vocab();
    let (mut m, mut opt) = match &o.resume {
        Some(dir) => {
            let m = Gpt2::<Cpu, T>::load_safetensors(dir.join("model.safetensors"))?
                .to_device::<D>()?;
            let found = Config::of(&m, o.model.heads);
            if found != o.model {
                println!("resuming a model of {found:?}");
                o.model = found;
            }
            let opt = optimizer(&m, &o, Some(&dir.join("optim.safetensors")))?;
            (m, opt)
        }
        None => {
            o.model.check()?;
            let m = init(&o.model, o.seed)?.cast::<T>()?.to_device::<D>()?;
            let opt = optimizer(&m, &o, None)?;
            (m, opt)
        }
    };
    o.model.check()?;
    let c = o.model;
    if c.ctx + 1 >= data.val.len() {
        return Err(format!("--ctx {} is longer than the held-out text", c.ctx).into());
    }
    let start = opt.steps() as usize;
    let stop = o.stop_after.unwrap_or(o.steps).min(o.steps);
    println!(
        "GPT-2 of {} layers, width {}, {} heads, context {}, vocabulary {}: {} parameters; {} on {}, batch {}, steps {start}..{stop} of {}",
        c.layers,
        c.width,
        c.heads,
        c.ctx,
        c.vocab,
        m.num_params(),
        T::KIND.name(),
        D::KIND,
        o.batch,
        o.steps
    );
    let inputs = Inputs::<D, T>::new(c.ctx, &c, !D::IS_CPU)?.recompute_blocks(o.recompute_blocks);
    let schedule = CosineWithWarmup {
        warmup_steps: o.warmup() as u64,
        total_steps: o.steps as u64,
        min_lr: o.lr / 10.0,
    };
    // A resumed run's curve starts with the losses before it.
    let mut report = match &o.resume {
        Some(dir) => saved_losses(dir, start),
        None => Report::default(),
    };
    let started = Instant::now();
    let mut last_print = 0.0;
    for step in start..stop {
        let t0 = Instant::now();
        let (x, y) = Data::batch::<D>(
            &data.train,
            o.batch,
            c.ctx,
            o.seed.wrapping_add(step as u64 * 7919),
        )?;
        let (value, grads) = loss_and_grads(&m, c.heads, &x, &y, &inputs)?;
        let lr = schedule.lr_at(o.lr, step as u64);
        opt.set_lr(lr);
        // Clipped inside the step: on a GPU the norm and the clip
        // coefficient stay on the device (no sync).
        opt.step_clipped(&mut m, &grads, o.clip)?;
        let l = value.to_vec()?[0].to_f64();
        report.train.push((step, l));
        let secs = t0.elapsed().as_secs_f64();
        let now = started.elapsed().as_secs_f64();
        if o.verbose && (now - last_print > 0.1 || step + 1 == stop) {
            last_print = now;
            print!(
                "\rstep {:>5}/{}  loss {l:.4}  {:>7.0} tok/s  lr {lr:.2e}   ",
                step + 1,
                o.steps,
                (o.batch * c.ctx) as f64 / secs
            );
            use std::io::Write;
            std::io::stdout().flush()?;
        }
        if (step + 1) % o.eval_every == 0 || step + 1 == stop {
            let v = evaluate(&m, &o, data, &inputs)?;
            report.val.push((step + 1, v));
            println!(
                "\rstep {:>5}/{}  loss {l:.4}  validation loss {v:.4}{:20}",
                step + 1,
                o.steps,
                ""
            );
            if let Some(dir) = &o.save {
                save(dir, &m, &opt, &report)?;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {secs:.1} s ({:.0} tokens/s)",
        stop - start,
        ((stop - start) * o.batch * c.ctx) as f64 / secs.max(1e-9)
    );
    if let Some(dir) = &o.save {
        save(dir, &m, &opt, &report)?;
        println!(
            "checkpoint in {} (--resume {} goes on from it)",
            dir.display(),
            dir.display()
        );
    }
    if let Some(path) = &o.plot {
        std::fs::write(path, loss_svg(&report.train, &report.val))?;
        println!("loss curve in {}", path.display());
    }
    if o.sample > 0 {
        report.sample = sample(&m, &o, data)?;
        println!(
            "--- sample (temperature {}, top-k {}, seed {}) ---\n{}\n---",
            o.temperature, o.top_k, o.seed, report.sample
        );
    }
    Ok(report)
}

/// `o.sample` characters generated after a newline: each from the last
/// row's logits divided by the temperature, among the `top_k` largest
/// (all for 0), drawn on the model's device with seeds from `o.seed`
/// (only the chosen id comes back to the host). The whole window is run
/// again for every character (no key-value cache: the context is short).
fn sample<D: Device, T: Float>(m: &Gpt2<D, T>, o: &Options, data: &Data) -> Result<String> {
    let c = o.model;
    let mut seeds = o.seed ^ 0x5a3b;
    let k = if o.top_k == 0 {
        c.vocab
    } else {
        o.top_k.min(c.vocab)
    };
    let temperature = o.temperature.max(1e-6) as f32;
    let start = data.chars.binary_search(&'\n').unwrap_or(0) as i64;
    let mut ids = vec![start];
    for _ in 0..o.sample {
        let window = &ids[ids.len().saturating_sub(c.ctx)..];
        let s = window.len();
        let x = Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(window.to_vec(), &[1, s])?
            .to_device::<D>()?;
        let (h, _) = forward(m, c.heads, &x, &positions(s)?, Keep::Nothing)?;
        let all = logits(&h, &m.ln_f.weight, &m.ln_f.bias, &m.wte.weight)?;
        let last = all.narrow::<0, shape![_, _]>(s - 1, 1)?;
        let seed = common::generate::next_seed(&mut seeds);
        let next = common::generate::sample_top_k(&last, k, temperature, seed)?;
        ids.push(next.to_vec()?[0]);
    }
    Ok(ids[1..].iter().map(|&i| data.chars[i as usize]).collect())
}

/// The loss curve as an SVG: the training loss of every step (light)
/// with its running mean, and the validation losses (points joined).
pub fn loss_svg(train: &[(usize, f64)], val: &[(usize, f64)]) -> String {
    let (w, h, pad) = (720.0, 420.0, 50.0);
    let all = train.iter().chain(val).filter(|p| p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(s, l) in all {
        (x0, x1) = (x0.min(s as f64), x1.max(s as f64));
        (y0, y1) = (y0.min(l), y1.max(l));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let (x1, y1) = (x1.max(x0 + 1.0), y1.max(y0 + 1e-3));
    let px = |s: f64| pad + (s - x0) / (x1 - x0) * (w - 2.0 * pad);
    let py = |l: f64| h - pad - (l - y0) / (y1 - y0) * (h - 2.0 * pad);
    let line = |pts: &[(usize, f64)], style: &str| {
        let p: Vec<String> = pts
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|&(s, l)| format!("{:.1},{:.1}", px(s as f64), py(l)))
            .collect();
        format!(
            "<polyline fill=\"none\" {style} points=\"{}\"/>\n",
            p.join(" ")
        )
    };
    let k = (train.len() / 50).max(1);
    let smooth: Vec<(usize, f64)> = (0..train.len())
        .map(|i| {
            let from = i.saturating_sub(k - 1);
            let part = &train[from..=i];
            (
                train[i].0,
                part.iter().map(|p| p.1).sum::<f64>() / part.len() as f64,
            )
        })
        .collect();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    svg += &format!(
        "<path d=\"M{pad},{pad} V{} H{}\" stroke=\"black\" fill=\"none\"/>\n",
        h - pad,
        w - pad
    );
    for i in 0..=4 {
        let l = y0 + (y1 - y0) * i as f64 / 4.0;
        svg += &format!("<text x=\"4\" y=\"{:.1}\">{l:.2}</text>\n", py(l) + 4.0);
        let s = x0 + (x1 - x0) * i as f64 / 4.0;
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{s:.0}</text>\n",
            px(s),
            h - pad + 16.0
        );
    }
    svg += &line(train, "stroke=\"#9ecae1\" stroke-width=\"1\"");
    svg += &line(&smooth, "stroke=\"#08519c\" stroke-width=\"2\"");
    svg += &line(val, "stroke=\"#e6550d\" stroke-width=\"2\"");
    for &(s, l) in val.iter().filter(|p| p.1.is_finite()) {
        svg += &format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#e6550d\"/>\n",
            px(s as f64),
            py(l)
        );
    }
    svg += &format!(
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\">loss by step: <tspan fill=\"#08519c\">train</tspan>, <tspan fill=\"#e6550d\">validation</tspan></text>\n</svg>\n",
        w / 2.0
    );
    svg
}

/// The model of `--bench` and `--grads-out`: `--weights`, else random
/// GPT-2 initialisation of `o.model`'s sizes.
fn model_for<D: Device, T: Float>(o: &Options) -> AnyResult<(Gpt2<D, T>, Config)> {
    let m = match &o.weights {
        Some(path) => hf_gpt2::load(path)?,
        None => {
            o.model.check()?;
            init(&o.model, o.seed)?
        }
    };
    let c = Config::of(&m, o.model.heads);
    c.check()?;
    Ok((m.cast::<T>()?.to_device::<D>()?, c))
}

/// The time and the CUDA work of each phase of a step (`--profile`): a
/// mark synchronises the device and closes the phase since the last one.
/// The counters and the host's time are read before that
/// synchronisation, so a phase's own host waits are its own, not the
/// profiler's, and a phase whose host time is close to its whole time is
/// bound by the host's queuing, not by the device.
pub struct Phases {
    on: bool,
    last: Instant,
    counted: tensorfn::CudaCounters,
    /// `(phase, seconds, seconds on the host before the wait, CUDA work)`
    /// in order.
    pub rows: Vec<(String, f64, f64, tensorfn::CudaCounters)>,
}

impl Phases {
    /// Marks that do nothing (an ordinary step).
    fn off() -> Phases {
        Phases {
            on: false,
            last: Instant::now(),
            counted: Default::default(),
            rows: Vec::new(),
        }
    }

    /// Starts the first phase now, after the device's queued work.
    fn start<D: Device>() -> Result<Phases> {
        tensorfn::synchronize::<D>()?;
        Ok(Phases {
            on: true,
            last: Instant::now(),
            counted: tensorfn::cuda_counters(),
            rows: Vec::new(),
        })
    }

    /// Ends the phase `name` once the device has done its work.
    fn mark<D: Device>(&mut self, name: impl FnOnce() -> String) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        let work = tensorfn::cuda_counters().since(&self.counted);
        let host = self.last.elapsed().as_secs_f64();
        tensorfn::synchronize::<D>()?;
        let now = Instant::now();
        self.rows
            .push((name(), (now - self.last).as_secs_f64(), host, work));
        self.last = now;
        self.counted = tensorfn::cuda_counters();
        Ok(())
    }

    /// The rows as a table, with a total.
    fn print(&self, gpu: bool) {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "{:<36} {:>8} {:>8}{}",
            "phase",
            "ms",
            "host ms",
            match gpu {
                true => "  launches  lib  allocs (cuMemAlloc)  to GPU (MiB)  to host (MiB)  GPU copies (MiB)  waits",
                false => "",
            }
        );
        let mut total = (0.0, 0.0, tensorfn::CudaCounters::default());
        for (_, secs, host, w) in &self.rows {
            total.0 += secs;
            total.1 += host;
            let t = &mut total.2;
            t.launches += w.launches;
            t.library_calls += w.library_calls;
            t.allocations += w.allocations;
            t.device_allocations += w.device_allocations;
            t.host_to_device += w.host_to_device;
            t.host_to_device_bytes += w.host_to_device_bytes;
            t.device_to_host += w.device_to_host;
            t.device_to_host_bytes += w.device_to_host_bytes;
            t.device_to_device += w.device_to_device;
            t.device_to_device_bytes += w.device_to_device_bytes;
            t.syncs += w.syncs;
        }
        let total = ("total".to_string(), total.0, total.1, total.2);
        for (name, secs, host, w) in self.rows.iter().chain([&total]) {
            print!("{name:<36} {:>8.2} {:>8.2}", 1e3 * secs, 1e3 * host);
            if gpu {
                print!(
                    "  {:>8}  {:>3}  {:>6} ({:>3})        {:>3} ({:>7.2})  {:>3} ({:>7.2})  {:>4} ({:>8.1})  {:>5}",
                    w.launches,
                    w.library_calls,
                    w.allocations,
                    w.device_allocations,
                    w.host_to_device,
                    mib(w.host_to_device_bytes),
                    w.device_to_host,
                    mib(w.device_to_host_bytes),
                    w.device_to_device,
                    mib(w.device_to_device_bytes),
                    w.syncs
                );
            }
            println!();
        }
    }
}

/// `--profile`: three steps with a mark after each phase, then one
/// AdamW step without clipping (what clipping adds is the difference);
/// prints the last clipped step's phases.
fn profile<D: Device, T: Float>(
    m: &mut Gpt2<D, T>,
    opt: &mut AdamW<Gpt2<D, T>>,
    heads: usize,
    (x, y): (&Ids<D>, &Ids<D>),
    inputs: &Inputs<D, T>,
    clip: f64,
) -> Result<()> {
    let mut last = Phases::off();
    for _ in 0..3 {
        let mut phases = Phases::start::<D>()?;
        let (_, grads) = loss_and_grads_phased(m, heads, x, y, inputs, &mut phases)?;
        opt.step_clipped(m, &grads, clip)?;
        phases.mark::<D>(|| "clipping and AdamW (step_clipped)".into())?;
        drop(grads);
        phases.mark::<D>(|| "gradients freed".into())?;
        last = phases;
    }
    let (_, grads) = loss_and_grads(m, heads, x, y, inputs)?;
    let mut alone = Phases::start::<D>()?;
    opt.step(m, &grads)?;
    alone.mark::<D>(|| "AdamW alone (step, not in the total)".into())?;
    println!("phases of one step, each ended by a synchronisation:");
    last.print(!D::IS_CPU);
    let (name, secs, _, w) = &alone.rows[0];
    println!(
        "{name}: {:.2} ms, {} launches, {} allocations",
        1e3 * secs,
        w.launches,
        w.allocations
    );
    Ok(())
}

/// `--bench`: warm-up steps, then the median of `o.steps` training steps
/// (forward, backward, clipping, AdamW), each timed between
/// synchronisations, on random tokens.
pub fn bench<D: Device, T: Float>(o: &Options) -> AnyResult<f64> {
    let (mut m, c) = model_for::<D, T>(o)?;
    let (b, s) = (o.batch, o.model.ctx.min(c.ctx));
    println!(
        "bench: GPT-2 of {} layers, width {}, {} heads, vocabulary {}{}: {} parameters; B {b}, T {s}, {} on {}, AdamW{}",
        c.layers,
        c.width,
        c.heads,
        c.vocab,
        match D::IS_CPU {
            true => String::new(),
            false => format!(" (projection padded to {})", c.vocab.next_multiple_of(64)),
        },
        m.num_params(),
        T::KIND.name(),
        D::KIND,
        if T::KIND.size_bytes() == 2 { " with f32 master weights" } else { "" }
    );
    let mut opt = optimizer(&m, o, None)?;
    let inputs = Inputs::<D, T>::new(s, &c, !D::IS_CPU)?.recompute_blocks(o.recompute_blocks);
    let mut rng = Lcg::new(o.seed);
    let mut tokens = || -> Result<Ids<D>> {
        let v = (0..b * s).map(|_| rng.below(c.vocab) as i64).collect();
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(v, &[b, s])?.to_device::<D>()
    };
    let (x, y) = (tokens()?, tokens()?);
    let mut times = Vec::new();
    let mut work = tensorfn::CudaCounters::default();
    for i in 0..o.steps + 2 {
        tensorfn::synchronize::<D>()?;
        let t0 = Instant::now();
        let before = tensorfn::cuda_counters();
        let (value, grads) = loss_and_grads(&m, c.heads, &x, &y, &inputs)?;
        opt.step_clipped(&mut m, &grads, o.clip)?;
        drop(grads);
        work = tensorfn::cuda_counters().since(&before);
        tensorfn::synchronize::<D>()?;
        let secs = t0.elapsed().as_secs_f64();
        let l = value.to_vec()?[0].to_f64();
        if i >= 2 {
            times.push(secs);
        }
        println!(
            "step {i:2}{}: {:8.2} ms, loss {l:.4}",
            if i < 2 { " (warm-up)" } else { "" },
            1e3 * secs
        );
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "median of {} steps: {:.2} ms, {:.0} tokens/s",
        times.len(),
        1e3 * median,
        (b * s) as f64 / median
    );
    if !D::IS_CPU {
        println!(
            "last step: {} kernel launches, {} library calls, {} allocations ({} cuMemAlloc), {} copies to the GPU ({} bytes), {} to the host ({} bytes), {} on the GPU ({} bytes), {} host waits",
            work.launches,
            work.library_calls,
            work.allocations,
            work.device_allocations,
            work.host_to_device,
            work.host_to_device_bytes,
            work.device_to_host,
            work.device_to_host_bytes,
            work.device_to_device,
            work.device_to_device_bytes,
            work.syncs
        );
        if let Ok(stats) = tensorfn::cuda_memory_stats(0) {
            println!(
                "peak allocated {:.1} MiB ({:.1} MiB cached now)",
                stats.peak_allocated_bytes as f64 / (1 << 20) as f64,
                stats.cached_bytes as f64 / (1 << 20) as f64
            );
            let dims: Vec<Vec<usize>> = m.tensors().into_iter().map(|(_, t)| t.dims()).collect();
            let step = peak::Step {
                model: c,
                batch: b,
                seq: s,
                padded_vocab: c.vocab.next_multiple_of(64),
            };
            match peak::predict::<T>(&dims, step, inputs.keep) {
                Some(p) => println!("{}", p.compare(stats.peak_allocated_bytes)),
                None => println!("peak memory: not predicted with --recompute-blocks"),
            }
        }
    }
    if o.profile {
        profile(&mut m, &mut opt, c.heads, (&x, &y), &inputs, o.clip)?;
    }
    Ok(median)
}

/// The ids and labels of `--tokens`.
#[derive(Params)]
pub struct Tokens<D: Device> {
    pub input_ids: Tensor<D, i64, shape![_, _]>,
    pub labels: Tensor<D, i64, shape![_, _]>,
}

/// `--grads-out`: the loss of `GPT2LMHeadModel(input_ids, labels=labels)`
/// and every parameter's gradient, written as f32 with the model's names.
pub fn grads_out<D: Device, T: Float>(o: &Options, tokens: &Path, out: &Path) -> AnyResult<f64> {
    let (m, c) = model_for::<D, T>(o)?;
    let t = Tokens::<Cpu>::load_safetensors(tokens)?;
    let dims = t.input_ids.dims().to_vec();
    if t.labels.dims() != dims.as_slice() {
        return Err(format!("labels {:?} and input_ids {dims:?} differ", t.labels.dims()).into());
    }
    let (b, s) = (dims[0], dims[1]);
    // Position `i` predicts label `i + 1`; the last position nothing.
    let labels = t.labels.to_vec()?;
    let targets: Vec<i64> = (0..b * s)
        .map(|i| if i % s + 1 < s { labels[i + 1] } else { -100 })
        .collect();
    let ids = t.input_ids.to_device::<D>()?;
    let targets =
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(targets, &[b, s])?.to_device::<D>()?;
    let inputs = Inputs::<D, T>::new(s, &c, !D::IS_CPU)?.recompute_blocks(o.recompute_blocks);
    let (value, grads) = loss_and_grads(&m, c.heads, &ids, &targets, &inputs)?;
    let l = value.to_vec()?[0].to_f64();
    let grads = grads.to_device::<Cpu>()?.cast::<f32>()?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> =
        vec![("loss".into(), vec![], (l as f32).to_le_bytes().to_vec())];
    grads.visit(&mut |name, t| {
        tensors.push((name.to_string(), t.dims(), t.to_le_bytes()?));
        Ok(())
    })?;
    let views = tensors
        .iter()
        .map(|(n, d, bytes)| {
            Ok((
                n.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, d.clone(), bytes)?,
            ))
        })
        .collect::<AnyResult<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, out)?;
    println!(
        "loss {l:.6} on {b}x{s} tokens ({} on {}); the loss and {} gradients in {}",
        T::KIND.name(),
        D::KIND,
        tensors.len() - 1,
        out.display()
    );
    Ok(l)
}

/// Runs what the options ask for on `D` in `T`.
fn dispatch<D: Device, T: Float>(o: &Options) -> AnyResult {
    if let Some(out) = &o.grads_out {
        let tokens = o
            .tokens
            .as_ref()
            .ok_or("--grads-out needs --tokens FILE.safetensors")?;
        grads_out::<D, T>(o, tokens, out)?;
    } else if o.bench {
        bench::<D, T>(o)?;
    } else {
        let data = Data::shakespeare()?;
        let r = train::<D, T>(o, &data)?;
        fell(&r)?;
    }
    Ok(())
}

/// An `Err` unless the training loss fell: the mean of the last tenth
/// of the steps against the first step's.
fn fell(r: &Report) -> AnyResult {
    let (Some(first), n) = (r.train.first(), r.train.len()) else {
        return Ok(());
    };
    let k = (n / 10).max(1);
    let last = r.train[n - k..].iter().map(|p| p.1).sum::<f64>() / k as f64;
    if last.is_nan() || last >= first.1 {
        return Err(format!(
            "the loss did not fall: {:.4} at first, {last:.4} at the end",
            first.1
        )
        .into());
    }
    println!("loss {:.4} -> {last:.4}", first.1);
    Ok(())
}

pub fn main() -> AnyResult {
    let o = Options::from_args()?;
    if let Some(gpus) = o.gpus {
        return dp::main(&o, gpus);
    }
    let gpu = match o.device.as_deref() {
        Some("cpu") => false,
        Some("cuda") => true,
        None => common::gpu_available()?,
        Some(other) => return Err(format!("--device {other}: cpu or cuda").into()),
    };
    let default = if gpu && o.grads_out.is_none() {
        "bf16"
    } else {
        "f32"
    };
    match (gpu, o.dtype.as_deref().unwrap_or(default)) {
        (false, "f32") => dispatch::<Cpu, f32>(&o),
        (true, "f32") => dispatch::<Cuda, f32>(&o),
        (true, "bf16") => dispatch::<Cuda, bf16>(&o),
        (false, "bf16") => {
            Err("--dtype bf16 runs on the GPU (--device cuda); the CPU trains in f32".into())
        }
        (_, other) => Err(format!("--dtype {other}: f32 or bf16").into()),
    }
}

/// A tensor of the given dims from f64 values.
fn tensor<S: tensorfn::Shape>(v: &[f64], dims: &[usize]) -> Result<Tensor<Cpu, f64, S>> {
    Tensor::from_vec_dims(v.to_vec(), dims)
}

/// `|got - want| <= atol + rtol * |want|`, or an `Err` naming `what`.
fn close(what: &str, got: f64, want: f64, rtol: f64, atol: f64) -> AnyResult {
    if (got - want).abs() <= atol + rtol * want.abs() {
        Ok(())
    } else {
        Err(format!("{what}: {got} where finite differences give {want}").into())
    }
}

/// One block's `vjp` in f64 against central finite differences of
/// `sum(block(..) * grad_output)`, for every element of the input and of
/// every parameter.
fn check_block_gradients(seed: u64) -> AnyResult {
    let (b, s, nh, hd) = (2, 3, 2, 2);
    let c = nh * hd;
    let dims: [Vec<usize>; 13] = [
        vec![b, s, c],
        vec![c],
        vec![c],
        vec![c, 3 * c],
        vec![3 * c],
        vec![c, c],
        vec![c],
        vec![c],
        vec![c],
        vec![c, 4 * c],
        vec![4 * c],
        vec![4 * c, c],
        vec![c],
    ];
    let names = [
        "x",
        "ln_1.weight",
        "ln_1.bias",
        "attn.c_attn.weight",
        "attn.c_attn.bias",
        "attn.c_proj.weight",
        "attn.c_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.c_fc.weight",
        "mlp.c_fc.bias",
        "mlp.c_proj.weight",
        "mlp.c_proj.bias",
    ];
    let mut rng = Lcg::new(seed);
    let mut vals: Vec<Vec<f64>> = dims
        .iter()
        .map(|d| {
            (0..d.iter().product())
                .map(|_| 2.0 * rng.uniform() - 1.0)
                .collect()
        })
        .collect();
    let go: Vec<f64> = (0..b * s * c).map(|_| 2.0 * rng.uniform() - 1.0).collect();
    let go_t = tensor::<shape![_, _, _]>(&go, &dims[0])?;
    let t1 = |v: &[f64]| tensor::<shape![_]>(v, &[v.len()]);
    let t2 = |v: &[f64], d: &[usize]| tensor::<shape![_, _]>(v, d);
    let f = |v: &[Vec<f64>]| -> Result<f64> {
        let y = block(
            &tensor::<shape![_, _, _]>(&v[0], &dims[0])?,
            nh,
            hd,
            &t1(&v[1])?,
            &t1(&v[2])?,
            &t2(&v[3], &dims[3])?,
            &t1(&v[4])?,
            &t2(&v[5], &dims[5])?,
            &t1(&v[6])?,
            &t1(&v[7])?,
            &t1(&v[8])?,
            &t2(&v[9], &dims[9])?,
            &t1(&v[10])?,
            &t2(&v[11], &dims[11])?,
            &t1(&v[12])?,
        )?;
        Ok(y.to_vec()?.iter().zip(&go).map(|(a, b)| a * b).sum())
    };
    let v = &vals;
    let (_, g) = block::vjp(
        &tensor::<shape![_, _, _]>(&v[0], &dims[0])?,
        nh,
        hd,
        &t1(&v[1])?,
        &t1(&v[2])?,
        &t2(&v[3], &dims[3])?,
        &t1(&v[4])?,
        &t2(&v[5], &dims[5])?,
        &t1(&v[6])?,
        &t1(&v[7])?,
        &t1(&v[8])?,
        &t2(&v[9], &dims[9])?,
        &t1(&v[10])?,
        &t2(&v[11], &dims[11])?,
        &t1(&v[12])?,
        &go_t,
    )?;
    let grads = [
        g.0.to_vec()?,
        g.1.to_vec()?,
        g.2.to_vec()?,
        g.3.to_vec()?,
        g.4.to_vec()?,
        g.5.to_vec()?,
        g.6.to_vec()?,
        g.7.to_vec()?,
        g.8.to_vec()?,
        g.9.to_vec()?,
        g.10.to_vec()?,
        g.11.to_vec()?,
        g.12.to_vec()?,
    ];
    let h = 1e-5;
    let mut n = 0;
    for i in 0..vals.len() {
        for j in 0..vals[i].len() {
            let x = vals[i][j];
            vals[i][j] = x + h;
            let up = f(&vals)?;
            vals[i][j] = x - h;
            let down = f(&vals)?;
            vals[i][j] = x;
            // The attention's saved log-sum-exps are f32, hence the
            // tolerance.
            close(
                &format!("block gradient of {}[{j}]", names[i]),
                grads[i][j],
                (up - down) / (2.0 * h),
                1e-4,
                1e-6,
            )?;
            n += 1;
        }
    }
    println!("  block: {n} gradients match f64 finite differences");
    Ok(())
}

/// The whole model's gradients (the chained pullbacks, the tied `wte`)
/// in f64 against finite differences of the loss at some elements, the
/// padded head against the plain one, and `--recompute-blocks` (the
/// chained `vjp`s) against the pullbacks, bit for bit.
fn check_model_gradients(seed: u64) -> AnyResult {
    let c = Config {
        layers: 2,
        width: 4,
        heads: 2,
        ctx: 5,
        vocab: 7,
    };
    let mut m = init(&c, seed)?.cast::<f64>()?;
    // Norms and biases away from 1 and 0, so that their gradients are
    // checked in general position.
    let mut rng = Lcg::new(seed);
    let mut jitter = |t: &mut Tensor<Cpu, f64, shape![_]>| -> Result<()> {
        let v = t
            .to_vec()?
            .iter()
            .map(|x| x + 0.3 * (2.0 * rng.uniform() - 1.0))
            .collect();
        *t = Tensor::from_vec_dims(v, &[t.dims()[0]])?;
        Ok(())
    };
    for b in &mut m.h {
        jitter(&mut b.ln_1.weight)?;
        jitter(&mut b.attn.c_attn.bias)?;
        jitter(&mut b.mlp.c_proj.bias)?;
    }
    jitter(&mut m.ln_f.bias)?;
    let (b, s) = (2, 4);
    let ids =
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(vec![1, 3, 3, 6, 0, 2, 5, 1], &[b, s])?;
    let targets =
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(vec![3, 3, 6, -100, 2, 5, 1, 4], &[b, s])?;
    let plain = Inputs::<Cpu, f64>::new(s, &c, false)?;
    let padded = Inputs::<Cpu, f64>::new(s, &c, true)?;
    let (l, g) = loss_and_grads(&m, c.heads, &ids, &targets, &plain)?;
    let (lp, gp) = loss_and_grads(&m, c.heads, &ids, &targets, &padded)?;
    close(
        "padded head's loss",
        lp.to_vec()?[0],
        l.to_vec()?[0],
        1e-12,
        0.0,
    )?;
    for (a, b) in gp.wte.weight.to_vec()?.iter().zip(g.wte.weight.to_vec()?) {
        close("padded head's wte gradient", *a, b, 1e-10, 1e-14)?;
    }
    // `--recompute-blocks` (each block's `vjp` from its kept input) gives
    // the bits of the pullbacks the step keeps by default.
    let recomputing = Inputs::<Cpu, f64>::new(s, &c, false)?.recompute_blocks(true);
    let (lr, gr) = loss_and_grads(&m, c.heads, &ids, &targets, &recomputing)?;
    if lr.to_vec()? != l.to_vec()? {
        return Err("--recompute-blocks changes the loss".into());
    }
    for ((name, a), (_, b)) in gr.tensors().into_iter().zip(g.tensors()) {
        if a.to_le_bytes()? != b.to_le_bytes()? {
            return Err(format!("--recompute-blocks changes the gradient of {name}").into());
        }
    }
    let h = 1e-5;
    let mut n = 0;
    let loss_at = |m: &Gpt2<Cpu, f64>| loss(m, c.heads, &ids, &targets, &plain);
    type Get2 = fn(&mut Gpt2<Cpu, f64>) -> &mut Tensor<Cpu, f64, shape![_, _]>;
    let matrices: [(&str, Get2, Vec<f64>); 4] = [
        ("wte.weight", |m| &mut m.wte.weight, g.wte.weight.to_vec()?),
        ("wpe.weight", |m| &mut m.wpe.weight, g.wpe.weight.to_vec()?),
        (
            "h.0.attn.c_attn.weight",
            |m| &mut m.h[0].attn.c_attn.weight,
            g.h[0].attn.c_attn.weight.to_vec()?,
        ),
        (
            "h.1.mlp.c_proj.weight",
            |m| &mut m.h[1].mlp.c_proj.weight,
            g.h[1].mlp.c_proj.weight.to_vec()?,
        ),
    ];
    for (name, get, grad) in matrices {
        let t = get(&mut m).clone();
        let (vals, dims) = (t.to_vec()?, t.dims().to_vec());
        // Every element of the embeddings, a spread of the others.
        let stride = if name.starts_with('w') { 1 } else { 7 };
        for j in (0..vals.len()).step_by(stride) {
            let mut v = vals.clone();
            v[j] += h;
            *get(&mut m) = Tensor::from_vec_dims(v.clone(), &dims)?;
            let up = loss_at(&m)?;
            v[j] -= 2.0 * h;
            *get(&mut m) = Tensor::from_vec_dims(v, &dims)?;
            let down = loss_at(&m)?;
            close(
                &format!("model gradient of {name}[{j}]"),
                grad[j],
                (up - down) / (2.0 * h),
                1e-4,
                1e-7,
            )?;
            n += 1;
        }
        *get(&mut m) = t;
    }
    type Get1 = fn(&mut Gpt2<Cpu, f64>) -> &mut Tensor<Cpu, f64, shape![_]>;
    let vectors: [(&str, Get1, Vec<f64>); 3] = [
        (
            "ln_f.weight",
            |m| &mut m.ln_f.weight,
            g.ln_f.weight.to_vec()?,
        ),
        (
            "h.0.ln_1.bias",
            |m| &mut m.h[0].ln_1.bias,
            g.h[0].ln_1.bias.to_vec()?,
        ),
        (
            "h.1.attn.c_attn.bias",
            |m| &mut m.h[1].attn.c_attn.bias,
            g.h[1].attn.c_attn.bias.to_vec()?,
        ),
    ];
    for (name, get, grad) in vectors {
        let t = get(&mut m).clone();
        let vals = t.to_vec()?;
        for j in 0..vals.len() {
            let mut v = vals.clone();
            v[j] += h;
            *get(&mut m) = Tensor::from_vec_dims(v.clone(), &[v.len()])?;
            let up = loss_at(&m)?;
            v[j] -= 2.0 * h;
            *get(&mut m) = Tensor::from_vec_dims(v.clone(), &[v.len()])?;
            let down = loss_at(&m)?;
            close(
                &format!("model gradient of {name}[{j}]"),
                grad[j],
                (up - down) / (2.0 * h),
                1e-4,
                1e-7,
            )?;
            n += 1;
        }
        *get(&mut m) = t;
    }
    println!("  model: {n} gradients match f64 finite differences; the padded head matches");
    Ok(())
}

/// The test's run: the gradient checks, a short training run of a tiny
/// model on `D` whose loss must fall, and a stop, save and resume that
/// must give the losses of not stopping.
pub fn run<D: Device>() -> AnyResult {
    let seed = common::seed();
    check_block_gradients(seed)?;
    check_model_gradients(seed)?;
    let data = Data::shakespeare()?;
    let dir =
        std::env::temp_dir().join(format!("tensorfn-train-gpt2-{}-{seed}", std::process::id()));
    let o = Options {
        model: Config {
            layers: 2,
            width: 32,
            heads: 2,
            ctx: 32,
            vocab: 0,
        },
        batch: 8,
        steps: 60,
        eval_every: 20,
        eval_batches: 2,
        seed,
        save: None,
        plot: Some(dir.join("loss.svg")),
        sample: 40,
        verbose: false,
        ..Options::default()
    };
    std::fs::create_dir_all(&dir)?;
    let r = train::<D, f32>(&o, &data)?;
    let first = r.train[..5].iter().map(|p| p.1).sum::<f64>() / 5.0;
    let last = r.train[r.train.len() - 5..]
        .iter()
        .map(|p| p.1)
        .sum::<f64>()
        / 5.0;
    let val = r.val.last().map_or(f64::NAN, |v| v.1);
    if last.is_nan() || last >= 0.85 * first || val.is_nan() || val >= r.train[0].1 {
        return Err(format!("the loss did not fall: {first:.4} over the first 5 steps, {last:.4} over the last; validation {:?}", r.val).into());
    }
    let svg = std::fs::read_to_string(dir.join("loss.svg"))?;
    if !svg.contains("<polyline") || r.sample.chars().count() != 40 {
        return Err("no loss curve or no sample".into());
    }
    // Stop after 4 of 8 steps and resume: the same losses as 8 steps in
    // one go.
    let ckpt = dir.join("ckpt");
    let short = Options {
        steps: 8,
        plot: None,
        sample: 0,
        ..o.clone()
    };
    let whole = train::<D, f32>(&short, &data)?;
    train::<D, f32>(
        &Options {
            stop_after: Some(4),
            save: Some(ckpt.clone()),
            ..short.clone()
        },
        &data,
    )?;
    let resumed = train::<D, f32>(
        &Options {
            resume: Some(ckpt),
            ..short
        },
        &data,
    )?;
    // On the GPU the embedding's gradient is summed with atomic adds, in
    // no fixed order.
    let tol = if D::IS_CPU { 0.0 } else { 1e-4 };
    if resumed.train.len() != 8 || !resumed.train[..4].iter().map(|p| p.0).eq(0..4) {
        return Err(format!(
            "the resumed run's curve lacks the steps before it: {:?}",
            resumed.train
        )
        .into());
    }
    for (&(s, a), &(t, b)) in resumed.train[4..].iter().zip(&whole.train[4..]) {
        if s != t || (a - b).abs() > tol * b.abs() {
            return Err(format!(
                "resumed at step 4: step {s} loss {a}, without stopping step {t} loss {b}"
            )
            .into());
        }
    }
    println!(
        "resuming at step 4 gives the losses of not stopping: {:?}",
        resumed.train
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
