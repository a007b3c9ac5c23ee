//! Tensors on the GPU that read cuda:0's memory counters (the caching
//! allocator, reserved memory, pinned host tensors), in one test binary
//! of their own: a test of another binary allocating at the same time
//! would move the counters. Every test takes [`SERIAL`]. Skips with a
//! notice when no GPU is present.

#[path = "../gpu/mod.rs"]
mod gpu;

mod pinned;
mod tensors;

/// The tests here share cuda:0 and read its memory counters: one at a
/// time, across both modules.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
