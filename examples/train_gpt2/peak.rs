//! The training step's peak memory predicted from what the step holds,
//! for `--bench` to set beside the CUDA allocator's measured peak.
//!
//! The step's memory is the parameters, the optimizer's state, the tokens
//! and the step's own tensors; the last are figures of the macro's memory
//! plans at the step's run-time dims (`block::pullback_bytes`,
//! `head_logits::vjp_peak_bytes`, `block::vjp_peak_bytes`) plus the tensors
//! the Rust code between the calls holds (each block's input, kept by its
//! pullback as a handle; the padded head; the gradients so far). Every
//! tensor the step allocates itself is counted in the allocator's size
//! classes (`cuda_block_bytes`); a plan figure is a sum of tensors and is
//! rounded as one, so the prediction may fall short of the measured peak
//! by up to one 2 MiB class per tensor inside a plan figure: the
//! tolerance counts one per plan figure of the phase. A norm backward's
//! partial sums (`cuda_norm_backward_scratch_bytes`) are scratch the plans
//! do not count; cuBLAS(Lt)'s workspace is allocated outside the caching
//! allocator and is not in either figure.

use super::{block, head_logits, Config, Keep};
use tensorfn::prelude::*;
use tensorfn::{cuda_block_bytes, cuda_norm_backward_scratch_bytes};

/// One phase of the step: its name and the terms live at its peak, in
/// bytes as the allocator holds them.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    pub terms: Vec<(String, usize)>,
    /// How many terms are plan figures (sums of tensors rounded as one).
    pub plan_figures: usize,
}

impl Phase {
    /// The bytes live at the phase's peak.
    pub fn bytes(&self) -> usize {
        self.terms.iter().map(|(_, b)| b).sum()
    }
}

/// The step's predicted peak: the largest of its phases.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub phases: Vec<Phase>,
}

/// The sizes of a step: the model's, the batch, the sequence and the
/// output projection's rows (the vocabulary, padded on a GPU).
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub model: Config,
    pub batch: usize,
    pub seq: usize,
    pub padded_vocab: usize,
}

const MIB: f64 = (1u64 << 20) as f64;

impl Prediction {
    /// The phase with the most bytes live.
    pub fn peak(&self) -> &Phase {
        self.phases
            .iter()
            .max_by_key(|p| p.bytes())
            .expect("a step has phases")
    }

    /// How far the measured peak may lie from the predicted one: one 2 MiB
    /// size class per plan figure of the peak's phase.
    pub fn tolerance(&self) -> usize {
        // The allocator's large size class: a request just above 1 MiB.
        let class = cuda_block_bytes((1 << 20) + 1);
        self.peak().plan_figures * class
    }

    /// One line: both figures and whether they agree within the tolerance.
    pub fn compare(&self, measured: usize) -> String {
        let (peak, tol) = (self.peak(), self.tolerance());
        let diff = measured as i64 - peak.bytes() as i64;
        let verdict = match diff.unsigned_abs() as usize <= tol {
            true => "agree",
            false => "DISAGREE",
        };
        format!(
            "peak memory: predicted {} bytes ({:.1} MiB, {}), allocator {} bytes ({:.1} MiB): {verdict} within the allocator's rounding ({:+} bytes, tolerance {:.0} MiB)",
            peak.bytes(),
            peak.bytes() as f64 / MIB,
            peak.name,
            measured,
            measured as f64 / MIB,
            diff,
            tol as f64 / MIB
        )
    }
}

/// The peak of one `--bench` step (forward keeping the blocks'
/// pullbacks, the head's backward, the blocks' backward, AdamW with f32
/// master weights for 16-bit parameters and clipping) with parameters of
/// dims `params` and dtype `T`; `None` for `--recompute-blocks`, whose
/// blocks' backward runs `vjp` (not predicted here).
pub fn predict<T: Float>(params: &[Vec<usize>], s: Step, keep: Keep) -> Option<Prediction> {
    if keep != Keep::Pullbacks {
        return None;
    }
    let t = T::KIND.size_bytes();
    let c = s.model;
    let (b, seq, width, vocab, pv) = (s.batch, s.seq, c.width, c.vocab, s.padded_vocab);
    let (nh, hd) = (c.heads, c.width / c.heads);
    let block_bytes = |numel: usize, size: usize| cuda_block_bytes(numel * size);
    let numels = params.iter().map(|d| d.iter().product::<usize>());
    let params_bytes: usize = numels.clone().map(|n| block_bytes(n, t)).sum();
    // AdamW: two moments each (f32, f64 for f64), and f32 master weights
    // of 16-bit ones.
    let states = 2 + usize::from(t < 4);
    let adam: usize = numels.map(|n| states * block_bytes(n, t.max(4))).sum();
    // The positions, the padding rows and the mask, the tokens and targets.
    let inputs = block_bytes(seq, 8)
        + block_bytes((pv - vocab) * width, t)
        + block_bytes(pv, t)
        + 2 * block_bytes(b * seq, 8);
    let hidden = block_bytes(b * seq * width, t);
    let pullback = block::pullback_bytes::<T>(b, seq, nh, hd);
    let layers = c.layers;
    let head_copy = match pv > vocab {
        true => block_bytes(pv * width, t),
        false => 0,
    };
    let loss = block_bytes(1, t);
    let norm_scratch = cuda_norm_backward_scratch_bytes(b * seq, width, T::KIND);
    // `wte`'s gradient is the padded head's, its padding rows left out: a
    // view of it (rows at the start of a contiguous tensor), no copy.
    let head_grad = block_bytes(pv * width, t);
    let ln_grads = 2 * block_bytes(width, t);
    let base = || {
        vec![
            ("parameters".to_string(), params_bytes),
            (format!("AdamW state ({states} values per parameter)"), adam),
            ("positions, padding, mask, tokens".to_string(), inputs),
            ("loss".to_string(), loss),
        ]
    };
    let kept = |blocks: usize, hiddens: usize| {
        vec![
            (
                format!("{blocks} blocks' pullbacks (block::pullback_bytes)"),
                blocks * pullback,
            ),
            (
                format!("{hiddens} hidden states (the blocks' inputs and the last output)"),
                hiddens * hidden,
            ),
        ]
    };
    let mut phases = Vec::new();
    // The head's backward: every pullback kept, the logits, the padded
    // head; its plan's peak counts the logits (the gradient takes their
    // place) and the backward's own tensors.
    let mut terms = base();
    terms.extend(kept(layers, layers + 1));
    terms.push(("padded head".into(), head_copy));
    terms.push((
        "head_logits::vjp_peak_bytes".into(),
        head_logits::vjp_peak_bytes::<T>(b, seq, width, pv),
    ));
    terms.push(("layer_norm backward's partial sums".into(), norm_scratch));
    phases.push(Phase {
        name: "head backward",
        terms,
        plan_figures: layers + 1,
    });
    // The end of the head's backward: its gradients (the hidden states',
    // `ln_f`'s, the padded head's, of which `wte`'s is a view) beside the
    // logits.
    let mut terms = base();
    terms.extend(kept(layers, layers + 1));
    terms.push(("padded head".into(), head_copy));
    terms.push((
        "logits and their gradient".into(),
        block_bytes(b * seq * pv, t),
    ));
    terms.push((
        "head gradients (hidden, ln_f, padded head)".into(),
        hidden + ln_grads + head_grad,
    ));
    phases.push(Phase {
        name: "head gradients",
        terms,
        plan_figures: layers,
    });
    // The last block's backward: the other pullbacks and their inputs,
    // the head's gradients, the gradient flowing in, and the block's own
    // plan (its pullback's values, its output, its backward's tensors).
    let mut terms = base();
    terms.extend(kept(layers.saturating_sub(1), layers));
    terms.push(("incoming gradient".into(), hidden));
    terms.push(("wte and ln_f gradients".into(), head_grad + ln_grads));
    terms.push((
        "block::vjp_peak_bytes".into(),
        block::vjp_peak_bytes::<T>(b, seq, nh, hd),
    ));
    terms.push(("layer_norm backward's partial sums".into(), norm_scratch));
    phases.push(Phase {
        name: "last block's backward",
        terms,
        plan_figures: layers,
    });
    // AdamW: every gradient.
    let mut terms = base();
    terms.push(("gradients".into(), params_bytes));
    phases.push(Phase {
        name: "AdamW",
        terms,
        plan_figures: 0,
    });
    Some(Prediction { phases })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (Vec<Vec<usize>>, Step) {
        let model = Config {
            layers: 2,
            width: 8,
            heads: 2,
            ctx: 16,
            vocab: 30,
        };
        let m = super::super::init(&model, 0).unwrap();
        let dims = m.tensors().into_iter().map(|(_, t)| t.dims()).collect();
        let step = Step {
            model,
            batch: 2,
            seq: 4,
            padded_vocab: 64,
        };
        (dims, step)
    }

    #[test]
    fn the_prediction_adds_its_terms_in_allocator_blocks() {
        let (dims, s) = tiny();
        let p = predict::<bf16>(&dims, s, Keep::Pullbacks).unwrap();
        // Every tensor of this model is below 1 MiB: one 512-byte class
        // each. 2 layers of 12 tensors, `wte`, `wpe` and `ln_f`'s 2.
        assert_eq!(dims.len(), 2 * 12 + 4);
        let params: usize = dims
            .iter()
            .map(|d| (d.iter().product::<usize>() * 2).next_multiple_of(512))
            .sum();
        let head = &p.phases[0];
        assert_eq!(head.terms[0].1, params);
        // bf16: master weights and two moments, f32.
        let adam: usize = dims
            .iter()
            .map(|d| 3 * (d.iter().product::<usize>() * 4).next_multiple_of(512))
            .sum();
        assert_eq!(head.terms[1].1, adam);
        // 4 positions (i64), 34 padding rows of 8 (544 bytes: two
        // classes), 64 mask values, the 2 x 4 tokens and targets (i64).
        let inputs = 512 + 1024 + 512 + 2 * 512;
        assert_eq!(head.terms[2].1, inputs);
        assert_eq!(
            head.terms[4].1,
            2 * block::pullback_bytes::<bf16>(2, 4, 2, 4)
        );
        assert_eq!(head.terms[5].1, 3 * 512);
        assert_eq!(head.bytes(), head.terms.iter().map(|t| t.1).sum::<usize>());
        // The AdamW phase holds every gradient on top of the state.
        let adamw = p.phases.last().unwrap();
        assert_eq!(adamw.bytes(), params * 2 + adam + inputs + 512);
        assert_eq!(
            p.peak().bytes(),
            p.phases.iter().map(Phase::bytes).max().unwrap()
        );
        // f32 parameters keep no master weights.
        let f = predict::<f32>(&dims, s, Keep::Pullbacks).unwrap();
        let adam32: usize = dims
            .iter()
            .map(|d| 2 * (d.iter().product::<usize>() * 4).next_multiple_of(512))
            .sum();
        assert_eq!(f.phases[0].terms[1].1, adam32);
        assert!(predict::<bf16>(&dims, s, Keep::Inputs).is_none());
    }

    /// The dims `init` gives a model of `c`'s sizes, without its values.
    fn dims_of(c: &Config) -> Vec<Vec<usize>> {
        let w = c.width;
        let block = [
            vec![w],
            vec![w],
            vec![w, 3 * w],
            vec![3 * w],
            vec![w, w],
            vec![w],
            vec![w],
            vec![w],
            vec![w, 4 * w],
            vec![4 * w],
            vec![4 * w, w],
            vec![w],
        ];
        let mut dims = vec![vec![c.vocab, w], vec![c.ctx, w]];
        for _ in 0..c.layers {
            dims.extend(block.iter().cloned());
        }
        dims.extend([vec![w], vec![w]]);
        dims
    }

    // GPT-2 124M at B 8, T 1024 in bf16, as `--bench` runs it: the head's
    // backward holds the most (the 786 MiB of logits beside every
    // pullback). The figures are printed for BENCHMARKS.md.
    #[test]
    fn gpt2_peaks_in_the_head_backward() {
        let (tiny, s) = tiny();
        let mut sorted = tiny.clone();
        sorted.sort();
        let mut expected = dims_of(&s.model);
        expected.sort();
        assert_eq!(sorted, expected, "dims_of follows init");
        let step = Step {
            model: Config::GPT2,
            batch: 8,
            seq: 1024,
            padded_vocab: 50304,
        };
        let p = predict::<bf16>(&dims_of(&Config::GPT2), step, Keep::Pullbacks).unwrap();
        for phase in &p.phases {
            println!("{}: {} bytes", phase.name, phase.bytes());
            for (term, bytes) in &phase.terms {
                println!("  {term}: {bytes}");
            }
        }
        assert_eq!(p.peak().name, "head backward");
        // 13 plan figures: 26 MiB either side.
        let (peak, tol) = (p.peak().bytes(), p.tolerance());
        assert_eq!(tol, 26 << 20);
        assert!(p.compare(peak - tol).contains(": agree within"));
        assert!(p.compare(peak - tol - 1).contains("DISAGREE"));
        // Four AdamW-and-parameter figures of 124M values: above 1.9 GB.
        assert!(p.phases[3].bytes() > 1_900_000_000);
    }

    #[test]
    fn the_comparison_says_both_figures_and_the_verdict() {
        let (dims, s) = tiny();
        let p = predict::<f32>(&dims, s, Keep::Pullbacks).unwrap();
        let (peak, tol) = (p.peak().bytes(), p.tolerance());
        assert_eq!(tol, p.peak().plan_figures * (2 << 20));
        let line = p.compare(peak + tol);
        assert!(line.contains(&format!("predicted {peak} bytes")), "{line}");
        assert!(
            line.contains(&format!("allocator {} bytes", peak + tol)),
            "{line}"
        );
        assert!(line.contains(": agree within"), "{line}");
        assert!(p.compare(peak + tol + 1).contains("DISAGREE"));
    }
}
