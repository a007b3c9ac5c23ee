//! Sampling: `topk` (a tuple of values and positions) and `multinomial`
//! (seeded draws of category indices).

use super::*;

impl<'s, 'k> Checker<'s, 'k> {
    /// A call of `topk` or `multinomial`, as a function (`recv` is `None`)
    /// or a method of `recv`.
    pub(super) fn sampling(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let Some(xs) = self.bind_with_receiver(def, recv, args, e) else {
            return self.error_node(e);
        };
        let x_ex = xs[0].expect("required");
        let x = self.operand_node(recv, x_ex);
        let Some(o) = self.tensor(x, x_ex, def.name) else {
            return self.error_node(e);
        };
        match def.kind {
            OpKind::TopK => self.topk(def.name, o, &xs, e),
            _ => self.multinomial(def.name, o, &xs, e),
        }
    }

    /// `topk(input, k, dim = -1, largest = true, sorted = true)`: numbers
    /// of any dtype, `k` a literal or a `usize` parameter (the picked dim's
    /// new size), `largest` and `sorted` literal flags; a tuple of the
    /// values and their `i64` positions.
    fn topk(&mut self, name: &str, o: Operand<'_>, xs: &[Option<&Expr>], e: &Expr) -> NodeId {
        let mut ok = self.need_numeric(name, &o);
        let k_ex = xs[1].expect("required");
        let k = self.size_arg(k_ex, name, "k");
        let dim = match xs[2] {
            Some(d) => self.dim_arg(d, name, &o),
            None if o.ty.dims.is_empty() => {
                self.error(
                    &o.ex.sp,
                    format!("`{name}` picks along a dim, but `{}` is a scalar (shape []): give it a dim with `unsqueeze(0)`", o.ex),
                );
                None
            }
            None => Some(o.ty.dims.len() - 1),
        };
        let largest = match xs[3] {
            Some(l) => self.flag_arg(l, name, "largest"),
            None => Some(true),
        };
        ok &= largest.is_some();
        if let Some(s) = xs[4] {
            // Sorted is one valid order of an unsorted result.
            ok &= self.flag_arg(s, name, "sorted").is_some();
        }
        let (Some((k, k_dim)), Some(dim), Some(largest), true) = (k, dim, largest, ok) else {
            return self.error_node(e);
        };
        let rule = rules::topk(name, (&o.ex.to_string(), &o.ty.dims), dim, &k_dim);
        let Some(dims) = self.ruled(rule, &[&k_ex.sp]) else {
            return self.error_node(e);
        };
        let values = TensorTy {
            dims: dims.clone(),
            ..o.ty.clone()
        };
        let indices = TensorTy {
            dims,
            dtype: Dt::Kind(DTypeKind::I64),
            ..o.ty
        };
        self.push(
            Op::TopK {
                x: o.id,
                k,
                dim,
                largest,
            },
            Ty::Tuple(vec![values, indices]),
            e,
        )
    }

    /// `multinomial(input, num_samples, replacement = false, seed)`: float
    /// weights along the last dim, `num_samples` a literal or a `usize`
    /// parameter, `seed` a `usize` (required: a generated function is
    /// pure, so its draws come from the seed it is given).
    fn multinomial(
        &mut self,
        name: &str,
        o: Operand<'_>,
        xs: &[Option<&Expr>],
        e: &Expr,
    ) -> NodeId {
        let mut ok = self.need_float(name, &o);
        let n_ex = xs[1].expect("required");
        let n = self.size_arg(n_ex, name, "num_samples");
        let replacement = match xs[2] {
            Some(r) => self.flag_arg(r, name, "replacement"),
            None => Some(false),
        };
        let seed = match xs[3] {
            Some(s) => self.index_arg(s, &format!("the `seed` of `{name}`")),
            None => {
                self.error(
                    &e.sp,
                    format!("`{name}` draws from `seed`, a `usize` (a literal or a `usize` parameter), and none was given: add `seed = seed` and pass a new seed for each new draw"),
                );
                None
            }
        };
        ok &= replacement.is_some() && seed.is_some();
        let (Some((num_samples, n_dim)), Some(replacement), Some(seed), true) =
            (n, replacement, seed, ok)
        else {
            return self.error_node(e);
        };
        let rule = rules::multinomial(name, (&o.ex.to_string(), &o.ty.dims), &n_dim, replacement);
        let Some(dims) = self.ruled(rule, &[&n_ex.sp]) else {
            return self.error_node(e);
        };
        self.push(
            Op::Multinomial {
                x: o.id,
                num_samples,
                replacement,
                seed,
            },
            Ty::Tensor(TensorTy {
                dims,
                dtype: Dt::Kind(DTypeKind::I64),
                ..o.ty
            }),
            e,
        )
    }
}
