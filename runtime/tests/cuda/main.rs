//! The runtime on CUDA devices, in one test binary (one link of the
//! library instead of one per file): the op set against the CPU,
//! channels-last tensors, two GPUs, `stream_map`, and the errors without
//! a GPU (`unavailable`; run it with `CUDA_VISIBLE_DEVICES=` on a GPU
//! machine). Every test that needs a GPU prints `skipping: no CUDA device
//! (..)` and returns where there is none. The tests that read the memory
//! counters are in `cuda_memory`: tests here allocate concurrently.

#[path = "../gpu/mod.rs"]
mod gpu;

mod channels_last;
mod multi;
mod ops;
mod stream_map;
mod unavailable;
