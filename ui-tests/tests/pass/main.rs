//! Compile-and-run cases of `tensor_fn!`: each file is a module of this one
//! test binary with a `runs` test, so the cases share one build and one link
//! of the library. They were trybuild pass cases, each a crate of its own
//! that trybuild built and linked beside its own build of the library; none
//! needs to be a separate crate (crate-rooted paths to parameter structs
//! are checked in `struct_params` through this crate's root). One case,
//! `ui-tests/pass/conv.rs`, stays with trybuild: see `tests/ui.rs`.
//!
//! `cargo test -p tensorfn-ui-tests --test pass`

mod common;

mod attention;
mod batch_norm;
mod batched_matmul;
mod bindings_twice;
mod broadcast_promotion;
mod call_site;
mod calls_and_memory;
mod catalogue_ops;
mod const_items;
mod conv_runtime_sizes;
mod cross_entropy;
mod dense;
mod fusion_kernels;
mod generic_fns;
mod grad;
mod params_derive;
mod pools;
mod reduce_size_one;
mod reductions_views;
mod reshape_reorder;
mod row_kernel;
mod runtime_dims;
mod seeds_addcmul_index;
mod seeds_addmm;
mod seeds_cat;
mod seeds_devices;
mod seeds_views;
mod struct_params;
