//! Shape operations: `cat`, reshapes and views, reductions, row ops,
//! `narrow` and indexing.

use super::*;
use crate::shape::{regrouping, reorder_fix, Regrouping, Reorder};

impl<'s, 'k> Checker<'s, 'k> {
    pub(super) fn cat(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("cat", args, &["tensors", "dim"], 1, e) else {
            return self.error_node(e);
        };
        let list = a[0].expect("required");
        let ExprKind::Array(xs) = &list.kind else {
            self.error(
                &list.sp,
                "`cat` takes a list of tensors: `cat([a, b], dim)`",
            );
            return self.error_node(e);
        };
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = ids
            .iter()
            .zip(xs)
            .map(|(&id, x)| self.tensor(id, x, "cat"))
            .collect();
        if ops.is_empty() {
            self.error(&list.sp, "`cat` needs at least one tensor");
            return self.error_node(e);
        }
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("cat", &ops, 0);
        let dim = match a[1] {
            None => Some(0),
            Some(d) => self.dim_arg(d, "cat", &ops[0]),
        };
        let Some(dim) = dim else {
            return self.error_node(e);
        };
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let operands: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&ops)
            .map(|(n, o)| (n.as_str(), &o.ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        match self.ruled(rules::cat("cat", &operands, dim), &spans) {
            Some(dims) => self.push(Op::Cat { xs: ids, dim }, Self::out_ty(&agreed, dims), e),
            None => self.error_node(e),
        }
    }

    /// `stack([a, b, ..], dim)`: tensors of one shape, each given a dim of
    /// size 1 at `dim` (a view) and joined there by `cat`.
    pub(super) fn stack(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("stack", args, &["tensors", "dim"], 1, e) else {
            return self.error_node(e);
        };
        let list = a[0].expect("required");
        let ExprKind::Array(xs) = &list.kind else {
            self.error(
                &list.sp,
                "`stack` takes a list of tensors: `stack([a, b], dim)`",
            );
            return self.error_node(e);
        };
        if xs.is_empty() {
            self.error(&list.sp, "`stack` needs at least one tensor");
            return self.error_node(e);
        }
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = ids
            .iter()
            .zip(xs)
            .map(|(&id, x)| self.tensor(id, x, "stack"))
            .collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("stack", &ops, 0);
        // The new dim may be the last: one more to choose from.
        let dim =
            match a[1] {
                None => Some(0),
                Some(d) => self.int_arg(d, "the dim of `stack`").and_then(|k| {
                    match rules::normalize_dim(
                        "stack",
                        &xs[0].to_string(),
                        k,
                        ops[0].ty.dims.len() + 1,
                    ) {
                        Ok(d) => Some(d),
                        Err(err) => {
                            self.error(&d.sp, err.message);
                            None
                        }
                    }
                }),
            };
        let Some(dim) = dim else {
            return self.error_node(e);
        };
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let operands: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&ops)
            .map(|(n, o)| (n.as_str(), &o.ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        let Some(dims) = self.ruled(rules::stack("stack", &operands, dim), &spans) else {
            return self.error_node(e);
        };
        let mut one = dims.clone();
        one[dim] = Dim::constant(1);
        let parts: Vec<NodeId> = ids
            .iter()
            .zip(&ops)
            .zip(xs)
            .map(|((&id, o), x)| {
                let ty = Ty::Tensor(TensorTy {
                    dims: one.clone(),
                    ..o.ty.clone()
                });
                self.push(Op::Reshape { x: id, view: false }, ty, x)
            })
            .collect();
        self.push(Op::Cat { xs: parts, dim }, Self::out_ty(&agreed, dims), e)
    }

    /// `x.expand([..])`: a view with dims of size 1 (and new leading dims)
    /// repeated; `-1` keeps a dim.
    pub(super) fn expand(&mut self, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let list: Vec<&Expr> = match args {
            [Arg { name: None, value }] => match &value.kind {
                ExprKind::Array(xs) => xs.iter().collect(),
                _ => vec![value],
            },
            [] => {
                self.error(&e.sp, "`expand` needs the new shape: `x.expand([..])`");
                return self.error_node(e);
            }
            _ => args.iter().map(|a| &a.value).collect(),
        };
        let mut size = Vec::new();
        for x in &list {
            match self.target_dim(x) {
                Some(d) => size.push(d),
                None => return self.error_node(e),
            }
        }
        match rules::expand("expand", (&o.ex.to_string(), &o.ty.dims), &size) {
            Ok(dims) => self.push(Op::Expand(rid), Ty::Tensor(TensorTy { dims, ..o.ty }), e),
            Err(err) => {
                let sp = Sp::join(&list[0].sp, &list[list.len() - 1].sp);
                self.error(&sp, err.message);
                self.error_node(e)
            }
        }
    }

    /// `x.repeat_interleave(repeats, dim)` (also as a function): each
    /// element along `dim` repeated in place. A dim of size 1 inserted after
    /// `dim` (a view), broadcast to `repeats` (a view), then merged into
    /// `dim` (the copy).
    pub(super) fn repeat_interleave(
        &mut self,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = "repeat_interleave";
        let names: &[&str] = match recv {
            Some(_) => &["repeats", "dim"],
            None => &["input", "repeats", "dim"],
        };
        let Some(a) = self.bind_args(name, args, names, names.len(), e) else {
            return self.error_node(e);
        };
        let (x, rid) = match recv {
            Some(r) => r,
            None => {
                let x = a[0].expect("required");
                (x, self.expr(x))
            }
        };
        let (rx, dx) = (
            a[a.len() - 2].expect("required"),
            a[a.len() - 1].expect("required"),
        );
        let Some(o) = self.tensor(rid, x, name) else {
            return self.error_node(e);
        };
        let repeats = match self.target_dim(rx) {
            Some(Some(r)) => r,
            Some(None) => {
                self.error(
                    &rx.sp,
                    "`repeats` is a count: a literal, a const generic or a dim name",
                );
                return self.error_node(e);
            }
            None => return self.error_node(e),
        };
        let Some(dim) = self.dim_arg(dx, name, &o) else {
            return self.error_node(e);
        };
        let dims =
            match rules::repeat_interleave(name, (&o.ex.to_string(), &o.ty.dims), &repeats, dim) {
                Ok(dims) => dims,
                Err(err) => {
                    self.error(&dx.sp, err.message);
                    return self.error_node(e);
                }
            };
        let mut wide = o.ty.dims.clone();
        wide.insert(dim + 1, Dim::constant(1));
        let ty = |dims: Vec<Dim>| {
            Ty::Tensor(TensorTy {
                dims,
                ..o.ty.clone()
            })
        };
        let one = self.push(
            Op::Reshape {
                x: rid,
                view: false,
            },
            ty(wide.clone()),
            e,
        );
        wide[dim + 1] = repeats;
        let spread = self.push(Op::Expand(one), ty(wide), e);
        self.push(
            Op::Reshape {
                x: spread,
                view: false,
            },
            ty(dims),
            e,
        )
    }

    /// A row op of the table (`x.softmax(dim)`): a float tensor, a dim of
    /// it whose size is not 1, and the result's dims by the op's shape.
    pub(super) fn row_op(
        &mut self,
        op: RowOp,
        id: NodeId,
        o: Operand<'_>,
        d: &Expr,
        e: &Expr,
    ) -> NodeId {
        let name = op.name();
        let Some(dim) = self.dim_arg(d, name, &o) else {
            return self.error_node(e);
        };
        if !self.need_float(name, &o) {
            return self.error_node(e);
        }
        let x = (o.ex.to_string(), &o.ty.dims);
        if let Err(err) = rules::reduce_size_one(name, (&x.0, x.1), dim) {
            self.error(&d.sp, err.message);
            return self.error_node(e);
        }
        let dims = match op.shape() {
            RowShape::Keep => o.ty.dims.clone(),
            RowShape::Reduce => match rules::reduce(name, (&x.0, x.1), dim, false) {
                Ok(dims) => dims,
                Err(err) => {
                    self.error(&e.sp, err.message);
                    return self.error_node(e);
                }
            },
        };
        let ty = TensorTy { dims, ..o.ty };
        self.push(Op::Row { op, x: id, dim }, Ty::Tensor(ty), e)
    }

    /// `layer_norm(x, weight, bias, eps = 1e-5)` and `rms_norm(x, weight,
    /// eps = None)`, or their method forms on `recv`: a float tensor of
    /// rank 1 or more, and `weight` (and `bias`) of shape `[N]`, `N` its
    /// last dim, on its device in its dtype; `eps` a scalar, not negative.
    pub(super) fn norm(
        &mut self,
        def: &OpDef,
        op: NormOp,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, recv.is_some(), args, e) else {
            if recv.is_none() {
                for x in args {
                    self.expr(&x.value);
                }
            }
            return self.error_node(e);
        };
        // The tensors in the catalogue's order (the receiver first), then eps.
        let mut xs: Vec<&Expr> = Vec::new();
        let mut ids: Vec<NodeId> = Vec::new();
        if let Some((x, id)) = recv {
            xs.push(x);
            ids.push(id);
        }
        let tensors = if op.has_bias() { 3 } else { 2 };
        let first = usize::from(recv.is_some());
        for i in first..tensors {
            let x = a[i - first].expect("required");
            xs.push(x);
            ids.push(self.expr(x));
        }
        // `eps = None` is PyTorch's way of asking for the default.
        let eps_expr =
            a[tensors - first].filter(|x| !matches!(&x.kind, ExprKind::Var(i) if i == "None"));
        let ops: Vec<Option<Operand>> = (0..tensors)
            .map(|i| self.tensor(ids[i], xs[i], name))
            .collect();
        if ops.iter().any(|o| o.is_none()) {
            if let Some(x) = eps_expr {
                self.expr(x);
            }
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree(name, &ops, 0);
        let ok = !agreed.ok || self.need_float(name, &ops[0]);
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let params: Vec<(&str, &[Dim])> = (1..tensors)
            .map(|i| (names[i].as_str(), &ops[i].ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        let dims = self.ruled(
            rules::norm(name, (&names[0], &ops[0].ty.dims), &params),
            &spans,
        );
        let eps = match eps_expr {
            None => Ok(None),
            Some(x) => match self.scalar_operand(x, &ops[0], name) {
                Some(id) => match self.graph.nodes[id].op {
                    Op::Lit { value, .. } if value.is_nan() || value < 0.0 => {
                        let default = match op {
                            NormOp::LayerNorm => "1e-5",
                            NormOp::RmsNorm => "the machine epsilon of f32 (f64 for f64)",
                        };
                        self.error(
                            &x.sp,
                            format!("`eps = {x}` of `{name}` is negative: it is added to the {} under a square root, so it must be zero or positive; leave it out for PyTorch's default, {default}", match op {
                                NormOp::LayerNorm => "variance",
                                NormOp::RmsNorm => "mean of the squares",
                            }),
                        );
                        Err(())
                    }
                    _ => Ok(Some(id)),
                },
                None => Err(()),
            },
        };
        match (ok, dims, eps) {
            (true, Some(dims), Ok(eps)) => self.push(
                Op::Norm {
                    op,
                    x: ids[0],
                    weight: ids[1],
                    bias: op.has_bias().then(|| ids[2]),
                    eps,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    /// `batch_norm(input, running_mean, running_var, weight = None, bias =
    /// None, training = false, momentum = 0.1, eps = 1e-5)`, PyTorch's
    /// `F.batch_norm`: a composite of graph ops, so the planner fuses it
    /// and `#[grad]` differentiates it through its parts. The statistics
    /// are `[C]` (`C` is `input`'s dim 1), broadcast as `[C, 1, ..]`:
    /// inference normalises with the running statistics (an affine per
    /// channel); `training = true` with the batch's mean and biased
    /// variance over every dim but 1 (means over one dim at a time, the
    /// counts being equal). The running statistics are not updated here
    /// (a generated function is pure; `momentum` is accepted for
    /// PyTorch's argument order): `BatchNorm::update_running_stats` does
    /// it outside.
    pub(super) fn batch_norm(&mut self, def: &OpDef, args: &[Arg], e: &Expr) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, false, args, e) else {
            for x in args {
                self.expr(&x.value);
            }
            return self.error_node(e);
        };
        let is_none = |x: &&Expr| matches!(&x.kind, ExprKind::Var(i) if i == "None");
        // The tensors given: input, running_mean, running_var, then the
        // weight and the bias unless left out or `None`.
        let mut xs: Vec<&Expr> = vec![
            a[0].expect("required"),
            a[1].expect("required"),
            a[2].expect("required"),
        ];
        let weight = a[3].filter(|x| !is_none(x));
        let bias = a[4].filter(|x| !is_none(x));
        xs.extend(weight);
        xs.extend(bias);
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let training = match a[5] {
            None => Some(false),
            Some(t) => self.flag_arg(t, name, "training"),
        };
        if let Some(m) = a[6].filter(|x| !is_none(x)) {
            // Read for its errors only: the update happens outside.
            self.expr(m);
        }
        let ops: Vec<Option<Operand>> = (0..xs.len())
            .map(|i| self.tensor(ids[i], xs[i], name))
            .collect();
        let eps_expr = a[7].filter(|x| !is_none(x));
        if ops.iter().any(|o| o.is_none()) {
            if let Some(x) = eps_expr {
                self.expr(x);
            }
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree(name, &ops, 0);
        let ok = !agreed.ok || self.need_float(name, &ops[0]);
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let params: Vec<(&str, &[Dim])> = (1..xs.len())
            .map(|i| (names[i].as_str(), &ops[i].ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        let dims = self.ruled(
            rules::batch_norm(name, (&names[0], &ops[0].ty.dims), &params),
            &spans,
        );
        let eps = match eps_expr {
            None => Some(None),
            Some(x) => match self.scalar_operand(x, &ops[0], name) {
                Some(id) => match self.graph.nodes[id].op {
                    Op::Lit { value, .. } if value.is_nan() || value < 0.0 => {
                        self.error(
                            &x.sp,
                            format!("`eps = {x}` of `{name}` is negative: it is added to the variance under a square root, so it must be zero or positive; leave it out for PyTorch's default, 1e-5"),
                        );
                        None
                    }
                    _ => Some(Some(id)),
                },
                None => None,
            },
        };
        let (true, Some(dims), Some(eps), Some(training)) = (ok, dims, eps, training) else {
            return self.error_node(e);
        };
        let out = Self::out_ty(&agreed, dims.clone());
        let ty = |d: Vec<Dim>| {
            Ty::Tensor(TensorTy {
                dims: d,
                ..ops[0].ty.clone()
            })
        };
        let c = dims[1].clone();
        // `[C, 1, ..]`: a statistic per channel against `[N, C, ..]`.
        let mut col = vec![c.clone()];
        col.extend((2..dims.len()).map(|_| Dim::constant(1)));
        let x = ids[0];
        let per_channel = |me: &mut Self, id: NodeId| {
            me.push(Op::Reshape { x: id, view: false }, ty(col.clone()), e)
        };
        // The mean over every dim but 1, one dim at a time from the last.
        let channel_mean = |me: &mut Self, id: NodeId| {
            let mut cur = id;
            let mut d = dims.clone();
            for dim in (2..dims.len()).rev().chain([0]) {
                d.remove(dim);
                cur = me.push(
                    Op::Reduce {
                        op: ReduceOp::Mean,
                        x: cur,
                        dim: Some(dim),
                    },
                    ty(d.clone()),
                    e,
                );
            }
            cur
        };
        let (dev, var) = if training {
            let mean = channel_mean(self, x);
            let mean = per_channel(self, mean);
            let dev = self.push(Op::Binary(BinaryOp::Sub, x, mean), out.clone(), e);
            let sq = self.push(Op::Binary(BinaryOp::Mul, dev, dev), out.clone(), e);
            let var = channel_mean(self, sq);
            (dev, per_channel(self, var))
        } else {
            let mean = per_channel(self, ids[1]);
            let dev = self.push(Op::Binary(BinaryOp::Sub, x, mean), out.clone(), e);
            (dev, per_channel(self, ids[2]))
        };
        let eps = match eps {
            Some(id) => id,
            None => self.push(
                Op::Lit {
                    value: 1e-5,
                    int: false,
                },
                Ty::Scalar(ScalarTy::FloatLit),
                e,
            ),
        };
        let var_ty = self.graph.nodes[var].ty.clone();
        let shifted = self.push(Op::Binary(BinaryOp::Add, var, eps), var_ty.clone(), e);
        let rstd = self.push(Op::Unary(UnaryOp::Rsqrt, shifted), var_ty, e);
        let mut y = self.push(Op::Binary(BinaryOp::Mul, dev, rstd), out.clone(), e);
        if weight.is_some() {
            let w = per_channel(self, ids[3]);
            y = self.push(Op::Binary(BinaryOp::Mul, y, w), out.clone(), e);
        }
        if bias.is_some() {
            let b = per_channel(self, ids[xs.len() - 1]);
            y = self.push(Op::Binary(BinaryOp::Add, y, b), out, e);
        }
        y
    }

    /// `rope(input, cos, sin)`: a float `input` of dims `[.., T, D]` (`D`
    /// even) and `cos`, `sin` of dims `[T, D]`, on its device in its dtype.
    pub(super) fn rope(&mut self, def: &OpDef, args: &[Arg], e: &Expr) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, false, args, e) else {
            return self.error_node(e);
        };
        let xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = (0..3).map(|i| self.tensor(ids[i], xs[i], name)).collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree(name, &ops, 0);
        let ok = !agreed.ok || self.need_float(name, &ops[0]);
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        let dims = self.ruled(
            rules::rope(
                name,
                (&names[0], &ops[0].ty.dims),
                (&names[1], &ops[1].ty.dims),
                (&names[2], &ops[2].ty.dims),
            ),
            &spans,
        );
        match (ok, dims) {
            (true, Some(dims)) => self.push(
                Op::Rope {
                    x: ids[0],
                    cos: ids[1],
                    sin: ids[2],
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    /// `x.t()`, `x.permute([..])`, `x.transpose(d0, d1)`: the same
    /// elements in another dim order.
    pub(super) fn reorder(
        &mut self,
        name: &str,
        rid: NodeId,
        o: Operand<'_>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let text = o.ex.to_string();
        let (op, rule) = match name {
            "t" => {
                if !args.is_empty() {
                    self.error(&e.sp, "`t` takes no arguments");
                }
                (Op::T(rid), rules::t("t", (&text, &o.ty.dims)))
            }
            "permute" => {
                let list: Vec<&Expr> = match args {
                    [Arg { name: None, value }] => match &value.kind {
                        ExprKind::Array(xs) => xs.iter().collect(),
                        _ => vec![value],
                    },
                    _ => args.iter().map(|a| &a.value).collect(),
                };
                let mut perm = Vec::new();
                for x in list {
                    match self.dim_arg(x, "permute", &o) {
                        Some(d) => perm.push(d),
                        None => return self.error_node(e),
                    }
                }
                let rule = rules::permute("permute", (&text, &o.ty.dims), &perm);
                (Op::Permute(rid, perm), rule)
            }
            _ => {
                let Some(a) = self.bind_args("transpose", args, &["dim0", "dim1"], 2, e) else {
                    return self.error_node(e);
                };
                let d0 = self.dim_arg(a[0].expect("required"), "transpose", &o);
                let d1 = self.dim_arg(a[1].expect("required"), "transpose", &o);
                let (Some(d0), Some(d1)) = (d0, d1) else {
                    return self.error_node(e);
                };
                let rule = rules::transpose("transpose", (&text, &o.ty.dims), d0, d1);
                (Op::Transpose(rid, d0, d1), rule)
            }
        };
        match rule {
            Ok(dims) => self.push(op, Ty::Tensor(TensorTy { dims, ..o.ty }), e),
            Err(err) => {
                self.error(&e.sp, err.message);
                self.error_node(e)
            }
        }
    }

    /// A dim of a reshape target, with `-1` allowed.
    pub(super) fn target_dim(&mut self, x: &Expr) -> Option<Option<Dim>> {
        fn go(x: &Expr, symbols: &Symbols) -> Result<Option<Dim>, String> {
            match &x.kind {
                ExprKind::Int(n) => Ok(Some(Dim::constant(*n as i64))),
                ExprKind::Neg(inner) if matches!(inner.kind, ExprKind::Int(1)) => Ok(None),
                ExprKind::Item(s) => Ok(Some(Dim::sym(s))),
                ExprKind::Var(v) => {
                    let s = v.to_string();
                    match symbols.kind(&s) {
                        Some(SymKind::Generic | SymKind::ConstItem | SymKind::Runtime(Some(_))) => Ok(Some(Dim::sym(&s))),
                        _ => Err(format!(
                            "unknown dim `{s}`: use a literal, a const generic, a `const` item, a dim named in a parameter's shape, or `-1`"
                        )),
                    }
                }
                ExprKind::Binary(op @ (BinOp::Add | BinOp::Mul), a, b) => {
                    let (Some(a), Some(b)) = (go(a, symbols)?, go(b, symbols)?) else {
                        return Err("`-1` stands alone".to_string());
                    };
                    Ok(Some(if *op == BinOp::Add {
                        a.add(&b)
                    } else {
                        a.mul(&b)
                    }))
                }
                _ => Err("a dim is a literal, a name, `+`/`*` of those, or `-1`".to_string()),
            }
        }
        match go(x, &self.sig.symbols) {
            Ok(d) => Some(d),
            Err(m) => {
                self.error(&x.sp, m);
                None
            }
        }
    }

    pub(super) fn reshape(
        &mut self,
        name: &str,
        (view, unordered): (bool, bool),
        rid: NodeId,
        o: Operand<'_>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let (list, list_sp): (Vec<&Expr>, Sp) = match args {
            [Arg { name: None, value }] => match &value.kind {
                ExprKind::Array(xs) => (xs.iter().collect(), value.sp.clone()),
                _ => (vec![value], value.sp.clone()),
            },
            [] => {
                self.error(
                    &e.sp,
                    format!("`{name}` needs the new shape: `x.{name}([..])`"),
                );
                return self.error_node(e);
            }
            _ => {
                let sp = Sp::join(&args[0].value.sp, &args[args.len() - 1].value.sp);
                (args.iter().map(|a| &a.value).collect(), sp)
            }
        };
        let mut dims: Vec<Option<Dim>> = Vec::new();
        for x in &list {
            match self.target_dim(x) {
                Some(d) => dims.push(d),
                None => return self.error_node(e),
            }
        }
        let infer: Vec<usize> = (0..dims.len()).filter(|&i| dims[i].is_none()).collect();
        if infer.len() > 1 {
            self.error(&list[infer[1]].sp, "only one dim can be `-1`");
            return self.error_node(e);
        }
        let total = numel(&o.ty.dims);
        if let Some(&i) = infer.first() {
            let known: Vec<Dim> = dims.iter().flatten().cloned().collect();
            let rest = numel(&known);
            match total.div_exact(&rest) {
                Some(d) => dims[i] = Some(d),
                None => {
                    self.error(
                        &list[i].sp,
                        format!(
                            "`{name}` of `{}` {} ({total} elements) cannot infer `-1`: {total} is not a multiple of {rest}",
                            o.ex,
                            fmt_shape(&o.ty.dims),
                        ),
                    );
                    return self.error_node(e);
                }
            }
        }
        let dims: Vec<Dim> = dims.into_iter().map(|d| d.expect("inferred")).collect();
        if dims.len() > 6 {
            self.error(&list_sp, "tensors have at most 6 dims");
            return self.error_node(e);
        }
        if let Err(err) = rules::reshape(name, (&o.ex.to_string(), &o.ty.dims), &dims) {
            self.error(&list_sp, err.message);
            return self.error_node(e);
        }
        if !unordered {
            if let Some(m) = reorder_message(name, view, &o, &dims, &list) {
                self.error(&list_sp, m);
                return self.error_node(e);
            }
        }
        self.push(
            Op::Reshape { x: rid, view },
            Ty::Tensor(TensorTy { dims, ..o.ty }),
            e,
        )
    }

    /// `x.unsqueeze(dim)` and `x.squeeze(dim)`: a size-1 dim in or out,
    /// as a view (the elements keep their order).
    pub(super) fn unsqueeze(
        &mut self,
        name: &str,
        rid: NodeId,
        o: Operand<'_>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let Some(a) = self.bind_args(name, args, &["dim"], 1, e) else {
            return self.error_node(e);
        };
        let x = a[0].expect("required");
        let text = o.ex.to_string();
        let rule = if name == "unsqueeze" {
            // One more dim to choose from: `-1` appends.
            let d = self.int_arg(x, &format!("the dim of `{name}`"));
            let Some(d) = d else {
                return self.error_node(e);
            };
            match rules::normalize_dim(name, &text, d, o.ty.dims.len() + 1) {
                Ok(d) => rules::unsqueeze(name, (&text, &o.ty.dims), d),
                Err(err) => Err(err),
            }
        } else {
            let Some(d) = self.dim_arg(x, name, &o) else {
                return self.error_node(e);
            };
            rules::squeeze(name, (&text, &o.ty.dims), d)
        };
        match rule {
            Ok(dims) => self.push(
                Op::Reshape { x: rid, view: true },
                Ty::Tensor(TensorTy { dims, ..o.ty }),
                e,
            ),
            Err(err) => {
                self.error(&x.sp, err.message);
                self.error_node(e)
            }
        }
    }

    pub(super) fn reduce(
        &mut self,
        name: &str,
        rid: NodeId,
        o: Operand<'_>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let op = match name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            "argmax" => ReduceOp::ArgMax,
            _ => ReduceOp::ArgMin,
        };
        // `a.max(b)` with a tensor or scalar is the elementwise maximum.
        if let ([Arg { name: None, value }], ReduceOp::Max | ReduceOp::Min) = (args, op) {
            if !matches!(value.kind, ExprKind::Int(_) | ExprKind::Neg(_)) {
                let iy = self.expr(value);
                let bop = if op == ReduceOp::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                return self.binary(bop, (rid, o.ex), (iy, value), e);
            }
        }
        let Some(a) = self.bind_args(name, args, &["dim", "keepdim"], 0, e) else {
            return self.error_node(e);
        };
        let keepdim = match a[1] {
            None => false,
            Some(k) => match self.flag_arg(k, name, "keepdim") {
                Some(k) => k,
                None => return self.error_node(e),
            },
        };
        let ok = if op == ReduceOp::Mean {
            self.need_float(name, &o)
        } else {
            self.need_numeric(name, &o)
        };
        let dim = match a[0] {
            None if op.returns_index() => {
                self.error(&e.sp, format!("`{name}` needs a dim: `x.{name}(1)`"));
                return self.error_node(e);
            }
            None => None,
            Some(d) => match self.dim_arg(d, name, &o) {
                Some(d) => Some(d),
                None => return self.error_node(e),
            },
        };
        if !ok {
            return self.error_node(e);
        }
        if let (Some(d), Some(x)) = (dim, a[0]) {
            if let Err(err) = rules::reduce_size_one(name, (&o.ex.to_string(), &o.ty.dims), d) {
                self.error(&x.sp, err.message);
                return self.error_node(e);
            }
        }
        let dims = match dim {
            None => vec![],
            Some(d) => match rules::reduce(name, (&o.ex.to_string(), &o.ty.dims), d, false) {
                Ok(dims) => dims,
                Err(err) => {
                    self.error(&e.sp, err.message);
                    return self.error_node(e);
                }
            },
        };
        let dtype = if op.returns_index() {
            Dt::Kind(DTypeKind::I64)
        } else {
            o.ty.dtype
        };
        let ty = |dims| {
            Ty::Tensor(TensorTy {
                device: o.ty.device,
                dtype,
                dims,
            })
        };
        let reduced = self.push(Op::Reduce { op, x: rid, dim }, ty(dims), e);
        match keepdim {
            false => reduced,
            true => self.keep_dims(reduced, &o, dim, ty, e),
        }
    }

    /// A reduction's result with its reduced dims back as 1 (`keepdim =
    /// true`): a view of the fresh result.
    fn keep_dims(
        &mut self,
        reduced: NodeId,
        o: &Operand<'_>,
        dim: Option<usize>,
        ty: impl Fn(Vec<Dim>) -> Ty,
        e: &Expr,
    ) -> NodeId {
        let kept = match dim {
            Some(d) => rules::reduce("keepdim", (&o.ex.to_string(), &o.ty.dims), d, true)
                .expect("checked without keepdim"),
            None => vec![Dim::constant(1); o.ty.dims.len()],
        };
        self.push(
            Op::Reshape {
                x: reduced,
                view: true,
            },
            ty(kept),
            e,
        )
    }

    /// `x.var(dim, correction = 1, keepdim = false)`: the mean (its dim
    /// kept), the squared deviations, their sum scaled by
    /// `1 / (n - correction)`; every step a node the planner fuses.
    pub(super) fn var(&mut self, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let name = "var";
        let Some(a) = self.bind_args(name, args, &["dim", "correction", "keepdim"], 0, e) else {
            return self.error_node(e);
        };
        if !self.need_float(name, &o) {
            return self.error_node(e);
        }
        let dim = match a[0] {
            None => None,
            Some(d) => match self.dim_arg(d, name, &o) {
                Some(d) => Some(d),
                None => return self.error_node(e),
            },
        };
        let correction = match a[1] {
            None => 1,
            Some(c) => match self.int_arg(c, "the `correction` of `var`") {
                Some(c) if c >= 0 => c as usize,
                Some(_) => {
                    self.error(&c.sp, "`correction` is a count of at least 0 (1: the sample variance, 0: the population's)");
                    return self.error_node(e);
                }
                None => return self.error_node(e),
            },
        };
        let keepdim = match a[2] {
            None => false,
            Some(k) => match self.flag_arg(k, name, "keepdim") {
                Some(k) => k,
                None => return self.error_node(e),
            },
        };
        let text = o.ex.to_string();
        if let (Some(d), Some(x)) = (dim, a[0]) {
            if let Err(err) = rules::reduce_size_one(name, (&text, &o.ty.dims), d) {
                self.error(&x.sp, err.message);
                return self.error_node(e);
            }
        }
        // The count of reduced elements; a run-time one has no literal.
        let n = match dim {
            Some(d) => o.ty.dims[d].clone(),
            None => numel(&o.ty.dims),
        };
        let scale = match n.as_constant() {
            // PyTorch divides by `max(0, n - correction)`.
            Some(n) => 1.0 / (n as f64 - correction as f64).max(0.0),
            None if correction == 0 => 0.0,
            None => {
                let at = a[1].or(a[0]).map_or(&e.sp, |x| &x.sp);
                self.error(
                    at,
                    format!("`var` with `correction = {correction}` over `{text}`'s dims {}: the count {n} is known only at run time; use `correction = 0` (the population variance, a mean) or a static dim", fmt_shape(&o.ty.dims)),
                );
                return self.error_node(e);
            }
        };
        let reduced = match dim {
            Some(d) => rules::reduce(name, (&text, &o.ty.dims), d, false).expect("dim checked"),
            None => vec![],
        };
        let ty = |dims| {
            Ty::Tensor(TensorTy {
                dims,
                ..o.ty.clone()
            })
        };
        let mean = self.push(
            Op::Reduce {
                op: ReduceOp::Mean,
                x: rid,
                dim,
            },
            ty(reduced.clone()),
            e,
        );
        let mean = self.keep_dims(mean, &o, dim, ty, e);
        let dev = self.push(
            Op::Binary(BinaryOp::Sub, rid, mean),
            ty(o.ty.dims.clone()),
            e,
        );
        let sq = self.push(
            Op::Binary(BinaryOp::Mul, dev, dev),
            ty(o.ty.dims.clone()),
            e,
        );
        let (op, factor) = match n.as_constant() {
            Some(_) => (ReduceOp::Sum, Some(scale)),
            None => (ReduceOp::Mean, None),
        };
        let mut out = self.push(Op::Reduce { op, x: sq, dim }, ty(reduced), e);
        if let Some(f) = factor {
            let lit = self.push(
                Op::Lit {
                    value: f,
                    int: false,
                },
                Ty::Scalar(ScalarTy::FloatLit),
                e,
            );
            out = self.push(
                Op::Binary(BinaryOp::Mul, out, lit),
                self.graph.nodes[out].ty.clone(),
                e,
            );
        }
        match keepdim {
            false => out,
            true => self.keep_dims(out, &o, dim, ty, e),
        }
    }

    pub(super) fn narrow(&mut self, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("narrow", args, &["dim", "start", "length"], 3, e) else {
            return self.error_node(e);
        };
        let (dx, sx, lx) = (
            a[0].expect("required"),
            a[1].expect("required"),
            a[2].expect("required"),
        );
        let dim = self.dim_arg(dx, "narrow", &o);
        let start = self.index_arg(sx, "the start of `narrow`");
        let len = self.size_arg(lx, "narrow", "length");
        let (Some(dim), Some(start), Some((len, len_dim))) = (dim, start, len) else {
            return self.error_node(e);
        };
        if let (IndexArg::Const(s), IndexArg::Const(l)) = (&start, &len) {
            if let Err(err) =
                rules::slice("narrow", (&o.ex.to_string(), &o.ty.dims), dim, *s, s + l)
            {
                self.error(&e.sp, err.message);
                return self.error_node(e);
            }
        }
        let mut dims = o.ty.dims.clone();
        dims[dim] = len_dim;
        self.push(
            Op::Narrow {
                x: rid,
                dim,
                start,
                len,
            },
            Ty::Tensor(TensorTy { dims, ..o.ty }),
            e,
        )
    }

    pub(super) fn index(&mut self, base: &Expr, indices: &[Expr], e: &Expr) -> NodeId {
        let bid = self.expr(base);
        let Some(o) = self.tensor(bid, base, "index") else {
            for i in indices {
                self.expr(i);
            }
            return self.error_node(e);
        };
        if indices.len() > o.ty.dims.len() {
            self.error(
                &e.sp,
                format!(
                    "`{base}` has {} dims but {} indices are given",
                    o.ty.dims.len(),
                    indices.len()
                ),
            );
            return self.error_node(e);
        }
        let mut args = Vec::new();
        let mut ok = true;
        for (k, ix) in indices.iter().enumerate() {
            let arg = match &ix.kind {
                ExprKind::Neg(inner) => match (&inner.kind, o.ty.dims[k].to_usize()) {
                    (ExprKind::Int(n), Some(size)) => {
                        if (*n as usize) > size {
                            self.error(
                                &ix.sp,
                                format!("index {ix} is out of range for dim {k} of `{base}`, which has size {size}: valid indices are -{size}..={}", size as i64 - 1),
                            );
                            ok = false;
                            continue;
                        }
                        Some(IndexArg::Const(size - *n as usize))
                    }
                    (ExprKind::Int(_), None) => {
                        self.error(
                            &ix.sp,
                            format!("a negative index needs a dim known at compile time, and dim {k} of `{base}` is {}", o.ty.dims[k]),
                        );
                        None
                    }
                    _ => self.index_arg(ix, "an index"),
                },
                _ => self.index_arg(ix, "an index"),
            };
            let Some(arg) = arg else {
                ok = false;
                continue;
            };
            if let IndexArg::Const(i) = arg {
                if let Err(err) = rules::index("index", (&base.to_string(), &o.ty.dims), k, i) {
                    self.error(&ix.sp, err.message);
                    ok = false;
                    continue;
                }
            }
            args.push(arg);
        }
        if !ok {
            return self.error_node(e);
        }
        let mut cur = bid;
        let mut dims = o.ty.dims.clone();
        for arg in args {
            dims.remove(0);
            cur = self.push(
                Op::Index {
                    x: cur,
                    dim: 0,
                    index: arg,
                },
                Ty::Tensor(TensorTy {
                    dims: dims.clone(),
                    ..o.ty.clone()
                }),
                e,
            );
        }
        cur
    }
}

/// The error of a reshape whose target does not keep the order of the
/// source's dims ([`regrouping`]), naming the dims that move and the
/// reorder that fixes it; `None` when the dims keep their order or the
/// factors cannot tell.
fn reorder_message(
    name: &str,
    view: bool,
    o: &Operand<'_>,
    to: &[Dim],
    written: &[&Expr],
) -> Option<String> {
    let from = &o.ty.dims;
    let Regrouping::Reordered {
        blocker,
        from_dim,
        partial,
        wanted,
        wanted_dim,
        to_dim,
    } = regrouping(from, to)
    else {
        return None;
    };
    let x = o.ex.to_string();
    let recv = o.ex.receiver_text();
    let texts: Vec<String> = written.iter().map(|w| w.to_string()).collect();
    let part = if partial { "part of " } else { "" };
    let wanted_at = match wanted_dim {
        Some(k) => format!(" ({wanted} is dim {k})"),
        None => String::new(),
    };
    // `view` of moved dims needs a copy, hence `reshape` after a move.
    let copy = if view { " (a copy, so not `view`)" } else { "" };
    let fix = match reorder_fix(from, to) {
        Some(Reorder::Before(perm)) => format!(
            "move the dims first: `{recv}{}.reshape([{}])`{copy}",
            permute_text(&perm),
            texts.join(", ")
        ),
        Some(Reorder::After { order, perm }) => {
            let ordered: Vec<&str> = order.iter().map(|&k| texts[k].as_str()).collect();
            format!(
                "{name} to the dims in `{x}`'s order and move them after: `{recv}.{name}([{}]){}`",
                ordered.join(", "),
                permute_text(&perm)
            )
        }
        None => "move the dims with `.transpose(d0, d1)` or `.permute([..])` first".to_string(),
    };
    let opt_out = if view {
        "view_unordered"
    } else {
        "reshape_unordered"
    };
    Some(format!(
        "`{name}` of `{x}` {} to {} does not keep the order of its dims: dim {to_dim} of the target needs {wanted}, but `{x}` has {blocker} ({part}dim {from_dim}) before it{wanted_at}; a {name} reads the elements in order, so it would mix {blocker} and {wanted} instead of moving them. To move them, {fix}; if mixing them is meant, write `{recv}.{opt_out}([..])`",
        fmt_shape(from),
        // The target as written (`H * Dh`, not the normal form `Dh * H`),
        // with a `-1` resolved.
        fmt_written(&texts, to),
    ))
}

/// A reshape target as written, a `-1` replaced by the dim it stands for.
fn fmt_written(texts: &[String], to: &[Dim]) -> String {
    let dims: Vec<String> = texts
        .iter()
        .zip(to)
        .map(|(t, d)| if t == "-1" { d.to_string() } else { t.clone() })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// `.transpose(a, b)` for a swap of two dims, `.permute([..])` otherwise.
fn permute_text(perm: &[usize]) -> String {
    let moved: Vec<usize> = (0..perm.len()).filter(|&k| perm[k] != k).collect();
    match moved.as_slice() {
        [a, b] => format!(".transpose({a}, {b})"),
        _ => {
            let p: Vec<String> = perm.iter().map(|k| k.to_string()).collect();
            format!(".permute([{}])", p.join(", "))
        }
    }
}
