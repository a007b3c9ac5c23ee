//! The CPU backend: loops over strided host buffers, `gemm` for products.
