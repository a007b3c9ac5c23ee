//! Derivatives of `tensor_fn!`, in one test binary (one link of the
//! library instead of one per file):
//!
//! - `grad`: every derivative rule against `f64` finite differences, and
//!   `vjp` of layers;
//! - `pullback`: `forward` then `Pullback::backward`, the same bits as `vjp`;
//! - `train_memory`: `GRAD_PEAK_BYTES` and `recompute = true`.

#[path = "../common/mod.rs"]
mod common;

mod grad;
mod pullback;
mod train_memory;
