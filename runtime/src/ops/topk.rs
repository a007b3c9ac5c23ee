//! `topk` along the last dim: the `k` largest (or smallest) elements of
//! each row and their positions, one kernel on the CPU and on CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::NumDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;

impl<D: Device, T: NumDType, S: Shape> Tensor<D, T, S> {
    /// The `k` largest elements along the last dim and their positions
    /// (`i64`), largest first, as PyTorch's `torch.topk(x, k)` (its
    /// defaults `dim = -1`, `largest = True`, `sorted = True`): NaN counts
    /// as larger than every number (as PyTorch), equal elements come in
    /// the order of their positions. The result type `SO` is `self`'s dims
    /// with the last one `k` (checked at run time); a `k` larger than the
    /// last dim, or a scalar `self`, is an `Err`.
    ///
    /// On the GPU each row is one block making `k` passes of a block-wide
    /// arg-max over the row (each pass skips what the earlier ones picked),
    /// so a row of `V` elements costs `k * V` reads: meant for sampling's
    /// small `k` over a vocabulary (`[B, 50257]` logits), not for a `k`
    /// near `V`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![1., 5., 3., 5., f32::NAN, 0., -1., 2.]).unwrap();
    /// let (v, i) = x.topk::<shape![2, 2]>(2).unwrap();
    /// assert_eq!(i.to_vec().unwrap(), vec![1, 3, 0, 3]);
    /// let v = v.to_vec().unwrap();
    /// assert_eq!(v[..2], [5., 5.]);
    /// assert!(v[2].is_nan() && v[3] == 2.);
    /// assert!(x.topk::<shape![2, 5]>(5).is_err());
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn topk<SO: Shape>(&self, k: usize) -> Result<(Tensor<D, T, SO>, Tensor<D, i64, SO>)> {
        self.pick(k, true)
    }

    /// The `k` smallest elements along the last dim and their positions
    /// (`i64`), smallest first, as PyTorch's `torch.topk(x, k,
    /// largest=False)`: NaN counts as larger than every number (as
    /// PyTorch), so it is picked only after every number and `+inf`;
    /// equal elements come in the order of their positions. Result type
    /// and errors as [`topk`](Self::topk), and the same kernel cost on
    /// the GPU.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![1., -5., 3., -5., f32::NAN, 0., f32::INFINITY, 2.]).unwrap();
    /// let (v, i) = x.topk_smallest::<shape![2, 3]>(3).unwrap();
    /// assert_eq!(i.to_vec().unwrap(), vec![1, 3, 0, 1, 3, 2]);
    /// assert_eq!(v.to_vec().unwrap(), vec![-5., -5., 1., 0., 2., f32::INFINITY]);
    /// let (v, _) = x.topk_smallest::<shape![2, 4]>(4).unwrap();
    /// assert!(v.to_vec().unwrap()[7].is_nan());
    /// assert!(x.topk_smallest::<shape![2, 5]>(5).is_err());
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn topk_smallest<SO: Shape>(
        &self,
        k: usize,
    ) -> Result<(Tensor<D, T, SO>, Tensor<D, i64, SO>)> {
        self.pick(k, false)
    }

    /// [`topk`](Self::topk) (`largest`) or
    /// [`topk_smallest`](Self::topk_smallest).
    #[allow(clippy::type_complexity)]
    fn pick<SO: Shape>(
        &self,
        k: usize,
        largest: bool,
    ) -> Result<(Tensor<D, T, SO>, Tensor<D, i64, SO>)> {
        let last = self.dims().len().saturating_sub(1);
        let dims = rules::topk("topk", ("input", self.dims()), last, &k)?;
        SO::check(&dims)?;
        let (values, indices) = dispatch!(D, |be| {
            let (v, i) = be.topk(be.buf(&self.storage), &self.layout, k, largest)?;
            (be.wrap(v), be.wrap(i))
        });
        Ok((output(values, &dims)?, output(indices, &dims)?))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, Dyn, Tensor};
    use half::bf16;

    /// `topk` of every row by a plain sort of `(value, position)` pairs:
    /// NaN larger than every number, equal values in order of position.
    fn reference(x: &[f64], cols: usize, k: usize, largest: bool) -> (Vec<f64>, Vec<i64>) {
        let mut vals = Vec::new();
        let mut idx = Vec::new();
        for row in x.chunks(cols.max(1)) {
            let mut p: Vec<usize> = (0..row.len()).collect();
            // NaN as a value above +inf, in a total order on (rank, value).
            let key = |i: usize| (row[i].is_nan(), if row[i].is_nan() { 0.0 } else { row[i] });
            p.sort_by(|&a, &b| {
                let (ka, kb) = (key(a), key(b));
                let o = ka.0.cmp(&kb.0).then(ka.1.partial_cmp(&kb.1).unwrap());
                if largest { o.reverse() } else { o }.then(a.cmp(&b))
            });
            for &i in &p[..k] {
                vals.push(row[i]);
                idx.push(i as i64);
            }
        }
        (vals, idx)
    }

    /// `topk` (`largest`) or `topk_smallest` of `t`.
    #[allow(clippy::type_complexity)]
    fn pick<T: crate::dtype::NumDType>(
        t: &Tensor<Cpu, T, (Dyn, Dyn)>,
        k: usize,
        largest: bool,
    ) -> (Tensor<Cpu, T, (Dyn, Dyn)>, Tensor<Cpu, i64, (Dyn, Dyn)>) {
        if largest {
            t.topk(k).unwrap()
        } else {
            t.topk_smallest(k).unwrap()
        }
    }

    #[test]
    fn matches_a_sort_in_float_and_integer_dtypes() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for &(rows, cols, k) in &[
            (1, 1, 1),
            (3, 7, 3),
            (2, 50, 50),
            (4, 1000, 17),
            (0, 5, 2),
            (3, 4, 0),
        ] {
            // Few distinct values, so ties are common; NaN and ±inf among them.
            let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0];
            let x: Vec<f64> = (0..rows * cols)
                .map(|_| {
                    let r = next();
                    if r % 11 == 0 {
                        specials[(r >> 8) as usize % 4]
                    } else {
                        ((r >> 20) % 9) as f64 - 4.0
                    }
                })
                .collect();
            for largest in [true, false] {
                let what = format!("[{rows}, {cols}] k={k} largest={largest}");
                let (wv, wi) = reference(&x, cols, k, largest);
                let t = Tensor::<Cpu, f64, (Dyn, Dyn)>::from_vec_dims(x.clone(), &[rows, cols])
                    .unwrap();
                let (v, i) = pick(&t, k, largest);
                assert_eq!(i.to_vec().unwrap(), wi, "{what}");
                let v = v.to_vec().unwrap();
                for (g, w) in v.iter().zip(&wv) {
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{what}: {g} against {w}"
                    );
                }
                let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
                let tb = Tensor::<Cpu, bf16, (Dyn, Dyn)>::from_vec_dims(b, &[rows, cols]).unwrap();
                assert_eq!(pick(&tb, k, largest).1.to_vec().unwrap(), wi, "{what}");
                let finite: Vec<i64> = x
                    .iter()
                    .map(|&v| if v.is_finite() { v as i64 } else { 7 })
                    .collect();
                let (wv, wi) = reference(
                    &finite.iter().map(|&v| v as f64).collect::<Vec<_>>(),
                    cols,
                    k,
                    largest,
                );
                let ti =
                    Tensor::<Cpu, i64, (Dyn, Dyn)>::from_vec_dims(finite, &[rows, cols]).unwrap();
                let (v, i) = pick(&ti, k, largest);
                assert_eq!(i.to_vec().unwrap(), wi, "{what}");
                assert_eq!(
                    v.to_vec().unwrap(),
                    wv.iter().map(|&v| v as i64).collect::<Vec<_>>()
                );
            }
        }
        // A strided view: the columns of a transposed matrix.
        let t =
            Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(vec![1., 4., 2., 3., 0., 5.], &[3, 2])
                .unwrap();
        let (v, i) = t.t().unwrap().topk::<(Dyn, Dyn)>(2).unwrap();
        assert_eq!(v.to_vec().unwrap(), vec![2., 1., 5., 4.]);
        assert_eq!(i.to_vec().unwrap(), vec![1, 0, 2, 0]);
        let (v, i) = t.t().unwrap().topk_smallest::<(Dyn, Dyn)>(2).unwrap();
        assert_eq!(v.to_vec().unwrap(), vec![0., 1., 3., 4.]);
        assert_eq!(i.to_vec().unwrap(), vec![2, 0, 1, 0]);
    }

    #[test]
    fn a_k_past_the_dim_or_a_scalar_is_an_error() {
        let t = Tensor::<Cpu, f32, (Dyn,)>::from_vec_dims(vec![1., 2.], &[2]).unwrap();
        let e = t.topk::<(Dyn,)>(3).unwrap_err().to_string();
        assert!(e.contains("`k` at most 2"), "{e}");
        let e = t.topk_smallest::<(Dyn,)>(3).unwrap_err().to_string();
        assert!(e.contains("`k` at most 2"), "{e}");
        let s = Tensor::<Cpu, f32, ()>::from_vec(vec![1.]).unwrap();
        assert!(s.topk::<()>(1).is_err());
        assert!(t.topk::<(Dyn, Dyn)>(1).is_err());
    }
}
