//! The `mbarrier` steps of the warp-specialised Hopper entries (the
//! forward's `attention_wgmma_ws.rs`, the backward's
//! `attention_wgmma_bwd_ws.rs`): waiting for a phase, arriving, and a
//! ring of buffers whose barriers alternate parity each round.

use super::body::{Body, Class};

/// Waits until the phase of parity `parity` (u32) of the barrier at
/// shared address `bar` (u32) has completed.
pub(in crate::ptx) fn wait_barrier(body: &mut Body, bar: &str, parity: &str) {
    let (again, ready) = (body.label("ws_wait"), body.reg(Class::Pred));
    body.place(&again);
    body.op(format!(
        "mbarrier.try_wait.parity.shared::cta.b64 {ready}, [{bar}], {parity}"
    ));
    body.op(format!("@!{ready} bra {again}"));
}

/// Waits as [`wait_barrier`] for a buffer's operand the copier wrote
/// with `cp.async` (the generic proxy), then fences the thread's view
/// to the async proxy its `wgmma`s read through.
pub(in crate::ptx) fn wait_landed(body: &mut Body, bar: &str, parity: &str) {
    wait_barrier(body, bar, parity);
    body.op("fence.proxy.async.shared::cta");
}

/// Arrives on the barrier at shared address `bar` (u32), under the
/// predicate `guard` when given.
pub(in crate::ptx) fn arrive(body: &mut Body, bar: &str, guard: Option<&str>) {
    let state = body.reg(Class::B64);
    let guard = guard.map(|g| format!("@{g} ")).unwrap_or_default();
    body.op(format!(
        "{guard}mbarrier.arrive.shared::cta.b64 {state}, [{bar}]"
    ));
}

/// A tile's place in the ring of buffers: its buffer's index `stage`
/// (u32) and the parity `phase` (u32) of the buffer's round.
pub(in crate::ptx) struct Ring {
    pub(in crate::ptx) stage: String,
    pub(in crate::ptx) phase: String,
    stages: usize,
}

impl Ring {
    /// Emits a ring of `stages` buffers at its first tile: buffer 0,
    /// parity 0.
    pub(in crate::ptx) fn new(body: &mut Body, stages: usize) -> Ring {
        let (stage, phase) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("mov.u32 {stage}, 0"));
        body.op(format!("mov.u32 {phase}, 0"));
        Ring {
            stage,
            phase,
            stages,
        }
    }

    /// Steps to the next tile's buffer, flipping the parity on a wrap.
    pub(in crate::ptx) fn step(&self, body: &mut Body) {
        let (stage, phase, stages) = (&self.stage, &self.phase, self.stages);
        let wrap = body.reg(Class::Pred);
        body.op(format!("add.u32 {stage}, {stage}, 1"));
        body.op(format!("setp.eq.u32 {wrap}, {stage}, {stages}"));
        body.op(format!("@{wrap} mov.u32 {stage}, 0"));
        body.op(format!("@{wrap} xor.b32 {phase}, {phase}, 1"));
    }

    /// The shared address of the barrier `bars + 8 stage` (u32) of the
    /// buffer `stage` (u32).
    pub(in crate::ptx) fn barrier(body: &mut Body, bars: &str, stage: &str) -> String {
        let a = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {a}, {stage}, 8, {bars}"));
        a
    }
}
