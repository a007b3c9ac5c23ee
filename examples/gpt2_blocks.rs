//! The transformer stack of GPT-2 small: 12 blocks of causal self-attention
//! and MLP on 768-wide hidden states, with parameters named as in Hugging
//! Face checkpoints (`h.0.attn.c_attn.weight`, ...), written once for every
//! device and float dtype.
//!
//! The example writes random parameters to a safetensors file (about
//! 85 million, 340 MB in f32; set `GPT2_BLOCKS` to use fewer blocks), loads
//! them memory-mapped with every shape checked against the struct's types,
//! runs a sequence through the stack in f32 on the GPU when there is one,
//! and checks the result against the same stack computed in f64 on the CPU.
//!
//! ```sh
//! cargo run --release --example gpt2_blocks
//! ```

mod common;

use common::{check_close, on_best_device, seed, to_f64, AnyResult, TempFile};
use tensorfn::prelude::*;

/// Tokens in the sequence.
const SEQ: usize = 64;

/// `LayerNorm(768)`: keys `weight`, `bias`.
#[derive(Params)]
pub struct LayerNorm<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![768]>,
    pub bias: Tensor<D, T, shape![768]>,
}

/// GPT-2's attention: `c_attn` makes queries, keys and values (a `Conv1D`,
/// stored `[in, out]`), `c_proj` mixes the heads.
#[derive(Params)]
pub struct Attention<D: Device, T: Float> {
    pub c_attn: Conv1D<D, T, 768, 2304>,
    pub c_proj: Conv1D<D, T, 768, 768>,
}

/// A `Conv1D` of Hugging Face's GPT-2: `x @ weight + bias`.
#[derive(Params)]
pub struct Conv1D<D: Device, T: Float, const IN: usize, const OUT: usize> {
    pub weight: Tensor<D, T, shape![IN, OUT]>,
    pub bias: Tensor<D, T, shape![OUT]>,
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

/// The stack: keys `h.0.ln_1.weight` .. `h.11.mlp.c_proj.bias`, `ln_f.*`.
#[derive(Params)]
pub struct Gpt2Blocks<D: Device, T: Float> {
    pub h: Vec<Block<D, T>>,
    pub ln_f: LayerNorm<D, T>,
}

tensor_fn! {
    /// Layer norm over the last dim (eps 1e-5, as GPT-2).
    pub fn layer_norm<D: Device, T: Float, const S: usize>(
        x: &Tensor<D, T, [S, 768]>,
        p: &LayerNorm<D, T>,
    ) -> Tensor<D, T, [S, 768]> {
        let centered = x - x.mean(1).reshape([S, 1]);
        let var = (centered * centered).mean(1).reshape([S, 1]);
        centered * rsqrt(var + 1e-5) * p.weight + p.bias
    }

    /// One block: `x + attn(ln_1(x))`, then `+ mlp(ln_2(..))`. `future`
    /// marks, for each query, the keys after it.
    pub fn block<D: Device, T: Float, const S: usize>(
        x: &Tensor<D, T, [S, 768]>,
        future: &Tensor<D, bool, [S, S]>,
        p: &Block<D, T>,
    ) -> Tensor<D, T, [S, 768]> {
        let h = layer_norm(x, p.ln_1);
        let qkv = addmm(p.attn.c_attn.bias, h, p.attn.c_attn.weight);
        // [S, 768] as 12 heads of 64: [12, S, 64].
        let q = qkv.narrow(1, 0, 768).reshape([S, 12, 64]).permute([1, 0, 2]);
        let k = qkv.narrow(1, 768, 768).reshape([S, 12, 64]).permute([1, 2, 0]);
        let v = qkv.narrow(1, 1536, 768).reshape([S, 12, 64]).permute([1, 0, 2]);
        let scores = (bmm(q, k) * 0.125).masked_fill(future, -10000.0);
        let heads = bmm(scores.softmax(2), v).permute([1, 0, 2]).reshape([S, 768]);
        let x = x + addmm(p.attn.c_proj.bias, heads, p.attn.c_proj.weight);
        let h = layer_norm(x, p.ln_2);
        let up = gelu(addmm(p.mlp.c_fc.bias, h, p.mlp.c_fc.weight));
        x + addmm(p.mlp.c_proj.bias, up, p.mlp.c_proj.weight)
    }
}

/// Every block, then the final layer norm.
pub fn forward<D: Device, T: Float, const S: usize>(
    x: &Tensor<D, T, shape![S, 768]>,
    future: &Tensor<D, bool, shape![S, S]>,
    p: &Gpt2Blocks<D, T>,
) -> Result<Tensor<D, T, shape![S, 768]>> {
    let mut x = x.clone();
    for b in &p.h {
        x = block(&x, future, b)?;
    }
    layer_norm(&x, &p.ln_f)
}

/// Random parameters with GPT-2's initialisation scale (normal, std
/// 0.02; layer norms at 1 and 0).
fn random(blocks: usize, seed: u64) -> Result<Gpt2Blocks<Cpu, f32>> {
    fn normal<S: tensorfn::Shape>(seed: u64) -> Result<Tensor<Cpu, f32, S>> {
        Tensor::randn(seed)?.mul_scalar(0.02)
    }
    let ln = || -> Result<LayerNorm<Cpu, f32>> {
        Ok(LayerNorm {
            weight: Tensor::ones()?,
            bias: Tensor::zeros()?,
        })
    };
    let mut h = Vec::new();
    for i in 0..blocks as u64 {
        let s = seed + 16 * i;
        h.push(Block {
            ln_1: ln()?,
            attn: Attention {
                c_attn: Conv1D {
                    weight: normal(s)?,
                    bias: normal(s + 1)?,
                },
                c_proj: Conv1D {
                    weight: normal(s + 2)?,
                    bias: normal(s + 3)?,
                },
            },
            ln_2: ln()?,
            mlp: Mlp {
                c_fc: Conv1D {
                    weight: normal(s + 4)?,
                    bias: normal(s + 5)?,
                },
                c_proj: Conv1D {
                    weight: normal(s + 6)?,
                    bias: normal(s + 7)?,
                },
            },
        });
    }
    Ok(Gpt2Blocks { h, ln_f: ln()? })
}

/// The causal mask: `true` above the diagonal.
fn future_mask<const S: usize>() -> Result<Tensor<Cpu, bool, shape![S, S]>> {
    Tensor::from_vec((0..S * S).map(|i| i % S > i / S).collect())
}

/// Writes, loads and runs the stack on `D`.
pub fn run<D: Device>() -> AnyResult {
    let seed = seed();
    let blocks = std::env::var("GPT2_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let file = TempFile::new(&format!("tensorfn-gpt2-blocks-{seed}.safetensors"));
    let params = random(blocks, seed)?;
    params.save_safetensors(&file.0)?;
    println!(
        "wrote {} blocks, {} parameters",
        params.h.len(),
        params.num_params()
    );
    drop(params);

    let model = Gpt2Blocks::<Cpu, f32>::load_safetensors(&file.0)?;
    let x = Tensor::<Cpu, f32, shape![SEQ, 768]>::randn(seed + 1000)?;
    let future = future_mask::<SEQ>()?;

    let on_device = model.to_device::<D>()?;
    let y = forward(&x.to_device::<D>()?, &future.to_device::<D>()?, &on_device)?;
    println!("hidden states on {}: {:?}", y.device(), y.shape());

    // The same generic function in f64 on the host.
    let want = forward(&x.cast::<f64>()?, &future, &model.cast::<f64>()?)?;
    check_close("hidden states", &to_f64(&y)?, &to_f64(&want)?, 2e-3, 2e-3)
}

pub fn main() -> AnyResult {
    on_best_device(run::<Cuda>, run::<Cpu>)
}
