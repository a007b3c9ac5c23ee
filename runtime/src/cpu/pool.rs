//! 2-D pooling on the CPU: each plane of the last two dims gathered
//! through its strides into `f64`, pooled by the catalogue's reference
//! (`tensorfn_core::ops::pool`), one plane per task on rayon's pool.

use super::par;
use crate::dtype::DType;
use crate::layout::Layout;
use tensorfn_core::ops::pool::{pool2d_plane_backward_f64, pool2d_plane_f64, Pool2d};

/// The offset of each plane of `l` (its leading dims, row-major) and the
/// strides of its last two dims.
fn planes(l: &Layout) -> (Vec<usize>, [usize; 2], [usize; 2]) {
    let (d, s) = (l.dims(), l.strides());
    let r = d.len();
    let lead = &d[..r - 2];
    let n: usize = lead.iter().product();
    let mut offs = Vec::with_capacity(n);
    let mut idx = vec![0; lead.len()];
    for _ in 0..n {
        offs.push(l.offset() + idx.iter().zip(s).map(|(i, st)| i * st).sum::<usize>());
        for k in (0..lead.len()).rev() {
            idx[k] += 1;
            if idx[k] < lead[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    (offs, [d[r - 2], d[r - 1]], [s[r - 2], s[r - 1]])
}

fn gather<T: DType>(x: &[T], off: usize, hw: [usize; 2], st: [usize; 2]) -> Vec<f64> {
    let mut v = Vec::with_capacity(hw[0] * hw[1]);
    for h in 0..hw[0] {
        for w in 0..hw[1] {
            v.push(x[off + h * st[0] + w * st[1]].to_f64());
        }
    }
    v
}

/// See `Backend::pool2d`.
pub(crate) fn pool2d<T: DType>(x: &[T], l: &Layout, p: &Pool2d, out: [usize; 2]) -> Vec<T> {
    let (offs, hw, st) = planes(l);
    let per = out[0] * out[1];
    let mut y = vec![T::from_f64(0.0); offs.len() * per];
    if per == 0 {
        return y;
    }
    par::chunks_mut(&mut y, per, &|i, dst| {
        let plane = gather(x, offs[i], hw, st);
        for (d, v) in dst.iter_mut().zip(pool2d_plane_f64(p, &plane, hw, out)) {
            *d = T::from_f64(v);
        }
    });
    y
}

/// See `Backend::pool2d_backward` (`lg` of the result's dims).
pub(crate) fn pool2d_backward<T: DType>(
    (x, lx): (&[T], &Layout),
    (g, lg): (&[T], &Layout),
    p: &Pool2d,
) -> Vec<T> {
    let (offs, hw, st) = planes(lx);
    let (goffs, out, gst) = planes(lg);
    let per = hw[0] * hw[1];
    let mut dx = vec![T::from_f64(0.0); offs.len() * per];
    if per == 0 {
        return dx;
    }
    par::chunks_mut(&mut dx, per, &|i, dst| {
        let plane = gather(x, offs[i], hw, st);
        let gp = gather(g, goffs[i], out, gst);
        for (d, v) in dst
            .iter_mut()
            .zip(pool2d_plane_backward_f64(p, &plane, hw, &gp, out))
        {
            *d = T::from_f64(v);
        }
    });
    dx
}
