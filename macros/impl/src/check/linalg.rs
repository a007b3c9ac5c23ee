//! Matrix products: `matmul`, `mm`, `bmm`, `dot` and `addmm`.

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
}
