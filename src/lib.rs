//! tensorfn: tensors whose device, dtype and shape mistakes fail to compile.
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
/// * Shapes are written `[B, 784]`: literals, `const` generics, `+` and `*`
///   of those (`[N + M]`, `[2 * N]`), or undeclared names, which are
///   run-time dims bound from the first parameter naming them and checked
///   against every other one (`_` is a run-time dim nothing else names).
///   Devices are `Cpu`, `Cuda` (cuda:0) and `Cuda<N>`; dtypes `f32 f64 f16
///   bf16 i32 i64 u8 bool`. A `usize` parameter may size dims by its name.
/// * Bodies are `let` bindings and a result: `matmul`, `mm`, `bmm`, `dot`,
///   `addmm(bias, m1, m2, beta = .., alpha = ..)`, `cat([a, b], dim)`,
///   `addcmul(input, t1, t2, value)`, the math functions (`relu sigmoid
///   tanh exp log sin cos sqrt rsqrt abs neg square recip gelu silu`, also
///   as methods), `maximum`, `minimum`, `pow`, `+ - * /` with PyTorch
///   broadcasting and with scalars, `x.reshape([..])` / `x.view([..])` (one
///   `-1` allowed), `x.t()`, `x.permute([..])`, `x.transpose(a, b)`,
///   `x.narrow(dim, start, len)`, `x.sum(dim)`, `mean`, `max`, `min`,
///   `argmax`, `argmin` (`x.sum()` reduces everything), `x.softmax(dim)`,
///   `x.log_softmax(dim)`, `x.cast::<T>()`, `x.to_device::<D>()`,
///   `x.to_cpu()`, indexing `x[i]`, `x[i, j]` (constant or `usize`),
///   calls to the other functions and kernels of the invocation, and calls
///   to functions outside it, whose result is annotated (`let y:
///   Tensor<Cpu, f32, [B, 10]> = other::f(x);`).
/// * Elementwise chains (math, arithmetic, broadcasts, scalars, casts,
///   `addcmul`, kernels) become one kernel each: PTX generated at compile
///   time for CUDA and a closure for the CPU (f16 and bf16 computed in f32,
///   rounded after each operation).
/// * A function without run-time dims gets a module of the same name with
///   its peak bytes of intermediate tensors: `name::PEAK_BYTES`, or
///   `name::peak_bytes::<B, ..>()` with const generics. Parameters are not
///   counted; a `reshape` of a parameter counts as a copy.
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
/// A CPU tensor passed to a function that takes a GPU one is a type error
/// from rustc (expected `&Tensor<Cuda, f32, (Const<2>, Const<3>)>`, found
/// `&Tensor<Cpu, ..>`):
///
/// ```compile_fail,E0308
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
/// # At run time
///
/// Run-time dims are checked when the function is entered (an `Err` names
/// the dim and both parameters); `usize` indices, `narrow` ranges on dims
/// not known at compile time, and the runtime's own shape checks of each
/// operation return `Err` too, never a panic or an illegal memory access.
pub use tensorfn_macros::tensor_fn;
pub use tensorfn_runtime::*;

/// The kernels crate, for the statics `tensor_fn!` generates; not a stable API.
#[doc(hidden)]
pub use tensorfn_kernels as __kernels;

/// Everything a program using tensorfn needs in scope.
pub mod prelude {
    pub use tensorfn_macros::tensor_fn;
    pub use tensorfn_runtime::prelude::*;
}
