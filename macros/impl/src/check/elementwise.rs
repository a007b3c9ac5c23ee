//! Elementwise work: unary and binary ops (with scalars and broadcasting),
//! `addcmul` and `#[kernel]` calls.

use super::*;

impl<'s, 'k> Checker<'s, 'k> {
    /// The common type of two scalars.
    pub(super) fn scalar_join(&mut self, a: ScalarTy, b: ScalarTy, e: &Expr) -> Option<ScalarTy> {
        use ScalarTy::*;
        Some(match (a, b) {
            (FloatLit, FloatLit) | (FloatLit, IntLit) | (IntLit, FloatLit) => FloatLit,
            (IntLit, IntLit) => IntLit,
            (Of(k), IntLit) | (IntLit, Of(k)) => Of(k),
            (Of(k), FloatLit) | (FloatLit, Of(k)) if ScalarTy::Of(k).is_float() => Of(k),
            (Of(k), FloatLit) | (FloatLit, Of(k)) => {
                self.error(
                    &e.sp,
                    format!("a float literal with a {k} scalar in `{e}`: use an integer literal"),
                );
                return None;
            }
            (Of(x), Of(y)) if x == y => Of(x),
            (Of(x), Of(y)) => {
                self.error(
                    &e.sp,
                    format!("`{e}` mixes a {x} scalar with a {y} scalar: tensorfn never converts silently; give both parameters one type"),
                );
                return None;
            }
        })
    }

    /// Checks that a scalar can join a tensor of dtype `d` (converted to it).
    pub(super) fn scalar_fits(
        &mut self,
        (sid, s): (NodeId, ScalarTy),
        sx: &Expr,
        t: &Operand<'_>,
        op: &str,
    ) -> bool {
        if t.ty.dtype.is_bool() {
            self.error(
                &t.ex.sp,
                format!(
                    "`{op}` needs numbers but `{}` is bool: cast with `{}.cast::<f32>()`",
                    t.ex,
                    t.ex.receiver_text()
                ),
            );
            return false;
        }
        if t.ty.dtype.may_be_bool() {
            return self.need_numeric(op, t);
        }
        if s.is_float() && !t.ty.dtype.is_float() {
            let fix = match t.ty.dtype {
                Dt::Param(n, b) => format!(
                    "`{n}: {}` admits integer dtypes: bound it `{n}: Float` or use an integer",
                    b.trait_name()
                ),
                Dt::Kind(_) => format!(
                    "tensorfn never converts silently; cast the tensor with `{}.cast::<f32>()` or use an integer",
                    t.ex.receiver_text()
                ),
            };
            self.error(
                &sx.sp,
                format!("`{sx}` is a float but `{}` is {}: {fix}", t.ex, t.ty.dtype),
            );
            return false;
        }
        if s == ScalarTy::Of(ScalarKind::DType(DTypeKind::Bool)) {
            self.error(
                &sx.sp,
                format!("`{sx}` is a bool: arithmetic needs a number"),
            );
            return false;
        }
        // A literal must be a value of the tensor's integer dtype.
        if let (Op::Lit { value, .. }, Some((lo, hi))) =
            (&self.graph.nodes[sid].op, int_range(t.ty.dtype))
        {
            if *value < lo || *value > hi {
                self.error(
                    &sx.sp,
                    format!(
                        "`{sx}` is out of range for `{}`, which is {} ({lo}..={hi}): cast the tensor first, e.g. `{}.cast::<i64>()`",
                        t.ex,
                        t.ty.dtype,
                        t.ex.receiver_text()
                    ),
                );
                return false;
            }
        }
        true
    }

    pub(super) fn unary(&mut self, op: UnaryOp, a: NodeId, ax: &Expr, e: &Expr) -> NodeId {
        match self.ty(a).clone() {
            Ty::Error => self.error_node(e),
            Ty::Scalar(s) => {
                if let Op::Lit { value, int } = self.graph.nodes[a].op {
                    let int = int && op == UnaryOp::Neg;
                    let v = op.eval_f64(value);
                    let ty = if int {
                        ScalarTy::IntLit
                    } else {
                        ScalarTy::FloatLit
                    };
                    return self.push(Op::Lit { value: v, int }, Ty::Scalar(ty), e);
                }
                if op.needs_float() && !s.is_float() {
                    self.error(
                        &ax.sp,
                        format!("`{}` needs a float, `{ax}` is {s}", op.name()),
                    );
                    return self.error_node(e);
                }
                self.push(Op::Unary(op, a), Ty::Scalar(s), e)
            }
            _ => {
                let Some(o) = self.tensor(a, ax, op.name()) else {
                    return self.error_node(e);
                };
                let ok = if op.needs_float() {
                    self.need_float(op.name(), &o)
                } else {
                    self.need_numeric(op.name(), &o)
                };
                if !ok {
                    return self.error_node(e);
                }
                self.push(Op::Unary(op, a), Ty::Tensor(o.ty), e)
            }
        }
    }

    pub(super) fn binary(
        &mut self,
        op: BinaryOp,
        a: (NodeId, &Expr),
        b: (NodeId, &Expr),
        e: &Expr,
    ) -> NodeId {
        let label = op_label(op);
        let (ta, tb) = (self.ty(a.0).clone(), self.ty(b.0).clone());
        if let (Ty::Scalar(sa), Ty::Scalar(sb)) = (&ta, &tb) {
            let Some(s) = self.scalar_join(*sa, *sb, e) else {
                return self.error_node(e);
            };
            if let (Op::Lit { value: x, int: ix }, Op::Lit { value: y, int: iy }) =
                (&self.graph.nodes[a.0].op, &self.graph.nodes[b.0].op)
            {
                let int = *ix && *iy && !op.needs_float();
                let mut v = op.eval_f64(*x, *y);
                if int {
                    v = if op == BinaryOp::Div && *y == 0.0 {
                        0.0
                    } else {
                        v.trunc()
                    };
                }
                return self.push(Op::Lit { value: v, int }, Ty::Scalar(s), e);
            }
            return self.push(Op::Binary(op, a.0, b.0), Ty::Scalar(s), e);
        }
        match self.elementwise_pair(label, op.needs_float(), a, b) {
            Some(ty) => self.push(Op::Binary(op, a.0, b.0), Ty::Tensor(ty), e),
            None => self.error_node(e),
        }
    }

    /// The type of an elementwise result of two operands, tensors or a
    /// scalar with a tensor, in the dtype they share (`float_only` ops need
    /// a float one); `None` once an error is reported.
    fn elementwise_pair(
        &mut self,
        label: &str,
        float_only: bool,
        a: (NodeId, &Expr),
        b: (NodeId, &Expr),
    ) -> Option<TensorTy> {
        let (ta, tb) = (self.ty(a.0).clone(), self.ty(b.0).clone());
        match (&ta, &tb) {
            (Ty::Error, _) | (_, Ty::Error) => None,
            (Ty::Scalar(_), Ty::Scalar(_)) => {
                self.error(
                    &a.1.sp,
                    format!("`{label}` of two scalars is not a tensor: make one operand a tensor"),
                );
                None
            }
            (Ty::Scalar(s), _) | (_, Ty::Scalar(s)) => {
                let scalar_first = matches!(ta, Ty::Scalar(_));
                let (sx, tx, tid, sid) = if scalar_first {
                    (a.1, b.1, b.0, a.0)
                } else {
                    (b.1, a.1, a.0, b.0)
                };
                let o = self.tensor(tid, tx, label)?;
                if !self.scalar_fits((sid, *s), sx, &o, label) {
                    return None;
                }
                if float_only && !self.need_float(label, &o) {
                    return None;
                }
                Some(o.ty)
            }
            _ => {
                let (Some(oa), Some(ob)) =
                    (self.tensor(a.0, a.1, label), self.tensor(b.0, b.1, label))
                else {
                    return None;
                };
                let agreed = self.agree(label, &[oa.clone(), ob.clone()], 0);
                let mut ok = true;
                if agreed.ok && oa.ty.dtype.may_be_bool() {
                    ok = self.need_numeric(label, &oa);
                }
                if agreed.ok && ok && float_only {
                    ok = self.need_float(label, &oa);
                }
                let sa = a.1.to_string();
                let sb = b.1.to_string();
                let dims = self.ruled(
                    rules::broadcast(label, &[(&sa, &oa.ty.dims), (&sb, &ob.ty.dims)]),
                    &[&a.1.sp, &b.1.sp],
                );
                match (ok, dims) {
                    (true, Some(dims)) => match Self::out_ty(&agreed, dims) {
                        Ty::Tensor(t) => Some(t),
                        _ => None,
                    },
                    _ => None,
                }
            }
        }
    }

    /// `a op b`, a `bool` tensor.
    pub(super) fn compare(
        &mut self,
        op: CmpOp,
        a: (NodeId, &Expr),
        b: (NodeId, &Expr),
        e: &Expr,
    ) -> NodeId {
        match self.elementwise_pair(op.symbol(), false, a, b) {
            Some(ty) => self.push(
                Op::Compare(op, a.0, b.0),
                Ty::Tensor(TensorTy {
                    dtype: Dt::Kind(DTypeKind::Bool),
                    ..ty
                }),
                e,
            ),
            None => self.error_node(e),
        }
    }

    /// Checks that `c` is a `bool` tensor (a condition or a mask).
    fn need_bool(&mut self, op: &str, c: (NodeId, &Expr)) -> Option<TensorTy> {
        let o = self.tensor(c.0, c.1, op)?;
        if !o.ty.dtype.is_bool() {
            self.error(
                &c.1.sp,
                format!(
                    "`{op}` takes a `bool` tensor for `{}`, but it is {}: compare to make one, e.g. `{} > 0.0`",
                    c.1, o.ty.dtype, c.1
                ),
            );
            return None;
        }
        Some(o.ty)
    }

    /// `where_(cond, a, b)`: `a` where `cond`, else `b`, all broadcast.
    pub(super) fn where_(
        &mut self,
        label: &str,
        c: (NodeId, &Expr),
        a: (NodeId, &Expr),
        b: (NodeId, &Expr),
        e: &Expr,
    ) -> NodeId {
        if let (Ty::Scalar(sa), Ty::Scalar(sb)) = (self.ty(a.0).clone(), self.ty(b.0).clone()) {
            return self.where_scalars(label, c, (a.0, sa), (b.0, sb), e);
        }
        let value = self.elementwise_pair(label, false, a, b);
        let Some(cond) = self.need_bool(label, c) else {
            return self.error_node(e);
        };
        let Some(value) = value else {
            return self.error_node(e);
        };
        if cond.device != value.device {
            self.error(
                &c.1.sp,
                format!(
                    "`{}` is on {} but the values are on {}: move it with `{}.to_device::<{}>()`",
                    c.1, cond.device, value.device, c.1, value.device
                ),
            );
            return self.error_node(e);
        }
        let sc = c.1.to_string();
        let dims = self.ruled(
            rules::broadcast(label, &[(&sc, &cond.dims), ("the values", &value.dims)]),
            &[&c.1.sp, &e.sp],
        );
        match dims {
            Some(dims) => self.push(
                Op::Where(c.0, a.0, b.0),
                Ty::Tensor(TensorTy { dims, ..value }),
                e,
            ),
            None => self.error_node(e),
        }
    }

    /// `where_(cond, 1.0, 0.0)`: two scalars take the condition's shape
    /// and device, and the dtype PyTorch gives them: a scalar parameter's
    /// (both the same), else `f32` when either is a float literal, `i64`
    /// for two integer literals.
    fn where_scalars(
        &mut self,
        label: &str,
        c: (NodeId, &Expr),
        a: (NodeId, ScalarTy),
        b: (NodeId, ScalarTy),
        e: &Expr,
    ) -> NodeId {
        let Some(cond) = self.need_bool(label, c) else {
            return self.error_node(e);
        };
        let dtype = match (a.1, b.1) {
            (ScalarTy::Of(ScalarKind::DType(x)), ScalarTy::Of(ScalarKind::DType(y))) if x == y => x,
            (ScalarTy::Of(_), _) | (_, ScalarTy::Of(_)) => {
                self.error(
                    &e.sp,
                    format!(
                        "`{label}` of two scalars takes literals or two scalar parameters of one dtype: make one value a tensor (e.g. `x.masked_fill(..)`) or cast the parameters alike"
                    ),
                );
                return self.error_node(e);
            }
            (ScalarTy::IntLit, ScalarTy::IntLit) => DTypeKind::I64,
            _ => DTypeKind::F32,
        };
        self.push(
            Op::Where(c.0, a.0, b.0),
            Ty::Tensor(TensorTy {
                dtype: Dt::Kind(dtype),
                ..cond
            }),
            e,
        )
    }

    /// `x.masked_fill(mask, value)`: `where_(mask, value, x)` where the
    /// mask may not grow `x`.
    pub(super) fn masked_fill(
        &mut self,
        x: (NodeId, &Expr),
        mask: (NodeId, &Expr),
        value: (NodeId, &Expr),
        e: &Expr,
    ) -> NodeId {
        let Some(o) = self.tensor(x.0, x.1, "masked_fill") else {
            return self.error_node(e);
        };
        let Some(m) = self.need_bool("masked_fill", mask) else {
            return self.error_node(e);
        };
        let sm = mask.1.to_string();
        let fits = self.ruled(
            rules::broadcast_to("masked_fill", (&sm, &m.dims), &o.ty.dims),
            &[&mask.1.sp],
        );
        if fits.is_none() {
            return self.error_node(e);
        }
        if m.device != o.ty.device {
            self.error(
                &mask.1.sp,
                format!(
                    "`{}` is on {} but `{}` is on {}: move it with `{}.to_device::<{}>()`",
                    mask.1, m.device, x.1, o.ty.device, mask.1, o.ty.device
                ),
            );
            return self.error_node(e);
        }
        match self.elementwise_pair("masked_fill", false, value, x) {
            Some(_) => self.push(Op::Where(mask.0, value.0, x.0), Ty::Tensor(o.ty), e),
            None => self.error_node(e),
        }
    }

    /// `x.clamp(min, max)`: `maximum` then `minimum`, either bound optional.
    pub(super) fn clamp(
        &mut self,
        x: (NodeId, &Expr),
        min: Option<(&Expr, NodeId)>,
        max: Option<(&Expr, NodeId)>,
        e: &Expr,
    ) -> NodeId {
        if min.is_none() && max.is_none() {
            self.error(
                &e.sp,
                "`clamp` needs `min`, `max` or both: `x.clamp(0.0, 6.0)`, `x.clamp(min = 0.0)`",
            );
            return self.error_node(e);
        }
        let mut v = x.0;
        if let Some((lo, ilo)) = min {
            v = self.binary(BinaryOp::Max, (v, x.1), (ilo, lo), e);
        }
        if let Some((hi, ihi)) = max {
            v = self.binary(BinaryOp::Min, (v, x.1), (ihi, hi), e);
        }
        v
    }

    pub(super) fn addcmul(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args(
            "addcmul",
            args,
            &["input", "tensor1", "tensor2", "value"],
            3,
            e,
        ) else {
            return self.error_node(e);
        };
        let xs = [
            a[0].expect("required"),
            a[1].expect("required"),
            a[2].expect("required"),
        ];
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        // The old PyTorch order `addcmul(input, value, t1, t2)`.
        if matches!(self.ty(ids[1]), Ty::Scalar(_)) {
            self.error(
                &xs[1].sp,
                format!("`addcmul` takes (input, tensor1, tensor2, value): move the scalar `{}` to the end", xs[1]),
            );
            return self.error_node(e);
        }
        let ops: Vec<Option<Operand>> = (0..3)
            .map(|i| self.tensor(ids[i], xs[i], "addcmul"))
            .collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("addcmul", &ops, 0);
        let ok = !agreed.ok || self.need_numeric("addcmul", &ops[0]);
        let value = match a[3] {
            Some(v) => self.scalar_operand(v, &ops[0], "addcmul"),
            None => Some(self.push(
                Op::Lit {
                    value: 1.0,
                    int: true,
                },
                Ty::Scalar(ScalarTy::IntLit),
                e,
            )),
        };
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let dims = self.ruled(
            rules::broadcast(
                "addcmul",
                &[
                    (&names[0], &ops[0].ty.dims),
                    (&names[1], &ops[1].ty.dims),
                    (&names[2], &ops[2].ty.dims),
                ],
            ),
            &[&xs[0].sp, &xs[1].sp, &xs[2].sp],
        );
        match (ok, dims, value) {
            (true, Some(dims), Some(value)) => self.push(
                Op::AddCmul {
                    input: ids[0],
                    t1: ids[1],
                    t2: ids[2],
                    value,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    pub(super) fn kernel_call(&mut self, k: usize, args: &[Arg], e: &Expr) -> NodeId {
        if self.kernels[k].ast.is_row() {
            return self.row_kernel_call(k, args, e);
        }
        let kernel = self.kernels[k].ast;
        let name = kernel.name.to_string();
        let pnames: Vec<String> = kernel.params.iter().map(|p| p.0.to_string()).collect();
        let pref: Vec<&str> = pnames.iter().map(|s| s.as_str()).collect();
        let Some(a) = self.bind_args(&name, args, &pref, pref.len(), e) else {
            return self.error_node(e);
        };
        let xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let mut ok = self.kernels[k].program.is_some();
        let mut tensors: Vec<Operand> = Vec::new();
        for (i, (&id, x)) in ids.iter().zip(&xs).enumerate() {
            let want = kernel.params[i].1;
            match self.ty(id).clone() {
                Ty::Error => ok = false,
                Ty::Scalar(s) => {
                    if s.is_float() && !want.is_float()
                        || s == ScalarTy::Of(ScalarKind::DType(DTypeKind::Bool))
                    {
                        self.error(
                            &x.sp,
                            format!("`{name}` takes {want} for `{}`, `{x}` is {s}", pnames[i]),
                        );
                        ok = false;
                    } else if let ScalarTy::Of(ScalarKind::DType(d)) = s {
                        if d != want {
                            self.error(
                                &x.sp,
                                format!(
                                    "`{x}` is {d} but `{name}` takes {want} for `{}`",
                                    pnames[i]
                                ),
                            );
                            ok = false;
                        }
                    }
                }
                _ => {
                    let Some(o) = self.tensor(id, x, &name) else {
                        ok = false;
                        continue;
                    };
                    if o.ty.dtype != Dt::Kind(want) {
                        self.error(
                            &x.sp,
                            format!(
                                "`{x}` is {} but `{name}` takes {want} for `{}`: cast with `{}.cast::<{want}>()`",
                                o.ty.dtype,
                                pnames[i],
                                x.receiver_text()
                            ),
                        );
                        ok = false;
                    }
                    tensors.push(o);
                }
            }
        }
        let ret = kernel.ret.0;
        if tensors.is_empty() {
            if !ok {
                return self.error_node(e);
            }
            return self.push(
                Op::Kernel {
                    kernel: k,
                    args: ids,
                },
                Ty::Scalar(ScalarTy::Of(ScalarKind::DType(ret))),
                e,
            );
        }
        // Dtypes are fixed per parameter; only devices must agree.
        let devices: Vec<Device> = tensors.iter().map(|o| o.ty.device).collect();
        let dev = pick(&devices, 0, |d| d != Device::Cpu);
        for o in &tensors {
            if o.ty.device != dev {
                self.error(
                    &o.ex.sp,
                    format!(
                        "`{}` is on {} but `{name}` runs on {dev}: move it with `{}.to_device::<{dev}>()`",
                        o.ex,
                        o.ty.device,
                        o.ex.receiver_text()
                    ),
                );
                ok = false;
            }
        }
        let names: Vec<String> = tensors.iter().map(|o| o.ex.to_string()).collect();
        let operands: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&tensors)
            .map(|(n, o)| (n.as_str(), &o.ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = tensors.iter().map(|o| &o.ex.sp).collect();
        let Some(dims) = self.ruled(rules::broadcast(&name, &operands), &spans) else {
            return self.error_node(e);
        };
        if !ok {
            return self.error_node(e);
        }
        self.push(
            Op::Kernel {
                kernel: k,
                args: ids,
            },
            Ty::Tensor(TensorTy {
                device: dev,
                dtype: Dt::Kind(ret),
                dims,
            }),
            e,
        )
    }
}

impl Checker<'_, '_> {
    /// A call to a row kernel: its `Row` arguments are tensors whose last
    /// dims are the rows (one length for all, the first row argument's),
    /// their leading dims broadcast together (`[N]` is one row for every
    /// row); its scalar arguments are scalars. The result has the
    /// broadcast leading dims, then the row for a `Row` result.
    fn row_kernel_call(&mut self, k: usize, args: &[Arg], e: &Expr) -> NodeId {
        let kernel = self.kernels[k].ast;
        let name = kernel.name.to_string();
        let pnames: Vec<String> = kernel.params.iter().map(|p| p.0.to_string()).collect();
        let pref: Vec<&str> = pnames.iter().map(|s| s.as_str()).collect();
        let Some(a) = self.bind_args(&name, args, &pref, pref.len(), e) else {
            return self.error_node(e);
        };
        let xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let mut ok = self.kernels[k].row.is_some();
        let mut rows: Vec<Operand> = Vec::new();
        for (i, (&id, x)) in ids.iter().zip(&xs).enumerate() {
            let want = kernel.params[i].1;
            let pname = &pnames[i];
            if kernel.rows[i] {
                match self.ty(id).clone() {
                    Ty::Error => ok = false,
                    Ty::Tensor(t) => {
                        if t.dtype != Dt::Kind(want) {
                            self.error(
                                &x.sp,
                                format!(
                                    "`{x}` is {} but `{name}` takes rows of {want} for `{pname}`: cast with `{}.cast::<{want}>()`",
                                    t.dtype,
                                    x.receiver_text()
                                ),
                            );
                            ok = false;
                        }
                        if t.dims.is_empty() {
                            self.error(
                                &x.sp,
                                format!("`{x}` is a 0-d tensor, but `{pname}` of `{name}` is a row of its last dim: pass a tensor of rank 1 or more"),
                            );
                            ok = false;
                            continue;
                        }
                        rows.push(Operand { id, ex: x, ty: t });
                    }
                    other => {
                        let what = match other {
                            Ty::Scalar(s) => format!("a scalar ({s})"),
                            _ => "a tuple".to_string(),
                        };
                        self.error(
                            &x.sp,
                            format!("`{pname}` of `{name}` is a `Row<{want}>`: pass a tensor, whose rows are its last dim; `{x}` is {what}"),
                        );
                        ok = false;
                    }
                }
            } else {
                match self.ty(id).clone() {
                    Ty::Error => ok = false,
                    Ty::Scalar(s) => {
                        let fits = match s {
                            ScalarTy::FloatLit => want.is_float(),
                            ScalarTy::IntLit => true,
                            ScalarTy::Of(ScalarKind::DType(d)) => d == want,
                            ScalarTy::Of(ScalarKind::Usize) => !want.is_float(),
                        };
                        if !fits {
                            self.error(
                                &x.sp,
                                format!("`{name}` takes {want} for `{pname}`, `{x}` is {s}"),
                            );
                            ok = false;
                        }
                    }
                    _ => {
                        self.error(
                            &x.sp,
                            format!("`{pname}` of `{name}` is one {want} for every row: pass a scalar (a literal or a scalar parameter), not `{x}`"),
                        );
                        ok = false;
                    }
                }
            }
        }
        if rows.is_empty() {
            return self.error_node(e);
        }
        let devices: Vec<Device> = rows.iter().map(|o| o.ty.device).collect();
        let dev = pick(&devices, 0, |d| d != Device::Cpu);
        for o in &rows {
            if o.ty.device != dev {
                self.error(
                    &o.ex.sp,
                    format!(
                        "`{}` is on {} but `{name}` runs on {dev}: move it with `{}.to_device::<{dev}>()`",
                        o.ex,
                        o.ty.device,
                        o.ex.receiver_text()
                    ),
                );
                ok = false;
            }
        }
        // One row length: the first row argument's.
        let first = &rows[0];
        let n = first.ty.dims.last().expect("rank 1 or more").clone();
        for o in &rows[1..] {
            let m = o.ty.dims.last().expect("rank 1 or more");
            if *m != n {
                self.error(
                    &o.ex.sp,
                    format!(
                        "the rows of `{}` have {m} elements where those of `{}` have {n}: the `Row` arguments of `{name}` share their last dim (`{}` is {}, `{}` is {})",
                        o.ex,
                        first.ex,
                        o.ex,
                        crate::shape::fmt_shape(&o.ty.dims),
                        first.ex,
                        crate::shape::fmt_shape(&first.ty.dims),
                    ),
                );
                ok = false;
            }
        }
        let names: Vec<String> = rows.iter().map(|o| o.ex.to_string()).collect();
        let leading: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&rows)
            .map(|(nm, o)| (nm.as_str(), &o.ty.dims[..o.ty.dims.len() - 1]))
            .collect();
        let spans: Vec<&Sp> = rows.iter().map(|o| &o.ex.sp).collect();
        let Some(mut dims) = self.ruled(rules::broadcast(&name, &leading), &spans) else {
            return self.error_node(e);
        };
        if !ok {
            return self.error_node(e);
        }
        if kernel.ret_row {
            dims.push(n);
        }
        self.push(
            Op::RowKernel {
                kernel: k,
                args: ids,
            },
            Ty::Tensor(TensorTy {
                device: dev,
                dtype: Dt::Kind(kernel.ret.0),
                dims,
            }),
            e,
        )
    }
}

/// The values an integer dtype holds.
fn int_range(d: Dt) -> Option<(f64, f64)> {
    let Dt::Kind(d) = d else { return None };
    match d {
        DTypeKind::U8 => Some((0.0, 255.0)),
        DTypeKind::I32 => Some((i32::MIN as f64, i32::MAX as f64)),
        DTypeKind::I64 => Some((i64::MIN as f64, i64::MAX as f64)),
        _ => None,
    }
}
