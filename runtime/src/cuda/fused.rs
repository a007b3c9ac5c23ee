//! The CUDA side of the elementwise kernels `tensor_fn!` generates: the
//! fusion group's PTX launched over the inputs' device buffers (the Rust
//! closure is the CPU's).

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::launch::launch_fused_in;
use crate::backend::FusedArgs;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use tensorfn_kernels::FusedKernel;

/// One implementation per input count: `(closure, ((buffer, layout), ..))`.
macro_rules! cuda_fused {
    ($(($X:ident, $i:tt)),+) => {
        impl<'a, F, O: DType, $($X: DType),+> FusedArgs<CudaBackend, O>
            for (F, ($((&'a CudaStorage<$X>, &'a Layout),)+))
        {
            fn launch(
                self,
                be: &CudaBackend,
                kernel: &'static FusedKernel,
                out_dims: &[usize],
            ) -> Result<CudaStorage<O>> {
                let (_, inputs) = self;
                let inputs = [$((inputs.$i.0.device_ptr(), inputs.$i.1)),+];
                launch_fused_in::<O>(kernel, || Ok(be.ctx().clone()), &inputs, out_dims)
            }
        }
    };
}

cuda_fused!((A, 0));
cuda_fused!((A, 0), (B, 1));
cuda_fused!((A, 0), (B, 1), (C, 2));
cuda_fused!((A, 0), (B, 1), (C, 2), (D, 3));
cuda_fused!((A, 0), (B, 1), (C, 2), (D, 3), (E, 4));
cuda_fused!((A, 0), (B, 1), (C, 2), (D, 3), (E, 4), (G, 5));
cuda_fused!((A, 0), (B, 1), (C, 2), (D, 3), (E, 4), (G, 5), (H, 6));
cuda_fused!(
    (A, 0),
    (B, 1),
    (C, 2),
    (D, 3),
    (E, 4),
    (G, 5),
    (H, 6),
    (I, 7)
);
