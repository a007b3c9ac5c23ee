//! Picking the fastest of a few ways to run the same work, by timing them
//! on the device: cuBLASLt algorithms for a product shape (`lt`) and grid
//! sizes for an elementwise kernel (`launch`).

use super::context::Context;
use super::event::Event;
use crate::error::Result;
use std::sync::atomic::{AtomicU8, Ordering};

/// How candidates are timed and when one displaces the default.
pub(crate) struct Timing {
    /// A timed batch repeats a candidate until about this long has passed,
    /// so that launch jitter does not decide between kernels of a few µs.
    pub(crate) span_ms: f32,
    /// A candidate takes part in the timed rounds when its first single
    /// run was at most this much slower than the fastest one.
    pub(crate) slack: f32,
    /// Work whose default candidate runs shorter than this is not timed.
    pub(crate) shortest_ms: f32,
    /// Timed rounds over the finalists.
    pub(crate) rounds: usize,
    /// Another candidate displaces the default (the first) only when its
    /// fastest round is at least this much faster.
    pub(crate) min_gain: f32,
}

/// How a library's candidate algorithms for one problem are timed
/// (cuBLASLt's for a product shape, cuDNN's for a convolution): work whose
/// heuristic choice runs shorter than 25 µs is not timed (at a few µs it
/// is bound by launch and by operands hot in cache, and timing picked
/// slower algorithms as often as faster ones); another candidate replaces
/// the heuristic's first choice only when 3% faster, since the operands
/// are hot in cache while they are timed, which favours some kernels by a
/// few per cent over the same work on operands fresh from memory.
pub(crate) const LIBRARY_TIMING: Timing = Timing {
    span_ms: 0.5,
    slack: 1.25,
    shortest_ms: 0.025,
    rounds: 3,
    min_gain: 1.03,
};

/// The index of the fastest of `candidates`, timed on the context's
/// stream. `launch` queues one run of a candidate and says whether it
/// could (one that cannot is skipped).
///
/// First a pass of single runs, each after an untimed one (which loads
/// the kernel), drops the candidates far behind; the default goes first,
/// and when it is shorter than [`Timing::shortest_ms`] the others are not
/// run. Then [`Timing::rounds`] interleaved rounds over the finalists,
/// each a batch of about [`Timing::span_ms`]; a candidate's score is its
/// fastest round. Other work on the device (another process, a clock
/// dip) only ever adds time, and it comes in bursts: the fastest round is
/// the one a burst missed, where a median round can still be one it hit.
pub(crate) fn fastest<C>(
    ctx: &Context,
    candidates: &[C],
    timing: &Timing,
    launch: impl Fn(&C) -> bool,
) -> Result<usize> {
    let (start, end) = (Event::timing()?, Event::timing()?);
    let time = |c: &C, reps: usize| -> Result<Option<f32>> {
        start.record(ctx.stream)?;
        for _ in 0..reps {
            if !launch(c) {
                return Ok(None);
            }
        }
        end.record(ctx.stream)?;
        Ok(Some(end.elapsed_ms(&start)? / reps as f32))
    };
    let mut once = vec![f32::INFINITY; candidates.len()];
    for (i, c) in candidates.iter().enumerate() {
        if !launch(c) {
            continue;
        }
        if let Some(ms) = time(c, 1)? {
            once[i] = ms;
        }
        if i == 0 && once[0] < timing.shortest_ms {
            return Ok(0);
        }
    }
    let fastest_once = once.iter().copied().fold(f32::INFINITY, f32::min);
    if !fastest_once.is_finite() {
        return Ok(0);
    }
    let finalists: Vec<usize> = (0..candidates.len())
        .filter(|&i| i == 0 || once[i] <= fastest_once * timing.slack)
        .collect();
    let reps = ((timing.span_ms / fastest_once.max(1e-4)).ceil() as usize).clamp(1, 64);
    let mut rounds = vec![Vec::with_capacity(timing.rounds); candidates.len()];
    for _ in 0..timing.rounds {
        for &i in &finalists {
            rounds[i].push(time(&candidates[i], reps)?.unwrap_or(f32::INFINITY));
        }
    }
    let score: Vec<f32> = rounds
        .iter()
        .map(|r| r.iter().copied().fold(f32::INFINITY, f32::min))
        .collect();
    let winner = finalists
        .iter()
        .copied()
        .min_by(|&x, &y| score[x].total_cmp(&score[y]))
        .unwrap_or(0);
    Ok(if score[winner] * timing.min_gain < score[0] {
        winner
    } else {
        0
    })
}

/// An on/off setting that starts from an environment variable (see `new`
/// and `off`) until the program sets it.
pub(crate) struct Switch {
    /// 1: on, 0: off, 2: not yet decided (read `env`).
    state: AtomicU8,
    env: &'static str,
    /// The state when `env` is unset.
    default: bool,
}

impl Switch {
    /// On unless `env` is `0`.
    pub(crate) const fn new(env: &'static str) -> Switch {
        Switch {
            state: AtomicU8::new(2),
            env,
            default: true,
        }
    }

    /// Off unless `env` is set to something other than `0`: for
    /// diagnostics that cost time or output.
    pub(crate) const fn off(env: &'static str) -> Switch {
        Switch {
            state: AtomicU8::new(2),
            env,
            default: false,
        }
    }

    pub(crate) fn set(&self, on: bool) {
        self.state.store(u8::from(on), Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            2 => {
                let on = std::env::var(self.env).map_or(self.default, |v| v.trim() != "0");
                // A concurrent `set` wins over the environment.
                let _ = self.state.compare_exchange(
                    2,
                    u8::from(on),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                self.state.load(Ordering::Relaxed) == 1
            }
            v => v == 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Switch;

    #[test]
    fn a_switch_starts_from_its_default_until_set() {
        // A variable nothing sets: each switch takes its default.
        const UNSET: &str = "TENSORFN_SWITCH_TEST_NEVER_SET";
        assert!(std::env::var(UNSET).is_err());
        let (on, off) = (Switch::new(UNSET), Switch::off(UNSET));
        assert!(on.get());
        assert!(!off.get());
        on.set(false);
        off.set(true);
        assert!(!on.get());
        assert!(off.get());
    }
}
