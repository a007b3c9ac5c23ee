//! `cross_entropy` of class logits against class indices, and its
//! backward, each one fused kernel on the CPU and on CUDA; PyTorch's
//! K-dimensional form (classes in dim 1) runs the same kernels on the
//! logits with their classes moved last.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::{FloatDType, IndexDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Dim, Dyn, Shape};
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

/// The checks every cross-entropy entry makes before it runs: `args`
/// (`label_smoothing` in [0, 1]), the logits' and the targets' dims
/// (`rules::cross_entropy`, the rule `tensor_fn!` checks at compile time)
/// and, for a backward, `grad_output`'s dims against the loss's. The
/// loss's dims.
fn check_xent_args(
    op: &str,
    args: &CrossEntropyArgs,
    (input, target): (&[usize], &[usize]),
    grad_output: Option<&[usize]>,
) -> Result<Vec<usize>> {
    args.check().map_err(|m| {
        Error::shape(
            op,
            "`label_smoothing` in [0, 1]",
            m.trim_start_matches("cross_entropy: ").to_string(),
        )
    })?;
    let dims = rules::cross_entropy(
        op,
        ("input", input),
        ("target", target),
        args.reduction == Reduction::None,
    )?;
    match grad_output {
        Some(g) if g != dims.as_slice() => Err(Error::shape(
            op,
            format!(
                "`grad_output` of the loss's shape {dims:?} (reduction \"{}\")",
                args.reduction.name()
            ),
            format!("{g:?}"),
        )),
        _ => Ok(dims),
    }
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
        let dims = check_xent_args(op, &args, (self.dims(), target.dims()), None)?;
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
        check_xent_args(
            op,
            &args,
            (self.dims(), target.dims()),
            Some(grad_output.dims()),
        )?;
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
    /// The loss of [`cross_entropy`](Self::cross_entropy) and its
    /// gradient with respect to the logits for a gradient of 1 on the
    /// loss (the values [`cross_entropy_backward`](Self::cross_entropy_backward)
    /// gives with a `grad_output` of ones), from one pass over the logits:
    /// the step of training where the loss is differentiated at once. The
    /// gradient is written over the logits, so `self` is taken by value
    /// and no second `[N, C]` buffer is made (unless its storage is
    /// shared with another tensor, which then keeps its values). The
    /// errors of the forward.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let logits = Tensor::<Cpu, f64, shape![1, 2]>::from_vec(vec![0., 0.]).unwrap();
    /// let target = Tensor::<Cpu, i32, shape![1]>::from_vec(vec![1]).unwrap();
    /// let (loss, d) = logits
    ///     .cross_entropy_with_grad::<shape![], _>(&target, Default::default())
    ///     .unwrap();
    /// assert_eq!(loss.to_vec().unwrap(), vec![std::f64::consts::LN_2]);
    /// assert_eq!(d.to_vec().unwrap(), vec![0.5, -0.5]);
    /// ```
    pub fn cross_entropy_with_grad<SO: Shape, I: IndexDType>(
        mut self,
        target: &Tensor<D, I, (N,)>,
        args: CrossEntropyArgs,
    ) -> Result<(Tensor<D, T, SO>, Self)> {
        let op = "cross_entropy_with_grad";
        let dims = check_xent_args(op, &args, (self.dims(), target.dims()), None)?;
        let classes = self.dims()[1];
        // The kernels write the gradient row by row over the logits.
        if !self.layout.is_contiguous() {
            self = self.contiguous()?;
        }
        let (storage, layout) = self.make_unique()?;
        let layout = layout.clone();
        let loss = dispatch!(D, |be| {
            match be.cross_entropy_fused(
                (be.buf_mut(storage), &layout),
                (be.buf(&target.storage), &target.layout),
                args,
            )? {
                Ok(out) => be.wrap(out),
                Err(k) => return Err(bad_target(op, k, classes, args.ignore_index)),
            }
        });
        Ok((output(loss, &dims)?, self))
    }
}

/// The permutation that moves the classes (dim 1 of `rank` dims) last:
/// `[0, 2, .., rank - 1, 1]`, the identity for `[N, C]`.
fn classes_last(rank: usize) -> Vec<usize> {
    let mut perm = vec![0];
    perm.extend(2..rank);
    perm.push(1);
    perm
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// [`cross_entropy`](Tensor::cross_entropy) of logits of any rank
    /// from 2: PyTorch's `F.cross_entropy` with logits `[N, C, d1, ..,
    /// dk]` (the classes in dim 1) against class indices `target` `[N,
    /// d1, .., dk]` (`i64` or `i32`), and `[N, C]` against `[N]` as well;
    /// the same `args` (`reduction`, `ignore_index`, `label_smoothing`).
    /// The result `SO` is `[]` for a mean or a sum and the targets' shape
    /// for `Reduction::None`. The shapes follow `rules::cross_entropy`
    /// (the rule `tensor_fn!` checks at compile time) and are checked
    /// here at run time: a target of the wrong shape is an `Err` naming
    /// `target` and the dim that differs.
    ///
    /// The kernels read each position's classes as one contiguous row,
    /// so the logits are taken as `x.permute([0, 2, .., k + 1, 1])`
    /// reshaped to `[N * d1 * .. * dk, C]`: a view for `[N, C]` (or a
    /// `C` of 1, or dims of 1), one copy of the logits otherwise.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape, CrossEntropyArgs, Reduction};
    /// // N = 1, C = 2, d1 = 3: the classes of position j are x[0, :, j].
    /// let x = Tensor::<Cpu, f64, shape![1, 2, 3]>::from_vec(vec![0., 1., 2., 0., 0., 0.]).unwrap();
    /// let t = Tensor::<Cpu, i64, shape![1, 3]>::from_vec(vec![1, 0, -100]).unwrap();
    /// let args = CrossEntropyArgs { reduction: Reduction::None, ..Default::default() };
    /// let l: Tensor<Cpu, f64, shape![1, 3]> = x.cross_entropy_nd(&t, args).unwrap();
    /// let l = l.to_vec().unwrap();
    /// assert!((l[0] - 2f64.ln()).abs() < 1e-15);
    /// assert!((l[1] - (1. + (-1f64).exp()).ln()).abs() < 1e-15);
    /// assert_eq!(l[2], 0.); // ignored
    /// let bad = Tensor::<Cpu, i64, shape![1, 2]>::zeros().unwrap();
    /// let e = x.cross_entropy_nd::<shape![], _, _>(&bad, Default::default()).unwrap_err();
    /// assert!(e.to_string().contains("dim 1 of `target` is 2 but must equal dim 2 of `input` (3)"), "{e}");
    /// ```
    pub fn cross_entropy_nd<SO: Shape, I: IndexDType, ST: Shape>(
        &self,
        target: &Tensor<D, I, ST>,
        args: CrossEntropyArgs,
    ) -> Result<Tensor<D, T, SO>> {
        let op = "cross_entropy";
        let dims = check_xent_args(op, &args, (self.dims(), target.dims()), None)?;
        SO::check(&dims)?;
        let (x, t) = self.class_rows(target)?;
        if args.reduction == Reduction::None {
            x.cross_entropy::<(Dyn,), I>(&t, args)?.reshape_dims(&dims)
        } else {
            x.cross_entropy::<SO, I>(&t, args)
        }
    }

    /// The gradient of [`cross_entropy_nd`](Self::cross_entropy_nd) with
    /// respect to the logits `self`, given the gradient `grad_output` of
    /// its result (`[]` for a mean or a sum, the targets' shape for
    /// `Reduction::None`) and the same `target` and `args`: the rows'
    /// gradients of [`cross_entropy_backward`](Tensor::cross_entropy_backward),
    /// with the classes moved back to dim 1. The result has `self`'s
    /// dims; for more than two it is a permuted view of the `[N * d1 *
    /// .. * dk, C]` rows (as PyTorch's permute, `.contiguous()` makes it
    /// row-major). The errors of the forward, and an `Err` naming
    /// `grad_output` for one of the wrong shape.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![1, 2, 2]>::from_vec(vec![0., 5., 0., 5.]).unwrap();
    /// let t = Tensor::<Cpu, i32, shape![1, 2]>::from_vec(vec![1, 0]).unwrap();
    /// let one = Tensor::<Cpu, f64, shape![]>::from_vec(vec![1.]).unwrap();
    /// let d = x.cross_entropy_nd_backward(&t, &one, Default::default()).unwrap();
    /// // Position 0: logits (0, 0), target 1; position 1: (5, 5), target 0; a mean over 2.
    /// let want = [0.25, -0.25, -0.25, 0.25];
    /// for (g, w) in d.to_vec().unwrap().iter().zip(want) {
    ///     assert!((g - w).abs() < 1e-15);
    /// }
    /// ```
    pub fn cross_entropy_nd_backward<I: IndexDType, ST: Shape, SG: Shape>(
        &self,
        target: &Tensor<D, I, ST>,
        grad_output: &Tensor<D, T, SG>,
        args: CrossEntropyArgs,
    ) -> Result<Self> {
        let op = "cross_entropy_backward";
        check_xent_args(
            op,
            &args,
            (self.dims(), target.dims()),
            Some(grad_output.dims()),
        )?;
        let (x, t) = self.class_rows(target)?;
        let rows = x.dims()[0];
        let d = if args.reduction == Reduction::None {
            let g = grad_output.reshape_dims::<(Dyn,)>(&[rows])?;
            x.cross_entropy_backward(&t, &g, args)?
        } else {
            x.cross_entropy_backward(&t, grad_output, args)?
        };
        // `[rows, C]` is `[N, d1, .., dk, C]` row-major; the inverse of
        // `classes_last` puts the classes back in dim 1 (a view).
        let perm = classes_last(self.dims().len());
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        let moved: Vec<usize> = perm.iter().map(|&p| self.dims()[p]).collect();
        let layout = Layout::contiguous(&moved).permute(&inverse);
        Ok(Tensor::from_parts(d.storage, layout))
    }

    /// The logits as `[rows, C]`, each position's classes one row (a view
    /// where the layout allows, else a copy), and the targets as `[rows]`,
    /// for shapes `rules::cross_entropy` accepted.
    #[allow(clippy::type_complexity)]
    fn class_rows<I: IndexDType, ST: Shape>(
        &self,
        target: &Tensor<D, I, ST>,
    ) -> Result<(Tensor<D, T, (Dyn, Dyn)>, Tensor<D, I, (Dyn,)>)> {
        let dims = self.dims();
        let (classes, rows) = (dims[1], target.layout.numel());
        let moved = self.layout.permute(&classes_last(dims.len()));
        let x = match moved.reshape(&[rows, classes]) {
            Some(view) => Tensor::from_parts(self.storage.clone(), view),
            None => {
                let storage = dispatch!(D, |be| be
                    .wrap(be.contiguous(be.buf(&self.storage), &moved)?));
                output(storage, &[rows, classes])?
            }
        };
        Ok((x, target.reshape_dims(&[rows])?))
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

    /// Asserts `got` equals the f64 reference `want` element by element
    /// within `tol` (NaN matching NaN), naming `case` on a mismatch.
    fn assert_matches(got: &[f64], want: &[f64], tol: f64, case: &str) {
        assert_eq!(got.len(), want.len(), "{case}: length");
        for (g, w) in got.iter().zip(want) {
            assert!(close(*g, *w, tol), "{case}: {g} against {w}");
        }
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
                    let kind = T::KIND;
                    let case = format!("{kind} n={n} c={c} {reduction:?} ignore={ignore} s={s}");
                    assert_matches(&got, &want, tol, &case);
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

    /// `cross_entropy_with_grad` gives the forward's loss and the
    /// backward's gradient for a gradient of 1, bit for bit, for every
    /// reduction, smoothing and ignored rows; it writes over its own
    /// buffer, never over one another tensor shares, takes strided
    /// logits, and names a bad target.
    #[test]
    fn with_grad_is_the_forward_and_the_backward() {
        let mut rng = Rng(0x5851_F42D_4C95_7F2D);
        for &(n, c) in &[(0, 3), (1, 1), (6, 9), (17, 130)] {
            for reduction in Reduction::ALL {
                for &(ignore, s) in &[(-100, 0.0), (2, 0.1)] {
                    let (x, t) = case::<f32>(&mut rng, n, c, ignore);
                    let (xt, tt) = tensors::<f32>(&x, &t, c);
                    let args = CrossEntropyArgs {
                        reduction,
                        ignore_index: ignore,
                        label_smoothing: s,
                    };
                    let per_row = reduction == Reduction::None;
                    let rows = if per_row { vec![n] } else { vec![] };
                    let one = Tensor::<Cpu, f32, (Dyn,)>::ones_dims(&[n]).unwrap();
                    let (loss, grad): (Vec<f32>, Vec<f32>) = if per_row {
                        let l = xt.cross_entropy::<(Dyn,), _>(&tt, args).unwrap();
                        let g = xt.cross_entropy_backward(&tt, &one, args).unwrap();
                        (l.to_vec().unwrap(), g.to_vec().unwrap())
                    } else {
                        let one = Tensor::<Cpu, f32, ()>::from_vec(vec![1.0]).unwrap();
                        let l = xt.cross_entropy::<(), _>(&tt, args).unwrap();
                        let g = xt.cross_entropy_backward(&tt, &one, args).unwrap();
                        (l.to_vec().unwrap(), g.to_vec().unwrap())
                    };
                    let fused = |x: Logits<f32>| -> (Vec<f32>, Vec<f32>) {
                        let (l, g) = if per_row {
                            let (l, g) = x.cross_entropy_with_grad::<(Dyn,), _>(&tt, args).unwrap();
                            (l.to_vec().unwrap(), g)
                        } else {
                            let (l, g) = x.cross_entropy_with_grad::<(), _>(&tt, args).unwrap();
                            (l.to_vec().unwrap(), g)
                        };
                        (l, g.to_vec().unwrap())
                    };
                    // `xt` shares the storage: it keeps its logits.
                    let (l, g) = fused(xt.clone());
                    let what = format!("[{n}, {c}] {reduction:?} s={s}");
                    assert_eq!(l.len(), rows.iter().product::<usize>(), "{what}");
                    let same = |a: &[f32], b: &[f32]| {
                        a.iter()
                            .map(|v| v.to_bits())
                            .eq(b.iter().map(|v| v.to_bits()))
                    };
                    assert!(same(&l, &loss), "{what}: {l:?} {loss:?}");
                    assert!(same(&g, &grad), "{what}");
                    let kept: Vec<f32> = xt.to_vec().unwrap();
                    assert!(same(
                        &kept,
                        &x.iter().map(|&v| v as f32).collect::<Vec<_>>()
                    ));
                    // Logits given transposed (a strided view) give the same.
                    let tr = Logits::<f32>::from_vec_dims(
                        (0..n * c).map(|i| x[(i % n) * c + i / n] as f32).collect(),
                        &[c, n],
                    )
                    .unwrap()
                    .permute::<(Dyn, Dyn)>(&[1, 0])
                    .unwrap();
                    let (l2, g2) = fused(tr);
                    assert!(same(&l2, &loss), "{what}: strided");
                    assert!(same(&g2, &grad), "{what}: strided");
                }
            }
        }
        let (xt, _) = tensors::<f32>(&[1.0, 2.0, 3.0, 4.0], &[0, 0], 2);
        let tt = Targets::from_vec_dims(vec![0, 5], &[2]).unwrap();
        let e = xt
            .cross_entropy_with_grad::<(), _>(&tt, Default::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cross_entropy_with_grad: target 5 in `target` is out of range"),
            "{e}"
        );
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

    /// `[N, C, d..]` logits (values rounded to `T`) and `[N, d..]` targets
    /// with some positions ignored, and the same logits as `[rows, C]`
    /// rows (classes last) for the 2-D f64 reference.
    fn kdim_case<T: crate::dtype::FloatDType>(
        rng: &mut Rng,
        dims: &[usize],
        ignore: i64,
        specials: bool,
    ) -> (Vec<f64>, Vec<i64>, Vec<f64>) {
        let (n, c) = (dims[0], dims[1]);
        let inner: usize = dims[2..].iter().product();
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0];
        let x: Vec<f64> = (0..n * c * inner)
            .map(|_| {
                if specials && rng.below(17) == 0 {
                    special[rng.below(4)]
                } else {
                    T::from_f64(8.0 * rng.unit() - 4.0).to_f64()
                }
            })
            .collect();
        let t: Vec<i64> = (0..n * inner)
            .map(|_| {
                if rng.below(5) == 0 || c == 0 {
                    ignore
                } else {
                    rng.below(c) as i64
                }
            })
            .collect();
        let mut rows = vec![0.0; x.len()];
        for b in 0..n {
            for k in 0..c {
                for j in 0..inner {
                    rows[(b * inner + j) * c + k] = x[(b * c + k) * inner + j];
                }
            }
        }
        (x, t, rows)
    }

    type Nd<T> = Tensor<Cpu, T, (Dyn, Dyn, Dyn, Dyn)>;
    type NdTargets = Tensor<Cpu, i64, (Dyn, Dyn, Dyn)>;

    /// The K-dimensional form against the f64 reference of its rows,
    /// every reduction and option, NaN and ±inf logits, empty dims, and
    /// every position ignored; a strided (transposed) view of the logits.
    #[test]
    fn kdim_forward_matches_the_f64_reference() {
        fn check<T: crate::dtype::FloatDType>(tol: f64) {
            let mut rng = Rng(0xC0FF_EE00_1234_5678 ^ T::KIND.size_bytes() as u64);
            let shapes = [
                [2, 5, 3, 4],
                [1, 1, 1, 1],
                [3, 7, 1, 2],
                [2, 130, 3, 3],
                [0, 4, 2, 2],
                [2, 3, 0, 5],
                [2, 0, 2, 2],
            ];
            for dims in shapes {
                for (round, &(ignore, sm)) in [(-100, 0.0), (2, 0.1), (0, 1.0)].iter().enumerate() {
                    let (x, mut t, rows) = kdim_case::<T>(&mut rng, &dims, ignore, round == 1);
                    if round == 2 {
                        // Every position ignored.
                        t.iter_mut().for_each(|k| *k = ignore);
                    }
                    let xt =
                        Nd::<T>::from_vec_dims(x.iter().map(|&v| T::from_f64(v)).collect(), &dims)
                            .unwrap();
                    let td = [dims[0], dims[2], dims[3]];
                    let tt = NdTargets::from_vec_dims(t.clone(), &td).unwrap();
                    for reduction in Reduction::ALL {
                        let args = CrossEntropyArgs {
                            reduction,
                            ignore_index: ignore,
                            label_smoothing: sm,
                        };
                        let want =
                            cross_entropy_f64(&rows, dims[1], &t, reduction, ignore, sm).unwrap();
                        let got: Vec<f64> = if reduction == Reduction::None {
                            let y: Tensor<Cpu, T, (Dyn, Dyn, Dyn)> =
                                xt.cross_entropy_nd(&tt, args).unwrap();
                            assert_eq!(y.dims(), &td);
                            y.to_vec().unwrap().iter().map(|v| v.to_f64()).collect()
                        } else {
                            let y: Tensor<Cpu, T, ()> = xt.cross_entropy_nd(&tt, args).unwrap();
                            y.to_vec().unwrap().iter().map(|v| v.to_f64()).collect()
                        };
                        let kind = T::KIND;
                        let case = format!("{kind} {dims:?} {reduction:?} ignore={ignore} s={sm}");
                        assert_matches(&got, &want, tol, &case);
                    }
                }
            }
        }
        check::<f64>(1e-13);
        check::<f32>(2e-6);
        check::<bf16>(1e-2);
        // A transposed view of the logits reads the same values.
        let mut rng = Rng(5);
        let (x, t, rows) = kdim_case::<f64>(&mut rng, &[3, 4, 5, 2], -100, false);
        let xt = Nd::<f64>::from_vec_dims(x, &[3, 4, 5, 2]).unwrap();
        let swapped = xt
            .transpose::<(Dyn, Dyn, Dyn, Dyn)>(2, 3)
            .unwrap()
            .contiguous()
            .unwrap();
        let back = swapped.transpose::<(Dyn, Dyn, Dyn, Dyn)>(2, 3).unwrap();
        assert!(!back.is_contiguous());
        let tt = NdTargets::from_vec_dims(t.clone(), &[3, 5, 2]).unwrap();
        let y: Tensor<Cpu, f64, ()> = back.cross_entropy_nd(&tt, Default::default()).unwrap();
        let want = cross_entropy_f64(&rows, 4, &t, Reduction::Mean, -100, 0.0).unwrap();
        assert!(close(y.to_vec().unwrap()[0], want[0], 1e-14));
    }

    /// `[N, C]` and `[N, C, d]` through `cross_entropy_nd` equal the 2-D
    /// method, and bad shapes and targets are errors naming the operand.
    #[test]
    fn kdim_shapes_and_errors() {
        let mut rng = Rng(99);
        let (x, t) = case::<f32>(&mut rng, 6, 5, -100);
        let (xt, tt) = tensors::<f32>(&x, &t, 5);
        let a: Tensor<Cpu, f32, ()> = xt.cross_entropy(&tt, Default::default()).unwrap();
        let b: Tensor<Cpu, f32, ()> = xt.cross_entropy_nd(&tt, Default::default()).unwrap();
        assert_eq!(a.to_vec().unwrap(), b.to_vec().unwrap());
        let x3 = Tensor::<Cpu, f32, (Dyn, Dyn, Dyn)>::zeros_dims(&[2, 3, 4]).unwrap();
        let err = |t: &[usize]| {
            let tt = Tensor::<Cpu, i64, (Dyn, Dyn)>::zeros_dims(t).unwrap();
            x3.cross_entropy_nd::<(), _, _>(&tt, Default::default())
                .unwrap_err()
                .to_string()
        };
        let e = err(&[2, 5]);
        assert!(
            e.contains("dim 1 of `target` is 5 but must equal dim 2 of `input` (4)"),
            "{e}"
        );
        let e = err(&[3, 4]);
        assert!(
            e.contains("dim 0 of `target` is 3 but must equal dim 0 of `input` (2)"),
            "{e}"
        );
        let t1 = Tensor::<Cpu, i64, (Dyn,)>::zeros_dims(&[2]).unwrap();
        let e = x3
            .cross_entropy_nd::<(), _, _>(&t1, Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`target` must have shape [2, 4]"), "{e}");
        let v = Tensor::<Cpu, f32, (Dyn,)>::zeros_dims(&[3]).unwrap();
        let e = v
            .cross_entropy_nd::<(), _, _>(&t1, Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`input` has shape [3]"), "{e}");
        // A target past the classes, and the result type of a reduction.
        let bad =
            Tensor::<Cpu, i32, (Dyn, Dyn)>::from_vec_dims(vec![0, 1, 2, 3, 0, 0, 0, 0], &[2, 4])
                .unwrap();
        let e = x3
            .cross_entropy_nd::<(), _, _>(&bad, Default::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("target 3 in `target` is out of range for 3 classes"),
            "{e}"
        );
        let good = Tensor::<Cpu, i32, (Dyn, Dyn)>::zeros_dims(&[2, 4]).unwrap();
        assert!(x3
            .cross_entropy_nd::<(Dyn,), _, _>(&good, Default::default())
            .is_err());
        let one = Tensor::<Cpu, f32, ()>::from_vec(vec![1.0]).unwrap();
        let e = x3
            .cross_entropy_nd_backward(&bad, &one, Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("target 3 in `target`"), "{e}");
        let rows = CrossEntropyArgs {
            reduction: Reduction::None,
            ..Default::default()
        };
        let e = x3
            .cross_entropy_nd_backward(&good, &one, rows)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grad_output"), "{e}");
    }

    /// The K-dimensional backward against central differences of the f64
    /// forward, and in f32 against the f64 backward.
    #[test]
    fn kdim_backward_matches_finite_differences() {
        let mut rng = Rng(0x5EED);
        let dims = [2, 4, 3, 2];
        let td = [2, 3, 2];
        for reduction in Reduction::ALL {
            for &(ignore, sm) in &[(-100, 0.0), (1, 0.2)] {
                let (x, t, _) = kdim_case::<f64>(&mut rng, &dims, ignore, false);
                let args = CrossEntropyArgs {
                    reduction,
                    ignore_index: ignore,
                    label_smoothing: sm,
                };
                let tt = NdTargets::from_vec_dims(t.clone(), &td).unwrap();
                let gs: Vec<f64> = match reduction {
                    Reduction::None => (0..t.len()).map(|_| 2.0 * rng.unit() - 1.0).collect(),
                    _ => vec![0.75],
                };
                let loss = |x: &[f64]| -> f64 {
                    let xt = Nd::<f64>::from_vec_dims(x.to_vec(), &dims).unwrap();
                    let l: Vec<f64> = if reduction == Reduction::None {
                        let y: Tensor<Cpu, f64, (Dyn, Dyn, Dyn)> =
                            xt.cross_entropy_nd(&tt, args).unwrap();
                        y.to_vec().unwrap()
                    } else {
                        let y: Tensor<Cpu, f64, ()> = xt.cross_entropy_nd(&tt, args).unwrap();
                        y.to_vec().unwrap()
                    };
                    l.iter().zip(&gs).map(|(l, g)| l * g).sum()
                };
                let xt = Nd::<f64>::from_vec_dims(x.clone(), &dims).unwrap();
                let got = if reduction == Reduction::None {
                    let g = Tensor::<Cpu, f64, (Dyn, Dyn, Dyn)>::from_vec_dims(gs.clone(), &td)
                        .unwrap();
                    xt.cross_entropy_nd_backward(&tt, &g, args).unwrap()
                } else {
                    let g = Tensor::<Cpu, f64, ()>::from_vec(gs.clone()).unwrap();
                    xt.cross_entropy_nd_backward(&tt, &g, args).unwrap()
                };
                assert_eq!(got.dims(), &dims);
                let got = got.to_vec().unwrap();
                let h = 1e-6;
                for i in 0..x.len() {
                    let (mut a, mut b) = (x.clone(), x.clone());
                    a[i] += h;
                    b[i] -= h;
                    let want = (loss(&a) - loss(&b)) / (2.0 * h);
                    assert!(
                        (got[i] - want).abs() < 1e-7,
                        "{reduction:?} s={sm} element {i}: {} against {want}",
                        got[i]
                    );
                }
                // f32 against the f64 backward.
                let x32 =
                    Nd::<f32>::from_vec_dims(x.iter().map(|&v| v as f32).collect(), &dims).unwrap();
                let d32 = if reduction == Reduction::None {
                    let g = Tensor::<Cpu, f32, (Dyn, Dyn, Dyn)>::from_vec_dims(
                        gs.iter().map(|&v| v as f32).collect(),
                        &td,
                    )
                    .unwrap();
                    x32.cross_entropy_nd_backward(&tt, &g, args).unwrap()
                } else {
                    let g = Tensor::<Cpu, f32, ()>::from_vec(vec![gs[0] as f32]).unwrap();
                    x32.cross_entropy_nd_backward(&tt, &g, args).unwrap()
                };
                for (g, w) in d32.to_vec().unwrap().iter().zip(&got) {
                    assert!(
                        (*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                        "{g} against {w}"
                    );
                }
            }
        }
    }

    /// On the GPU, the K-dimensional form and its backward against the f64
    /// reference and the CPU (the GPU path of the same row kernels).
    #[test]
    fn kdim_on_the_gpu_matches_the_f64_reference() {
        use crate::Cuda;
        let mut rng = Rng(0xD15C);
        for dims in [[2, 5, 3, 4], [3, 1000, 2, 5], [0, 4, 2, 2], [2, 3, 0, 5]] {
            let (x, t, rows) = kdim_case::<f32>(&mut rng, &dims, 1, true);
            let td = [dims[0], dims[2], dims[3]];
            let xc =
                Nd::<f32>::from_vec_dims(x.iter().map(|&v| v as f32).collect(), &dims).unwrap();
            let tc = NdTargets::from_vec_dims(t.clone(), &td).unwrap();
            let Ok(xg) = xc.to_device::<Cuda>() else {
                eprintln!("skipping: no CUDA device");
                return;
            };
            let tg = tc.to_device::<Cuda>().unwrap();
            for reduction in Reduction::ALL {
                let args = CrossEntropyArgs {
                    reduction,
                    ignore_index: 1,
                    label_smoothing: 0.1,
                };
                let want = cross_entropy_f64(&rows, dims[1], &t, reduction, 1, 0.1).unwrap();
                let got: Vec<f64> = if reduction == Reduction::None {
                    let y: Tensor<Cuda, f32, (Dyn, Dyn, Dyn)> =
                        xg.cross_entropy_nd(&tg, args).unwrap();
                    y.to_vec().unwrap().iter().map(|&v| v as f64).collect()
                } else {
                    let y: Tensor<Cuda, f32, ()> = xg.cross_entropy_nd(&tg, args).unwrap();
                    y.to_vec().unwrap().iter().map(|&v| v as f64).collect()
                };
                assert_matches(&got, &want, 1e-5, &format!("{dims:?} {reduction:?}"));
                let (gc, gg) = if reduction == Reduction::None {
                    let g: Vec<f32> = (0..t.len()).map(|_| rng.unit() as f32).collect();
                    let g = Tensor::<Cpu, f32, (Dyn, Dyn, Dyn)>::from_vec_dims(g, &td).unwrap();
                    (
                        xc.cross_entropy_nd_backward(&tc, &g, args).unwrap(),
                        xg.cross_entropy_nd_backward(&tg, &g.to_device::<Cuda>().unwrap(), args)
                            .unwrap(),
                    )
                } else {
                    let g = Tensor::<Cpu, f32, ()>::from_vec(vec![1.5]).unwrap();
                    (
                        xc.cross_entropy_nd_backward(&tc, &g, args).unwrap(),
                        xg.cross_entropy_nd_backward(&tg, &g.to_device::<Cuda>().unwrap(), args)
                            .unwrap(),
                    )
                };
                assert_eq!(gg.dims(), &dims);
                let (gc, gg) = (gc.to_vec().unwrap(), gg.to_vec().unwrap());
                // The GPU's exponential is `ex2.approx` (relative error
                // about 2^-22 of each probability), and a gradient is
                // `g (p - target)`, so where `p` and the smoothed target
                // nearly cancel the error is absolute, on the scale of
                // `g` (at most 1.5 here), not relative to the result.
                for (i, (g, c)) in gg.iter().zip(&gc).enumerate() {
                    let (g, c) = (*g as f64, *c as f64);
                    assert!(
                        (g.is_nan() && c.is_nan()) || (g - c).abs() <= 1e-5 * c.abs() + 1e-6,
                        "{dims:?} {reduction:?} gradient {i}: {g} against the CPU's {c}"
                    );
                }
            }
        }
    }

    /// f32 over GPT-2's padded vocabulary: the sums are `f64`, so the
    /// loss and the gradients stay within a few f32 roundings of the f64
    /// results on the same values (an f32 running sum drifted by about
    /// 4e-5 relative).
    #[test]
    fn wide_f32_rows_stay_near_f64() {
        let mut rng = Rng(0xA11CE);
        let (n, c) = (3, 50304);
        let (x, t) = case::<f32>(&mut rng, n, c, -100);
        let (x32, tt) = tensors::<f32>(&x, &t, c);
        let (x64, _) = tensors::<f64>(&x, &t, c);
        let args = CrossEntropyArgs {
            reduction: Reduction::Sum,
            label_smoothing: 0.1,
            ..Default::default()
        };
        let l32: Tensor<Cpu, f32, ()> = x32.cross_entropy(&tt, args).unwrap();
        let l64: Tensor<Cpu, f64, ()> = x64.cross_entropy(&tt, args).unwrap();
        let (l32, l64) = (l32.to_vec().unwrap()[0] as f64, l64.to_vec().unwrap()[0]);
        assert!((l32 - l64).abs() <= 2e-7 * l64.abs(), "{l32} against {l64}");
        // Without smoothing, so no gradient is a difference of two
        // near-equal terms and the relative error is the kernel's own.
        let args = CrossEntropyArgs {
            reduction: Reduction::Sum,
            ..Default::default()
        };
        let g32 = Tensor::<Cpu, f32, ()>::from_vec(vec![1.0]).unwrap();
        let g64 = Tensor::<Cpu, f64, ()>::from_vec(vec![1.0]).unwrap();
        let d32 = x32
            .cross_entropy_backward(&tt, &g32, args)
            .unwrap()
            .to_vec()
            .unwrap();
        let d64 = x64
            .cross_entropy_backward(&tt, &g64, args)
            .unwrap()
            .to_vec()
            .unwrap();
        let mut worst = 0f64;
        for (g, w) in d32.iter().zip(&d64) {
            worst = worst.max((*g as f64 - w).abs() / w.abs());
        }
        assert!(worst < 3e-6, "worst relative gradient error {worst}");
    }
}
