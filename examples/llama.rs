//! A Llama: RMSNorm, rotary position embeddings, a SwiGLU MLP and
//! grouped-query attention (8 query heads sharing 2 key-value heads), with
//! weights named as Hugging Face's `LlamaForCausalLM` names them
//! (`model.layers.0.self_attn.q_proj.weight`, ...), and generation with a
//! key-value cache. Written once for every device and float dtype.
//!
//! ```sh
//! cargo run --release --example llama                     # random weights, checked
//! cargo run --release --example llama -- --weights model.safetensors --tokens 1,306,4658 --steps 32
//! ```
//!
//! The shapes are those of a small Llama (hidden 512, 8 heads of 64, MLP
//! 1376, vocabulary 32000, RoPE theta 10000, RMSNorm eps 1e-5, an untied
//! output head); the number of layers is the file's. Without `--weights`
//! it writes random weights to a temporary file and loads them through the
//! same loader. `scripts/lm_reference.py write llama DIR` writes such a
//! checkpoint with `transformers` and `compare` checks the logits that
//! `--logits-out FILE` writes against `transformers`' own. Options as the
//! `gpt2` example's.

mod common;

use common::generate::{
    check_against_f64, check_and_generate, generate, weights_file, CausalLm, Logits3, Options,
};
use common::{seed, AnyResult};
use tensorfn::prelude::*;
use tensorfn::Shape;

/// Tokens in the vocabulary.
pub const VOCAB: usize = 32000;
/// Positions the model is run on at most.
pub const CTX: usize = 1024;
/// The rotary embedding's base.
pub const THETA: f64 = 10000.0;

/// `LlamaRMSNorm(N)`: key `weight`.
#[derive(Params)]
pub struct RmsNorm<D: Device, T: Float, const N: usize> {
    pub weight: Tensor<D, T, shape![N]>,
}

/// `nn.Linear(IN, OUT, bias=False)`: key `weight`, stored `[OUT, IN]`.
#[derive(Params)]
pub struct Linear<D: Device, T: Float, const IN: usize, const OUT: usize> {
    pub weight: Tensor<D, T, shape![OUT, IN]>,
}

/// The attention's projections.
#[derive(Params)]
pub struct SelfAttn<D: Device, T: Float> {
    pub q_proj: Linear<D, T, 512, 512>,
    pub k_proj: Linear<D, T, 512, 128>,
    pub v_proj: Linear<D, T, 512, 128>,
    pub o_proj: Linear<D, T, 512, 512>,
}

/// The SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
#[derive(Params)]
pub struct Mlp<D: Device, T: Float> {
    pub gate_proj: Linear<D, T, 512, 1376>,
    pub up_proj: Linear<D, T, 512, 1376>,
    pub down_proj: Linear<D, T, 1376, 512>,
}

/// One decoder layer.
#[derive(Params)]
pub struct Layer<D: Device, T: Float> {
    pub input_layernorm: RmsNorm<D, T, 512>,
    pub self_attn: SelfAttn<D, T>,
    pub post_attention_layernorm: RmsNorm<D, T, 512>,
    pub mlp: Mlp<D, T>,
}

/// The token embedding: key `weight`.
#[derive(Params)]
pub struct Embedding<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![32000, 512]>,
}

/// The decoder: keys `embed_tokens`, `layers.N`, `norm`.
#[derive(Params)]
pub struct Model<D: Device, T: Float> {
    pub embed_tokens: Embedding<D, T>,
    pub layers: Vec<Layer<D, T>>,
    pub norm: RmsNorm<D, T, 512>,
}

/// `LlamaForCausalLM`: keys `model.*` and `lm_head.weight`.
#[derive(Params)]
pub struct Llama<D: Device, T: Float> {
    pub model: Model<D, T>,
    pub lm_head: Linear<D, T, 512, 32000>,
}

tensor_fn! {
    /// RMSNorm over the hidden dim.
    pub fn norm<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 512]>,
        p: &RmsNorm<D, T, 512>,
    ) -> Tensor<D, T, [B, S, 512]> {
        rms_norm(x, p.weight, 1e-5)
    }

    /// Rotary position embedding of `x`'s heads (Hugging Face's
    /// `rotate_half` form): `x * cos + rotate_half(x) * sin`.
    pub fn rotate<D: Device, T: Float>(
        x: &Tensor<D, T, [B, H, S, 64]>,
        cos: &Tensor<D, T, [S, 64]>,
        sin: &Tensor<D, T, [S, 64]>,
    ) -> Tensor<D, T, [B, H, S, 64]> {
        rope(x, cos, sin)
    }

    /// The rotated queries `[B, 8, S, 64]` and keys `[B, 2, S, 64]`, and
    /// the values `[B, 2, S, 64]` of a layer.
    pub fn qkv<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 512]>,
        cos: &Tensor<D, T, [S, 64]>,
        sin: &Tensor<D, T, [S, 64]>,
        p: &Layer<D, T>,
    ) -> (Tensor<D, T, [B, 8, S, 64]>, Tensor<D, T, [B, 2, S, 64]>, Tensor<D, T, [B, 2, S, 64]>) {
        let h = norm(x, p.input_layernorm).reshape([B * S, 512]);
        let q = matmul(h, p.self_attn.q_proj.weight.t()).reshape([B, S, 8, 64]).permute([0, 2, 1, 3]);
        let k = matmul(h, p.self_attn.k_proj.weight.t()).reshape([B, S, 2, 64]).permute([0, 2, 1, 3]);
        let v = matmul(h, p.self_attn.v_proj.weight.t()).reshape([B, S, 2, 64]).permute([0, 2, 1, 3]);
        (rotate(q, cos, sin), rotate(k, cos, sin), v)
    }

    /// The rest of a layer once the heads are attended: their projection
    /// and residual, then the MLP and its residual.
    pub fn finish<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 512]>,
        heads: &Tensor<D, T, [B, 8, S, 64]>,
        p: &Layer<D, T>,
    ) -> Tensor<D, T, [B, S, 512]> {
        let a = heads.permute([0, 2, 1, 3]).reshape([B * S, 512]);
        let x = x + matmul(a, p.self_attn.o_proj.weight.t()).reshape([B, S, 512]);
        let h = norm(x, p.post_attention_layernorm).reshape([B * S, 512]);
        let gate = silu(matmul(h, p.mlp.gate_proj.weight.t()));
        let up = matmul(h, p.mlp.up_proj.weight.t());
        x + matmul(gate * up, p.mlp.down_proj.weight.t()).reshape([B, S, 512])
    }

    /// A layer over a whole prompt (causal attention), with its keys and
    /// values for the cache (before the heads are shared).
    pub fn layer<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 512]>,
        cos: &Tensor<D, T, [S, 64]>,
        sin: &Tensor<D, T, [S, 64]>,
        p: &Layer<D, T>,
    ) -> (Tensor<D, T, [B, S, 512]>, Tensor<D, T, [B, 2, S, 64]>, Tensor<D, T, [B, 2, S, 64]>) {
        let (q, k, v) = qkv(x, cos, sin, p);
        // Each of the 2 key-value heads serves 4 query heads.
        let heads = scaled_dot_product_attention(q, k, v, is_causal = true, enable_gqa = true);
        (finish(x, heads, p), k, v)
    }

    /// A layer for one new token after `P` cached ones.
    pub fn layer_step<D: Device, T: Float>(
        x: &Tensor<D, T, [B, 1, 512]>,
        k_past: &Tensor<D, T, [B, 2, P, 64]>,
        v_past: &Tensor<D, T, [B, 2, P, 64]>,
        cos: &Tensor<D, T, [1, 64]>,
        sin: &Tensor<D, T, [1, 64]>,
        p: &Layer<D, T>,
    ) -> (Tensor<D, T, [B, 1, 512]>, Tensor<D, T, [B, 2, P + 1, 64]>, Tensor<D, T, [B, 2, P + 1, 64]>) {
        let (q, k, v) = qkv(x, cos, sin, p);
        let k = cat([k_past, k], 2);
        let v = cat([v_past, v], 2);
        let heads = scaled_dot_product_attention(q, k, v, enable_gqa = true);
        (finish(x, heads, p), k, v)
    }

    /// The token embeddings.
    pub fn embed<D: Device, T: Float>(
        ids: &Tensor<D, i64, [B, S]>,
        p: &Embedding<D, T>,
    ) -> Tensor<D, T, [B, S, 512]> {
        embedding(ids, p.weight)
    }

    /// The logits of every position: the final norm, then the head.
    pub fn logits<D: Device, T: Float>(
        x: &Tensor<D, T, [B, S, 512]>,
        p: &Llama<D, T>,
    ) -> Tensor<D, T, [B, S, 32000]> {
        matmul(norm(x, p.model.norm).reshape([B * S, 512]), p.lm_head.weight.t()).reshape([B, S, 32000])
    }
}

/// A `[T, 64]` table of the rotary embedding's cosines or sines.
type Table<D, T> = Tensor<D, T, shape![_, 64]>;

/// A `[B, 2, _, 64]` tensor of keys or values.
type Heads<D, T> = Tensor<D, T, shape![_, 2, _, 64]>;

/// Every layer's keys and values so far.
pub struct Cache<D: Device, T: Float> {
    k: Vec<Heads<D, T>>,
    v: Vec<Heads<D, T>>,
}

/// The rotary embedding's cosines and sines at positions
/// `start .. start + len`, `[len, 64]` each (each frequency twice, as
/// Hugging Face's), computed in f64; an `Err` past the context.
fn rotary<D: Device, T: Float>(start: usize, len: usize) -> Result<(Table<D, T>, Table<D, T>)> {
    if start + len > CTX {
        return Err(Error::shape(
            "llama positions",
            format!("at most {CTX}"),
            format!("{}", start + len),
        ));
    }
    let angle = |p: usize, i: usize| p as f64 * THETA.powf(-((2 * (i % 32)) as f64) / 64.0);
    let table = |f: fn(f64) -> f64| -> Result<Table<D, T>> {
        let v: Vec<f64> = (start..start + len)
            .flat_map(|p| (0..64).map(move |i| f(angle(p, i))))
            .collect();
        Tensor::<Cpu, f64, shape![_, 64]>::from_vec_dims(v, &[len, 64])?
            .cast::<T>()?
            .to_device::<D>()
    };
    Ok((table(f64::cos)?, table(f64::sin)?))
}

impl<D: Device, T: Float> CausalLm<D, T> for Llama<D, T> {
    type Cache = Cache<D, T>;

    fn prompt(&self, ids: &Tensor<D, i64, shape![_, _]>) -> Result<(Logits3<D, T>, Cache<D, T>)> {
        let (cos, sin) = rotary::<D, T>(0, ids.dims()[1])?;
        let mut x = embed(ids, &self.model.embed_tokens)?;
        let mut cache = Cache {
            k: Vec::new(),
            v: Vec::new(),
        };
        for l in &self.model.layers {
            let (y, k, v) = layer(&x, &cos, &sin, l)?;
            x = y;
            cache.k.push(k);
            cache.v.push(v);
        }
        logits(&x, self)?.into_shape().map(|l| (l, cache))
    }

    fn step(
        &self,
        ids: &Tensor<D, i64, shape![_, 1]>,
        cache: &mut Cache<D, T>,
    ) -> Result<Tensor<D, T, shape![_, 1, _]>> {
        let past = cache.k.first().map_or(0, |k| k.dims()[2]);
        let (cos, sin) = rotary::<D, T>(past, 1)?;
        let (cos, sin) = (cos.into_shape()?, sin.into_shape()?);
        let mut x = embed(&ids.clone().into_shape()?, &self.model.embed_tokens)?.into_shape()?;
        for (i, l) in self.model.layers.iter().enumerate() {
            let (y, k, v) = layer_step(&x, &cache.k[i], &cache.v[i], &cos, &sin, l)?;
            x = y;
            cache.k[i] = k.into_shape()?;
            cache.v[i] = v.into_shape()?;
        }
        logits(&x.into_shape()?, self)?.into_shape()
    }
}

/// Random weights: normal with std 0.02 (the library's initialisation),
/// norm weights drawn near 1 so that a check sees them.
fn random(layers: usize, seed: u64) -> Result<Llama<Cpu, f32>> {
    fn normal<S: Shape>(seed: u64, mean: f32, std: f32) -> Result<Tensor<Cpu, f32, S>> {
        Tensor::<Cpu, f32, S>::randn(seed)?
            .mul_scalar(std)?
            .add_scalar(mean)
    }
    fn linear<const I: usize, const O: usize>(seed: u64) -> Result<Linear<Cpu, f32, I, O>> {
        Ok(Linear {
            weight: normal(seed, 0.0, 0.02)?,
        })
    }
    let rms = |s: u64| -> Result<RmsNorm<Cpu, f32, 512>> {
        Ok(RmsNorm {
            weight: normal(s, 1.0, 0.1)?,
        })
    };
    let mut all = Vec::new();
    for i in 0..layers as u64 {
        let s = seed + 100 + 16 * i;
        all.push(Layer {
            input_layernorm: rms(s)?,
            self_attn: SelfAttn {
                q_proj: linear(s + 1)?,
                k_proj: linear(s + 2)?,
                v_proj: linear(s + 3)?,
                o_proj: linear(s + 4)?,
            },
            post_attention_layernorm: rms(s + 5)?,
            mlp: Mlp {
                gate_proj: linear(s + 6)?,
                up_proj: linear(s + 7)?,
                down_proj: linear(s + 8)?,
            },
        });
    }
    Ok(Llama {
        model: Model {
            embed_tokens: Embedding {
                weight: normal(seed, 0.0, 0.02)?,
            },
            layers: all,
            norm: rms(seed + 1)?,
        },
        lm_head: linear(seed + 2)?,
    })
}

/// The test's run: a random model of `LLAMA_LAYERS` layers (default 2),
/// checked, then a few tokens.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let layers = std::env::var("LLAMA_LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let (path, _file) = weights_file(None, "llama", (layers, seed), random)?;
    let model = Llama::<Cpu, f32>::load_safetensors(&path)?;
    println!(
        "loaded {} layers, {} parameters",
        model.model.layers.len(),
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
    let o = Options::from_args(VOCAB, 4)?;
    let seed = o.seed.unwrap_or_else(seed);
    let (path, _file) = weights_file(o.weights.as_ref(), "llama", (o.layers, seed), random)?;
    let model = Llama::<Cpu, f32>::load_safetensors(&path)?;
    println!(
        "Llama: {} layers, {} parameters",
        model.model.layers.len(),
        model.num_params()
    );
    check_and_generate!(o, model, CTX);
    Ok(())
}
