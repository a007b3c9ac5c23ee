//! Matrix products: `matmul`, `mm`, `bmm`, `dot`, `addmm` and
//! `scaled_dot_product_attention`.

use super::*;

impl<'s, 'k> Checker<'s, 'k> {
    pub(super) fn matmul(
        &mut self,
        name: &str,
        (ix, x): (NodeId, &Expr),
        (iy, y): (NodeId, &Expr),
        e: &Expr,
    ) -> NodeId {
        let (Some(a), Some(b)) = (self.tensor(ix, x, name), self.tensor(iy, y, name)) else {
            return self.error_node(e);
        };
        let agreed = self.agree(name, &[a.clone(), b.clone()], 0);
        let ok = !agreed.ok || self.need_float(name, &a);
        let (sa, sb) = (x.to_string(), y.to_string());
        let (da, db) = ((sa.as_str(), &a.ty.dims[..]), (sb.as_str(), &b.ty.dims[..]));
        let rule = match name {
            "mm" => rules::mm(name, da, db),
            "bmm" => rules::bmm(name, da, db),
            "dot" => rules::dot(name, da, db),
            _ => rules::matmul(name, da, db),
        };
        let Some(dims) = self.ruled(rule, &[&x.sp, &y.sp]) else {
            return self.error_node(e);
        };
        if !ok {
            return self.error_node(e);
        }
        let op = match name {
            "bmm" => Op::Bmm(ix, iy),
            "dot" => Op::Dot(ix, iy),
            _ => Op::MatMul(ix, iy),
        };
        self.push(op, Self::out_ty(&agreed, dims), e)
    }

    pub(super) fn scalar_operand(&mut self, x: &Expr, t: &Operand<'_>, op: &str) -> Option<NodeId> {
        let id = self.expr(x);
        match self.ty(id).clone() {
            Ty::Scalar(s) => self.scalar_fits((id, s), x, t, op).then_some(id),
            Ty::Error => None,
            _ => {
                self.error(
                    &x.sp,
                    format!("`{op}` takes a scalar here, `{x}` is a tensor"),
                );
                None
            }
        }
    }

    pub(super) fn addmm(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args(
            "addmm",
            args,
            &["input", "mat1", "mat2", "beta", "alpha"],
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
        let ops: Vec<Option<Operand>> = (0..3)
            .map(|i| self.tensor(ids[i], xs[i], "addmm"))
            .collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("addmm", &ops, 1);
        let ok = !agreed.ok || self.need_float("addmm", &ops[1]);
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let dims = self.ruled(
            rules::addmm(
                "addmm",
                (&names[0], &ops[0].ty.dims),
                (&names[1], &ops[1].ty.dims),
                (&names[2], &ops[2].ty.dims),
            ),
            &[&xs[0].sp, &xs[1].sp, &xs[2].sp],
        );
        let scale = |i: usize, me: &mut Self| -> Result<Option<NodeId>, ()> {
            match a[i] {
                None => Ok(None),
                Some(x) => me.scalar_operand(x, &ops[1], "addmm").map(Some).ok_or(()),
            }
        };
        let beta = scale(3, self);
        let alpha = scale(4, self);
        match (ok, dims, beta, alpha) {
            (true, Some(dims), Ok(beta), Ok(alpha)) => self.push(
                Op::AddMm {
                    bias: ids[0],
                    m1: ids[1],
                    m2: ids[2],
                    beta,
                    alpha,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    /// `scaled_dot_product_attention(query, key, value, attn_mask = m,
    /// is_causal = true, scale = s, enable_gqa = true)`: float tensors on
    /// one device, a mask that is `bool` or of their dtype, literal flags,
    /// a scalar scale.
    pub(super) fn attention(&mut self, def: &'static OpDef, args: &[Arg], e: &Expr) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, false, args, e) else {
            return self.error_node(e);
        };
        let absent = |x: &Option<&Expr>| match x {
            Some(x) => matches!(&x.kind, ExprKind::Var(v) if v == "None"),
            None => true,
        };
        let xs = [
            a[0].expect("required"),
            a[1].expect("required"),
            a[2].expect("required"),
        ];
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = (0..3).map(|i| self.tensor(ids[i], xs[i], name)).collect();
        let mask = match a[3] {
            Some(m) if !absent(&a[3]) => {
                let id = self.expr(m);
                Some((m, id, self.tensor(id, m, name)))
            }
            _ => None,
        };
        let mut flag = |at: usize, what: &str| match a[at] {
            None => Some(false),
            Some(x) => match &x.kind {
                ExprKind::Bool(b) => Some(*b),
                _ => {
                    self.error(
                        &x.sp,
                        format!("`{name}` takes `true` or `false` for `{what}`, found `{x}`"),
                    );
                    None
                }
            },
        };
        let causal = flag(4, "is_causal");
        let gqa = flag(6, "enable_gqa");
        if ops.iter().any(|o| o.is_none()) || mask.as_ref().is_some_and(|m| m.2.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree(name, &ops, 0);
        let mut ok = agreed.ok && self.need_float(name, &ops[0]);
        if let Some((m, _, Some(mo))) = &mask {
            let dt = mo.ty.dtype;
            if !dt.is_bool() && dt != agreed.dtype {
                self.error(
                    &m.sp,
                    format!(
                        "`{m}` is {dt} but the mask of `{name}` is `bool` (true = takes part) or of the tensors' dtype {}: cast with `{}.cast::<bool>()` or `{}.cast::<{}>()`",
                        agreed.dtype,
                        m.receiver_text(),
                        m.receiver_text(),
                        agreed.dtype
                    ),
                );
                ok = false;
            }
            if mo.ty.device != agreed.device {
                self.error(
                    &m.sp,
                    format!(
                        "`{m}` is on {} but `{name}` runs on {}: move it with `{}.to_device::<{}>()`",
                        mo.ty.device,
                        agreed.device,
                        m.receiver_text(),
                        agreed.device
                    ),
                );
                ok = false;
            }
        }
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let mask_name = mask.as_ref().map(|m| m.0.to_string());
        let mask_dims = mask
            .as_ref()
            .and_then(|m| m.2.as_ref())
            .map(|o| o.ty.dims.clone());
        let mask_sp = mask.as_ref().map_or(&e.sp, |m| &m.0.sp);
        let dims = self.ruled(
            rules::attention(
                name,
                (&names[0], &ops[0].ty.dims),
                (&names[1], &ops[1].ty.dims),
                (&names[2], &ops[2].ty.dims),
                mask_name.as_deref().zip(mask_dims.as_deref()),
                causal.unwrap_or(false),
                gqa.unwrap_or(false),
            ),
            &[&xs[0].sp, &xs[1].sp, &xs[2].sp, mask_sp],
        );
        let scale = match a[5] {
            Some(x) if !absent(&a[5]) => self.scalar_operand(x, &ops[0], name).map(Some),
            _ => Some(None),
        };
        match (ok, dims, causal, scale, gqa) {
            (true, Some(dims), Some(causal), Some(scale), Some(gqa)) => self.push(
                Op::Attention {
                    q: ids[0],
                    k: ids[1],
                    v: ids[2],
                    mask: mask.map(|m| m.1),
                    causal,
                    scale,
                    gqa,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }
}
