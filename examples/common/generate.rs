//! Generation shared by the language-model examples (`gpt2`, `llama`): the
//! command line, the prompt's forward pass (timed, its logits written for
//! the reference scripts), and greedy or top-k decoding with a key-value
//! cache, in tokens per second. Choosing each token runs on the model's
//! device ([`next_tokens`]); only the chosen ids come back to the host.

use super::{check_close, to_f64, AnyResult, TempFile};
use std::path::PathBuf;
use std::time::Instant;
use tensorfn::prelude::*;

/// Logits `[B, S, vocab]`.
pub type Logits3<D, T> = Tensor<D, T, shape![_, _, _]>;

/// A causal language model on `D` in `T`, as generation drives it.
pub trait CausalLm<D: Device, T: Float> {
    /// The keys and values of every layer so far.
    type Cache;
    /// The prompt's logits `[B, S, vocab]`, and the cache of its keys and
    /// values.
    fn prompt(&self, ids: &Tensor<D, i64, shape![_, _]>) -> Result<(Logits3<D, T>, Self::Cache)>;
    /// The logits `[B, 1, vocab]` of one more token per row, its keys and
    /// values added to `cache`.
    fn step(
        &self,
        ids: &Tensor<D, i64, shape![_, 1]>,
        cache: &mut Self::Cache,
    ) -> Result<Tensor<D, T, shape![_, 1, _]>>;
}

/// The options of a run (see each example's docs).
pub struct Options {
    /// A checkpoint to read; random weights when `None`.
    pub weights: Option<std::path::PathBuf>,
    /// The prompts of every row, one after the other.
    pub tokens: Vec<i64>,
    /// Rows.
    pub batch: usize,
    /// New tokens per row.
    pub steps: usize,
    /// Sample from the `top_k` largest logits; 0: greedy.
    pub top_k: usize,
    /// The sampler's seed (and the random weights').
    pub seed: Option<u64>,
    /// `f32`, `bf16` or `f16`.
    pub dtype: String,
    /// Layers of random weights.
    pub layers: usize,
    /// Run on the CPU even with a GPU.
    pub cpu: bool,
    /// Where to write the prompt's logits.
    pub logits_out: Option<std::path::PathBuf>,
    /// Check a random model against f64 on the host first.
    pub check: bool,
    /// Forward passes of the prompt to time.
    pub bench: usize,
}

impl Options {
    /// The defaults: 8 fixed prompt ids, one row, 16 greedy tokens in f32,
    /// random weights of `layers` layers, checked.
    pub fn new(layers: usize) -> Options {
        Options {
            weights: None,
            tokens: vec![464, 2068, 7586, 21831, 18045, 625, 262, 16931],
            batch: 1,
            steps: 16,
            top_k: 0,
            seed: None,
            dtype: "f32".into(),
            layers,
            cpu: false,
            logits_out: None,
            check: true,
            bench: 0,
        }
    }

    /// Reads the command line; `vocab` bounds `--prompt-len`'s ids, `layers`
    /// is the default depth of random weights.
    pub fn from_args(vocab: usize, layers: usize) -> AnyResult<Options> {
        let mut o = Options::new(layers);
        let mut prompt_len = None;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--weights" => o.weights = Some(value()?.into()),
                "--tokens" => {
                    o.tokens = value()?
                        .split(',')
                        .map(|t| t.trim().parse())
                        .collect::<std::result::Result<_, _>>()?
                }
                "--batch" => o.batch = value()?.parse()?,
                "--steps" => o.steps = value()?.parse()?,
                "--top-k" => o.top_k = value()?.parse()?,
                "--seed" => o.seed = Some(value()?.parse()?),
                "--dtype" => o.dtype = value()?,
                "--layers" => o.layers = value()?.parse()?,
                "--logits-out" => o.logits_out = Some(value()?.into()),
                "--cpu" => o.cpu = true,
                "--no-check" => o.check = false,
                "--prompt-len" => prompt_len = Some(value()?.parse::<usize>()?),
                "--bench" => o.bench = value()?.parse()?,
                other => {
                    return Err(format!("unknown option {other} (see the example's docs)").into())
                }
            }
        }
        if let Some(t) = prompt_len {
            o.tokens = (0..o.batch * t)
                .map(|i| ((i * 7919 + 13) % vocab) as i64)
                .collect();
        }
        Ok(o)
    }

    /// The prompt ids as `[batch, S]`.
    pub fn prompt(&self) -> AnyResult<Tensor<Cpu, i64, shape![_, _]>> {
        if self.batch == 0 || self.tokens.is_empty() || self.tokens.len() % self.batch != 0 {
            return Err(format!(
                "--tokens: {} ids do not make {} rows of one length",
                self.tokens.len(),
                self.batch
            )
            .into());
        }
        let s = self.tokens.len() / self.batch;
        Ok(Tensor::from_vec_dims(
            self.tokens.clone(),
            &[self.batch, s],
        )?)
    }
}

/// The prompt's logits, as the reference scripts read them.
#[derive(Params)]
struct Logits {
    logits: Tensor<Cpu, f32, shape![_, _]>,
}

tensor_fn! {
    /// One token per row drawn from the softmax at `temperature` of the
    /// row's `k` largest logits, as ids `[B, 1]`, with `seed` (the same
    /// draws on every device): top-k, softmax and the draw all run on the
    /// logits' device.
    pub fn sample_top_k<D: Device, T: Float>(
        logits: &Tensor<D, T, [B, V]>,
        k: usize,
        temperature: f32,
        seed: usize,
    ) -> Tensor<D, i64, [B, 1]> {
        let (values, indices) = topk(logits, k);
        let probs = softmax(values.cast::<f32>() / temperature, -1);
        gather(indices, 1, multinomial(probs, 1, seed = seed))
    }

    /// The id of each row's largest logit (the first of equals), `[B, 1]`.
    pub fn greedy<D: Device, T: Float>(logits: &Tensor<D, T, [B, V]>) -> Tensor<D, i64, [B, 1]> {
        logits.argmax(-1, keepdim = true)
    }
}

/// A batch's next token ids: on the device (`[B, 1]`, the next step's
/// input) and on the host.
pub type NextTokens<D> = (Tensor<D, i64, shape![_, 1]>, Vec<i64>);

/// The next token of each row from `[B, 1, vocab]` logits, on their
/// device: the largest for `k = 0`, else one of the `k` largest drawn by
/// their softmax with the next seed of `rng`. The ids stay on the device
/// for the next step; only they (8 bytes a row) are copied to the host.
pub fn next_tokens<D: Device, T: Float>(
    logits: &Tensor<D, T, shape![_, 1, _]>,
    k: usize,
    rng: &mut u64,
) -> Result<NextTokens<D>> {
    let (b, vocab) = (logits.dims()[0], logits.dims()[2]);
    let rows = logits.reshape_dims::<shape![_, _]>(&[b, vocab])?;
    let ids = if k == 0 {
        greedy(&rows)?
    } else {
        sample_top_k(&rows, k.min(vocab), 1.0, next_seed(rng))?
    };
    let host = ids.to_vec()?;
    Ok((ids, host))
}

/// The next seed of a SplitMix64 stream (one per step, so each step draws
/// anew).
pub fn next_seed(state: &mut u64) -> usize {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

/// Runs the prompt (timed with `--bench`, its logits written with
/// `--logits-out`), then generates `o.steps` tokens per row; returns them.
pub fn generate<D: Device, T: Float, M: CausalLm<D, T>>(
    o: &Options,
    model: &M,
    context: usize,
) -> AnyResult<Vec<Vec<i64>>> {
    let ids = o.prompt()?.to_device::<D>()?;
    let (b, s) = (ids.dims()[0], ids.dims()[1]);

    let start = Instant::now();
    let (all, mut cache) = model.prompt(&ids)?;
    let vocab = all.dims()[2];
    if let Some(path) = &o.logits_out {
        let flat = all.cast::<f32>()?.to_cpu()?.reshape_dims(&[b * s, vocab])?;
        Logits { logits: flat }.save_safetensors(path)?;
        println!("wrote the prompt's logits to {}", path.display());
    }
    let last = all.narrow::<1, shape![_, 1, _]>(s - 1, 1)?;
    let mut rng = o.seed.unwrap_or(0);
    let (mut next_ids, mut next) = next_tokens(&last, o.top_k, &mut rng)?;
    tensorfn::synchronize::<D>()?;
    let prompt_time = start.elapsed();
    drop((all, last));

    if o.bench > 0 {
        let mut times = Vec::new();
        for _ in 0..o.bench {
            let start = Instant::now();
            let (all, _) = model.prompt(&ids)?;
            tensorfn::synchronize::<D>()?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            drop(all);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "forward [{b}, {s}] {}: median {:.3} ms, min {:.3} ms over {} runs",
            T::KIND.name(),
            times[times.len() / 2],
            times[0],
            times.len()
        );
    }

    let mut out = vec![Vec::new(); b];
    let start = Instant::now();
    for _ in 0..o.steps {
        for (row, t) in out.iter_mut().zip(&next) {
            row.push(*t);
        }
        if s + out[0].len() >= context {
            break;
        }
        (next_ids, next) = next_tokens(&model.step(&next_ids, &mut cache)?, o.top_k, &mut rng)?;
    }
    tensorfn::synchronize::<D>()?;
    let gen_time = start.elapsed().as_secs_f64();
    let tokens = out[0].len() * b;
    println!(
        "{} prompt tokens in {:.1} ms; {tokens} new tokens in {:.1} ms: {:.1} tokens/s ({}, {}, batch {b})",
        b * s,
        prompt_time.as_secs_f64() * 1e3,
        gen_time * 1e3,
        tokens as f64 / gen_time.max(1e-9),
        std::any::type_name::<D>().rsplit("::").next().unwrap_or("?"),
        T::KIND.name(),
    );
    Ok(out)
}

/// The file to load a model from: `weights`, or random weights of `layers`
/// layers drawn by `random` and written to a temporary file (returned too,
/// so that it lives until the load), read through the same loader.
pub fn weights_file<P: Params>(
    weights: Option<&PathBuf>,
    name: &str,
    (layers, seed): (usize, u64),
    random: impl FnOnce(usize, u64) -> Result<P>,
) -> AnyResult<(PathBuf, Option<TempFile>)> {
    if let Some(path) = weights {
        return Ok((path.clone(), None));
    }
    let file = TempFile::new(&format!("tensorfn-{name}-{seed}.safetensors"));
    random(layers, seed)?.save_safetensors(&file.0)?;
    Ok((file.0.clone(), Some(file)))
}

/// The checks of a model: the prompt's logits of `on_device` (f32)
/// against `reference` (the same weights in f64 on the host), and the
/// cache against the prompt (the logits of the last token stepped through
/// the cache of the others equal the full prompt's).
pub fn check_against_f64<D: Device, M: CausalLm<D, f32>, R: CausalLm<Cpu, f64>>(
    on_device: &M,
    reference: &R,
    tokens: &[i64],
) -> AnyResult {
    let s = tokens.len();
    let ids = Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(tokens.to_vec(), &[1, s])?;
    let (got, mut cache) = on_device.prompt(&ids.to_device::<D>()?)?;
    let (want, _) = reference.prompt(&ids)?;
    check_close("prompt logits", &to_f64(&got)?, &to_f64(&want)?, 2e-3, 2e-3)?;

    // The prompt without its last token, then that token through the cache.
    let head =
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(tokens[..s - 1].to_vec(), &[1, s - 1])?;
    let (_, mut cache_head) = on_device.prompt(&head.to_device::<D>()?)?;
    let last = Tensor::<Cpu, i64, shape![_, 1]>::from_vec_dims(vec![tokens[s - 1]], &[1, 1])?;
    let stepped = on_device.step(&last.to_device::<D>()?, &mut cache_head)?;
    let full_last = got.narrow::<1, shape![_, 1, _]>(s - 1, 1)?;
    check_close(
        "cached step",
        &to_f64(&stepped)?,
        &to_f64(&full_last)?,
        1e-3,
        1e-3,
    )?;
    // One more step from the full prompt's cache runs too.
    let again = on_device.step(&last.to_device::<D>()?, &mut cache)?;
    println!("one step past the prompt: logits {:?}", again.dims());
    Ok(())
}

/// The command line's run of an example's model `$model` (loaded in f32 on
/// the host): the check of random weights, then [`generate`] on the GPU
/// (unless `--cpu` or there is none) in the dtype `--dtype` names.
#[allow(unused_macros)] // the examples without a language model include this file too
macro_rules! check_and_generate {
    ($o:expr, $model:expr, $context:expr) => {{
        let (o, model) = (&$o, &$model);
        let gpu = !o.cpu && common::gpu_available()?;
        if o.check && o.weights.is_none() {
            let reference = model.cast::<f64>()?;
            match gpu {
                true => check_against_f64(&model.to_device::<Cuda>()?, &reference, &o.tokens)?,
                false => check_against_f64(model, &reference, &o.tokens)?,
            }
            println!("checked against f64 on the host");
        }
        let out = match (gpu, o.dtype.as_str()) {
            (true, "f32") => generate::<Cuda, f32, _>(o, &model.to_device()?, $context)?,
            (true, "bf16") => generate::<Cuda, bf16, _>(o, &model.cast()?.to_device()?, $context)?,
            (true, "f16") => generate::<Cuda, f16, _>(o, &model.cast()?.to_device()?, $context)?,
            (false, "f32") => generate::<Cpu, f32, _>(o, model, $context)?,
            (false, "bf16") => generate::<Cpu, bf16, _>(o, &model.cast()?, $context)?,
            (false, "f16") => generate::<Cpu, f16, _>(o, &model.cast()?, $context)?,
            (_, other) => return Err(format!("--dtype {other}: f32, bf16 or f16").into()),
        };
        for (i, row) in out.iter().enumerate() {
            println!("row {i}: {row:?}");
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use check_and_generate;
