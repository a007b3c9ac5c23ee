//! Tensors whose device, dtype and shape mistakes fail to compile.
//!
//! A [`Tensor<D, T, S>`](Tensor) carries in its type where its elements
//! live, what they are and how many there are along each dim. The classic
//! failures of GPU tensor code, a CPU tensor passed to a GPU kernel, `f16`
//! mixed with `f32`, a `matmul` or `cat` of incompatible shapes, a `view`
//! to the wrong element count, are compile errors that name the operand and
//! the fix. What only the running program can know (a dim read from a file,
//! the memory left on the GPU, the driver) comes back as an [`Error`],
//! never a panic.
//!
//! The [`tensor_fn!`] macro checks whole functions at compile time, fuses
//! their elementwise work into kernels it generates as PTX, and sends
//! matrix products to cuBLAS. The same program runs on the CPU (with
//! `gemm` and loops the compiler vectorises) and on NVIDIA GPUs; no CUDA
//! toolkit is needed to build.
//!
//! # Five minutes
//!
//! ## 1. Types
//!
//! | parameter | what | values |
//! | --- | --- | --- |
//! | `D: Device` | where the elements are | [`Cpu`], [`Cuda`] (cuda:0), `Cuda<1>`, ... |
//! | `T: DType` | the element type | `f32`, `f64`, [`f16`](struct@f16), [`bf16`](struct@bf16), `i32`, `i64`, `u8`, `bool` |
//! | `S: Shape` | the dims | `shape![2, 3]`, `shape![_, 784]`, `shape![]` |
//!
//! ```
//! use tensorfn::prelude::*;
//!
//! # fn main() -> Result<()> {
//! let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.])?;
//! let w = Tensor::<Cpu, f32, shape![3, 4]>::randn(0)?; // seeded
//! let y = x.matmul(&w)?; // Tensor<Cpu, f32, shape![2, 4]>
//! let total = y.relu()?.sum::<1>()?; // shape![2]: dim 1 summed away
//! println!("{total}"); // tensor([..., ...]), like PyTorch's print
//! assert_eq!(total.shape(), &[2]);
//!
//! let half = x.cast::<f16>()?; // dtypes change only when asked
//! assert_eq!(half.to_vec()?[5], f16::from_f32(6.0));
//! # Ok(())
//! # }
//! ```
//!
//! Every operation returns a [`Result`]; `?` passes errors on. Tensors are
//! cheap to clone (the storage is shared); views (`t()`, `permute`,
//! `narrow`, `broadcast_to`) copy nothing.
//!
//! ## 2. Shapes: `shape!`, `Const` and `Dyn`
//!
//! [`shape!`] writes a shape type: `shape![B, 784]` is `(Const<B>,
//! Const<784>)` for a `const B: usize`, and `_` is a [`Dyn`] dim, whose
//! size is known only at run time. Static dims are checked by the
//! compiler; `Dyn` dims are checked when the operation runs and a mismatch
//! is an [`Error`]. `into_shape` moves between the two.
//!
//! ```
//! use tensorfn::prelude::*;
//!
//! # fn main() -> Result<()> {
//! let batch = 32; // e.g. read from a file
//! let x = Tensor::<Cpu, f32, shape![_, 784]>::zeros_dims(&[batch, 784])?;
//! let fixed: Tensor<Cpu, f32, shape![32, 784]> = x.clone().into_shape()?;
//! assert!(x.into_shape::<shape![64, 784]>().is_err()); // 32 is not 64
//! # let _ = fixed;
//! # Ok(())
//! # }
//! ```
//!
//! ## 3. What does not compile
//!
//! A tensor on another device (PyTorch: "Expected all tensors to be on the
//! same device", or `cudaErrorInvalidValue` from `addmm`):
//!
//! ```compile_fail,E0308
//! use tensorfn::prelude::*;
//! # fn main() -> Result<()> {
//! let bias = Tensor::<Cuda, f32, shape![10]>::zeros()?;
//! let x = Tensor::<Cuda, f32, shape![4, 10]>::zeros()?;
//! let w = Tensor::<Cpu, f32, shape![10, 10]>::zeros()?; // left on the CPU
//! let y = Tensor::addmm(&bias, &x, &w)?; // expected `&Tensor<Cuda, ..>`, found `&Tensor<Cpu, ..>`
//! # Ok(())
//! # }
//! ```
//!
//! Mixed dtypes (PyTorch: "expected scalar type Half but found Float"):
//!
//! ```compile_fail,E0308
//! use tensorfn::prelude::*;
//! # fn main() -> Result<()> {
//! let a = Tensor::<Cpu, f16, shape![2, 2]>::zeros()?;
//! let b = Tensor::<Cpu, f32, shape![2, 2]>::zeros()?;
//! let c = a.matmul(&b)?; // expected `&Tensor<Cpu, f16, ..>`, found `&Tensor<Cpu, f32, ..>`
//! # Ok(())
//! # }
//! ```
//!
//! Incompatible shapes (PyTorch: "mat1 and mat2 shapes cannot be
//! multiplied"):
//!
//! ```compile_fail,E0277
//! use tensorfn::prelude::*;
//! # fn main() -> Result<()> {
//! let a = Tensor::<Cpu, f32, shape![100, 200]>::zeros()?;
//! let c = a.matmul(&a)?; // `matmul` cannot multiply a [100, 200] tensor by a [100, 200] tensor
//! # Ok(())
//! # }
//! ```
//!
//! The fix is always written where it happens: `.to_device::<Cuda>()`,
//! `.cast::<f32>()`, `.t()`. Relations the type system cannot state (a
//! `cat` result being the sum of two dims, a `view` keeping the element
//! count, a constant index inside a dim) are checked when the program is
//! built (`cargo build`; `cargo check` skips them) and, inside
//! `tensor_fn!`, already in `cargo check` and the editor.
//!
//! ## 4. `tensor_fn!`
//!
//! Inside the macro, shapes are written `[B, 784]`: a `const` generic, a
//! literal, a `const` item in scope (`SEQ_LEN`), arithmetic of those
//! (`N + M`), or an undeclared name, which is a run-time dim bound from
//! the arguments and checked across all of them.
//! Parameters are `&Tensor`s; the function returns `Result<Tensor>`.
//!
//! ```
//! use tensorfn::prelude::*;
//!
//! tensor_fn! {
//!     /// One dense layer and a softmax over the classes.
//!     pub fn classify<const B: usize>(
//!         x: &Tensor<Cpu, f32, [B, 784]>,
//!         w: &Tensor<Cpu, f32, [784, 10]>,
//!         b: &Tensor<Cpu, f32, [10]>,
//!     ) -> Tensor<Cpu, f32, [B, 10]> {
//!         gelu(addmm(b, x, w)).softmax(1)
//!     }
//!
//!     /// A kernel: a scalar body applied elementwise, fused with its
//!     /// neighbours into one loop (one PTX kernel on a GPU).
//!     #[kernel]
//!     pub fn gelu(x: f32) -> f32 {
//!         0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
//!     }
//! }
//!
//! # fn main() -> Result<()> {
//! let x = Tensor::<Cpu, f32, shape![8, 784]>::rand(1)?;
//! let w = Tensor::<Cpu, f32, shape![784, 10]>::randn(2)?.mul_scalar(0.03)?;
//! let b = Tensor::<Cpu, f32, shape![10]>::zeros()?;
//! let p = classify(&x, &w, &b)?;
//! let row_sums = p.sum::<1>()?.to_vec()?;
//! assert!(row_sums.iter().all(|s| (s - 1.0).abs() < 1e-5));
//! # Ok(())
//! # }
//! ```
//!
//! The macro's errors name the operand, what was expected and the fix, and
//! appear in `cargo check` and the editor, e.g. `` `w` is on Cpu but
//! `matmul` runs on Cuda (a: Cuda): move it with `w.to_device::<Cuda>()` ``.
//! The [`tensor_fn!`](macro@tensor_fn) page lists its syntax and every kind
//! of error with its message.
//!
//! ## 5. Errors at run time
//!
//! One enum, [`Error`]: [`Error::Shape`] and [`Error::Rule`] for run-time
//! dims that do not fit, [`Error::Index`] for an index past the end,
//! [`Error::CudaUnavailable`] without a usable GPU, [`Error::OutOfMemory`]
//! with the bytes requested, free and total (every later operation still
//! works), [`Error::Cublas`], [`Error::Cudnn`] and [`Error::Driver`] for the
//! GPU libraries.
//! Each message says which operand is wrong and how to fix it.
//!
//! ```
//! use tensorfn::prelude::*;
//!
//! # fn main() -> Result<()> {
//! let x = Tensor::<Cpu, f32, shape![10, 10]>::randn(0)?;
//! match x.index::<0>(10) {
//!     Err(Error::Index(message)) => assert!(message.contains("0..=9")),
//!     other => panic!("expected an index error, got {other:?}"),
//! }
//! // Dims read at run time: [2, 3] @ [4, 5] is checked when it runs.
//! let a = Tensor::<Cpu, f32, shape![_, _]>::zeros_dims(&[2, 3])?;
//! let b = Tensor::<Cpu, f32, shape![_, _]>::zeros_dims(&[4, 5])?;
//! let e = a.matmul(&b).unwrap_err();
//! println!("{e}");
//! assert!(matches!(e, Error::Rule(_)));
//! # Ok(())
//! # }
//! ```
//!
//! ## 6. On a GPU
//!
//! Nothing to install to build: the NVIDIA driver and cuBLAS are loaded
//! when the program first touches a [`Cuda`] tensor, so one binary serves
//! machines with and without a GPU. Moving is explicit
//! (`x.to_device::<Cuda>()?`, `x.to_cpu()?`); without a usable GPU that
//! returns [`Error::CudaUnavailable`], which a program can use to fall
//! back to the CPU. Code written over `D: Device` runs on both:
//!
//! ```
//! use tensorfn::prelude::*;
//! use tensorfn::Device;
//!
//! fn scores<D: Device>(seed: u64) -> Result<Vec<f32>> {
//!     let x = Tensor::<Cpu, f32, shape![4, 8]>::randn(seed)?.to_device::<D>()?;
//!     let w = Tensor::<Cpu, f32, shape![8, 2]>::randn(seed + 1)?.to_device::<D>()?;
//!     x.matmul(&w)?.sigmoid()?.to_vec()
//! }
//!
//! # fn main() -> Result<()> {
//! let on_cpu = scores::<Cpu>(7)?;
//! match scores::<Cuda>(7) {
//!     Ok(on_gpu) => {
//!         for (g, c) in on_gpu.iter().zip(&on_cpu) {
//!             assert!((g - c).abs() < 1e-3);
//!         }
//!     }
//!     Err(Error::CudaUnavailable { reason }) => println!("no GPU ({reason}); CPU only"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Device memory goes through a caching allocator
//! ([`cuda_memory_stats`], [`cuda_empty_cache`]); host transfers go
//! through pinned staging buffers.
//!
//! ## 7. Host data: `ndarray`, `Vec` and `stream_map`
//!
//! Tensors convert to and from `Vec`s, slices and [`ndarray`](https://docs.rs/ndarray) arrays (any
//! layout, dims checked against the shape type, the dtype unchanged):
//! `Tensor::try_from(array.view())`, [`Tensor::from_ndarray`] for any
//! device, `Array2::from(tensor)`, [`Tensor::to_ndarray`]. See
//! [`interop`].
//!
//! An array too large for the device goes through [`stream_map`] (or
//! [`StreamMap`] to set the chunk size or write in place): the function
//! sees chunks of rows on the device, copies overlap compute, and the
//! result is the same as one run on the whole array.
//!
//! ```
//! use ndarray::Array2;
//! use tensorfn::prelude::*;
//!
//! # fn main() -> Result<()> {
//! let host = Array2::from_shape_fn((100_000, 16), |(i, j)| (i + j) as f32 * 1e-3);
//! let out = tensorfn::stream_map(&host, |x: Tensor<Cpu, f32, shape![_, 16]>| {
//!     x.sin()?.mul_scalar(2.0)
//! })?;
//! assert_eq!(out.shape(), &[100_000, 16]);
//! assert!((out[[99_999, 15]] - 2.0 * (100.014f32).sin()).abs() < 1e-4);
//! # Ok(())
//! # }
//! ```
//!
//! ## 8. Parameter structs: `#[derive(Params)]`
//!
//! A model's weights are a struct of typed tensors, nested structs,
//! arrays and `Vec`s of them. `#[derive(Params)]` names each by its
//! fields, with dots and indices as Hugging Face checkpoints do
//! (`h.0.attn.c_attn.weight`; `#[params(rename = "..")]` renames one), and
//! gives [`Params::load_safetensors`] (memory-mapped; every tensor's dtype
//! and shape checked against its type, a missing, mis-shaped or extra
//! key an `Err` naming it), [`Params::save_safetensors`],
//! [`Params::num_params`], [`Params::visit`], and `to_device::<D2>()` /
//! `cast::<U>()` when the struct is generic over its device / dtype.
//!
//! ```
//! use tensorfn::prelude::*;
//!
//! #[derive(Params)]
//! struct Linear<D: Device, T: Float> {
//!     weight: Tensor<D, T, shape![4, 3]>,
//!     bias: Tensor<D, T, shape![4]>,
//! }
//!
//! #[derive(Params)]
//! struct Mlp<D: Device, T: Float> {
//!     layers: [Linear<D, T>; 2],
//! }
//!
//! # fn main() -> Result<()> {
//! let layer = |seed| -> Result<Linear<Cpu, f32>> {
//!     Ok(Linear { weight: Tensor::randn(seed)?, bias: Tensor::zeros()? })
//! };
//! let mlp = Mlp { layers: [layer(1)?, layer(2)?] };
//! let path = std::env::temp_dir().join(format!("mlp_{}.safetensors", std::process::id()));
//! mlp.save_safetensors(&path)?; // "layers.0.weight", "layers.0.bias", ...
//! let back = Mlp::<Cpu, f32>::load_safetensors(&path)?;
//! assert_eq!(back.layers[1].weight.to_vec()?, mlp.layers[1].weight.to_vec()?);
//! assert_eq!(back.num_params(), 2 * (12 + 4));
//! let half = back.cast::<bf16>()?; // Mlp<Cpu, bf16>
//! if let Ok(gpu) = half.to_device::<Cuda>() {
//!     assert_eq!(gpu.layers[0].bias.to_vec()?, vec![bf16::ZERO; 4]);
//! }
//! // The same file read as another shape: an error naming the key.
//! #[derive(Params)]
//! struct Wide<D: Device> { layers: [Tensor<D, f32, shape![4, 5]>; 2] }
//! let e = Wide::<Cpu>::load_safetensors(&path).err().unwrap();
//! assert!(e.to_string().contains("missing key `layers.0`"), "{e}");
//! # std::fs::remove_file(&path).unwrap();
//! # Ok(())
//! # }
//! ```
//!
//! A function of `tensor_fn!` takes such a struct as `p: &Mlp<Cpu, f32>`
//! and reads its fields (`p.w1`, `p.h[3].attn.weight`), each checked at
//! compile time like a tensor parameter (see [`tensor_fn!`](macro@tensor_fn)).
//!
//! # Examples
//!
//! `cargo run --release --example <name>`; each runs on the GPU when one
//! is present, else on the CPU, and checks its numbers against f64:
//!
//! | example | shows |
//! | --- | --- |
//! | `quickstart` | a small `tensor_fn!` model, on either device |
//! | `mlp_inference` | weights from a safetensors file into typed tensors, inference |
//! | `addmm_device_and_dtype` | `addmm` operands on one device and dtype; `addmm_into` |
//! | `cuda_crash_causes` | indices past the end, int and float in `addcmul`, out of memory |
//! | `cat_errors` | `cat` across devices, too large, and of [2, 3, 4] with [2, 5, 4] |
//! | `cublas_failures` | `view` to a wrong count, out of memory then a product, `dot` vs `matmul` |
//! | `numpy_pipelines` | `ndarray` to the device and back, in-place work, `stream_map` |
#![deny(missing_docs)]

/// Whole tensor functions whose device, dtype and shape are checked at
/// compile time, with their elementwise work fused into generated kernels.
///
/// Each `fn` inside the macro becomes a typed Rust function: parameters
/// `&Tensor<..>` (or scalars), result `Result<Tensor<..>>` (or a tuple of
/// tensors), so calls from your code are checked by rustc too.
///
/// ```
/// use tensorfn::prelude::*;
///
/// tensor_fn! {
///     /// One dense layer; `B` is a const generic, `[B, 4]` its shape.
///     pub fn dense<const B: usize>(
///         x: &Tensor<Cpu, f32, [B, 4]>,
///         w: &Tensor<Cpu, f32, [4, 3]>,
///         b: &Tensor<Cpu, f32, [3]>,
///     ) -> Tensor<Cpu, f32, [B, 3]> {
///         gelu(addmm(b, x, w)) * 2.0
///     }
///
///     /// A kernel: a scalar body, applied per element and fused with its
///     /// neighbours (also callable as a plain `fn(f32) -> f32`).
///     #[kernel]
///     pub fn gelu(x: f32) -> f32 {
///         0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
///     }
///
///     /// `N` is not declared: it is read from `scores` when the function is
///     /// entered and checked against `weights`.
///     pub fn weighted(scores: &Tensor<Cpu, f32, [N, 3]>, weights: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [3]> {
///         matmul(weights, scores.softmax(1))
///     }
/// }
///
/// let x = Tensor::<Cpu, f32, shape![2, 4]>::randn(0)?;
/// let w = Tensor::<Cpu, f32, shape![4, 3]>::randn(1)?;
/// let b = Tensor::<Cpu, f32, shape![3]>::zeros()?;
/// let y = dense(&x, &w, &b)?;
/// assert_eq!(y.shape(), &[2, 3]);
/// assert!((gelu(1.0) - 0.841192).abs() < 1e-5);
/// // The static memory plan: bytes of intermediates, for a batch of 2.
/// assert_eq!(dense::peak_bytes::<2>(), 2 * 2 * 3 * 4);
/// // Over a run-time dim, the plan's peak at that dim: the softmax's
/// // `N x 3` f32 values and the `3` results, live together.
/// assert_eq!(weighted::peak_bytes(5), 5 * 3 * 4 + 3 * 4);
///
/// let s = Tensor::<Cpu, f32, shape![_, 3]>::randn_dims(2, &[5, 3])?;
/// let short = Tensor::<Cpu, f32, shape![_]>::ones_dims(&[4])?;
/// let err = weighted(&s, &short).unwrap_err().to_string();
/// assert!(err.contains("dim 0 of `weights` to be N = 5 (N is dim 0 of `scores`)"));
/// # Ok::<(), tensorfn::Error>(())
/// ```
///
/// # Syntax
///
/// * Shapes are written `[B, 784]`: literals, `const` generics, `const`
///   items, `+` and `*` of those (`[N + M]`, `[2 * N]`), or undeclared
///   names, which are run-time dims bound from the first parameter naming
///   them and checked against every other one (`_` is a run-time dim
///   nothing else names).
/// * How a name in a shape is classified, in order: a `const` generic of
///   the function (`<const B: usize>`) or a `usize` parameter is that; a
///   name in braces (`{M}`, as in Rust's const arguments) or a path
///   (`dims::HEADS`) is a `const` item in scope, and so is a
///   SCREAMING_CASE name of two letters or more (`SEQ_LEN`, `D_MODEL`);
///   any other name (`B`, `T`, `N`, `D1`, `Dh`) is a run-time dim. A
///   `const` item is `Const<{ ITEM }>` in the generated types, so tensors
///   typed with the same item (`shape![SEQ_LEN, D_MODEL]`) are passed as
///   they are and results keep their static shape; the checker treats it
///   as an opaque symbol (it does not read its value, so `SEQ_LEN` and `4`
///   are different dims, and `D_MODEL` is not `HEADS * HEAD_DIM` unless
///   written so). An item marked once (`[{M}, 4]`) is one everywhere in
///   that function; an item not in scope is rustc's "cannot find value"
///   on the dim that names it.
///   Devices are `Cpu`, `Cuda` (cuda:0) and `Cuda<N>`; dtypes `f32 f64 f16
///   bf16 i32 i64 u8 bool`. A `usize` parameter may size dims by its name.
/// * Generics are a device `D: Device`, a dtype `T: Float` (`T: NumDType`
///   for every number, `T: DType` for every dtype) and const dims `const B:
///   usize`, bounded inline. `D` and `T` are symbols to the checker like
///   dims: an operand on `Cpu` or of `f32` where the others are on `D` or
///   of `T` is the error a concrete mix is, and an op that needs floats
///   rejects `T: DType`. The function is an ordinary generic Rust function;
///   its fused kernels are built for every dtype the bound admits (PTX and
///   CPU closure each), and a call runs the body of its `T` (the others
///   are not compiled into it).
/// * A parameter may be a `#[derive(Params)]` struct (`p: &Mlp`,
///   `p: &nn::Mlp<Cpu, f32>`), defined in the function's module, reached
///   by a path or glob-imported. The body reads its tensor fields
///   (`p.w1`, `p.attn.c_attn.weight`, `p.h[3].w` for an array or a `Vec`
///   field, indexed with a literal), each checked like a `&Tensor`
///   parameter of the field's type: a field of the wrong shape, a field
///   the struct lacks or an array index past its length is a compile
///   error on the path; a `Vec` index past the end is an `Err` naming the
///   field. A function of the same `tensor_fn!` taking a struct is called
///   with the struct, a field of it or an element (`mlp(x, p)`,
///   `norm(x, p.ln_1)`, `block(x, p.h[3])`); the callee's `D`, `T` and
///   const generics bind from the struct's arguments, and another struct
///   or a struct of another dtype is a compile error on the argument.
///
///   ```
///   use tensorfn::prelude::*;
///
///   #[derive(Params)]
///   struct Linear<D: Device, T: Float> {
///       w: Tensor<D, T, shape![4, 4]>,
///       b: Tensor<D, T, shape![4]>,
///   }
///
///   #[derive(Params)]
///   struct Mlp<D: Device, T: Float> {
///       fc: [Linear<D, T>; 2],
///       w2: Tensor<D, T, shape![4, 2]>,
///   }
///
///   tensor_fn! {
///       fn linear<D: Device, T: Float, const B: usize>(x: &Tensor<D, T, [B, 4]>, p: &Linear<D, T>) -> Tensor<D, T, [B, 4]> {
///           relu(addmm(p.b, x, p.w))
///       }
///
///       fn mlp<D: Device, T: Float, const B: usize>(x: &Tensor<D, T, [B, 4]>, p: &Mlp<D, T>) -> Tensor<D, T, [B, 2]> {
///           matmul(linear(linear(x, p.fc[0]), p.fc[1]), p.w2).softmax(1)
///       }
///   }
///
///   let fc = || -> Result<Linear<Cpu, f32>> { Ok(Linear { w: Tensor::randn(1)?, b: Tensor::zeros()? }) };
///   let p = Mlp { fc: [fc()?, fc()?], w2: Tensor::randn(2)? };
///   let y = mlp(&Tensor::<Cpu, f32, shape![3, 4]>::randn(3)?, &p)?;
///   assert_eq!(y.shape(), &[3, 2]);
///   # Ok::<(), tensorfn::Error>(())
///   ```
/// * Bodies are `let` bindings and a result: `matmul`, `mm`, `bmm`, `dot`,
///   `addmm(bias, m1, m2, beta = .., alpha = ..)`, `cat([a, b], dim)`,
///   `addcmul(input, t1, t2, value)`, `scaled_dot_product_attention(q,
///   k, v, attn_mask = m, is_causal = true, scale = s)` (PyTorch's, with a
///   `bool` or additive mask; a row whose every key is masked is 0), the
///   math functions (`relu sigmoid
///   tanh exp log sin cos sqrt rsqrt abs neg square recip gelu silu`, also
///   as methods), `maximum`, `minimum`, `pow`, `+ - * /` with PyTorch
///   broadcasting and with scalars, `x.reshape([..])` / `x.view([..])` (one
///   `-1` allowed), `x.t()`, `x.permute([..])`, `x.transpose(a, b)`,
///   `x.narrow(dim, start, len)`, `x.sum(dim)`, `mean`, `max`, `min`,
///   `argmax`, `argmin` (`x.sum()` reduces everything), `x.softmax(dim)`,
///   `x.log_softmax(dim)`, `x.logsumexp(dim)`, `layer_norm(x, weight,
///   bias, eps = 1e-5)` and `rms_norm(x, weight, eps = None)` over the last
///   dim (also as methods; one fused row kernel each), `rope(x, cos, sin)`
///   (Hugging Face Llama's rotary embedding), `x.cast::<T>()`,
///   `x.to_device::<D>()`,
///   `embedding(ids, weight)`, `x.index_select(dim, index)`,
///   `x.gather(dim, index)`, `x.index_add(dim, index, source, alpha = 1)`,
///   `x.scatter_add(dim, index, src)` (`i64` or `i32` indices; one out of
///   range is an `Err`; repeated indices add up), `cross_entropy(logits, target, ignore_index = -100,
///   reduction = "mean", label_smoothing = 0.0)` (PyTorch's, one fused
///   row kernel; a target out of range is an `Err`), `cumsum(x, dim)`
///   (also a method; integers sum into `i64`), `topk(x, k, dim = -1)`
///   (a tuple `(values, indices)`, PyTorch's order: NaN largest, ties by
///   position; `let (v, i) = x.topk(k);`), `multinomial(probs,
///   num_samples, replacement = false, seed = seed)` (`i64` draws from the
///   weights along the last dim, the same for a seed on every device),
///   `arange(N)`,
///   `arange(start, end)` (`i64`),
///   `x.tril(diagonal = 0)`, `x.triu(..)`,
///   `x.to_cpu()`, indexing `x[i]`, `x[i, j]` (constant or `usize`),
///   calls to the other functions and kernels of the invocation, and calls
///   to functions outside it, whose result is annotated (`let y:
///   Tensor<Cpu, f32, [B, 10]> = other::f(x);`).
/// * Elementwise chains (math, arithmetic, broadcasts, scalars, casts,
///   `addcmul`, kernels) become one kernel each: PTX generated at compile
///   time for CUDA and a closure for the CPU (f16 and bf16 computed in f32,
///   rounded after each operation).
/// * A function gets a module of the same name with its peak bytes of
///   intermediate tensors: `name::PEAK_BYTES` (computed from the `const`
///   items it names), or `name::peak_bytes::<B, ..>()` with const generics
///   (`name::peak_bytes::<T, B, ..>()` with a dtype parameter), or
///   `name::peak_bytes(N, ..)` over run-time dims, which takes them in the
///   order the signature first names them (a tensor's dims, a `usize`
///   parameter) and is a `const fn`. The plan's order of steps does not
///   depend on the dims' values, so this is the same plan's peak as a
///   static call's at the same sizes. Parameters are not counted; a
///   `reshape` of a parameter counts as a copy.
///
/// # Row kernels: `#[kernel]` over `Row<T>`
///
/// A `#[kernel]` whose parameters (or result) are `Row<T>` works on whole
/// rows of the last dim, the way the built-in norms do:
///
/// * A `Row<T>` parameter is a row: in the body, the row's element at each
///   column. Its argument is a tensor whose last dim is the row; every row
///   argument has the same row length (the first one's: a mismatch is a
///   compile error on the argument), and their leading dims broadcast as
///   PyTorch's do, so a `[N]` weight is one row for every row of a
///   `[B, T, N]` input. Rows are f32, f64, f16 or bf16, all of one dtype.
/// * A scalar parameter (`eps: f32`; f32, f64, i32 or i64) is one value for
///   every row; its argument is a literal or a scalar parameter.
/// * `sum(e)`, `mean(e)`, `max(e)`, `min(e)` (or `e.sum()`, ..) of a row
///   expression `e` are per-row values, usable like scalars in what
///   follows, including in later reductions (`mean((x - mean(x)) * ..)`).
///   `max(a, b)` with two arguments stays the elementwise maximum.
///   `max` and `min` propagate NaN; over an empty row `sum` is 0, `mean`
///   NaN, `max` -inf and `min` +inf.
/// * `-> Row<T>` writes a row per row (the result has the argument's dims);
///   `-> T` one value per row (the last dim removed), which must be a
///   per-row value: returning a row there is a compile error.
/// * Everything else is the scalar kernel's body (`let`, arithmetic, `if`,
///   casts, math functions, calls to scalar kernels). Rows of f16 and bf16
///   compute in f32 and are rounded once when stored.
///
/// A call is one kernel, run as the built-in norms run: on the GPU a row
/// up to 1024 elements (512 in f64) is held in the registers of a warp,
/// up to 8192 (4096) in those of a block, read once with 16-byte accesses
/// where the rows are aligned, each reduction computed from the registers;
/// longer rows take a pass over memory per reduction. On the CPU it is a
/// loop per row. Its elementwise neighbours fold into it: an elementwise
/// expression used only as a row argument (`my_rms_norm(x + residual, ..)`)
/// is computed as the row is loaded, and an elementwise expression of the
/// result of the same dims (`my_rms_norm(..) * gate + 1.0`, where the
/// result is read nowhere else) before the row is stored, so neither is
/// written to memory; the other operands of those expressions are rows of
/// the kernel's dtype (of its row length) or scalars. Under `#[grad(..)]`
/// it is differentiated through its body, as a scalar kernel is: a layer
/// norm, RMS norm or softmax written as a row kernel gets the gradients of
/// the catalogue's op; `max` and `min` of a row split the gradient evenly
/// among tied elements (PyTorch's `amax`). It is called from the functions of its
/// invocation only: no Rust function of its name is emitted (a scalar
/// kernel is also a plain `fn`).
///
/// ```
/// use tensorfn::prelude::*;
///
/// tensor_fn! {
///     /// Llama's RMS norm, written by hand.
///     #[kernel]
///     pub fn my_rms_norm(x: Row<f32>, w: Row<f32>, eps: f32) -> Row<f32> {
///         let ms = mean(x * x);
///         x * rsqrt(ms + eps) * w
///     }
///
///     /// `layer_norm`: the variance depends on the mean.
///     #[kernel]
///     pub fn my_layer_norm(x: Row<f32>, w: Row<f32>, b: Row<f32>, eps: f32) -> Row<f32> {
///         let m = mean(x);
///         let var = mean((x - m) * (x - m));
///         (x - m) / sqrt(var + eps) * w + b
///     }
///
///     /// One value per row.
///     #[kernel]
///     pub fn row_range(x: Row<f32>) -> f32 {
///         max(x) - min(x)
///     }
///
///     pub fn block<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, w: &Tensor<Cpu, f32, [8]>, b: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [B, 8]> {
///         my_rms_norm(x, w, 1e-6) + my_layer_norm(x, w, b, 1e-5)
///     }
///
///     pub fn ranges<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>) -> Tensor<Cpu, f32, [B]> {
///         row_range(x)
///     }
///
///     /// One kernel: the sum as the rows are loaded, the gate before
///     /// they are stored.
///     pub fn residual_norm<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, r: &Tensor<Cpu, f32, [B, 8]>, w: &Tensor<Cpu, f32, [8]>, g: &Tensor<Cpu, f32, [B, 8]>) -> Tensor<Cpu, f32, [B, 8]> {
///         my_rms_norm(x + r, w, 1e-6) * g
///     }
/// }
///
/// let x = Tensor::<Cpu, f32, shape![3, 8]>::randn(0)?;
/// let w = Tensor::<Cpu, f32, shape![8]>::randn(1)?;
/// let b = Tensor::<Cpu, f32, shape![8]>::randn(2)?;
/// let y = block(&x, &w, &b)?;
/// let (rms, ln) = (x.rms_norm(&w, Some(1e-6))?, x.layer_norm(&w, &b, 1e-5)?);
/// for ((a, r), l) in y.to_vec()?.iter().zip(rms.to_vec()?).zip(ln.to_vec()?) {
///     assert!((a - (r + l)).abs() < 1e-4);
/// }
/// assert!(ranges(&x)?.to_vec()?.iter().all(|r| *r >= 0.0));
/// let r = Tensor::<Cpu, f32, shape![3, 8]>::randn(3)?;
/// let g = Tensor::<Cpu, f32, shape![3, 8]>::randn(4)?;
/// let want = x.add(&r)?.rms_norm(&w, Some(1e-6))?.mul(&g)?;
/// for (a, b) in residual_norm(&x, &r, &w, &g)?.to_vec()?.iter().zip(want.to_vec()?) {
///     assert!((a - b).abs() < 1e-4);
/// }
/// # Ok::<(), tensorfn::Error>(())
/// ```
///
/// # Gradients: `#[grad(p, ..)]`
///
/// `#[grad(p)]` on a function whose result is a 0-d float tensor (a loss)
/// derives its reverse-mode derivative at compile time:
/// `name::value_and_grad(args..)` takes the function's arguments and
/// returns `(value, grads)`, each gradient typed like its parameter: a
/// tensor for a tensor parameter, a struct of the same type for a
/// `#[derive(Params)]` struct (the fields the result does not read are
/// zero), and a tuple in the written order for `#[grad(a, b)]`. The
/// backward is made of the same nodes as the forward (elementwise rules
/// fuse into the generated kernels, products run as matrix products with
/// transposes) and passes through calls to the other functions of the
/// invocation. A gradient flowing into a broadcast operand is summed back
/// to its dims, as PyTorch does.
///
/// ```
/// use tensorfn::prelude::*;
///
/// #[derive(Params)]
/// pub struct Linear<D: Device, T: Float> {
///     pub w: Tensor<D, T, shape![3, 2]>,
///     pub b: Tensor<D, T, shape![2]>,
/// }
///
/// tensor_fn! {
///     /// Mean squared error of a linear model.
///     #[grad(p)]
///     pub fn mse<D: Device, T: Float, const B: usize>(
///         x: &Tensor<D, T, [B, 3]>,
///         y: &Tensor<D, T, [B, 2]>,
///         p: &Linear<D, T>,
///     ) -> Tensor<D, T, []> {
///         let e = addmm(p.b, x, p.w) - y;
///         (e * e).mean()
///     }
/// }
///
/// fn main() -> Result<()> {
///     let x = Tensor::<Cpu, f32, shape![4, 3]>::randn(1)?;
///     let y = Tensor::<Cpu, f32, shape![4, 2]>::zeros()?;
///     let p = Linear { w: Tensor::zeros()?, b: Tensor::from_vec(vec![1.0, -2.0])? };
///     let (loss, grads) = mse::value_and_grad(&x, &y, &p)?; // grads: Linear<Cpu, f32>
///     assert_eq!(loss.to_vec()?, vec![2.5]); // (1 + 4) / 2
///     // d/db of the mean of b^2 over 4 rows and 2 columns: 2 b / 2.
///     assert_eq!(grads.b.to_vec()?, vec![1.0, -2.0]);
///     Ok(())
/// }
/// ```
///
/// On a function whose result is a float tensor of any shape (a layer),
/// `#[grad(x, p)]` gives `name::vjp(args.., grad_output)`: the
/// vector-Jacobian product, as PyTorch's `torch.autograd.grad(y, (x, p),
/// grad_output)`. `grad_output` is the gradient of a loss with respect to
/// the result, typed like it (device, dtype and shape); `vjp` returns the
/// value and the gradients of that loss as `value_and_grad` does. It is
/// how a model whose layers are a `Vec` (which a `tensor_fn!`, having no
/// loops, cannot run as one function) trains: forward through the layers
/// keeping each one's input, then backward in reverse, each `vjp` giving
/// the gradient of its input to the layer below and of its parameters.
/// A weight used by several layers (tied embeddings) gets the sum of its
/// gradients through [`Params::accumulate`]. A loss gets `vjp` too (with
/// a 0-d `grad_output`; a seed of one gives `value_and_grad`'s
/// gradients).
///
/// A tuple result takes a tuple `grad_output`, one gradient per element in
/// its place, typed like it, and `()` in the place of an element that has
/// none (the indices of `topk`, an `argmax`); `vjp` returns the value as
/// the function does (the tuple) and the gradients of the loss whose
/// gradients with respect to the elements are those (the sum of each
/// element's vector-Jacobian product), as `torch.autograd.grad((y0, y1),
/// params, (g0, g1))`. `name::forward` and `Pullback::backward` take it the
/// same way.
///
/// ```
/// use tensorfn::prelude::*;
///
/// tensor_fn! {
///     /// The two largest values of each row, scaled, and where they are.
///     #[grad(x, s)]
///     pub fn top2(
///         x: &Tensor<Cpu, f32, [4, 5]>,
///         s: &Tensor<Cpu, f32, [4, 1]>,
///     ) -> (Tensor<Cpu, f32, [4, 2]>, Tensor<Cpu, i64, [4, 2]>) {
///         let (v, i) = x.topk(2);
///         (v * s, i)
///     }
/// }
///
/// fn main() -> Result<()> {
///     let x = Tensor::<Cpu, f32, shape![4, 5]>::randn(1)?;
///     let s = Tensor::<Cpu, f32, shape![4, 1]>::ones()?;
///     let g = Tensor::<Cpu, f32, shape![4, 2]>::ones()?;
///     // One gradient per element; the indices take `()`.
///     let ((values, indices), (grad_x, grad_s)) = top2::vjp(&x, &s, (&g, ()))?;
///     assert_eq!(indices.dims(), &[4, 2]);
///     // The gradient reaches the two picked positions of each row.
///     let picked = grad_x.to_vec()?.iter().filter(|&&v| v == 1.0).count();
///     assert_eq!(picked, 8);
///     // `d(sum(v * s)) / ds` is the sum of each row's two values.
///     let row0: f32 = values.to_vec()?[..2].iter().sum();
///     assert_eq!(grad_s.to_vec()?[0], row0);
///     // The split form takes the same tuple.
///     let ((_, _), pullback) = top2::forward(&x, &s)?;
///     let (again_x, _) = pullback.backward((&g, ()))?;
///     assert_eq!(again_x.to_vec()?, grad_x.to_vec()?);
///     Ok(())
/// }
/// ```
///
/// ```
/// use tensorfn::prelude::*;
///
/// #[derive(Params)]
/// pub struct Dense<D: Device, T: Float> {
///     pub w: Tensor<D, T, shape![3, 3]>,
///     pub b: Tensor<D, T, shape![3]>,
/// }
///
/// tensor_fn! {
///     /// One layer of a deep model.
///     #[grad(x, p)]
///     pub fn dense<const B: usize>(
///         x: &Tensor<Cpu, f32, [B, 3]>,
///         p: &Dense<Cpu, f32>,
///     ) -> Tensor<Cpu, f32, [B, 3]> {
///         tanh(addmm(p.b, x, p.w))
///     }
/// }
///
/// fn main() -> Result<()> {
///     let layers = vec![
///         Dense { w: Tensor::<Cpu, f32, shape![3, 3]>::randn(1)?, b: Tensor::zeros()? },
///         Dense { w: Tensor::<Cpu, f32, shape![3, 3]>::randn(2)?, b: Tensor::zeros()? },
///     ];
///     let x = Tensor::<Cpu, f32, shape![4, 3]>::randn(3)?;
///     // Forward, keeping each layer's input.
///     let mut inputs = vec![x];
///     for p in &layers {
///         let y = dense(inputs.last().unwrap(), p)?;
///         inputs.push(y);
///     }
///     let y = inputs.pop().unwrap();
///     // The loss `(y * y).sum() / 2` has gradient `y` at the top.
///     let mut grad = y;
///     let mut grads = Vec::new();
///     for (p, input) in layers.iter().zip(&inputs).rev() {
///         let (_, (grad_x, grad_p)) = dense::vjp(input, p, &grad)?;
///         grads.push(grad_p); // grad_p: Dense<Cpu, f32>
///         grad = grad_x; // the gradient of the layer below's result
///     }
///     grads.reverse();
///     assert_eq!(grads[0].w.dims(), &[3, 3]);
///     assert_eq!(grad.dims(), &[4, 3]); // the gradient of `x`
///     // Tied weights: the gradients of one parameter added up.
///     let mut total = grads[0].zeros_like()?;
///     total.accumulate(&grads[0])?;
///     total.accumulate(&grads[1])?;
///     Ok(())
/// }
/// ```
///
/// `vjp` runs the layer's forward again before its backward, so the loop
/// above runs every forward twice. `name::forward(args..)` runs it once:
/// it returns the value and a `name::Pullback` holding what the backward
/// reads (the intermediate values, moved in, handles to the tensor
/// arguments it reads, and the parameter structs, borrowed for its
/// lifetime `'a`); `pullback.backward(&grad_output)` returns the
/// gradients `vjp` returns, as JAX's `y, f_vjp = jax.vjp(f, x)` then
/// `f_vjp(dy)`. The two calls run the steps of `vjp`'s joint function in
/// its order, cut where the backward starts (the first step reading
/// `grad_output`), so the value and the gradients are the same bits as
/// `vjp`'s. A chain keeps one pullback per layer instead of one input per
/// layer: more memory (each layer's intermediates, `recompute = true`
/// keeping fewer, as below), one forward less. `name::PULLBACK_BYTES`
/// (`pullback_bytes::<..>()` with generics, `pullback_bytes(dims..)` over
/// run-time dims) states
/// the bytes a pullback keeps (an attention's saved log-sum-exps
/// included), and `VJP_PEAK_BYTES` is the peak of `forward` and
/// `backward` too. A `Pullback` is `Send`, as the tensors it holds are:
/// its backward may run on another thread.
///
/// ```
/// use tensorfn::prelude::*;
///
/// #[derive(Params)]
/// pub struct Dense<D: Device, T: Float> {
///     pub w: Tensor<D, T, shape![3, 3]>,
///     pub b: Tensor<D, T, shape![3]>,
/// }
///
/// tensor_fn! {
///     #[grad(x, p)]
///     pub fn dense<const B: usize>(
///         x: &Tensor<Cpu, f32, [B, 3]>,
///         p: &Dense<Cpu, f32>,
///     ) -> Tensor<Cpu, f32, [B, 3]> {
///         tanh(addmm(p.b, x, p.w))
///     }
/// }
///
/// fn main() -> Result<()> {
///     let layers = vec![
///         Dense { w: Tensor::<Cpu, f32, shape![3, 3]>::randn(1)?, b: Tensor::zeros()? },
///         Dense { w: Tensor::<Cpu, f32, shape![3, 3]>::randn(2)?, b: Tensor::zeros()? },
///     ];
///     let x = Tensor::<Cpu, f32, shape![4, 3]>::randn(3)?;
///     // Forward once, keeping each layer's pullback.
///     let mut y = x.clone();
///     let mut pullbacks = Vec::new();
///     for p in &layers {
///         let (out, pullback) = dense::forward(&y, p)?;
///         pullbacks.push(pullback); // dense::Pullback<'_, 4>
///         y = out;
///     }
///     // The loss `(y * y).sum() / 2` has gradient `y` at the top.
///     let mut grad = y;
///     let mut grads = Vec::new();
///     for pullback in pullbacks.into_iter().rev() {
///         let (grad_x, grad_p) = pullback.backward(&grad)?;
///         grads.push(grad_p);
///         grad = grad_x;
///     }
///     grads.reverse();
///     // The same bits as `vjp`, which runs the forward again.
///     let h = dense(&x, &layers[0])?;
///     let (_, (_, want)) = dense::vjp(&h, &layers[1], &dense(&h, &layers[1])?)?;
///     assert_eq!(grads[1].w.to_vec()?, want.w.to_vec()?);
///     assert_eq!(grad.dims(), &[4, 3]);
///     // The pullback keeps `tanh`'s result (its backward reads it).
///     assert_eq!(dense::pullback_bytes::<4>(), 4 * 3 * 4);
///     Ok(())
/// }
/// ```
///
/// `value_and_grad`, `vjp`, `forward` and `Pullback` live in a module named after the function, which
/// sees the items of the enclosing module (`use super::*`): a `#[grad]`
/// function and the structs it takes are written at module level, not
/// inside a function body.
///
/// Which ops have a derivative is the catalogue's
/// (`tensorfn_core::ops::Derivative`). An op without one on the path from
/// a differentiated parameter to the result (`argmax`, a cast to an
/// integer type, a row `#[kernel]`) is a compile error on the op naming the
/// parameter, as is a `#[grad]` parameter the result does not depend on,
/// or a comparison as the only path to it (a comparison used as a mask beside a
/// differentiable path is fine). `max(dim)` and `min(dim)` give the whole
/// gradient to the index they return; `max()` and `min()` share it evenly
/// among the elements equal to the result, and `maximum`/`minimum` halve
/// it on ties, as PyTorch does; `floor`, `round`, `sign` and the other
/// piecewise-constant ops pass a zero gradient. `layer_norm` and
/// `rms_norm` have one fused backward each (`layer_norm_backward`,
/// `rms_norm_backward`), which recomputes the rows' statistics from the
/// input, so the forward saves nothing for them.
/// `scaled_dot_product_attention` has one fused backward too (the forward
/// saves its rows' log-sum-exps); its gradient has no derivative of its
/// own, so differentiating through it a second time is a compile error.
/// `topk`'s values pass their gradient to the positions they were picked
/// from (its indices have none), as PyTorch's do.
///
/// A call to a scalar `#[kernel]` is differentiated through its body:
/// the backward recomputes the body's operations from the call's
/// arguments and applies the chain rule to them with the rules of the
/// catalogue's elementwise ops (an `if` passes the gradient to the branch
/// it takes), fused into the backward's kernels; the forward stays one
/// fused kernel. A body whose result depends on a differentiated value
/// through integer arithmetic, a cast to an integer, or a comparison used
/// as a number (`(v > 0.0) as f32`, rather than an `if`'s condition) is a
/// compile error on the call naming the kernel and the operation.
///
/// ```
/// use tensorfn::prelude::*;
///
/// tensor_fn! {
///     /// A ReLU with a smooth start.
///     #[kernel]
///     fn softish(v: f64) -> f64 {
///         if v > 0.0 { v + (-v).exp() - 1.0 } else { 0.0 }
///     }
///
///     #[grad(x)]
///     fn loss(x: &Tensor<Cpu, f64, [3]>) -> Tensor<Cpu, f64, []> {
///         softish(x * 2.0).sum()
///     }
/// }
///
/// fn main() -> Result<()> {
///     let x = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![-1.0, 0.5, 2.0])?;
///     let (_, g) = loss::value_and_grad(&x)?;
///     // d/dx softish(2x) = 2 (1 - e^(-2x)) where x > 0, else 0.
///     let want = [0.0, 2.0 * (1.0 - (-1.0f64).exp()), 2.0 * (1.0 - (-4.0f64).exp())];
///     for (g, w) in g.to_vec()?.into_iter().zip(want) {
///         assert!((g - w).abs() < 1e-12);
///     }
///     Ok(())
/// }
/// ```
///
/// ## What a training step keeps, and its `GRAD_PEAK_BYTES`
///
/// The joint function (forward, then backward) keeps every value the
/// backward reads alive from the forward until its last backward use: the
/// inputs of products and of the other non-elementwise ops, and the
/// elementwise values the rules read (`tanh`'s and `sigmoid`'s results,
/// a product's operands, ...); a value read by both passes is computed
/// once. `#[grad(p, .., recompute = true)]` keeps only the inputs and the
/// values of non-elementwise ops (products, reductions, norms,
/// attention): each elementwise value the backward reads is computed again
/// in the backward, from those, fused into the backward's own kernels. The
/// gradients are the same bits; the step does more elementwise work and
/// holds less memory.
///
/// The function's module states the peak of both passes as they run:
/// `name::GRAD_PEAK_BYTES` for `value_and_grad` and `name::VJP_PEAK_BYTES`
/// for `vjp` (`grad_peak_bytes::<..>()` and `vjp_peak_bytes::<..>()` with
/// generics, `grad_peak_bytes(dims..)` and `vjp_peak_bytes(dims..)` over
/// run-time dims, as `peak_bytes`), counted as `PEAK_BYTES` is
/// (parameters and `grad_output` not counted; the value and the gradients
/// counted until returned; scratch space inside a kernel or a library call
/// not counted). On a GPU the caching allocator's peak over one call,
/// rounded to its size classes, is that figure.
///
/// ```
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     #[grad(w)]
///     fn kept(x: &Tensor<Cpu, f32, [64, 16]>, w: &Tensor<Cpu, f32, [16, 64]>) -> Tensor<Cpu, f32, []> {
///         let a = x.matmul(w);
///         (tanh(a) * sigmoid(a)).sum()
///     }
///
///     #[grad(w, recompute = true)]
///     fn recomputed(x: &Tensor<Cpu, f32, [64, 16]>, w: &Tensor<Cpu, f32, [16, 64]>) -> Tensor<Cpu, f32, []> {
///         let a = x.matmul(w);
///         (tanh(a) * sigmoid(a)).sum()
///     }
/// }
/// assert!(kept::GRAD_PEAK_BYTES > kept::PEAK_BYTES);
/// assert!(recomputed::GRAD_PEAK_BYTES < kept::GRAD_PEAK_BYTES);
///
/// // The same step over a run-time batch `B`: the same plan, its peak
/// // evaluated at the batch a call has.
/// tensor_fn! {
///     #[grad(w)]
///     fn kept_batch(x: &Tensor<Cpu, f32, [B, 16]>, w: &Tensor<Cpu, f32, [16, 64]>) -> Tensor<Cpu, f32, []> {
///         let a = x.matmul(w);
///         (tanh(a) * sigmoid(a)).sum()
///     }
/// }
/// assert_eq!(kept_batch::grad_peak_bytes(64), kept::GRAD_PEAK_BYTES);
/// assert!(kept_batch::grad_peak_bytes(128) > kept::GRAD_PEAK_BYTES);
/// ```
///
/// # Errors at compile time
///
/// Mistakes are reported by the macro, in `cargo check`, on the operand,
/// with the fix; every error of a function is reported at once.
///
/// A CPU tensor in a GPU `addmm` (`` `bias` is on Cpu but `addmm` runs on
/// Cuda (m1: Cuda): move it with `bias.to_device::<Cuda>()` ``):
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn step(bias: &Tensor<Cpu, f32, [10]>, m1: &Tensor<Cuda, f32, [4, 10]>, m2: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, [4, 10]> {
///         addmm(bias, m1, m2)
///     }
/// }
/// ```
///
/// f16 mixed with f32 (`` `m2` is f32 but `addmm` here is f16: cast with
/// `m2.cast::<f16>()` ``):
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn step(b: &Tensor<Cuda, f16, [10, 10]>, m1: &Tensor<Cuda, f16, [10, 10]>, m2: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f16, [10, 10]> {
///         addmm(b, m1, m2)
///     }
/// }
/// ```
///
/// Shapes that do not fit (`` `cat` along dim 0 needs equal dims elsewhere:
/// dim 1 is 3 in `a` and 5 in `b` ``; along dim 1 the same tensors give
/// `[2, 8, 4]`):
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn join(a: &Tensor<Cpu, f32, [2, 3, 4]>, b: &Tensor<Cpu, f32, [2, 5, 4]>) -> Tensor<Cpu, f32, [4, 3, 4]> {
///         cat([a, b], 0)
///     }
/// }
/// ```
///
/// A view to a wrong element count (`` `view` of `x` from [1000, 1000]
/// (1000000 elements) to [1000001] (1000001 elements) ``):
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn corrupt(x: &Tensor<Cuda, f32, [1000, 1000]>) -> Tensor<Cuda, f32, [1000001]> {
///         x.view([1000001])
///     }
/// }
/// ```
///
/// A constant index past the end (`index 10 is out of range for dim 0 of
/// `x`, which has size 10: valid indices are 0..=9`); a `usize` index is
/// checked at run time and returns `Err` instead:
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn row(x: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, [10]> {
///         x[10]
///     }
/// }
/// ```
///
/// Integers mixed with floats (`` `x` is i32 but `addcmul` here is f32:
/// cast with `x.cast::<f32>()` ``):
///
/// ```compile_fail
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn update(y: &Tensor<Cpu, f32, [5, 5]>, x: &Tensor<Cpu, i32, [5, 5]>) -> Tensor<Cpu, f32, [5, 5]> {
///         addcmul(y, x, x, 1)
///     }
/// }
/// ```
///
/// A CPU tensor passed to a function that takes a GPU one (`` this tensor
/// is on `Cpu` where the parameter takes `Cuda` ``, with the fix:
/// `` move it first: `.to_device::<Cuda>()?` ``):
///
/// ```compile_fail,E0277
/// use tensorfn::prelude::*;
/// tensor_fn! {
///     fn double(x: &Tensor<Cuda, f32, [2, 3]>) -> Tensor<Cuda, f32, [2, 3]> { x * 2.0 }
/// }
/// fn main() -> Result<()> {
///     let x = Tensor::<Cpu, f32, shape![2, 3]>::ones()?;
///     double(&x)?;
///     Ok(())
/// }
/// ```
///
/// A generated function takes a tensor parameter as `&impl
/// TensorArg<D, T, S>` ([`TensorArg`](crate::TensorArg)), whose bounds
/// compare the argument with the parameter part by part, so that a call
/// with another tensor names what differs: the device (`Cuda<1>` against
/// `Cuda`, `.to_device`), the dtype (`.cast`), the rank (1 against 2), a
/// dim (3 against 784), or a static dim against a run-time one
/// (`.into_shape`). The argument's type is still inferred from the
/// parameter (`double(&Tensor::ones()?)`, `f(&x.cast()?)`), and so are a
/// generic function's device, dtype and const generics. Dims the function
/// takes at run time are `Dyn`: a tensor with a static shape is passed as
/// `x.into_shape::<shape![_, _]>()?`, or the name is made a `const` item
/// (`{M}`) so that the types agree.
///
/// # At run time
///
/// Run-time dims are checked when the function is entered (an `Err` names
/// the dim and both parameters); `usize` indices, `narrow` ranges on dims
/// not known at compile time, and the runtime's own shape checks of each
/// operation return `Err` too, never a panic or an illegal memory access.
pub use tensorfn_macros::{tensor_fn, Params};
pub use tensorfn_runtime::*;

/// The second stage of `tensor_fn!` (functions taking parameter structs);
/// not a stable API.
#[doc(hidden)]
pub use tensorfn_macros::__tensor_fn_with_fields;

/// The kernels crate, for the statics `tensor_fn!` generates; not a stable API.
#[doc(hidden)]
pub use tensorfn_kernels as __kernels;

/// Everything a program using tensorfn needs in scope.
pub mod prelude {
    pub use tensorfn_macros::{tensor_fn, Params};
    pub use tensorfn_runtime::prelude::*;
}
