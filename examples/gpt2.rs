//! GPT-2 small (124M): weights from a safetensors file with Hugging Face's
//! names, a forward pass over a prompt, and generation with a key-value
//! cache, greedy or top-k, printing tokens per second. Written once for
//! every device and float dtype.
//!
//! ```sh
//! cargo run --release --example gpt2                      # random weights, checked
//! cargo run --release --example gpt2 -- --weights model.safetensors --tokens 464,2068,7586 \
//!     --steps 32 --top-k 40 --dtype bf16
//! ```
//!
//! Without `--weights` it writes random weights (GPT-2's initialisation) to
//! a temporary file and loads them through the same loader; with it, it
//! reads a checkpoint as `GPT2LMHeadModel.save_pretrained` writes it (keys
//! under `transformer.`, the tied `lm_head.weight` absent) or as the
//! original GPT-2 files name them (`wte.weight`, `h.0.attn.c_attn.weight`,
//! ...; the attention's mask buffers are left). `scripts/lm_reference.py`
//! writes such a file with PyTorch and compares the logits that
//! `--logits-out FILE` writes with `transformers`' own. There is no
//! tokenizer: prompts and outputs are token ids.
//!
//! Options: `--weights FILE`, `--tokens IDS` (comma-separated, the
//! prompts of the `--batch` rows one after the other, default 8 fixed ids),
//! `--batch B`, `--steps N`
//! (new tokens, default 16), `--top-k K` (0: greedy; tokens are chosen
//! on the device either way), `--seed S`,
//! `--dtype f32|bf16|f16`, `--layers L` (random weights only, default 12),
//! `--cpu`, `--logits-out FILE` (the prompt's logits, `[B * T, 50257]`,
//! f32), `--no-check` (skip the f64 check of a random model),
//! `--prompt-len T` (rows of `T` pseudo-random ids instead of `--tokens`),
//! `--bench N` (time `N` forward passes of the prompt, after one to warm
//! up, and print the median).

mod common;

use common::generate::{
    check_against_f64, check_and_generate, generate, weights_file, CausalLm, Logits3, Options,
};
use common::{hf_gpt2, seed, AnyResult};
use tensorfn::prelude::*;
use tensorfn::Shape;

/// Tokens in GPT-2's vocabulary.
pub const VOCAB: usize = 50257;
/// Positions GPT-2 has embeddings for.
pub const CTX: usize = 1024;
/// The vocabulary rounded up to a multiple of 64 for the output projection
/// (llm.c's `padded_vocab_size`): logits rows of 50257 16-bit values start
/// at 2-byte boundaries, which keeps cuBLASLt off its tensor-core kernels
/// with 16-byte aligned rows; padded rows are aligned, and the extra
/// columns (zero weights) are sliced off as a view.
pub const VOCAB_PAD: usize = 50304;

/// `LayerNorm(768)`: keys `weight`, `bias`.
#[derive(Params)]
pub struct LayerNorm<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![768]>,
    pub bias: Tensor<D, T, shape![768]>,
}

/// A `Conv1D` of Hugging Face's GPT-2: `x @ weight + bias`, the weight
/// stored `[in, out]`.
#[derive(Params)]
pub struct Conv1D<D: Device, T: Float, const IN: usize, const OUT: usize> {
    pub weight: Tensor<D, T, shape![IN, OUT]>,
    pub bias: Tensor<D, T, shape![OUT]>,
}

/// Attention: `c_attn` makes queries, keys and values, `c_proj` mixes the
/// heads.
#[derive(Params)]
pub struct Attention<D: Device, T: Float> {
    pub c_attn: Conv1D<D, T, 768, 2304>,
    pub c_proj: Conv1D<D, T, 768, 768>,
}

/// The MLP: 768 → 3072 → 768 with GELU (tanh form, GPT-2's `gelu_new`).
#[derive(Params)]
pub struct Mlp<D: Device, T: Float> {
    pub c_fc: Conv1D<D, T, 768, 3072>,
    pub c_proj: Conv1D<D, T, 3072, 768>,
}

/// One transformer block: keys `ln_1`, `attn`, `ln_2`, `mlp`.
#[derive(Params)]
pub struct Block<D: Device, T: Float> {
    pub ln_1: LayerNorm<D, T>,
    pub attn: Attention<D, T>,
    pub ln_2: LayerNorm<D, T>,
    pub mlp: Mlp<D, T>,
}

/// The model: keys `wte.weight`, `wpe.weight`, `h.0.ln_1.weight` ..
/// `h.11.mlp.c_proj.bias`, `ln_f.*`. The output projection is `wte`
/// (tied, as GPT-2's).
#[derive(Params)]
pub struct Gpt2<D: Device, T: Float> {
    pub wte: Embedding<D, T, VOCAB>,
    pub wpe: Embedding<D, T, CTX>,
    pub h: Vec<Block<D, T>>,
    pub ln_f: LayerNorm<D, T>,
}

/// An embedding table: key `weight`, `[N, 768]`.
#[derive(Params)]
pub struct Embedding<D: Device, T: Float, const N: usize> {
    pub weight: Tensor<D, T, shape![N, 768]>,
}

tensor_fn! {
    /// Layer norm over the hidden dim, with GPT-2's epsilon.
    pub fn ln<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 768]>,
        p: &LayerNorm<D, T>,
    ) -> Tensor<D, T, [B, S, 768]> {
        layer_norm(x, p.weight, p.bias, 1e-5)
    }

    /// Token and position embeddings of `ids`, at `positions`.
    pub fn embed<D: Device, T: Float>(
        ids: &Tensor<D, i64, [B, S]>,
        positions: &Tensor<D, i64, [S]>,
        wte: &Embedding<D, T, VOCAB>,
        wpe: &Embedding<D, T, CTX>,
    ) -> Tensor<D, T, [B, S, 768]> {
        embedding(ids, wte.weight) + embedding(positions, wpe.weight)
    }

    /// The queries, keys and values of a block, 12 heads of 64 each.
    pub fn qkv<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 768]>,
        p: &Block<D, T>,
    ) -> (Tensor<D, T, [B, 12, S, 64]>, Tensor<D, T, [B, 12, S, 64]>, Tensor<D, T, [B, 12, S, 64]>) {
        let h = ln(x, p.ln_1).reshape([B * S, 768]);
        let qkv = addmm(p.attn.c_attn.bias, h, p.attn.c_attn.weight);
        let q = qkv.narrow(1, 0, 768).reshape([B, S, 12, 64]).permute([0, 2, 1, 3]);
        let k = qkv.narrow(1, 768, 768).reshape([B, S, 12, 64]).permute([0, 2, 1, 3]);
        let v = qkv.narrow(1, 1536, 768).reshape([B, S, 12, 64]).permute([0, 2, 1, 3]);
        (q, k, v)
    }

    /// The rest of a block once the heads are attended: their projection
    /// and residual, then the MLP and its residual.
    pub fn finish<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 768]>,
        heads: &Tensor<D, T, [B, 12, S, 64]>,
        p: &Block<D, T>,
    ) -> Tensor<D, T, [B, S, 768]> {
        let a = heads.permute([0, 2, 1, 3]).reshape([B * S, 768]);
        let x = x + addmm(p.attn.c_proj.bias, a, p.attn.c_proj.weight).reshape([B, S, 768]);
        let h = ln(x, p.ln_2).reshape([B * S, 768]);
        let up = gelu(addmm(p.mlp.c_fc.bias, h, p.mlp.c_fc.weight));
        x + addmm(p.mlp.c_proj.bias, up, p.mlp.c_proj.weight).reshape([B, S, 768])
    }

    /// A block over a whole prompt (causal attention), with its keys and
    /// values for the cache.
    pub fn block<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 768]>,
        p: &Block<D, T>,
    ) -> (Tensor<D, T, [B, S, 768]>, Tensor<D, T, [B, 12, S, 64]>, Tensor<D, T, [B, 12, S, 64]>) {
        let (q, k, v) = qkv(x, p);
        let heads = scaled_dot_product_attention(q, k, v, is_causal = true);
        (finish(x, heads, p), k, v)
    }

    /// A block for one new token after `P` cached ones: it attends to all
    /// of them and to itself.
    pub fn block_step<D: Device, T: Float>(
        x: &Tensor<D, T, [B, 1, 768]>,
        k_past: &Tensor<D, T, [B, 12, P, 64]>,
        v_past: &Tensor<D, T, [B, 12, P, 64]>,
        p: &Block<D, T>,
    ) -> (Tensor<D, T, [B, 1, 768]>, Tensor<D, T, [B, 12, P + 1, 64]>, Tensor<D, T, [B, 12, P + 1, 64]>) {
        let (q, k, v) = qkv(x, p);
        let k = cat([k_past, k], 2);
        let v = cat([v_past, v], 2);
        let heads = scaled_dot_product_attention(q, k, v);
        (finish(x, heads, p), k, v)
    }

    /// The logits of every position: the final layer norm, then the
    /// output projection (`head`), its padding sliced off.
    pub fn logits<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 768]>,
        ln_f: &LayerNorm<D, T>,
        head: &Tensor<D, T, [VOCAB_PAD, 768]>,
    ) -> Tensor<D, T, [B, S, 50257]> {
        let padded = matmul(ln(x, ln_f).reshape([B * S, 768]), head.t());
        padded.narrow(1, 0, 50257).reshape([B, S, 50257])
    }
}

/// A `[B, 12, _, 64]` tensor of keys or values.
type Heads<D, T> = Tensor<D, T, shape![_, 12, _, 64]>;

/// Every block's keys and values so far, and the padded output
/// projection (made once per prompt).
pub struct Cache<D: Device, T: Float> {
    k: Vec<Heads<D, T>>,
    v: Vec<Heads<D, T>>,
    head: Tensor<D, T, shape![VOCAB_PAD, 768]>,
}

impl<D: Device, T: Float> CausalLm<D, T> for Gpt2<D, T> {
    type Cache = Cache<D, T>;

    fn prompt(&self, ids: &Tensor<D, i64, shape![_, _]>) -> Result<(Logits3<D, T>, Cache<D, T>)> {
        let positions = positions(0, ids.dims()[1])?.to_device::<D>()?;
        let mut x = embed(ids, &positions, &self.wte, &self.wpe)?;
        let zeros = Tensor::<D, T, shape![{ VOCAB_PAD - VOCAB }, 768]>::zeros()?;
        let mut cache = Cache {
            k: Vec::new(),
            v: Vec::new(),
            head: self.wte.weight.cat::<0, _>(&zeros)?,
        };
        for b in &self.h {
            let (y, k, v) = block(&x, b)?;
            x = y;
            cache.k.push(k);
            cache.v.push(v);
        }
        logits(&x, &self.ln_f, &cache.head)?
            .into_shape()
            .map(|l| (l, cache))
    }

    fn step(
        &self,
        ids: &Tensor<D, i64, shape![_, 1]>,
        cache: &mut Cache<D, T>,
    ) -> Result<Tensor<D, T, shape![_, 1, _]>> {
        let past = cache.k.first().map_or(0, |k| k.dims()[2]);
        let positions = positions(past, 1)?.to_device::<D>()?;
        let ids = ids.clone().into_shape()?;
        let mut x = embed(&ids, &positions, &self.wte, &self.wpe)?.into_shape()?;
        for (i, b) in self.h.iter().enumerate() {
            let (y, k, v) = block_step(&x, &cache.k[i], &cache.v[i], b)?;
            x = y;
            cache.k[i] = k.into_shape()?;
            cache.v[i] = v.into_shape()?;
        }
        logits(&x.into_shape()?, &self.ln_f, &cache.head)?.into_shape()
    }
}

/// The positions `start .. start + len`, an `Err` past GPT-2's context.
fn positions(start: usize, len: usize) -> Result<Tensor<Cpu, i64, shape![_]>> {
    if start + len > CTX {
        return Err(Error::shape(
            "gpt2 positions",
            format!("at most {CTX}"),
            format!("{}", start + len),
        ));
    }
    Tensor::from_vec_dims((start..start + len).map(|p| p as i64).collect(), &[len])
}

/// Random weights with GPT-2's initialisation (normal, std 0.02; the
/// residual projections scaled by `1/sqrt(2 * layers)`), layer norms and
/// biases drawn near 1 and 0 so that a check sees them.
fn random(layers: usize, seed: u64) -> Result<Gpt2<Cpu, f32>> {
    fn normal<S: Shape>(seed: u64, mean: f32, std: f32) -> Result<Tensor<Cpu, f32, S>> {
        Tensor::<Cpu, f32, S>::randn(seed)?
            .mul_scalar(std)?
            .add_scalar(mean)
    }
    let proj = 0.02 / (2.0 * layers as f32).sqrt();
    let ln = |s: u64| -> Result<LayerNorm<Cpu, f32>> {
        Ok(LayerNorm {
            weight: normal(s, 1.0, 0.1)?,
            bias: normal(s + 1, 0.0, 0.02)?,
        })
    };
    fn conv<const I: usize, const O: usize>(s: u64, std: f32) -> Result<Conv1D<Cpu, f32, I, O>> {
        Ok(Conv1D {
            weight: normal(s, 0.0, std)?,
            bias: normal(s + 1, 0.0, 0.02)?,
        })
    }
    let mut h = Vec::new();
    for i in 0..layers as u64 {
        let s = seed + 100 + 16 * i;
        h.push(Block {
            ln_1: ln(s + 8)?,
            attn: Attention {
                c_attn: conv(s, 0.02)?,
                c_proj: conv(s + 2, proj)?,
            },
            ln_2: ln(s + 10)?,
            mlp: Mlp {
                c_fc: conv(s + 4, 0.02)?,
                c_proj: conv(s + 6, proj)?,
            },
        });
    }
    Ok(Gpt2 {
        wte: Embedding {
            weight: normal(seed, 0.0, 0.02)?,
        },
        wpe: Embedding {
            weight: normal(seed + 1, 0.0, 0.01)?,
        },
        h,
        ln_f: ln(seed + 2)?,
    })
}

/// The test's run: a random model of `GPT2_LAYERS` blocks (default 2),
/// checked, then a few greedy tokens.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let layers = std::env::var("GPT2_LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let (path, _file) = weights_file(None, "gpt2", (layers, seed), random)?;
    let model: Gpt2<Cpu, f32> = hf_gpt2::load(&path)?;
    println!(
        "loaded {} blocks, {} parameters",
        model.h.len(),
        model.num_params()
    );
    let mut o = Options::new(layers);
    (o.steps, o.seed, o.top_k) = (4, Some(seed), 5);
    check_against_f64(&model.to_device::<D>()?, &model.cast::<f64>()?, &o.tokens)?;
    let out = generate::<D, f32, _>(&o, &model.to_device::<D>()?, CTX)?;
    println!("generated {:?}", out[0]);
    Ok(())
}

pub fn main() -> AnyResult {
    let o = Options::from_args(VOCAB, 12)?;
    let seed = o.seed.unwrap_or_else(seed);
    let (path, _file) = weights_file(o.weights.as_ref(), "gpt2", (o.layers, seed), random)?;
    let model: Gpt2<Cpu, f32> = hf_gpt2::load(&path)?;
    println!(
        "GPT-2: {} blocks, {} parameters",
        model.h.len(),
        model.num_params()
    );
    check_and_generate!(o, model, CTX);
    Ok(())
}
