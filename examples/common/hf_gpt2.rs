//! GPT-2 checkpoints with Hugging Face's names, shared by the `gpt2`
//! example (dims known at compile time) and `train_gpt2` (dims known at
//! run time): both models name their tensors alike, so one loader reads
//! either.

use std::path::Path;
use tensorfn::prelude::*;
use tensorfn::{LoadOptions, Params};

/// Keys of a Hugging Face GPT-2 file that hold no parameter of ours: the
/// attention's mask buffers and the `lm_head.weight` tied to `wte`.
pub const IGNORED_KEYS: &[&str] = &["h.*.attn.bias", "h.*.attn.masked_bias", "lm_head.weight"];

/// Reads a GPT-2 checkpoint into `P`: the keys under `transformer.` when
/// the file has them (`GPT2LMHeadModel.save_pretrained`), else at the top
/// (the original GPT-2 files); [`IGNORED_KEYS`] are left. The model type
/// says which layout: `let m: Gpt2<Cpu, f32> = hf_gpt2::load(path)?;`.
pub fn load<P: Params>(path: &Path) -> Result<P> {
    let under = |prefix| {
        P::load_safetensors_with(
            path,
            &LoadOptions {
                prefix,
                ignore: IGNORED_KEYS,
            },
        )
    };
    match under("transformer") {
        Err(Error::Load(e)) if e.contains("missing key `transformer.") => under(""),
        r => r,
    }
}
