//! Grid sizes of grid-stride kernels, and their tuning per kernel.
//!
//! Which grid runs an elementwise kernel at memory speed depends on the
//! kernel. Measured on an H100 (`scripts/kernel_variants.py --grids`), at
//! 2^28 elements: light f32 kernels (`sin(x) * 2 + 5`, a two-input chain)
//! run 3% faster with two steps a thread and as many blocks as that takes
//! than with [the default](GridRule::Capped); f16 and bf16 GELU run 5%
//! slower that way, and f32 GELU is fastest with four steps a thread. So a
//! large contiguous launch times the [`GRID_RULES`] once per kernel and
//! size class and keeps the fastest ([`set_elementwise_autotune`]).

use super::context::Context;
use super::error::lock;
use super::modules::{GridRule, ModuleKey, BLOCK};
use super::tune::{fastest, Switch, Timing};
use crate::error::Result;

/// The rules a tuned launch chooses from; the first is the default.
pub(crate) const GRID_RULES: [GridRule; 3] =
    [GridRule::Capped, GridRule::Steps(2), GridRule::Steps(4)];

/// Launches whose output is smaller than this keep the default rule: their
/// operands can sit in the 50 MB L2 cache of an H100 while they are timed,
/// which is not how they run in a program.
const SMALLEST_TUNED_BYTES: usize = 64 << 20;

/// How grids are timed: the operands are far beyond the L2 cache, so the
/// timed runs see memory as later calls do and a 1% gain is kept; the
/// fastest of five rounds of about 1 ms each is steady to that level.
const TIMING: Timing = Timing {
    span_ms: 1.0,
    slack: 1.25,
    shortest_ms: 0.05,
    rounds: 5,
    min_gain: 1.01,
};

static AUTOTUNE: Switch = Switch::new("TENSORFN_ELEMENTWISE_AUTOTUNE");

/// Whether a large contiguous elementwise launch of a new kernel (or a new
/// size class of one: sizes within a factor of two share a choice) times
/// a few grid sizes and keeps the fastest (`true`, the default), or
/// always uses the default grid (`false`). The environment variable
/// `TENSORFN_ELEMENTWISE_AUTOTUNE=0` turns it off until this is called.
///
/// Only launches writing 64 MiB or more are timed, and not those whose
/// output overlaps an input (running them again would change the result).
/// Timing costs one synchronisation and a few extra runs the first time;
/// the results do not depend on the grid.
///
/// ```
/// use tensorfn_runtime::{elementwise_autotune, set_elementwise_autotune};
/// set_elementwise_autotune(false);
/// assert!(!elementwise_autotune());
/// set_elementwise_autotune(true);
/// assert!(elementwise_autotune());
/// ```
pub fn set_elementwise_autotune(on: bool) {
    AUTOTUNE.set(on);
}

/// Whether large elementwise launches tune their grid (see
/// [`set_elementwise_autotune`]).
///
/// ```
/// // On unless the program or TENSORFN_ELEMENTWISE_AUTOTUNE=0 turns it off.
/// let on = tensorfn_runtime::elementwise_autotune();
/// let env = std::env::var("TENSORFN_ELEMENTWISE_AUTOTUNE");
/// assert_eq!(on, env.map_or(true, |v| v != "0"));
/// ```
pub fn elementwise_autotune() -> bool {
    AUTOTUNE.get()
}

/// Blocks for `steps` steps in all under `rule`, for one of `sharing`
/// launches that run side by side (the blocks of a multiprocessor are
/// split between them).
pub(crate) fn grid(rule: GridRule, steps: usize, sm_count: usize, sharing: usize) -> u32 {
    let blocks = match rule {
        GridRule::Capped => {
            let most = (sm_count * 128).div_ceil(sharing.max(1));
            steps.div_ceil(BLOCK as usize * 2).min(most.max(1))
        }
        GridRule::Steps(per_thread) => steps.div_ceil(BLOCK as usize * per_thread.max(1)),
    };
    blocks.clamp(1, u32::MAX as usize) as u32
}

/// Steps of an elementwise launch over `n` elements; `widest` is the size
/// of the widest element of a contiguous launch (whose threads step by 16
/// bytes of it), 0 for a strided one (one element a step).
pub(crate) fn elementwise_steps(n: usize, widest: usize) -> usize {
    n.div_ceil(16usize.checked_div(widest).unwrap_or(1).max(1))
}

/// Blocks for an elementwise launch over `n` elements under the default
/// rule (see [`elementwise_steps`]).
pub(crate) fn elementwise_grid(n: usize, widest: usize, sm_count: usize) -> u32 {
    grid(GridRule::Capped, elementwise_steps(n, widest), sm_count, 1)
}

/// A contiguous elementwise launch to size: the kernel, its step count and
/// the byte ranges (address, length) it writes and reads. The inputs are
/// an iterator so that a launch too small to tune never collects them.
pub(crate) struct Launch<I> {
    pub(crate) key: ModuleKey,
    pub(crate) steps: usize,
    pub(crate) out: (u64, usize),
    pub(crate) inputs: I,
}

impl<I: Iterator<Item = (u64, usize)> + Clone> Launch<I> {
    /// Whether timing may run this launch more than once: a large output
    /// that no input overlaps.
    fn tunable(&self) -> bool {
        let (out, len) = self.out;
        let overlaps = |(p, l): (u64, usize)| p < out + len as u64 && out < p + l as u64;
        len >= SMALLEST_TUNED_BYTES && !self.inputs.clone().any(overlaps)
    }

    /// The size class: sizes within a factor of two share a choice.
    fn class(&self) -> u32 {
        usize::BITS - self.steps.leading_zeros()
    }
}

impl Context {
    /// The grid of `launch`: the default rule's, or the rule timed fastest
    /// for its kernel and size class (timing it now if it is new, with
    /// `run` queuing one launch of a given grid and saying whether it
    /// could).
    pub(crate) fn tuned_grid<I: Iterator<Item = (u64, usize)> + Clone>(
        &self,
        launch: &Launch<I>,
        run: impl Fn(u32) -> bool,
    ) -> Result<u32> {
        let grid_of = |rule| grid(rule, launch.steps, self.sm_count, 1);
        let default = grid_of(GridRule::Capped);
        let distinct = GRID_RULES.iter().any(|&r| grid_of(r) != default);
        if !distinct || !elementwise_autotune() || !launch.tunable() {
            return Ok(default);
        }
        let key = (launch.key, launch.class());
        if let Some(&rule) = lock(&self.modules).grids.get(&key) {
            return Ok(grid_of(rule));
        }
        let best = GRID_RULES[fastest(self, &GRID_RULES, &TIMING, |&r| run(grid_of(r)))?];
        lock(&self.modules).grids.insert(key, best);
        Ok(grid_of(best))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_grids_give_each_thread_two_steps_up_to_the_cap() {
        let sms = 132;
        // f16, 2^24 elements: 8 a step, 2 steps a thread of 256.
        assert_eq!(elementwise_grid(1 << 24, 2, sms), 4096);
        // f32: 4 a step.
        assert_eq!(elementwise_grid(1 << 24, 4, sms), 8192);
        // 2^28 f16 elements would want 65536 blocks: capped.
        assert_eq!(elementwise_grid(1 << 28, 2, sms), 128 * 132);
        // Strided: one element a step.
        assert_eq!(elementwise_grid(1 << 20, 0, sms), 2048);
        // Never an empty grid, even for widths beyond 16 bytes.
        assert_eq!(elementwise_grid(1, 8, sms), 1);
        assert_eq!(elementwise_grid(3, 32, sms), 1);
        // Eight launches side by side share the cap.
        assert_eq!(grid(GridRule::Capped, 1 << 21, sms, 8), 128 * 132 / 8);
        assert_eq!(grid(GridRule::Capped, 1 << 12, sms, 8), 8);
    }

    #[test]
    fn step_rules_ignore_the_cap() {
        let sms = 132;
        // 2^28 f32 elements: 2^26 steps.
        let steps = elementwise_steps(1 << 28, 4);
        assert_eq!(grid(GridRule::Steps(2), steps, sms, 1), 131_072);
        assert_eq!(grid(GridRule::Steps(4), steps, sms, 1), 65_536);
        assert_eq!(grid(GridRule::Capped, steps, sms, 1), 128 * 132);
        assert_eq!(grid(GridRule::Steps(4), 1, sms, 1), 1);
    }

    fn launch(out: (u64, usize), inputs: &[(u64, usize)]) -> bool {
        let steps = out.1 / 16;
        let key = ModuleKey::Fused("k");
        Launch {
            key,
            steps,
            out,
            inputs: inputs.iter().copied(),
        }
        .tunable()
    }

    #[test]
    fn only_large_launches_that_write_apart_from_their_inputs_are_timed() {
        let big = SMALLEST_TUNED_BYTES;
        assert!(launch((0, big), &[(big as u64, big)]));
        assert!(!launch((0, big - 1), &[(big as u64, big)]));
        // In place, or overlapping an input by one byte at either end.
        assert!(!launch((0, big), &[(0, big)]));
        assert!(!launch((100, big), &[(0, 101)]));
        assert!(!launch((0, big), &[(big as u64 - 1, 8)]));
        assert!(launch((0, big), &[(big as u64, 8), (1 << 40, big)]));
    }

    #[test]
    fn sizes_within_a_factor_of_two_share_a_class() {
        let class = |steps| {
            let key = ModuleKey::Fused("k");
            Launch {
                key,
                steps,
                out: (0, 0),
                inputs: std::iter::empty(),
            }
            .class()
        };
        assert_eq!(class(1 << 24), class((1 << 25) - 1));
        assert_ne!(class(1 << 24), class(1 << 25));
    }
}
