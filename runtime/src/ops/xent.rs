//! `cross_entropy` of class logits against class indices, and its
//! backward, each one fused kernel on the CPU and on CUDA.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::{FloatDType, IndexDType};
use crate::error::{Error, Result};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;
use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
use tensorfn_core::rules;

/// The `Err` of a target `k` that is neither a class of `0..classes` nor
/// `ignore_index`.
fn bad_target(op: &str, k: i64, classes: usize, ignore_index: i64) -> Error {
    let valid = if classes == 0 {
        "there are no classes, so only `ignore_index` is valid".to_string()
    } else {
        format!("valid targets are 0..={}", classes - 1)
    };
    Error::Index(format!(
        "{op}: target {k} in `target` is out of range for {classes} classes: {valid}, or `ignore_index` ({ignore_index})"
    ))
}

fn check_args(op: &str, args: &CrossEntropyArgs) -> Result<()> {
    args.check().map_err(|m| {
        Error::shape(
            op,
            "`label_smoothing` in [0, 1]",
            m.trim_start_matches("cross_entropy: ").to_string(),
        )
    })
}

impl<D: Device, T: FloatDType, N: Dim, C: Dim> Tensor<D, T, (N, C)> {
    /// The cross-entropy loss of the class logits `self` (`[N, C]`)
    /// against the class indices `target` (`[N]`, `i64` or `i32`), as
    /// PyTorch's `F.cross_entropy`: per row `logsumexp(x) - x[target]`
    /// (with `label_smoothing = s`: `(1 - s)` of that plus `s / C` of the
    /// sum over every class of `logsumexp(x) - x[c]`), rows whose target
    /// is `ignore_index` left out, then `reduction`: the mean over the
    /// rows not ignored (NaN if there are none, as PyTorch), the sum, or
    /// `"none"`, one loss per row. The result type `SO` is `[]` for a mean
    /// or a sum and `[N]` for `Reduction::None` (checked at run time).
    ///
    /// One fused pass over the rows: the max, the log-sum-exp and the
    /// target's logit per row, accumulated in f32 for f16 and bf16 (f64
    /// for f64), with no `[N, C]` temporary. A target outside `0..C` that
    /// is not `ignore_index` is an `Err` on every device (a row with a
    /// NaN or an infinite logit gives NaN, as PyTorch's `log_softmax`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, CrossEntropyArgs, Reduction};
    /// let logits = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![0., 0., 0., 0., 10., 0.]).unwrap();
    /// let target = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![2, 1]).unwrap();
    /// let mean: Tensor<Cpu, f32, shape![]> = logits.cross_entropy(&target, Default::default()).unwrap();
    /// let want = (3f32.ln() + (1. + 2. * (-10f32).exp()).ln()) / 2.;
    /// assert!((mean.to_vec().unwrap()[0] - want).abs() < 1e-6);
    /// let args = CrossEntropyArgs { reduction: Reduction::None, ignore_index: 1, ..Default::default() };
    /// let rows: Tensor<Cpu, f32, shape![2]> = logits.cross_entropy(&target, args).unwrap();
    /// assert_eq!(rows.to_vec().unwrap()[1], 0.); // ignored
    /// let bad = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![3, 0]).unwrap();
    /// let e = logits.cross_entropy::<shape![], _>(&bad, Default::default()).unwrap_err();
    /// assert!(e.to_string().contains("target 3 in `target` is out of range for 3 classes"));
    /// ```
    ///
    /// Targets of another length, or float targets, do not compile:
    ///
    /// ```compile_fail,E0308
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let logits = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// let target = Tensor::<Cpu, i64, shape![3]>::zeros().unwrap();
    /// let _ = logits.cross_entropy::<shape![], _>(&target, Default::default());
    /// ```
    pub fn cross_entropy<SO: Shape, I: IndexDType>(
        &self,
        target: &Tensor<D, I, (N,)>,
        args: CrossEntropyArgs,
    ) -> Result<Tensor<D, T, SO>> {
        let op = "cross_entropy";
        check_args(op, &args)?;
        let dims = rules::cross_entropy(
            op,
            ("input", self.dims()),
            ("target", target.dims()),
            args.reduction == Reduction::None,
        )?;
        let classes = self.dims()[1];
        let storage = dispatch!(D, |be| {
            match be.cross_entropy(
                (be.buf(&self.storage), &self.layout),
                (be.buf(&target.storage), &target.layout),
                args,
            )? {
                Ok(out) => be.wrap(out),
                Err(k) => return Err(bad_target(op, k, classes, args.ignore_index)),
            }
        });
        output(storage, &dims)
    }

    /// The gradient of [`cross_entropy`](Self::cross_entropy) with respect
    /// to the logits `self`, given the gradient `grad_output` of its
    /// result (`[]` for a mean or a sum, `[N]` for `Reduction::None`) and
    /// the same `target` and `args`: per row
    /// `(softmax(x) - (1 - s) * onehot(target) - s / C) * g`, where `g` is
    /// the row's gradient (divided by the number of rows not ignored for
    /// a mean), and 0 on ignored rows. One fused pass over the rows, no
    /// temporary; the errors of the forward, and an `Err` for a
    /// `grad_output` of the wrong shape.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let logits = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![0., 0.]).unwrap();
    /// let target = Tensor::<Cpu, i32, shape![1]>::from_vec(vec![1]).unwrap();
    /// let one = Tensor::<Cpu, f64, shape![]>::from_vec(vec![1.]).unwrap();
    /// let d = logits.cross_entropy_backward(&target, &one, Default::default()).unwrap();
    /// assert_eq!(d.to_vec().unwrap(), vec![0.5, -0.5]);
    /// ```
    pub fn cross_entropy_backward<I: IndexDType, SG: Shape>(
        &self,
        target: &Tensor<D, I, (N,)>,
        grad_output: &Tensor<D, T, SG>,
        args: CrossEntropyArgs,
    ) -> Result<Self> {
        let op = "cross_entropy_backward";
        check_args(op, &args)?;
        let per_row = args.reduction == Reduction::None;
        let want = rules::cross_entropy(
            op,
            ("input", self.dims()),
            ("target", target.dims()),
            per_row,
        )?;
        if grad_output.dims() != want.as_slice() {
            return Err(Error::shape(
                op,
                format!(
                    "`grad_output` of the loss's shape {want:?} (reduction \"{}\")",
                    args.reduction.name()
                ),
                format!("{:?}", grad_output.dims()),
            ));
        }
        let classes = self.dims()[1];
        let storage = dispatch!(D, |be| {
            match be.cross_entropy_backward(
                (be.buf(&self.storage), &self.layout),
                (be.buf(&target.storage), &target.layout),
                (be.buf(&grad_output.storage), &grad_output.layout),
                args,
            )? {
                Ok(out) => be.wrap(out),
                Err(k) => return Err(bad_target(op, k, classes, args.ignore_index)),
            }
        });
        output(storage, self.dims())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, Dyn, Tensor};
    use half::{bf16, f16};
    use tensorfn_core::ops::xent::{cross_entropy_f64, CrossEntropyArgs, Reduction};

    type Logits<T> = Tensor<Cpu, T, (Dyn, Dyn)>;
    type Targets = Tensor<Cpu, i64, (Dyn,)>;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Fresh logits (rounded to `T`) and targets with some rows ignored.
    fn case<T: crate::dtype::FloatDType>(
        rng: &mut Rng,
        n: usize,
        c: usize,
        ignore: i64,
    ) -> (Vec<f64>, Vec<i64>) {
        let x: Vec<f64> = (0..n * c)
            .map(|_| T::from_f64(8.0 * rng.unit() - 4.0).to_f64())
            .collect();
        let t: Vec<i64> = (0..n)
            .map(|_| {
                if rng.below(5) == 0 {
                    ignore
                } else {
                    rng.below(c.max(1)) as i64
                }
            })
            .collect();
        (x, t)
    }

    fn tensors<T: crate::dtype::FloatDType>(
        x: &[f64],
        t: &[i64],
        c: usize,
    ) -> (Logits<T>, Targets) {
        let n = t.len();
        let xt = Logits::<T>::from_vec_dims(x.iter().map(|&v| T::from_f64(v)).collect(), &[n, c]);
        (
            xt.unwrap(),
            Targets::from_vec_dims(t.to_vec(), &[n]).unwrap(),
        )
    }

    fn close(got: f64, want: f64, tol: f64) -> bool {
        (got.is_nan() && want.is_nan())
            || got == want
            || (got - want).abs() <= tol * want.abs().max(1.0)
    }

    fn forward<T: crate::dtype::FloatDType>(tol: f64) {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ T::KIND.size_bytes() as u64);
        for &(n, c) in &[(0, 5), (1, 1), (3, 1), (7, 13), (33, 300), (4, 3000)] {
            for reduction in Reduction::ALL {
                for &(ignore, s) in &[(-100, 0.0), (2, 0.1), (0, 1.0)] {
                    let (x, t) = case::<T>(&mut rng, n, c, ignore);
                    let (xt, tt) = tensors::<T>(&x, &t, c);
                    let args = CrossEntropyArgs {
                        reduction,
                        ignore_index: ignore,
                        label_smoothing: s,
                    };
                    let want = cross_entropy_f64(&x, c, &t, reduction, ignore, s).unwrap();
                    let got: Vec<f64> = if reduction == Reduction::None {
                        let y: Tensor<Cpu, T, (Dyn,)> = xt.cross_entropy(&tt, args).unwrap();
                        y.to_vec().unwrap().iter().map(|v| v.to_f64()).collect()
                    } else {
                        let y: Tensor<Cpu, T, ()> = xt.cross_entropy(&tt, args).unwrap();
                        y.to_vec().unwrap().iter().map(|v| v.to_f64()).collect()
                    };
                    assert_eq!(got.len(), want.len());
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            close(*g, *w, tol),
                            "{} n={n} c={c} {reduction:?} ignore={ignore} s={s}: {g} against {w}",
                            T::KIND
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn forward_matches_the_f64_reference() {
        forward::<f64>(1e-13);
        forward::<f32>(2e-6);
        forward::<f16>(2e-3);
        forward::<bf16>(1e-2);
    }

    #[test]
    fn edges_follow_pytorch() {
        let inf = f64::INFINITY;
        let rows = [
            (vec![inf, 0.0], 1),
            (vec![-inf, -inf], 0),
            (vec![f64::NAN, 1.0], 1),
            (vec![-inf, 2.0], 1),
            (vec![0.0, -0.0], 0),
        ];
        for (row, t) in rows {
            let (xt, tt) = tensors::<f32>(&row, &[t], 2);
            let args = CrossEntropyArgs {
                reduction: Reduction::None,
                ..Default::default()
            };
            let y: Tensor<Cpu, f32, (Dyn,)> = xt.cross_entropy(&tt, args).unwrap();
            let want = cross_entropy_f64(&row, 2, &[t], Reduction::None, -100, 0.0).unwrap();
            let got = y.to_vec().unwrap()[0] as f64;
            assert!(close(got, want[0], 1e-6), "{row:?}: {got} against {want:?}");
        }
        // A -inf logit away from the target costs nothing.
        let (xt, tt) = tensors::<f64>(&[-inf, 2.0], &[1], 2);
        let y: Tensor<Cpu, f64, ()> = xt.cross_entropy(&tt, Default::default()).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![0.0]);
        // Every row ignored: the mean is NaN, the sum 0.
        let (xt, tt) = tensors::<f32>(&[1.0, 2.0, 3.0, 4.0], &[-100, -100], 2);
        let y: Tensor<Cpu, f32, ()> = xt.cross_entropy(&tt, Default::default()).unwrap();
        assert!(y.to_vec().unwrap()[0].is_nan());
        let sum = CrossEntropyArgs {
            reduction: Reduction::Sum,
            ..Default::default()
        };
        let y: Tensor<Cpu, f32, ()> = xt.cross_entropy(&tt, sum).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![0.0]);
        // No rows: NaN mean, empty per-row losses.
        let (xt, tt) = tensors::<f32>(&[], &[], 4);
        let y: Tensor<Cpu, f32, ()> = xt.cross_entropy(&tt, Default::default()).unwrap();
        assert!(y.to_vec().unwrap()[0].is_nan());
    }

    #[test]
    fn bad_targets_and_arguments_are_errors() {
        let (xt, _) = tensors::<f32>(&[1.0, 2.0, 3.0, 4.0], &[0, 0], 2);
        for bad in [2, -1, -100] {
            let tt = Targets::from_vec_dims(vec![0, bad], &[2]).unwrap();
            let args = CrossEntropyArgs {
                ignore_index: 7,
                ..Default::default()
            };
            let e = xt
                .cross_entropy::<(), _>(&tt, args)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "target {bad} in `target` is out of range for 2 classes"
                )),
                "{e}"
            );
            let one = Tensor::<Cpu, f32, ()>::from_vec(vec![1.0]).unwrap();
            let e = xt
                .cross_entropy_backward(&tt, &one, args)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("target {bad} in `target`")), "{e}");
        }
        let tt = Targets::from_vec_dims(vec![0, 1], &[2]).unwrap();
        let args = CrossEntropyArgs {
            label_smoothing: -0.5,
            ..Default::default()
        };
        let e = xt
            .cross_entropy::<(), _>(&tt, args)
            .unwrap_err()
            .to_string();
        assert!(e.contains("label_smoothing"), "{e}");
        // The result type must fit the reduction.
        assert!(xt
            .cross_entropy::<(Dyn,), _>(&tt, Default::default())
            .is_err());
        let rows = Tensor::<Cpu, f32, (Dyn,)>::from_vec_dims(vec![1.0, 1.0], &[2]).unwrap();
        let e = xt
            .cross_entropy_backward(&tt, &rows, Default::default())
            .unwrap_err();
        assert!(e.to_string().contains("grad_output"), "{e}");
    }

    /// The backward against central differences of the `f64` forward.
    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for &(n, c) in &[(1, 1), (5, 7), (3, 40)] {
            for reduction in Reduction::ALL {
                for &(ignore, s) in &[(-100, 0.0), (1, 0.2)] {
                    let (x, t) = case::<f64>(&mut rng, n, c, ignore);
                    if reduction == Reduction::Mean && t.iter().all(|&k| k == ignore) {
                        continue;
                    }
                    let args = CrossEntropyArgs {
                        reduction,
                        ignore_index: ignore,
                        label_smoothing: s,
                    };
                    let gs: Vec<f64> = match reduction {
                        Reduction::None => (0..n).map(|_| 2.0 * rng.unit() - 1.0).collect(),
                        _ => vec![1.5],
                    };
                    // L = sum(g * loss).
                    let loss = |x: &[f64]| -> f64 {
                        let l = cross_entropy_f64(x, c, &t, reduction, ignore, s).unwrap();
                        l.iter().zip(&gs).map(|(l, g)| l * g).sum()
                    };
                    let (xt, tt) = tensors::<f64>(&x, &t, c);
                    let got = if reduction == Reduction::None {
                        let g =
                            Tensor::<Cpu, f64, (Dyn,)>::from_vec_dims(gs.clone(), &[n]).unwrap();
                        xt.cross_entropy_backward(&tt, &g, args).unwrap()
                    } else {
                        let g = Tensor::<Cpu, f64, ()>::from_vec(gs.clone()).unwrap();
                        xt.cross_entropy_backward(&tt, &g, args).unwrap()
                    }
                    .to_vec()
                    .unwrap();
                    let h = 1e-6;
                    for i in 0..n * c {
                        let (mut a, mut b) = (x.clone(), x.clone());
                        a[i] += h;
                        b[i] -= h;
                        let want = (loss(&a) - loss(&b)) / (2.0 * h);
                        assert!(
                            (got[i] - want).abs() < 1e-7,
                            "n={n} c={c} {reduction:?} s={s} element {i}: {} against {want}",
                            got[i]
                        );
                    }
                }
            }
        }
    }

    /// 16-bit and f32 backward against the f64 backward of the same values.
    #[test]
    fn backward_in_every_float_dtype() {
        fn check<T: crate::dtype::FloatDType>(tol: f64) {
            let mut rng = Rng(77);
            let (n, c) = (9, 130);
            for &(ignore, s) in &[(-100, 0.0), (3, 0.1)] {
                let (x, t) = case::<T>(&mut rng, n, c, ignore);
                let args = CrossEntropyArgs {
                    reduction: Reduction::Sum,
                    ignore_index: ignore,
                    label_smoothing: s,
                };
                let (x64, tt) = tensors::<f64>(&x, &t, c);
                let (xt, _) = tensors::<T>(&x, &t, c);
                let g64 = Tensor::<Cpu, f64, ()>::from_vec(vec![0.75]).unwrap();
                let g = Tensor::<Cpu, T, ()>::from_vec(vec![T::from_f64(0.75)]).unwrap();
                let want = x64
                    .cross_entropy_backward(&tt, &g64, args)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                let got = xt
                    .cross_entropy_backward(&tt, &g, args)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let g = g.to_f64();
                    assert!(
                        (g - w).abs() <= tol * w.abs().max(1.0 / c as f64),
                        "{} {i}: {g} against {w}",
                        T::KIND
                    );
                }
            }
        }
        check::<f32>(1e-5);
        check::<f16>(2e-3);
        check::<bf16>(1e-2);
    }
}
