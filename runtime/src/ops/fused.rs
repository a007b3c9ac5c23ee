//! Entry points for the elementwise kernels `tensor_fn!` generates: the
//! same fusion group as PTX (for CUDA) and as a Rust closure (for the
//! CPU), applied to inputs broadcast to the output dims.

use super::check_result;
use super::dispatch::dispatch;
use super::order::ChannelsLast;
use super::output::output_in;
use crate::cpu::blocks::Lanes;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;
use tensorfn_kernels::FusedKernel;

/// The input's layout broadcast to `out_dims`, after checking it fits.
fn broadcast_input(
    kernel: &FusedKernel,
    index: usize,
    layout: &Layout,
    out_dims: &[usize],
) -> Result<Layout> {
    // The name only matters in an error; a call queues a kernel in a few
    // microseconds, so it is not formatted on every one.
    if rules::broadcast_to(kernel.name, ("", layout.dims()), out_dims).is_err() {
        let name = format!("input {index}");
        rules::broadcast_to(kernel.name, (&name, layout.dims()), out_dims)?;
    }
    Ok(layout.broadcast_to(out_dims))
}

macro_rules! fused_fn {
    ($(#[$doc:meta])* $name:ident; $(($x:ident, $X:ident, $i:tt)),+) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        pub fn $name<D: Device, $($X: DType,)+ O: DType, SO: Shape>(
            $($x: &Tensor<D, $X, impl Shape>,)+
            out_dims: &[usize],
            kernel: &'static FusedKernel,
            cpu: impl Fn(&mut Lanes, $($X),+) -> O + Sync + Send,
        ) -> Result<Tensor<D, O, SO>> {
            check_result::<SO>(kernel.name, out_dims)?;
            let mut layouts = [$(broadcast_input(kernel, $i, &$x.layout, out_dims)?),+];
            // A channels-last operand gives a channels-last result: the
            // kernel runs over every operand seen as `[N, H, W, C]`.
            let order = ChannelsLast::pick(out_dims, &[$(&layouts[$i]),+]);
            let run_dims = match order {
                Some(o) => {
                    layouts = layouts.map(|l| o.apply(&l));
                    std::borrow::Cow::Owned(o.dims(out_dims))
                }
                None => std::borrow::Cow::Borrowed(out_dims),
            };
            let storage = dispatch!(D, |be| be.wrap(be.fused_launch(
                kernel,
                (cpu, ($((be.buf(&$x.storage), &layouts[$i]),)+)),
                &run_dims
            )?));
            output_in(storage, ChannelsLast::result(order, out_dims))
        }
    };
}

fused_fn!(
    /// Applies a generated one-input kernel: on the CPU `cpu` per element
    /// (its [`Lanes`] providing sine and cosine), on CUDA the kernel's PTX.
    /// Inputs broadcast to `out_dims`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, __private::{fused1, Lanes}};
    /// use tensorfn_kernels::FusedKernel;
    /// use tensorfn_core::DTypeKind;
    /// static K: FusedKernel = FusedKernel {
    ///     name: "tf_double", ptx: "", ptx_sm80: None, inputs: &[DTypeKind::F32], output: DTypeKind::F32,
    /// };
    /// let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![3]> = fused1(&x, &[3], &K, |_: &mut Lanes, a: f32| a * 2.0).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![2., 4., 6.]);
    /// ```
    fused1; (a, A, 0)
);
fused_fn!(
    /// [`fused1`] with two inputs, which may differ in dtype.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, __private::{fused2, Lanes}};
    /// use tensorfn_kernels::FusedKernel;
    /// use tensorfn_core::DTypeKind;
    /// static K: FusedKernel = FusedKernel {
    ///     name: "tf_scale", ptx: "", ptx_sm80: None, inputs: &[DTypeKind::F32, DTypeKind::I32],
    ///     output: DTypeKind::F32,
    /// };
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let k = Tensor::<Cpu, i32, shape![2]>::from_vec(vec![10, 100]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![2, 2]> =
    ///     fused2(&x, &k, &[2, 2], &K, |_: &mut Lanes, a: f32, b: i32| a * b as f32).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![10., 200., 30., 400.]);
    /// ```
    fused2; (a, A, 0), (b, B, 1)
);
fused_fn!(
    /// [`fused1`] with three inputs.
    fused3; (a, A, 0), (b, B, 1), (c, C, 2)
);
fused_fn!(
    /// [`fused1`] with four inputs.
    fused4; (a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3)
);
fused_fn!(
    /// [`fused1`] with five inputs.
    fused5; (a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3), (e, F, 4)
);
fused_fn!(
    /// [`fused1`] with six inputs.
    fused6; (a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3), (e, F, 4), (f, G, 5)
);
fused_fn!(
    /// [`fused1`] with seven inputs.
    fused7; (a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3), (e, F, 4), (f, G, 5), (g, H, 6)
);
fused_fn!(
    /// [`fused1`] with eight inputs.
    fused8; (a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3), (e, F, 4), (f, G, 5), (g, H, 6), (h, I, 7)
);
