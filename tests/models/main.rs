//! Parameter structs and the example programs, in one test binary (one
//! link of the library instead of one per file):
//!
//! - `params`: `#[derive(Params)]`, names and safetensors round trips;
//! - `struct_params`: `tensor_fn!` functions taking parameter structs;
//! - `examples`: every example's program, on the CPU and on a GPU if present;
//! - `data_parallel`: `train_gpt2 --gpus N` (the example compiled once, in
//!   `examples`).

mod data_parallel;
mod examples;
mod params;
mod struct_params;
