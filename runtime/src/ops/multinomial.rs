//! Seeded `multinomial` along the last dim: categories drawn from rows of
//! non-negative weights, the same indices on the CPU and on CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::Result;
use crate::shape::Shape;
use crate::tensor::Tensor;
use tensorfn_core::rules;

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// PyTorch's `torch.multinomial(probs, num_samples, replacement)`,
    /// seeded: each row along the last dim of `self` (`probs`, `[.., K]`)
    /// holds non-negative weights, not necessarily normalised, and
    /// `num_samples` category indices (`i64`) are drawn from it, with
    /// `replacement` or without (then each draw zeroes its category's
    /// weight, so a row's draws are distinct). The result type `SO` is
    /// `self`'s dims with the last one `num_samples` (checked at run time).
    ///
    /// The draws are a function of `seed` and their position (the
    /// generator of `dropout`), the same on every device, so a new seed
    /// per step draws anew; they are not PyTorch's (its generator is a
    /// stateful stream), the distribution is. An `Err` for a negative, NaN
    /// or infinite weight, a row of zeros, `num_samples` 0, or more draws
    /// without replacement than the row has positive weights. On the GPU
    /// one thread draws a row, `K` reads per draw: meant for sampling a
    /// few tokens from `[B, vocab]` probabilities.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let p = Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![0., 1., 0., 3., 5., 0., 0., 0.]).unwrap();
    /// let i = p.multinomial::<shape![2, 3]>(3, true, 7).unwrap().to_vec().unwrap();
    /// assert!(i[..3].iter().all(|&c| c == 1 || c == 3)); // never a zero weight
    /// assert_eq!(i[3..], [0, 0, 0]);
    /// assert_eq!(p.multinomial::<shape![2, 3]>(3, true, 7).unwrap().to_vec().unwrap(), i); // same seed
    /// let j = p.multinomial::<shape![2, 1]>(1, false, 7).unwrap().to_vec().unwrap();
    /// assert_eq!(j[1], 0);
    /// assert!(p.multinomial::<shape![2, 2]>(2, false, 7).is_err()); // row 1 has one positive weight
    /// ```
    pub fn multinomial<SO: Shape>(
        &self,
        num_samples: usize,
        replacement: bool,
        seed: usize,
    ) -> Result<Tensor<D, i64, SO>> {
        let dims = rules::multinomial(
            "multinomial",
            ("probs", self.dims()),
            &num_samples,
            replacement,
        )?;
        SO::check(&dims)?;
        let storage = dispatch!(D, |be| be.wrap(be.multinomial::<T>(
            be.buf(&self.storage),
            &self.layout,
            num_samples,
            replacement,
            seed as u64
        )?));
        output(storage, &dims)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, Dyn, Tensor};
    use half::bf16;

    /// Draws of `rows` copies of the row `w` (as `[rows, K]`).
    fn draws(w: &[f64], rows: usize, n: usize, replacement: bool, seed: usize) -> Vec<i64> {
        let x: Vec<f64> = (0..rows).flat_map(|_| w.iter().copied()).collect();
        let t = Tensor::<Cpu, f64, (Dyn, Dyn)>::from_vec_dims(x, &[rows, w.len()]).unwrap();
        t.multinomial::<(Dyn, Dyn)>(n, replacement, seed)
            .unwrap()
            .to_vec()
            .unwrap()
    }

    /// Pearson's chi-square of `counts` against probabilities `p`
    /// (categories of probability 0 must have no counts).
    fn chi_square(counts: &[usize], p: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(p)
            .map(|(&c, &p)| {
                if p == 0.0 {
                    assert_eq!(c, 0, "a category of probability 0 drawn");
                    0.0
                } else {
                    let e = p * n as f64;
                    (c as f64 - e).powi(2) / e
                }
            })
            .sum()
    }

    fn counts(idx: impl Iterator<Item = i64>, k: usize) -> Vec<usize> {
        let mut c = vec![0; k];
        for i in idx {
            c[i as usize] += 1;
        }
        c
    }

    // Chi-square bounds at p = 0.001: 4 degrees of freedom 18.47.
    const CHI2_4DF: f64 = 18.47;

    #[test]
    fn draws_follow_the_weights_with_replacement() {
        let w = [1.0, 2.5, 0.0, 3.0, 0.5, 3.0];
        let total: f64 = w.iter().sum();
        let p: Vec<f64> = w.iter().map(|v| v / total).collect();
        let idx = draws(&w, 2000, 50, true, 11);
        let x2 = chi_square(&counts(idx.into_iter(), w.len()), &p);
        assert!(x2 < CHI2_4DF, "chi-square {x2}");
    }

    #[test]
    fn draws_without_replacement_are_distinct_and_follow_the_weights() {
        let w = [1.0, 2.5, 0.0, 3.0, 0.5, 3.0];
        let total: f64 = w.iter().sum();
        let rows = 40_000;
        let idx = draws(&w, rows, 3, false, 5);
        for r in idx.chunks(3) {
            assert!(r[0] != r[1] && r[1] != r[2] && r[0] != r[2], "{r:?}");
        }
        // The first draw follows the weights; the second, the weights
        // without the first's category.
        let p1: Vec<f64> = w.iter().map(|v| v / total).collect();
        let p2: Vec<f64> = (0..w.len())
            .map(|c| {
                (0..w.len())
                    .filter(|&a| a != c)
                    .map(|a| w[a] / total * w[c] / (total - w[a]))
                    .sum()
            })
            .collect();
        let first = counts(idx.iter().step_by(3).copied(), w.len());
        let second = counts(idx.iter().skip(1).step_by(3).copied(), w.len());
        let (a, b) = (chi_square(&first, &p1), chi_square(&second, &p2));
        assert!(a < CHI2_4DF && b < CHI2_4DF, "chi-square {a}, {b}");
        // Every positive category, drawn without replacement: all of them.
        let all = draws(&w, 3, 5, false, 9);
        for r in all.chunks(5) {
            let mut r = r.to_vec();
            r.sort();
            assert_eq!(r, vec![0, 1, 3, 4, 5]);
        }
    }

    #[test]
    fn a_seed_gives_the_same_draws_in_every_dtype_and_view() {
        let w = [0.25, 1.0, 0.5, 2.0];
        let a = draws(&w, 8, 6, true, 3);
        assert_eq!(a, draws(&w, 8, 6, true, 3));
        assert_ne!(a, draws(&w, 8, 6, true, 4));
        // The weights are exact in bf16 and as a transposed view.
        let x: Vec<bf16> = (0..8)
            .flat_map(|_| w.iter().map(|&v| bf16::from_f64(v)))
            .collect();
        let t = Tensor::<Cpu, bf16, (Dyn, Dyn)>::from_vec_dims(x, &[8, 4]).unwrap();
        assert_eq!(
            t.multinomial::<(Dyn, Dyn)>(6, true, 3)
                .unwrap()
                .to_vec()
                .unwrap(),
            a
        );
        let cols: Vec<f32> = (0..4)
            .flat_map(|c| (0..8).map(move |_| w[c] as f32))
            .collect();
        let t = Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(cols, &[4, 8]).unwrap();
        let tt = t.t().unwrap();
        assert_eq!(
            tt.multinomial::<(Dyn, Dyn)>(6, true, 3)
                .unwrap()
                .to_vec()
                .unwrap(),
            a
        );
        // Empty leading dims draw nothing.
        let e = Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(vec![], &[0, 4]).unwrap();
        let d = e.multinomial::<(Dyn, Dyn)>(2, false, 1).unwrap();
        assert_eq!(d.dims(), &[0, 2]);
    }

    #[test]
    fn bad_weights_and_counts_are_errors_naming_the_operand() {
        let t = |v: Vec<f32>| Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(v, &[2, 3]).unwrap();
        let err = |v: Vec<f32>, n: usize, rep: bool| {
            t(v).multinomial::<(Dyn, Dyn)>(n, rep, 1)
                .unwrap_err()
                .to_string()
        };
        let ok = vec![1., 2., 3., 4., 5., 6.];
        for bad in [-1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v = ok.clone();
            v[4] = bad;
            let e = err(v, 1, true);
            assert!(e.contains("weight in `probs`"), "{bad}: {e}");
        }
        let e = err(vec![1., 2., 3., 0., 0., -0.], 1, true);
        assert!(e.contains("all zero"), "{e}");
        let e = err(vec![1., 2., 3., 0., 5., 0.], 2, false);
        assert!(e.contains("fewer positive weights"), "{e}");
        let e = err(ok.clone(), 4, false);
        assert!(e.contains("`num_samples` at most 3"), "{e}");
        assert!(t(ok.clone()).multinomial::<(Dyn, Dyn)>(4, true, 1).is_ok());
        let e = err(ok, 0, true);
        assert!(e.contains("`num_samples` of 1 or more"), "{e}");
        let s = Tensor::<Cpu, f32, ()>::from_vec(vec![1.]).unwrap();
        assert!(s.multinomial::<()>(1, true, 1).is_err());
        let z = Tensor::<Cpu, f32, (Dyn, Dyn)>::from_vec_dims(vec![], &[2, 0]).unwrap();
        assert!(z.multinomial::<(Dyn, Dyn)>(1, true, 1).is_err());
        // A total past f64's range is an infinite weight in all but name.
        let big =
            Tensor::<Cpu, f64, (Dyn,)>::from_vec_dims(vec![f64::MAX, f64::MAX], &[2]).unwrap();
        assert!(big.multinomial::<(Dyn,)>(1, true, 1).is_err());
    }
}
