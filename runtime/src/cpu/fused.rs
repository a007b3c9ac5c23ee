//! The CPU side of the elementwise kernels `tensor_fn!` generates: the
//! fusion group's Rust closure applied to every output element, in
//! vectorised runs where the inputs are contiguous.

use super::blocks::{fill_blocks, Lanes};
use super::simd::vectorized;
use super::strided::{check_extent, fill_runs};
use super::CpuBackend;
use crate::backend::FusedArgs;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use std::mem::MaybeUninit;
use tensorfn_kernels::FusedKernel;

/// One implementation per input count: `(closure, ((buffer, layout), ..))`
/// with the closure taking one value of each input's dtype.
macro_rules! cpu_fused {
    ($(($x:ident, $X:ident, $i:tt)),+) => {
        impl<'a, F, O: DType, $($X: DType),+> FusedArgs<CpuBackend, O>
            for (F, ($((&'a Vec<$X>, &'a Layout),)+))
        where
            F: Fn(&mut Lanes, $($X),+) -> O + Sync + Send,
        {
            fn launch(
                self,
                _be: &CpuBackend,
                kernel: &'static FusedKernel,
                out_dims: &[usize],
            ) -> Result<Vec<O>> {
                let (cpu, inputs) = self;
                let layouts = [$(inputs.$i.1),+];
                $(
                    let $x: &[$X] = inputs.$i.0;
                    check_extent(kernel.name, layouts[$i], $x.len())?;
                )+
                // SAFETY: both branches write every element of the run.
                let out = unsafe { fill_runs(out_dims, layouts, |o: &mut [MaybeUninit<O>], base, step| {
                    if step.iter().all(|&s| s == 1) {
                        vectorized(#[inline(always)] || fill_blocks(o, #[inline(always)] |lanes, start, o| {
                            let len = o.len();
                            $(let $x = &$x[base[$i] + start..base[$i] + start + len];)+
                            for j in 0..len {
                                o[j].write(cpu(lanes, $($x[j]),+));
                            }
                        }))
                    } else {
                        fill_blocks(o, #[inline(always)] |lanes, start, o| {
                            for (j, o) in o.iter_mut().enumerate() {
                                o.write(cpu(lanes, $($x[base[$i] + (start + j) * step[$i]]),+));
                            }
                        })
                    }
                }) };
                Ok(out)
            }
        }
    };
}

cpu_fused!((a, A, 0));
cpu_fused!((a, A, 0), (b, B, 1));
cpu_fused!((a, A, 0), (b, B, 1), (c, C, 2));
cpu_fused!((a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3));
cpu_fused!((a, A, 0), (b, B, 1), (c, C, 2), (d, E, 3), (e, G, 4));
cpu_fused!(
    (a, A, 0),
    (b, B, 1),
    (c, C, 2),
    (d, E, 3),
    (e, G, 4),
    (f, H, 5)
);
cpu_fused!(
    (a, A, 0),
    (b, B, 1),
    (c, C, 2),
    (d, E, 3),
    (e, G, 4),
    (f, H, 5),
    (g, I, 6)
);
cpu_fused!(
    (a, A, 0),
    (b, B, 1),
    (c, C, 2),
    (d, E, 3),
    (e, G, 4),
    (f, H, 5),
    (g, I, 6),
    (h, J, 7)
);
