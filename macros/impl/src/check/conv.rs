//! `conv2d` and `conv1d`: the operands, the keyword options (an int, a
//! pair `(h, w)` for `conv2d`, `padding = "valid"` or `"same"`) and the
//! output sizes of `rules::conv`.

use super::*;
use tensorfn_core::ops::conv::ConvArgs;

/// `padding` as written: sizes, or `"same"` (resolved from the kernel).
enum Padding {
    Sizes([usize; 2]),
    Same,
}

impl<'s, 'k> Checker<'s, 'k> {
    /// `conv2d(input, weight, bias = None, stride = 1, padding = 0,
    /// dilation = 1, groups = 1)` (`spatial = 2`) or `conv1d` (`spatial =
    /// 1`): float tensors of one dtype and device.
    pub(super) fn conv(&mut self, def: &OpDef, spatial: usize, args: &[Arg], e: &Expr) -> NodeId {
        let name = def.name;
        let Some(a) = self.bind_op(def, false, args, e) else {
            return self.error_node(e);
        };
        let (x_ex, w_ex) = (a[0].expect("required"), a[1].expect("required"));
        let b_ex = a[2];
        let x = self.expr(x_ex);
        let w = self.expr(w_ex);
        let b = b_ex.map(|b| self.expr(b));
        let mut exs = vec![x_ex, w_ex];
        let mut ids = vec![x, w];
        if let (Some(bx), Some(bid)) = (b_ex, b) {
            exs.push(bx);
            ids.push(bid);
        }
        let ops: Vec<Option<Operand>> = ids
            .iter()
            .zip(&exs)
            .map(|(&id, ex)| self.tensor(id, ex, name))
            .collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree(name, &ops, 0);
        let mut ok = agreed.ok && self.need_float(name, &ops[0]);
        let mut pair = |this: &mut Self, i: usize, what: &str, default: usize| -> [usize; 2] {
            match a[i] {
                None => [default; 2],
                Some(v) => match this.conv_sizes(v, name, what, spatial) {
                    Some(p) => p,
                    None => {
                        ok = false;
                        [default; 2]
                    }
                },
            }
        };
        let stride = pair(self, 3, "stride", 1);
        let dilation = pair(self, 5, "dilation", 1);
        let padding = match a[4] {
            Some(v) if matches!(&v.kind, ExprKind::Str(_)) => match &v.kind {
                ExprKind::Str(s) if s == "valid" => Padding::Sizes([0, 0]),
                ExprKind::Str(s) if s == "same" => Padding::Same,
                _ => {
                    self.error(
                        &v.sp,
                        format!("`{name}` takes `padding` as an integer, a pair `(h, w)`, `\"valid\"` (no padding) or `\"same\"` (the input's size), found `{v}`"),
                    );
                    ok = false;
                    Padding::Sizes([0, 0])
                }
            },
            _ => Padding::Sizes(pair(self, 4, "padding", 0)),
        };
        let groups = match a[6] {
            None => 1,
            Some(v) => match self.int_arg(v, &format!("the `groups` of `{name}`")) {
                Some(g) if g >= 1 => g as usize,
                Some(_) => {
                    self.error(
                        &v.sp,
                        format!("`{name}` takes `groups` of at least 1, found `{v}`"),
                    );
                    ok = false;
                    1
                }
                None => {
                    ok = false;
                    1
                }
            },
        };
        let (stride, dilation) = if spatial == 1 {
            ([1, stride[1]], [1, dilation[1]])
        } else {
            (stride, dilation)
        };
        let padding = match padding {
            Padding::Sizes(p) if spatial == 1 => [0, p[1]],
            Padding::Sizes(p) => p,
            Padding::Same => {
                let v = a[4].expect("written");
                match self.same_padding(name, v, &ops[1], spatial, stride, dilation) {
                    Some(p) => p,
                    None => {
                        ok = false;
                        [0, 0]
                    }
                }
            }
        };
        let args = ConvArgs {
            stride,
            padding,
            dilation,
            groups,
        };
        let names: Vec<String> = exs.iter().map(|x| x.to_string()).collect();
        let spans: Vec<&Sp> = exs.iter().map(|x| &x.sp).collect();
        let rule = rules::conv(
            name,
            (&names[0], &ops[0].ty.dims),
            (&names[1], &ops[1].ty.dims),
            ops.get(2)
                .map(|o| (names[2].as_str(), o.ty.dims.as_slice())),
            &args,
            spatial,
        );
        match (ok, self.ruled(rule, &spans)) {
            (true, Some(dims)) => self.push(
                Op::Conv {
                    x,
                    weight: w,
                    bias: b,
                    args,
                    spatial,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    /// A size option: an integer literal, or for `conv2d` a pair `(h, w)`
    /// of them; `[h, w]` (a `conv1d`'s in the width).
    fn conv_sizes(&mut self, v: &Expr, op: &str, what: &str, spatial: usize) -> Option<[usize; 2]> {
        let one = |this: &mut Self, x: &Expr| -> Option<usize> {
            match x.kind {
                ExprKind::Int(n) => Some(n as usize),
                _ => {
                    let form = if spatial == 2 {
                        format!("an integer literal or a pair `({what}_h, {what}_w)`")
                    } else {
                        "an integer literal".to_string()
                    };
                    this.error(
                        &x.sp,
                        format!("`{op}` takes `{what}` as {form}, found `{x}`"),
                    );
                    None
                }
            }
        };
        match &v.kind {
            ExprKind::Tuple(xs) if spatial == 2 && xs.len() == 2 => {
                let (h, w) = (one(self, &xs[0]), one(self, &xs[1]));
                Some([h?, w?])
            }
            ExprKind::Tuple(_) => {
                let form = if spatial == 2 {
                    format!("a pair `({what}_h, {what}_w)` has two entries")
                } else {
                    "`conv1d` has one spatial dim, so an integer literal".to_string()
                };
                self.error(
                    &v.sp,
                    format!("`{op}` takes `{what}` as an integer or a pair: {form}, found `{v}`"),
                );
                None
            }
            _ => one(self, v).map(|n| [n, n]),
        }
    }

    /// `padding = "same"`: PyTorch's, for `stride = 1` and kernels whose
    /// dilated span `d(k-1)` is even (the same zeros on both sides).
    fn same_padding(
        &mut self,
        op: &str,
        v: &Expr,
        w: &Operand<'_>,
        spatial: usize,
        stride: [usize; 2],
        dilation: [usize; 2],
    ) -> Option<[usize; 2]> {
        if stride != [1, 1] {
            self.error(
                &v.sp,
                format!("`{op}` takes `padding = \"same\"` only with `stride = 1` (as PyTorch): give the padding as a number"),
            );
            return None;
        }
        let mut out = [0, 0];
        let wd = &w.ty.dims;
        if wd.len() != 2 + spatial {
            return Some(out);
        }
        for i in 0..spatial {
            let a = 2 - spatial + i;
            let Some(k) = wd[2 + i].to_usize() else {
                self.error(
                    &v.sp,
                    format!("`{op}` computes `padding = \"same\"` from the kernel size, but dim {} of `{}` is `{}`: give the kernel a literal size, or the padding as a number", 2 + i, w.ex, wd[2 + i]),
                );
                return None;
            };
            let span = dilation[a] * k.saturating_sub(1);
            if span % 2 != 0 {
                self.error(
                    &v.sp,
                    format!("`padding = \"same\"` pads `{op}` by {span} in all along a kernel dim of {k} (dilation {}), which does not split evenly over both sides: use an odd kernel size, or give the padding as a number", dilation[a]),
                );
                return None;
            }
            out[a] = span / 2;
        }
        Some(out)
    }
}
