//! `#[kernel]` functions: their scalar bodies checked and built as element
//! programs, [`Kernel`]s of the kernels crate, which fused groups inline
//! where they call them.
//!
//! The body is a small subset of Rust on single elements: literals, the
//! parameters, `let`, `+ - * /`, comparisons, `&& || !`, `if .. else ..`
//! (both branches are evaluated, then one is selected), `as` casts, the
//! math functions of `tensorfn_kernels::UnaryOp` written as functions
//! (`tanh(x)`) or methods (`x.tanh()`, also `x.ln()`), `max`/`min`/`pow`
//! (`x.max(y)`, `x.powf(y)`), the constants `PI`, `E`, `INFINITY` and `NAN`,
//! and calls to other kernels of the invocation.
//!
//! A row kernel (a parameter or the result is a `Row<T>`) is the same
//! body over rows of the last dim: a `Row` parameter is the row's element
//! at each column, a scalar parameter one value for every row, and
//! `sum(e)`, `max(e)`, `min(e)`, `mean(e)` (or `e.sum()`, ..) of a row
//! expression `e` are per-row values (each a [`RowStat`], a pass over the
//! row), which later expressions use like scalars. Rows of `f16` and
//! `bf16` are computed in `f32` and rounded once at the result. The body
//! builds one element program; each reduction's argument is that program
//! up to it (a clone of the builder), its result a new input, so every
//! statistic sees the parameters and the statistics before it.

use crate::ast::KernelFn;
use crate::plan::constant;
use std::collections::HashMap;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::{ElementwiseBuilder, Inst, Kernel, Value};
use tensorfn_kernels::rowkernel::{compute_dtype, RowParam, RowProgram, RowReduce, RowStat};
use tensorfn_kernels::{BinaryOp, CmpOp, UnaryOp};

/// A value while building: a literal whose type comes from its use, or
/// an instruction of known dtype.
#[derive(Clone, Copy, Debug)]
enum V {
    Lit { value: f64, int: bool },
    Typed(Value, DTypeKind),
}

/// Builds the IR of every kernel of an invocation (kernels may call each other, in
/// any order, but not recursively). Returns one program per kernel, `None`
/// where the kernel has an error (reported in the errors).
pub fn build_kernels(kernels: &[&KernelFn]) -> (Vec<Option<Kernel>>, Vec<syn::Error>) {
    let (irs, _, errors) = build_all(kernels);
    (irs, errors)
}

/// [`build_kernels`] with the row kernels' programs: `None` in the first
/// list for a row kernel, in the second for a scalar one (and for either
/// with errors).
pub fn build_all(
    kernels: &[&KernelFn],
) -> (
    Vec<Option<Kernel>>,
    Vec<Option<RowProgram>>,
    Vec<syn::Error>,
) {
    let mut l = KernelBuilder {
        kernels,
        done: vec![None; kernels.len()],
        state: vec![State::Todo; kernels.len()],
        errors: Vec::new(),
    };
    let mut rows = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        if k.is_row() {
            l.state[i] = State::Done;
            l.done[i] = Some(None);
            match KernelBody::new(&mut l, k).run_rows() {
                Ok(p) => rows.push(Some(p)),
                Err(e) => {
                    l.errors.push(e);
                    rows.push(None);
                }
            }
        } else {
            let _ = l.get(i);
            rows.push(None);
        }
    }
    let irs = l.done.into_iter().map(|d| d.flatten()).collect();
    (irs, rows, l.errors)
}

/// The program of row kernel `k` alone (calls to the scalar kernels of
/// `kernels` inlined); its errors were reported by [`build_all`].
pub fn build_row(kernels: &[&KernelFn], k: usize) -> Option<RowProgram> {
    build_all(kernels).1.swap_remove(k)
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Todo,
    Busy,
    Done,
}

struct KernelBuilder<'a> {
    kernels: &'a [&'a KernelFn],
    done: Vec<Option<Option<Kernel>>>,
    state: Vec<State>,
    errors: Vec<syn::Error>,
}

impl KernelBuilder<'_> {
    fn get(&mut self, i: usize) -> Result<Kernel, ()> {
        match self.state[i] {
            State::Done => return self.done[i].clone().flatten().ok_or(()),
            State::Busy => return Err(()),
            State::Todo => {}
        }
        self.state[i] = State::Busy;
        let k = self.kernels[i];
        let result = KernelBody::new(self, k).run();
        let ir = match result {
            Ok(ir) => Some(ir),
            Err(e) => {
                self.errors.push(e);
                None
            }
        };
        self.state[i] = State::Done;
        self.done[i] = Some(ir.clone());
        ir.ok_or(())
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.kernels.iter().position(|k| k.name == name)
    }
}

struct KernelBody<'l, 'a> {
    builder: &'l mut KernelBuilder<'a>,
    kernel: &'a KernelFn,
    /// Reuses identical instructions, as the fused groups' builder does.
    b: ElementwiseBuilder,
    scopes: Vec<HashMap<String, V>>,
    /// The row kernel's state (`None` for a scalar kernel).
    row: Option<RowState>,
}

/// What a row kernel's body has built so far.
struct RowState {
    /// The rows' dtype.
    dtype: DTypeKind,
    /// The input indices of the `Row` parameters.
    row_inputs: Vec<usize>,
    /// The statistics so far.
    stats: Vec<RowStat>,
}

fn err(t: &impl quote::ToTokens, m: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(t, m)
}

impl<'l, 'a> KernelBody<'l, 'a> {
    fn new(builder: &'l mut KernelBuilder<'a>, kernel: &'a KernelFn) -> Self {
        let mut b = ElementwiseBuilder::with_cse();
        let mut scope = HashMap::new();
        let row = kernel.is_row().then(|| RowState {
            dtype: kernel.ret.0,
            row_inputs: Vec::new(),
            stats: Vec::new(),
        });
        for (i, (name, d, _)) in kernel.params.iter().enumerate() {
            let v = b.input(*d);
            let c = compute_dtype(*d);
            let v = if kernel.rows[i] && c != *d {
                V::Typed(b.cast(v, c), c)
            } else {
                V::Typed(v, *d)
            };
            scope.insert(name.to_string(), v);
        }
        let mut body = KernelBody {
            builder,
            kernel,
            b,
            scopes: vec![scope],
            row,
        };
        if let Some(r) = &mut body.row {
            r.row_inputs = (0..kernel.params.len())
                .filter(|&i| kernel.rows[i])
                .collect();
        }
        body
    }

    /// Whether `v` depends on a `Row` parameter (else it is one value per
    /// row).
    fn is_row_value(&self, v: V) -> bool {
        let (V::Typed(v, _), Some(r)) = (v, &self.row) else {
            return false;
        };
        let Ok(k) = self.b.clone().output(v) else {
            return false;
        };
        let insts = k.insts();
        let mut live = vec![false; insts.len()];
        live[k.output().index()] = true;
        for i in (0..insts.len()).rev() {
            if !live[i] {
                continue;
            }
            if let Inst::Input { index, .. } = insts[i] {
                if r.row_inputs.contains(&index) {
                    return true;
                }
            }
            for o in insts[i].operands() {
                live[o.index()] = true;
            }
        }
        false
    }

    /// Checks a row kernel's signature and builds its program.
    fn run_rows(mut self) -> syn::Result<RowProgram> {
        let k = self.kernel;
        let dtype = k.ret.0;
        let first_row = k.rows.iter().position(|&r| r).ok_or_else(|| {
            err(
                &k.name,
                format!(
                    "`{}` returns a `Row` but takes none: give it a `Row<{dtype}>` parameter",
                    k.name
                ),
            )
        })?;
        let row_dtype = k.params[first_row].1;
        let mut params = Vec::new();
        for (i, (name, d, sp)) in k.params.iter().enumerate() {
            if k.rows[i] {
                if *d != row_dtype {
                    return Err(sp.error(format!(
                        "`{name}` is a `Row<{d}>` where `{}` is a `Row<{row_dtype}>`: the rows of a row kernel share one dtype",
                        k.params[first_row].0
                    )));
                }
                params.push(RowParam::Row);
            } else {
                if !matches!(
                    d,
                    DTypeKind::F32 | DTypeKind::F64 | DTypeKind::I32 | DTypeKind::I64
                ) {
                    return Err(sp.error(format!(
                        "a row kernel's scalar parameter is f32, f64, i32 or i64 (rows of f16 and bf16 compute in f32): declare `{name}: f32`"
                    )));
                }
                params.push(RowParam::Scalar(*d));
            }
        }
        let shape = if k.ret_row { "Row<" } else { "" };
        let close = if k.ret_row { ">" } else { "" };
        if dtype != row_dtype {
            return Err(k.ret.1.error(format!(
                "the rows are {row_dtype}: declare the result `{shape}{row_dtype}{close}`"
            )));
        }
        let c = compute_dtype(dtype);
        let body = &k.body;
        let v = self.block(body, Some(c))?;
        if !k.ret_row && self.is_row_value(v) {
            return Err(err(
                &tail(body),
                format!(
                    "this is a row, but `{}` returns one value per row (`-> {dtype}`): reduce it (`sum(..)`, `mean(..)`, `max(..)`, `min(..)`) or declare `-> Row<{dtype}>`",
                    k.name
                ),
            ));
        }
        let out = self.materialise(v, c, &tail(body))?;
        let out = if c != dtype {
            self.b.cast(out, dtype)
        } else {
            out
        };
        let name = &k.name;
        let output = self
            .b
            .output(out)
            .map_err(|e| err(name, format!("`{name}` computes an ill-typed program: {e}")))?;
        let stats = self.row.expect("a row kernel").stats;
        Ok(RowProgram {
            dtype,
            params,
            stats,
            output,
            per_row: !k.ret_row,
        })
    }

    /// `reduce(arg)` in a row kernel: a new statistic.
    fn reduction(&mut self, reduce: RowReduce, arg: &syn::Expr, at: &syn::Expr) -> syn::Result<V> {
        let c = compute_dtype(self.row.as_ref().expect("a row kernel").dtype);
        let v = self.expr(arg, Some(c))?;
        let r = reduce.name();
        if !self.is_row_value(v) {
            return Err(err(
                arg,
                format!(
                    "`{r}` reduces a row, and `{}` is one value per row: reduce an expression of a `Row` parameter",
                    quote::ToTokens::to_token_stream(arg)
                ),
            ));
        }
        let V::Typed(x, d) = v else {
            unreachable!("a row value is typed")
        };
        if d != c {
            return Err(err(
                arg,
                format!("`{r}` of {d} in a row kernel computing in {c}: convert with `as {c}`"),
            ));
        }
        let name = &self.kernel.name;
        let program = self
            .b
            .clone()
            .output(x)
            .map_err(|e| err(at, format!("`{name}` computes an ill-typed program: {e}")))?;
        let s = self.b.input(c);
        self.row
            .as_mut()
            .expect("a row kernel")
            .stats
            .push(RowStat { reduce, program });
        Ok(V::Typed(s, c))
    }

    fn run(mut self) -> syn::Result<Kernel> {
        let ret = self.kernel.ret.0;
        let body = &self.kernel.body;
        let v = self.block(body, Some(ret))?;
        let out = self.materialise(v, ret, body)?;
        let name = &self.kernel.name;
        self.b
            .output(out)
            .map_err(|e| err(name, format!("`{name}` computes an ill-typed program: {e}")))
    }

    fn block(&mut self, b: &syn::Block, want: Option<DTypeKind>) -> syn::Result<V> {
        self.scopes.push(HashMap::new());
        let mut result = None;
        for (i, stmt) in b.stmts.iter().enumerate() {
            let last = i + 1 == b.stmts.len();
            match stmt {
                syn::Stmt::Local(local) => {
                    let (name, ty) = local_pat(&local.pat)?;
                    let init = local
                        .init
                        .as_ref()
                        .ok_or_else(|| err(local, "give the binding a value: `let y = ..;`"))?;
                    let v = self.expr(&init.expr, ty)?;
                    let v = match ty {
                        Some(d) => V::Typed(self.materialise(v, d, &init.expr)?, d),
                        None => v,
                    };
                    self.scopes
                        .last_mut()
                        .expect("a scope is open")
                        .insert(name, v);
                }
                syn::Stmt::Expr(e, None) if last => result = Some(self.expr(e, want)?),
                other => {
                    return Err(err(
                        other,
                        "a kernel body is `let`s followed by the result expression",
                    ))
                }
            }
        }
        self.scopes.pop();
        result.ok_or_else(|| err(b, "the block must end with its value (no `;` after it)"))
    }

    fn lookup(&self, name: &str) -> Option<V> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    /// Gives a literal the dtype `d`, or checks that a value has it.
    fn materialise(&mut self, v: V, d: DTypeKind, at: &impl quote::ToTokens) -> syn::Result<Value> {
        match v {
            V::Lit { value, int } => {
                if !int && !d.is_float() {
                    return Err(err(
                        at,
                        format!("a float literal where {d} is expected: write an integer or cast with `as {d}`"),
                    ));
                }
                Ok(constant(&mut self.b, value, d))
            }
            V::Typed(val, have) if have == d => Ok(val),
            V::Typed(_, have) => Err(err(
                at,
                format!("this is {have} but {d} is expected here: convert with `as {d}`"),
            )),
        }
    }

    /// The common dtype of two operands (a literal takes the other's).
    fn unify(
        &mut self,
        a: V,
        b: V,
        want: Option<DTypeKind>,
        at: &impl quote::ToTokens,
    ) -> syn::Result<(Value, Value, DTypeKind)> {
        let d = match (a, b) {
            (V::Typed(_, da), V::Typed(_, db)) if da != db => {
                return Err(err(
                    at,
                    format!(
                        "the operands are {da} and {db}: convert one with `as {da}` or `as {db}`"
                    ),
                ))
            }
            (V::Typed(_, d), _) | (_, V::Typed(_, d)) => d,
            (V::Lit { int: ia, .. }, V::Lit { int: ib, .. }) => want.unwrap_or(if ia && ib {
                DTypeKind::I32
            } else {
                DTypeKind::F32
            }),
        };
        Ok((self.materialise(a, d, at)?, self.materialise(b, d, at)?, d))
    }

    fn expr(&mut self, e: &syn::Expr, want: Option<DTypeKind>) -> syn::Result<V> {
        use syn::Expr as E;
        match e {
            E::Lit(l) => match &l.lit {
                syn::Lit::Int(i) => Ok(V::Lit {
                    value: i.base10_parse::<u64>()? as f64,
                    int: true,
                }),
                syn::Lit::Float(f) => Ok(V::Lit {
                    value: f.base10_parse()?,
                    int: false,
                }),
                syn::Lit::Bool(b) => Ok(V::Typed(
                    self.b.constant(b.value as u8 as f64, DTypeKind::Bool),
                    DTypeKind::Bool,
                )),
                _ => Err(err(e, "kernels compute on numbers")),
            },
            E::Path(p) => {
                let name = p
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .ok_or_else(|| err(e, "expected a parameter or a `let` name"))?;
                if let Some(c) = float_const(&name) {
                    return Ok(V::Lit {
                        value: c,
                        int: false,
                    });
                }
                self.lookup(&name)
                    .ok_or_else(|| err(e, format!("`{name}` is not a parameter or a `let` of this kernel")))
            }
            E::Paren(p) => self.expr(&p.expr, want),
            E::Group(g) => self.expr(&g.expr, want),
            E::Block(b) => self.block(&b.block, want),
            E::Unary(u) => {
                let v = self.expr(&u.expr, want)?;
                match u.op {
                    syn::UnOp::Neg(_) => match v {
                        V::Lit { value, int } => Ok(V::Lit {
                            value: -value,
                            int,
                        }),
                        V::Typed(x, d) => {
                            if d == DTypeKind::Bool || d == DTypeKind::U8 {
                                return Err(err(e, format!("`-` on {d}")));
                            }
                            Ok(V::Typed(self.b.unary(UnaryOp::Neg, x), d))
                        }
                    },
                    syn::UnOp::Not(_) => {
                        let x = self.materialise(v, DTypeKind::Bool, &u.expr)?;
                        Ok(V::Typed(self.b.not(x), DTypeKind::Bool))
                    }
                    _ => Err(err(e, "unsupported operator in a kernel")),
                }
            }
            E::Binary(b) => self.binary(b, want),
            E::If(i) => self.if_expr(i, want),
            E::Cast(c) => {
                let to = match &*c.ty {
                    syn::Type::Path(p) => p
                        .path
                        .segments
                        .last()
                        .and_then(|s| DTypeKind::parse(&s.ident.to_string())),
                    _ => None,
                }
                .ok_or_else(|| err(&c.ty, "cast to one of f32, f64, f16, bf16, i32, i64, u8, bool"))?;
                match self.expr(&c.expr, None)? {
                    V::Lit { value, int } => {
                        let d = if int { DTypeKind::I64 } else { DTypeKind::F64 };
                        let x = constant(&mut self.b, value, d);
                        Ok(V::Typed(self.b.cast(x, to), to))
                    }
                    V::Typed(x, _) => Ok(V::Typed(self.b.cast(x, to), to)),
                }
            }
            E::Call(c) => {
                let name = match &*c.func {
                    E::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                    _ => None,
                }
                .ok_or_else(|| err(&c.func, "call a math function or a kernel by name"))?;
                let args: Vec<&syn::Expr> = c.args.iter().collect();
                self.call(&name, &args, want, e)
            }
            E::MethodCall(m) => {
                let mut args: Vec<&syn::Expr> = vec![&m.receiver];
                args.extend(m.args.iter());
                let name = match m.method.to_string().as_str() {
                    "ln" => "log".to_string(),
                    "powf" | "powi" => "pow".to_string(),
                    other => other.to_string(),
                };
                self.call(&name, &args, want, e)
            }
            _ => Err(err(
                e,
                "not supported in a kernel: use literals, parameters, `let`, arithmetic, comparisons, `if`/`else`, `as` and math functions",
            )),
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary, want: Option<DTypeKind>) -> syn::Result<V> {
        use syn::BinOp as B;
        let arith = match b.op {
            B::Add(_) => Some(BinaryOp::Add),
            B::Sub(_) => Some(BinaryOp::Sub),
            B::Mul(_) => Some(BinaryOp::Mul),
            B::Div(_) => Some(BinaryOp::Div),
            _ => None,
        };
        if let Some(op) = arith {
            let l = self.expr(&b.left, want)?;
            let r = self.expr(&b.right, want)?;
            if let (V::Lit { value: x, int: ix }, V::Lit { value: y, int: iy }) = (l, r) {
                let int = ix && iy;
                let v = op.eval_f64(x, y);
                return Ok(V::Lit {
                    value: if int { v.trunc() } else { v },
                    int,
                });
            }
            let (x, y, d) = self.unify(l, r, want, b)?;
            if d == DTypeKind::Bool {
                return Err(err(b, "arithmetic on bool: cast it first with `as f32`"));
            }
            return Ok(V::Typed(self.b.binary(op, x, y), d));
        }
        let cmp = match b.op {
            B::Lt(_) => Some(CmpOp::Lt),
            B::Le(_) => Some(CmpOp::Le),
            B::Gt(_) => Some(CmpOp::Gt),
            B::Ge(_) => Some(CmpOp::Ge),
            B::Eq(_) => Some(CmpOp::Eq),
            B::Ne(_) => Some(CmpOp::Ne),
            _ => None,
        };
        if let Some(op) = cmp {
            let l = self.expr(&b.left, None)?;
            let r = self.expr(&b.right, None)?;
            let (x, y, _) = self.unify(l, r, None, b)?;
            return Ok(V::Typed(self.b.compare(op, x, y), DTypeKind::Bool));
        }
        let and = match b.op {
            B::And(_) => true,
            B::Or(_) => false,
            _ => return Err(err(&b.op, "unsupported operator in a kernel")),
        };
        let l = self.expr(&b.left, Some(DTypeKind::Bool))?;
        let r = self.expr(&b.right, Some(DTypeKind::Bool))?;
        let x = self.materialise(l, DTypeKind::Bool, &b.left)?;
        let y = self.materialise(r, DTypeKind::Bool, &b.right)?;
        let v = if and {
            self.b.and(x, y)
        } else {
            self.b.or(x, y)
        };
        Ok(V::Typed(v, DTypeKind::Bool))
    }

    fn if_expr(&mut self, i: &syn::ExprIf, want: Option<DTypeKind>) -> syn::Result<V> {
        let c = self.expr(&i.cond, Some(DTypeKind::Bool))?;
        let c = self.materialise(c, DTypeKind::Bool, &i.cond)?;
        let a = self.block(&i.then_branch, want)?;
        let (_, else_expr) = i
            .else_branch
            .as_ref()
            .ok_or_else(|| err(i, "an `if` in a kernel is a value: add an `else` branch"))?;
        let b = self.expr(else_expr, want)?;
        let (x, y, d) = self.unify(a, b, want, i)?;
        Ok(V::Typed(self.b.select(c, x, y), d))
    }

    fn call(
        &mut self,
        name: &str,
        args: &[&syn::Expr],
        want: Option<DTypeKind>,
        at: &syn::Expr,
    ) -> syn::Result<V> {
        if let Some(k) = self.builder.find(name) {
            return self.call_kernel(k, args, at);
        }
        if let Some(reduce) = RowReduce::from_name(name) {
            if args.len() == 1 {
                if self.row.is_none() {
                    return Err(err(
                        at,
                        format!("`{name}` reduces a row: it is for row kernels (`x: Row<f32>`), where this kernel takes single elements"),
                    ));
                }
                return self.reduction(reduce, args[0], at);
            }
        }
        let arity = |n: usize| -> syn::Result<()> {
            if args.len() == n {
                Ok(())
            } else {
                Err(err(
                    at,
                    format!("`{name}` takes {n} argument(s), found {}", args.len()),
                ))
            }
        };
        if let Some(op) = UnaryOp::from_name(name) {
            arity(1)?;
            let v = self.expr(args[0], want)?;
            return match v {
                V::Lit { value, .. } => Ok(V::Lit {
                    value: op.eval_f64(value),
                    int: false,
                }),
                V::Typed(x, d) => {
                    if op.needs_float() && !d.is_float() {
                        return Err(err(
                            args[0],
                            format!("`{name}` needs a float, this is {d}: convert with `as f32`"),
                        ));
                    }
                    Ok(V::Typed(self.b.unary(op, x), d))
                }
            };
        }
        let op = match name {
            "max" | "maximum" => BinaryOp::Max,
            "min" | "minimum" => BinaryOp::Min,
            "pow" => BinaryOp::Pow,
            _ => {
                return Err(err(
                    at,
                    format!("`{name}` is not a kernel of this `tensor_fn!` or a math function (neg, abs, relu, sigmoid, tanh, exp, log, sin, cos, sqrt, rsqrt, square, recip, gelu, silu, max, min, pow)"),
                ))
            }
        };
        arity(2)?;
        let l = self.expr(args[0], want)?;
        let r = self.expr(args[1], want)?;
        if let (V::Lit { value: x, int: ix }, V::Lit { value: y, int: iy }) = (l, r) {
            return Ok(V::Lit {
                value: op.eval_f64(x, y),
                int: ix && iy && op != BinaryOp::Pow,
            });
        }
        let (x, y, d) = self.unify(l, r, want, at)?;
        if op == BinaryOp::Pow && !d.is_float() {
            return Err(err(at, format!("`pow` needs floats, these are {d}")));
        }
        Ok(V::Typed(self.b.binary(op, x, y), d))
    }

    fn call_kernel(&mut self, k: usize, args: &[&syn::Expr], at: &syn::Expr) -> syn::Result<V> {
        let callee = self.builder.kernels[k];
        if callee.is_row() {
            return Err(err(
                at,
                format!(
                    "`{}` is a row kernel: call it from a `tensor_fn`, not from a kernel",
                    callee.name
                ),
            ));
        }
        if args.len() != callee.params.len() {
            return Err(err(
                at,
                format!(
                    "`{}` takes {} argument(s), found {}",
                    callee.name,
                    callee.params.len(),
                    args.len()
                ),
            ));
        }
        let mut vals = Vec::new();
        for (a, (_, d, _)) in args.iter().zip(&callee.params) {
            let v = self.expr(a, Some(*d))?;
            vals.push(self.materialise(v, *d, a)?);
        }
        let callee_kernel = self.builder.get(k).map_err(|()| {
            err(
                at,
                format!(
                    "`{}` calls itself (directly or through other kernels) or has errors",
                    callee.name
                ),
            )
        })?;
        let out = self.b.inline(&callee_kernel, &vals);
        Ok(V::Typed(out, callee_kernel.output_dtype()))
    }
}

/// The expression a block ends with, for spans.
fn tail(b: &syn::Block) -> proc_macro2::TokenStream {
    match b.stmts.last() {
        Some(syn::Stmt::Expr(e, None)) => quote::ToTokens::to_token_stream(e),
        _ => quote::ToTokens::to_token_stream(b),
    }
}

fn float_const(name: &str) -> Option<f64> {
    match name {
        "PI" => Some(std::f64::consts::PI),
        "E" => Some(std::f64::consts::E),
        "INFINITY" => Some(f64::INFINITY),
        "NAN" => Some(f64::NAN),
        _ => None,
    }
}

fn local_pat(p: &syn::Pat) -> syn::Result<(String, Option<DTypeKind>)> {
    match p {
        syn::Pat::Ident(i) => Ok((i.ident.to_string(), None)),
        syn::Pat::Type(t) => {
            let (name, _) = local_pat(&t.pat)?;
            let d = match &*t.ty {
                syn::Type::Path(p) => p
                    .path
                    .segments
                    .last()
                    .and_then(|s| DTypeKind::parse(&s.ident.to_string())),
                _ => None,
            }
            .ok_or_else(|| {
                err(
                    &t.ty,
                    "an element type: f32, f64, f16, bf16, i32, i64, u8 or bool",
                )
            })?;
            Ok((name, Some(d)))
        }
        other => Err(err(other, "bind one name: `let y = ..;`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Item;
    use quote::quote;

    fn build(ts: proc_macro2::TokenStream) -> (Vec<Option<Kernel>>, Vec<syn::Error>) {
        let input = crate::parse::parse_input(ts).unwrap();
        let ks: Vec<&KernelFn> = input
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Kernel(k) => Some(k),
                _ => None,
            })
            .collect();
        build_kernels(&ks)
    }

    #[test]
    fn gelu_matches_the_formula() {
        let (irs, errs) = build(quote! {
            #[kernel]
            fn gelu(x: f32) -> f32 {
                0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
            }
        });
        assert!(errs.is_empty());
        let kernel = irs[0].as_ref().unwrap();
        // The constants as the f32 program holds them (rounded once).
        let (c1, c2) = (0.7978846f32 as f64, 0.044715f32 as f64);
        for x in [-2.0f64, -0.3, 0.0, 0.7, 3.1] {
            let want = 0.5 * x * (1.0 + (c1 * (x + c2 * x * x * x)).tanh());
            assert!((kernel.eval_f64(&[x]) - want).abs() < 1e-12);
        }
    }

    #[test]
    fn select_lets_casts_and_kernel_calls() {
        let (irs, errs) = build(quote! {
            #[kernel]
            fn leaky(x: f32, slope: f32) -> f32 {
                let neg = x * slope;
                if x > 0.0 { x } else { neg }
            }
            #[kernel]
            fn twice_leaky(x: f32) -> f32 { 2.0 * leaky(x, 0.1).max(-1.0) + (3 as f32) }
            #[kernel]
            fn to_int(x: f64) -> i32 { x as i32 + 1 }
        });
        assert!(
            errs.is_empty(),
            "{:?}",
            errs.iter().map(|e| e.to_string()).collect::<Vec<_>>()
        );
        let t = irs[1].as_ref().unwrap();
        assert!((t.eval_f64(&[3.0]) - 9.0).abs() < 1e-12);
        assert!((t.eval_f64(&[-5.0]) - (2.0 * -0.5 + 3.0)).abs() < 1e-6);
        assert!((t.eval_f64(&[-50.0]) - 1.0).abs() < 1e-12);
        assert_eq!(irs[2].as_ref().unwrap().eval_f64(&[2.7]), 3.0);
    }

    #[test]
    fn errors_say_what_to_change() {
        let (_, errs) = build(quote! {
            #[kernel]
            fn a(x: f32, y: f64) -> f32 { x + y }
            #[kernel]
            fn b(x: i32) -> i32 { exp(x) }
            #[kernel]
            fn c(x: f32) -> f32 { if x > 0.0 { x } }
            #[kernel]
            fn d(x: f32) -> f32 { d(x) }
            #[kernel]
            fn e(x: f32) -> f32 { foo(x) }
            #[kernel]
            fn f(x: i32) -> i32 { x * 1.5 }
        });
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 6, "{msgs:?}");
        assert!(msgs[0].contains("f32 and f64"), "{msgs:?}");
        assert!(msgs[1].contains("`exp` needs a float"), "{msgs:?}");
        assert!(msgs[2].contains("add an `else`"), "{msgs:?}");
        assert!(msgs[3].contains("calls itself"), "{msgs:?}");
        assert!(msgs[4].contains("`foo` is not a kernel"), "{msgs:?}");
        assert!(msgs[5].contains("float literal where i32"), "{msgs:?}");
    }

    fn build_rows(ts: proc_macro2::TokenStream) -> (Vec<Option<RowProgram>>, Vec<String>) {
        let input = crate::parse::parse_input(ts).unwrap();
        let ks: Vec<&KernelFn> = input
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Kernel(k) => Some(k),
                _ => None,
            })
            .collect();
        let (_, rows, errs) = build_all(&ks);
        (rows, errs.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn a_users_layer_norm_is_the_catalogues() {
        let (rows, errs) = build_rows(quote! {
            #[kernel]
            fn sq(x: f32) -> f32 { x * x }
            #[kernel]
            fn ln(x: Row<bf16>, w: Row<bf16>, b: Row<bf16>, eps: f32) -> Row<bf16> {
                let m = mean(x);
                let var = mean(sq(x - m));
                (x - m) * (1.0 / sqrt(var + eps)) * w + b
            }
        });
        assert!(errs.is_empty(), "{errs:?}");
        let p = rows[1].as_ref().unwrap();
        assert_eq!(p.stats.len(), 2);
        let want = tensorfn_kernels::rowkernel::norm_program(
            tensorfn_kernels::NormOp::LayerNorm,
            DTypeKind::BF16,
        );
        let (x, w, b) = ([1.0, -2.0, 0.5], [1.0, 0.5, 2.0], [0.0, 0.25, -1.0]);
        assert_eq!(
            p.eval_row(&[&x, &w, &b], &[1e-5]),
            want.eval_row(&[&x, &w, &b], &[1e-5])
        );
        let text = tensorfn_kernels::ptx::row_kernel(p, "tf_rows_ln").unwrap();
        // The built-in norms' strategies: a warp's and a block's rows in
        // registers (16-byte and one-element accesses), and the long form.
        for entry in ["warp_v", "warp_s", "block_v", "block_s", "long"] {
            assert!(
                text.contains(&format!(".visible .entry tf_rows_ln_{entry}(")),
                "no entry {entry}"
            );
        }
        if let Ok(dir) = std::env::var("TENSORFN_DUMP_ROW_PTX") {
            std::fs::write(format!("{dir}/tf_rows_ln.ptx"), text).unwrap();
        }
    }

    #[test]
    fn row_kernel_errors_say_what_to_change() {
        let (_, errs) = build_rows(quote! {
            #[kernel]
            fn a(x: Row<f32>) -> f32 { x * 2.0 }
            #[kernel]
            fn b(x: Row<f32>) -> Row<f32> { let s = sum(x); x / sum(s) }
            #[kernel]
            fn c(x: Row<f32>, y: Row<f64>) -> Row<f32> { x }
            #[kernel]
            fn d(x: f32) -> f32 { sum(x) }
            #[kernel]
            fn e(x: Row<f32>) -> Row<f64> { x }
            #[kernel]
            fn f(x: Row<f16>, eps: f16) -> Row<f16> { x }
            #[kernel]
            fn g(x: Row<f32>) -> Row<f32> { x }
            #[kernel]
            fn h(x: f32) -> f32 { g(x) }
        });
        assert_eq!(errs.len(), 7, "{errs:?}");
        assert!(
            errs[0].contains("this is a row, but `a` returns one value per row"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("`sum` reduces a row, and `s` is one value per row"),
            "{errs:?}"
        );
        assert!(errs[2].contains("share one dtype"), "{errs:?}");
        assert!(errs[3].contains("it is for row kernels"), "{errs:?}");
        assert!(
            errs[4].contains("declare the result `Row<f32>`"),
            "{errs:?}"
        );
        assert!(errs[5].contains("declare `eps: f32`"), "{errs:?}");
        assert!(errs[6].contains("`g` is a row kernel"), "{errs:?}");
    }
}
