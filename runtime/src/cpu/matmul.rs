//! Batched matrix products through the `gemm` crate, reading strided
//! (transposed, sliced, broadcast) operands in place.

use super::buffer::output_buffer;
use super::copy::{cast, contiguous};
use super::strided::check_extent;
use crate::dtype::{DType, Is};
use crate::error::Result;
use crate::layout::Layout;
use gemm::Parallelism;
use half::{bf16, f16};

/// Products with at least this many multiply-adds use every core.
const PAR_FLOPS: usize = 64 * 64 * 64;

/// One operand: a buffer and its `[batch, rows, cols]` view.
pub(crate) struct Operand<'a, T> {
    pub(crate) data: &'a [T],
    pub(crate) layout: &'a Layout,
}

/// The element types `gemm` multiplies natively.
trait GemmType: DType {}
impl GemmType for f32 {}
impl GemmType for f64 {}
impl GemmType for f16 {}

/// `alpha * a @ b + beta * bias` as a contiguous `[batch, m, n]` buffer.
pub(crate) fn matmul<T: DType>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    bias: Option<Operand<'_, T>>,
    alpha: T,
    beta: T,
) -> Result<Vec<T>> {
    check_extent("matmul", a.layout, a.data.len())?;
    check_extent("matmul", b.layout, b.data.len())?;
    if let Some(c) = &bias {
        check_extent("matmul", c.layout, c.data.len())?;
    }
    // `if`s on constants: an instance compiles only its own `gemm`.
    if <T as Is<f32>>::IS {
        Ok(gemm_typed::<f32, T>(a, b, bias, alpha, beta))
    } else if <T as Is<f64>>::IS {
        Ok(gemm_typed::<f64, T>(a, b, bias, alpha, beta))
    } else if <T as Is<f16>>::IS {
        Ok(gemm_typed::<f16, T>(a, b, bias, alpha, beta))
    } else if <T as Is<bf16>>::IS {
        Ok(via_f32(a, b, bias, alpha, beta))
    } else {
        unreachable!("matmul of `{}` (floats only)", T::KIND.name())
    }
}

/// bf16 has no `gemm` kernel: multiply in f32 and round once.
fn via_f32<T: DType>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    bias: Option<Operand<'_, T>>,
    alpha: T,
    beta: T,
) -> Vec<T> {
    let widen = |o: &Operand<'_, T>| -> (Vec<f32>, Layout) {
        (
            cast::<T, f32>(o.data, o.layout),
            Layout::contiguous(o.layout.dims()),
        )
    };
    let (ad, al) = widen(&a);
    let (bd, bl) = widen(&b);
    let c = bias.as_ref().map(widen);
    let out = gemm_typed::<f32, f32>(
        Operand {
            data: &ad,
            layout: &al,
        },
        Operand {
            data: &bd,
            layout: &bl,
        },
        c.as_ref().map(|(d, l)| Operand { data: d, layout: l }),
        alpha.cast(),
        beta.cast(),
    );
    cast::<f32, T>(&out, &Layout::contiguous(&[out.len()]))
}

fn gemm_typed<G: GemmType, T: DType>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    bias: Option<Operand<'_, T>>,
    alpha: T,
    beta: T,
) -> Vec<T> {
    let a = Operand {
        data: super::typed::slice::<T, G>(a.data),
        layout: a.layout,
    };
    let b = Operand {
        data: super::typed::slice::<T, G>(b.data),
        layout: b.layout,
    };
    let bias = bias.map(|c| Operand {
        data: super::typed::slice::<T, G>(c.data),
        layout: c.layout,
    });
    let out = gemm_batched::<G>(
        a,
        b,
        bias,
        super::typed::value(alpha),
        super::typed::value(beta),
    );
    super::typed::vec::<G, T>(out)
}

fn gemm_batched<G: GemmType>(
    a: Operand<'_, G>,
    b: Operand<'_, G>,
    bias: Option<Operand<'_, G>>,
    alpha: G,
    beta: G,
) -> Vec<G> {
    let (la, lb) = (a.layout, b.layout);
    let (batch, m, k) = (la.dims()[0], la.dims()[1], la.dims()[2]);
    let n = lb.dims()[2];
    debug_assert_eq!(lb.dims(), &[batch, k, n]);
    // PyTorch ignores the bias (NaN included) when beta is 0.
    let read_dst = bias.is_some() && beta != G::zero();
    let len = batch * m * n;
    let mut out = match &bias {
        Some(c) if read_dst => contiguous(c.data, c.layout),
        // With nothing to read and something to multiply, gemm writes
        // every element: the buffer can start uninitialised (and large
        // ones come from the pool of freed buffers, so a product does not
        // pay for the system clearing fresh pages).
        _ if k > 0 => output_buffer(len),
        _ => vec![G::zero(); len],
    };
    if len == 0 {
        return out;
    }
    // gemm reads (a bias) and writes the elements through pointers, so the
    // whole buffer is handed out as spare capacity, one `m x n` block per
    // batch.
    // SAFETY: `G: Copy`, so dropping the length drops nothing, and a bias
    // copy stays in memory for gemm to read.
    unsafe { out.set_len(0) };
    let blocks = &mut out.spare_capacity_mut()[..len];
    let work = m * n * k.max(1);
    let run = |i: usize, dst: &mut [std::mem::MaybeUninit<G>], par: Parallelism| {
        let a0 = la.offset() + i * la.strides()[0];
        let b0 = lb.offset() + i * lb.strides()[0];
        // SAFETY: the layouts were checked to stay inside their buffers
        // (`check_extent`), so every (row, col) the strides reach is in
        // bounds for `k > 0`; `dst` is batch `i`'s `m x n` block, which
        // aliases neither input. For `k == 0` gemm reads nothing.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr().cast::<G>(),
                1,
                n as isize,
                read_dst,
                a.data.as_ptr().wrapping_add(a0),
                la.strides()[2] as isize,
                la.strides()[1] as isize,
                b.data.as_ptr().wrapping_add(b0),
                lb.strides()[2] as isize,
                lb.strides()[1] as isize,
                // gemm computes dst := alpha * dst + beta * lhs @ rhs, so
                // its alpha scales the bias (ours is beta) and vice versa.
                beta,
                alpha,
                false,
                false,
                false,
                par,
            );
        }
    };
    let threads = rayon::current_num_threads();
    if batch > 1 && work < PAR_FLOPS && batch * work >= PAR_FLOPS && threads > 1 {
        super::par::chunks_mut(blocks, m * n, &|i, dst| run(i, dst, Parallelism::None));
    } else {
        let par = if work >= PAR_FLOPS && threads > 1 {
            Parallelism::Rayon(0)
        } else {
            Parallelism::None
        };
        for (i, dst) in blocks.chunks_mut(m * n).enumerate() {
            run(i, dst, par);
        }
    }
    // SAFETY: every one of the `len` elements was initialised: read from
    // the bias, zeroed, or written by gemm above.
    unsafe { out.set_len(len) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(a: &[f64], la: &Layout, b: &[f64], lb: &Layout) -> Vec<f64> {
        let (batch, m, k) = (la.dims()[0], la.dims()[1], la.dims()[2]);
        let n = lb.dims()[2];
        let at = |x: &[f64], l: &Layout, i: usize, r: usize, c: usize| {
            let s = l.strides();
            x[l.offset() + i * s[0] + r * s[1] + c * s[2]]
        };
        let mut out = vec![];
        for i in 0..batch {
            for r in 0..m {
                for c in 0..n {
                    out.push(
                        (0..k)
                            .map(|p| at(a, la, i, r, p) * at(b, lb, i, p, c))
                            .sum(),
                    );
                }
            }
        }
        out
    }

    #[test]
    fn transposed_and_broadcast_operands() {
        let a: Vec<f64> = (0..24).map(|v| v as f64 * 0.5 - 3.0).collect();
        // [2, 3, 4] viewed as [2, 4, 3] by swapping the last two dims.
        let la = Layout::contiguous(&[2, 3, 4]).transpose(1, 2);
        let b: Vec<f64> = (0..15).map(|v| v as f64 - 7.0).collect();
        // One [3, 5] matrix shared by both batches.
        let lb = Layout::contiguous(&[1, 3, 5]).broadcast_to(&[2, 3, 5]);
        let out = matmul(
            Operand {
                data: &a,
                layout: &la,
            },
            Operand {
                data: &b,
                layout: &lb,
            },
            None,
            1.0,
            0.0,
        )
        .unwrap();
        assert_eq!(out, reference(&a, &la, &b, &lb));
    }

    #[test]
    fn empty_inner_dim_gives_the_scaled_bias() {
        let la = Layout::contiguous(&[1, 2, 0]);
        let lb = Layout::contiguous(&[1, 0, 3]);
        let c = [1.0f32, 2.0, 3.0];
        let lc = Layout::contiguous(&[3]).broadcast_to(&[1, 2, 3]);
        let out = matmul(
            Operand {
                data: &[],
                layout: &la,
            },
            Operand {
                data: &[],
                layout: &lb,
            },
            Some(Operand {
                data: &c,
                layout: &lc,
            }),
            1.0f32,
            2.0,
        )
        .unwrap();
        assert_eq!(out, vec![2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
    }
    /// Operands of `dims` filled with a fixed pseudo-random pattern.
    fn filled(dims: &[usize], seed: u64) -> (Vec<f32>, Layout) {
        let n: usize = dims.iter().product();
        let mut r = crate::random::SplitMix64::new(seed);
        let v = (0..n).map(|_| (r.uniform() * 4.0 - 2.0) as f32).collect();
        (v, Layout::contiguous(dims))
    }

    fn operand(x: &(Vec<f32>, Layout)) -> Operand<'_, f32> {
        Operand {
            data: &x.0,
            layout: &x.1,
        }
    }

    fn product(a: &(Vec<f32>, Layout), b: &(Vec<f32>, Layout)) -> Vec<f32> {
        matmul(operand(a), operand(b), None, 1.0, 0.0).unwrap()
    }

    fn assert_close(got: &[f32], a: &(Vec<f32>, Layout), b: &(Vec<f32>, Layout)) {
        let wide = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        let want = reference(&wide(&a.0), &a.1, &wide(&b.0), &b.1);
        assert_eq!(got.len(), want.len());
        let k = a.1.dims()[2] as f64;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() <= 4.0 * k * f32::EPSILON as f64 * 4.0,
                "element {i}: {g} against {w}"
            );
        }
    }

    #[test]
    fn a_reused_buffer_is_overwritten_everywhere() {
        // A dropped 4 MB buffer of NaNs waits in the pool; the product of
        // the same size may take it and must write every element.
        crate::cpu::buffer::recycle(vec![f32::NAN; 1024 * 1024]);
        let a = filled(&[1, 1024, 8], 1);
        let b = filled(&[1, 8, 1024], 2);
        assert_close(&product(&a, &b), &a, &b);
    }

    #[test]
    fn batches_split_across_threads_fill_their_own_blocks() {
        // Small products, many of them: each batch runs on its own thread.
        let a = filled(&[64, 32, 32], 3);
        let b = filled(&[64, 32, 32], 4);
        assert_close(&product(&a, &b), &a, &b);
    }

    #[test]
    fn empty_inner_dim_without_bias_gives_zeros() {
        let a = (vec![], Layout::contiguous(&[2, 3, 0]));
        let b = (vec![], Layout::contiguous(&[2, 0, 4]));
        assert_eq!(product(&a, &b), vec![0.0; 24]);
    }
}
