//! The layers of a conv-net around its products: pooling over the last
//! two dims (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`),
//! `flatten` and seeded `dropout`.

use super::*;
use tensorfn_core::ops::pool::{Pool2d, PoolKind};

impl<'s, 'k> Checker<'s, 'k> {
    /// A call of a pooling op: a float tensor `[N, C, H, W]` or
    /// `[C, H, W]`, its options as literals, and the output size computed
    /// here (an error names the dim and how its size came out).
    pub(super) fn pool(
        &mut self,
        def: &'static OpDef,
        kind: PoolKind,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, false, args, e) else {
            return self.error_node(e);
        };
        let arg = |n: &str| {
            def.params
                .iter()
                .position(|p| p.name == n)
                .and_then(|i| a[i])
        };
        let x_ex = a[0].expect("required");
        let x = self.expr(x_ex);
        let Some(o) = self.tensor(x, x_ex, name) else {
            return self.error_node(e);
        };
        let mut ok = self.need_float(name, &o);
        let mut pair = |this: &mut Self, n: &str| match arg(n) {
            Some(v) => {
                let r = this.size_pair(v, name, n);
                ok &= r.is_some();
                r
            }
            None => None,
        };
        let mut pool = match kind {
            PoolKind::AdaptiveAvg => {
                Pool2d::adaptive_avg(pair(self, "output_size").unwrap_or([1, 1]))
            }
            PoolKind::Max => Pool2d::max(pair(self, "kernel_size").unwrap_or([1, 1])),
            PoolKind::Avg => Pool2d::avg(pair(self, "kernel_size").unwrap_or([1, 1])),
        };
        if let Some(s) = pair(self, "stride") {
            pool = pool.stride(s);
        }
        if let Some(p) = pair(self, "padding") {
            pool = pool.padding(p);
        }
        if let Some(d) = pair(self, "dilation") {
            pool = pool.dilation(d);
        }
        for (flag, set) in [
            ("ceil_mode", Pool2d::ceil_mode as fn(Pool2d, bool) -> Pool2d),
            ("count_include_pad", Pool2d::count_include_pad),
        ] {
            if let Some(v) = arg(flag) {
                match self.flag_arg(v, name, flag) {
                    Some(b) => pool = set(pool, b),
                    None => ok = false,
                }
            }
        }
        if let Some(v) = arg("divisor_override") {
            match self.int_arg(v, &format!("the `divisor_override` of `{name}`")) {
                Some(d) if d > 0 => pool = pool.divisor_override(d as usize),
                Some(d) => {
                    self.error(
                        &v.sp,
                        format!("`{name}` divides by `divisor_override`, which must be at least 1, found {d}"),
                    );
                    ok = false;
                }
                None => ok = false,
            }
        }
        if !ok {
            return self.error_node(e);
        }
        let dims = &o.ty.dims;
        match rules::pool2d(name, (&x_ex.to_string(), dims), &pool) {
            Ok(out) => self.push(
                Op::Pool { x, pool },
                Ty::Tensor(TensorTy { dims: out, ..o.ty }),
                e,
            ),
            Err(err) => {
                // An option at fault (a padding over half the window, a
                // zero size) is spanned on that argument, a size that
                // comes out too small on the input.
                let known: Option<Vec<usize>> = dims.iter().map(|d| d.to_usize()).collect();
                let hw = match known.as_deref() {
                    Some([.., h, w]) => [*h, *w],
                    _ => [usize::MAX / 4; 2],
                };
                let at = match pool.output_dims(hw) {
                    Err(pe) if pe.message.contains("got `padding`") => arg("padding"),
                    Err(pe) if pe.message.contains("`output_size` of 0") => arg("output_size"),
                    Err(pe) if pe.message.contains("`kernel_size` of 0") => arg("kernel_size"),
                    Err(pe) if pe.message.contains("`stride` of 0") => arg("stride"),
                    Err(pe) if pe.message.contains("`dilation` of 0") => arg("dilation"),
                    _ => None,
                };
                self.error(&at.unwrap_or(x_ex).sp, err.message);
                self.error_node(e)
            }
        }
    }

    /// A size written as one integer literal (both dims) or a pair
    /// `[h, w]`/`(h, w)` of them.
    fn size_pair(&mut self, v: &Expr, op: &str, param: &str) -> Option<[usize; 2]> {
        let what = format!("`{param}` of `{op}`");
        let one = |this: &mut Self, x: &Expr| match x.kind {
            ExprKind::Int(n) => Some(n as usize),
            _ => {
                this.error(
                    &x.sp,
                    format!("the {what} is a non-negative integer literal or a pair `[h, w]` of them, found `{x}`"),
                );
                None
            }
        };
        match &v.kind {
            ExprKind::Array(xs) | ExprKind::Tuple(xs) if xs.len() == 2 => {
                Some([one(self, &xs[0])?, one(self, &xs[1])?])
            }
            ExprKind::Array(xs) | ExprKind::Tuple(xs) => {
                self.error(
                    &v.sp,
                    format!("the {what} is one integer or a pair `[h, w]` for the last two dims, found {} values", xs.len()),
                );
                None
            }
            _ => one(self, v).map(|n| [n, n]),
        }
    }

    /// `flatten(x, start_dim = 0, end_dim = -1)` (`x.flatten(..)`): the
    /// dims from `start_dim` to `end_dim` merged into one, a `reshape`
    /// (a view where the layout allows).
    pub(super) fn flatten(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let Some(xs) = self.bind_with_receiver(def, recv, args, e) else {
            return self.error_node(e);
        };
        let x_ex = xs[0].expect("required");
        let x = self.operand_node(recv, x_ex);
        let Some(o) = self.tensor(x, x_ex, name) else {
            return self.error_node(e);
        };
        let start = match xs[1] {
            Some(d) => self.dim_arg(d, name, &o),
            None => Some(0),
        };
        let end = match xs[2] {
            Some(d) => self.dim_arg(d, name, &o),
            None => Some(o.ty.dims.len().max(1) - 1),
        };
        let (Some(start), Some(end)) = (start, end) else {
            return self.error_node(e);
        };
        let at = xs[1].or(xs[2]).unwrap_or(x_ex);
        match self.ruled(
            rules::flatten(name, (&x_ex.to_string(), &o.ty.dims), start, end),
            &[&at.sp],
        ) {
            Some(dims) => self.push(
                Op::Reshape { x, view: false },
                Ty::Tensor(TensorTy { dims, ..o.ty }),
                e,
            ),
            None => self.error_node(e),
        }
    }

    /// `dropout(x, p = 0.5, training = true, seed = s)` (`x.dropout(..)`):
    /// a float tensor, `p` a literal in [0, 1], `training` a literal flag
    /// and `seed` a `usize` (a literal or a `usize` parameter) when
    /// anything is dropped. Not training, or `p = 0`, is `x` itself.
    pub(super) fn dropout(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let Some(xs) = self.bind_with_receiver(def, recv, args, e) else {
            return self.error_node(e);
        };
        let x_ex = xs[0].expect("required");
        let x = self.operand_node(recv, x_ex);
        let Some(o) = self.tensor(x, x_ex, name) else {
            return self.error_node(e);
        };
        let mut ok = self.need_float(name, &o);
        let p = match xs[1] {
            None => 0.5,
            Some(v) => {
                let lit = match v.kind {
                    ExprKind::Float(f) => Some(f),
                    ExprKind::Int(n) => Some(n as f64),
                    ExprKind::Neg(ref inner) => match inner.kind {
                        ExprKind::Float(f) => Some(-f),
                        ExprKind::Int(n) => Some(-(n as f64)),
                        _ => None,
                    },
                    _ => None,
                };
                match lit {
                    Some(p) if (0.0..=1.0).contains(&p) => p,
                    Some(p) => {
                        self.error(
                            &v.sp,
                            format!("`{name}` drops each element with probability `p`, which must be in [0, 1], found {p}: write e.g. `p = 0.1`"),
                        );
                        ok = false;
                        0.0
                    }
                    None => {
                        self.error(
                            &v.sp,
                            format!("`{name}` takes a literal probability for `p` (e.g. `p = 0.1`), found `{v}`"),
                        );
                        ok = false;
                        0.0
                    }
                }
            }
        };
        let training = match xs[2] {
            None => true,
            Some(v) => self.flag_arg(v, name, "training").unwrap_or_else(|| {
                ok = false;
                true
            }),
        };
        if !ok {
            return self.error_node(e);
        }
        if !training || p == 0.0 {
            return x;
        }
        let Some(seed_ex) = xs[3] else {
            self.error(
                &e.sp,
                format!("`{name}` draws its mask from `seed`, a `usize` (a literal or a `usize` parameter), and none was given: add `seed = seed` and pass a new seed each step (the backward draws the same mask from it)"),
            );
            return self.error_node(e);
        };
        let Some(seed) = self.index_arg(seed_ex, &format!("the `seed` of `{name}`")) else {
            return self.error_node(e);
        };
        self.push(Op::Dropout { x, p, seed }, Ty::Tensor(o.ty), e)
    }
}
