//! Writes every built-in kernel and a representative set of fused kernels
//! and row kernels as `.ptx` files into the directory given as the only argument, for
//! checking with `ptxas` (see `.ci/ptxas-check`). Kernels whose sm_80 text
//! differs (they round to `bf16`) are also written as `NAME.sm_80.ptx`.
//!
//! Usage: `tensorfn-ptx OUTDIR`

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tensorfn_kernels::ir::{ElementwiseBuilder, Kernel};
use tensorfn_kernels::ptx::Target;
use tensorfn_kernels::rowkernel::{self, RowParam, RowProgram, RowReduce, RowStat};
use tensorfn_kernels::{builtin, ptx, BinaryOp, CmpOp, DTypeKind, NormOp, UnaryOp};

/// `sin(x) * 2 + 5`
fn sin_mul_add(dtype: DTypeKind) -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let s = k.unary(UnaryOp::Sin, x);
    let two = k.constant(2.0, dtype);
    let m = k.binary(BinaryOp::Mul, s, two);
    let five = k.constant(5.0, dtype);
    let y = k.binary(BinaryOp::Add, m, five);
    k.output(y)
}

/// `gelu(x + bias)` with a broadcast bias.
fn gelu_bias(dtype: DTypeKind) -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let b = k.input(dtype);
    let s = k.binary(BinaryOp::Add, x, b);
    let y = k.unary(UnaryOp::Gelu, s);
    k.output(y)
}

/// A 6-op chain: `relu(exp(-x^2) * tanh(y) - log(z)) / sqrt(z)`... in f32
/// from f16 inputs, stored as f16.
fn chain6() -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let xh = k.input(DTypeKind::F16);
    let y = k.input(DTypeKind::F32);
    let z = k.input(DTypeKind::F32);
    let x = k.cast(xh, DTypeKind::F32);
    let sq = k.unary(UnaryOp::Square, x);
    let n = k.unary(UnaryOp::Neg, sq);
    let e = k.unary(UnaryOp::Exp, n);
    let t = k.unary(UnaryOp::Tanh, y);
    let p = k.binary(BinaryOp::Mul, e, t);
    let l = k.unary(UnaryOp::Log, z);
    let d = k.binary(BinaryOp::Sub, p, l);
    let r = k.unary(UnaryOp::Relu, d);
    let s = k.unary(UnaryOp::Sqrt, z);
    let q = k.binary(BinaryOp::Div, r, s);
    let out = k.cast(q, DTypeKind::F16);
    k.output(out)
}

/// Mixed dtypes: `where(mask, f64(i) * x, bf16 y as f64) as bf16`.
fn mixed_casts() -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let mask = k.input(DTypeKind::Bool);
    let i = k.input(DTypeKind::I64);
    let x = k.input(DTypeKind::F64);
    let y = k.input(DTypeKind::BF16);
    let u = k.input(DTypeKind::U8);
    let fi = k.cast(i, DTypeKind::F64);
    let a = k.binary(BinaryOp::Mul, fi, x);
    let yb = k.cast(y, DTypeKind::F64);
    let fu = k.cast(u, DTypeKind::F64);
    let b = k.binary(BinaryOp::Add, yb, fu);
    let s = k.select(mask, a, b);
    let out = k.cast(s, DTypeKind::BF16);
    k.output(out)
}

/// `(a > b) as u8 + min(a, b) as u8`, integer/bool mix.
fn compare_u8() -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let a = k.input(DTypeKind::I32);
    let b = k.input(DTypeKind::I32);
    let g = k.compare(CmpOp::Gt, a, b);
    let gu = k.cast(g, DTypeKind::U8);
    let m = k.binary(BinaryOp::Min, a, b);
    let mu = k.cast(m, DTypeKind::U8);
    let s = k.binary(BinaryOp::Add, gu, mu);
    k.output(s)
}

/// `pow(x, y) * sigmoid(x) + silu(y)` in f64.
fn pow_mix() -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(DTypeKind::F64);
    let y = k.input(DTypeKind::F64);
    let p = k.binary(BinaryOp::Pow, x, y);
    let s = k.unary(UnaryOp::Sigmoid, x);
    let m = k.binary(BinaryOp::Mul, p, s);
    let t = k.unary(UnaryOp::Silu, y);
    let o = k.binary(BinaryOp::Add, m, t);
    k.output(o)
}

/// GELU (tanh form) written op by op, as `tensor_fn!` fuses
/// `x * 0.5 * (tanh((x + x * x * x * 0.044715) * 0.7978846) + 1.0)`:
/// every op in `dtype`.
fn gelu_tanh_ops(dtype: DTypeKind) -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let c = |k: &mut ElementwiseBuilder, v: f64| k.constant(v, dtype);
    let half = c(&mut k, 0.5);
    let a = c(&mut k, 0.044715);
    let s = c(&mut k, 0.7978846);
    let one = c(&mut k, 1.0);
    let xh = k.binary(BinaryOp::Mul, x, half);
    let x2 = k.binary(BinaryOp::Mul, x, x);
    let x3 = k.binary(BinaryOp::Mul, x2, x);
    let x3a = k.binary(BinaryOp::Mul, x3, a);
    let inner = k.binary(BinaryOp::Add, x, x3a);
    let u = k.binary(BinaryOp::Mul, inner, s);
    let t = k.unary(UnaryOp::Tanh, u);
    let t1 = k.binary(BinaryOp::Add, t, one);
    let y = k.binary(BinaryOp::Mul, xh, t1);
    k.output(y)
}

/// `tanh(sigmoid(x * y + 1) * x) - y`, every op in `dtype`.
fn sigmoid_tanh_chain(dtype: DTypeKind) -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dtype);
    let y = k.input(dtype);
    let one = k.constant(1.0, dtype);
    let xy = k.binary(BinaryOp::Mul, x, y);
    let a = k.binary(BinaryOp::Add, xy, one);
    let s = k.unary(UnaryOp::Sigmoid, a);
    let m = k.binary(BinaryOp::Mul, s, x);
    let t = k.unary(UnaryOp::Tanh, m);
    let out = k.binary(BinaryOp::Sub, t, y);
    k.output(out)
}

/// No input at all: fills the output with `0.1` in bf16.
fn fill() -> tensorfn_kernels::Result<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let c = k.constant(0.1, DTypeKind::BF16);
    k.output(c)
}

fn fused() -> tensorfn_kernels::Result<Vec<(String, Kernel)>> {
    let mut v = vec![("tf_example_fill_bf16".to_string(), fill()?)];
    for d in [
        DTypeKind::F32,
        DTypeKind::F16,
        DTypeKind::BF16,
        DTypeKind::F64,
    ] {
        v.push((format!("tf_example_sin_mul_add_{d}"), sin_mul_add(d)?));
        v.push((format!("tf_example_gelu_bias_{d}"), gelu_bias(d)?));
        v.push((format!("tf_example_gelu_tanh_ops_{d}"), gelu_tanh_ops(d)?));
        v.push((
            format!("tf_example_sigmoid_tanh_chain_{d}"),
            sigmoid_tanh_chain(d)?,
        ));
    }
    v.push(("tf_example_chain6".into(), chain6()?));
    v.push(("tf_example_mixed_casts".into(), mixed_casts()?));
    v.push(("tf_example_compare_u8".into(), compare_u8()?));
    v.push(("tf_example_pow_mix".into(), pow_mix()?));
    Ok(v)
}

/// `log(sum(exp(x - max(x)))) + max(x) + k`, one value per row, with an
/// `i32` scalar `k`: a per-row result, three reductions' worth of passes.
fn row_logsumexp(dtype: DTypeKind) -> tensorfn_kernels::Result<RowProgram> {
    let c = rowkernel::compute_dtype(dtype);
    let mut b = ElementwiseBuilder::new();
    let x0 = b.input(dtype);
    let x = if c != dtype { b.cast(x0, c) } else { x0 };
    let k = b.input(DTypeKind::I32);
    let max = RowStat {
        reduce: RowReduce::Max,
        program: b.clone().output(x)?,
    };
    let m = b.input(c);
    let d = b.binary(BinaryOp::Sub, x, m);
    let e = b.unary(UnaryOp::Exp, d);
    let sum = RowStat {
        reduce: RowReduce::Sum,
        program: b.clone().output(e)?,
    };
    let s = b.input(c);
    let l = b.unary(UnaryOp::Log, s);
    let l = b.binary(BinaryOp::Add, l, m);
    let kf = b.cast(k, c);
    let y = b.binary(BinaryOp::Add, l, kf);
    let y = if c != dtype { b.cast(y, dtype) } else { y };
    Ok(RowProgram {
        dtype,
        params: vec![RowParam::Row, RowParam::Scalar(DTypeKind::I32)],
        stats: vec![max, sum],
        output: b.output(y)?,
        per_row: true,
    })
}

/// Row kernels as `tensor_fn!` writes them (`#[kernel]` over `Row<T>`).
fn row_programs() -> tensorfn_kernels::Result<Vec<(String, RowProgram)>> {
    let mut v = Vec::new();
    for d in [
        DTypeKind::F32,
        DTypeKind::F16,
        DTypeKind::BF16,
        DTypeKind::F64,
    ] {
        for op in [NormOp::LayerNorm, NormOp::RmsNorm] {
            v.push((
                format!("tf_example_rows_{}_{d}", op.name()),
                rowkernel::norm_program(op, d),
            ));
        }
        v.push((format!("tf_example_rows_logsumexp_{d}"), row_logsumexp(d)?));
    }
    Ok(v)
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let path: PathBuf = dir.join(format!("{name}.ptx"));
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(dir: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut count = 0;
    for k in builtin::all() {
        write(dir, &k.name, &k.ptx)?;
        count += 1;
    }
    for k in builtin_sm80() {
        write(dir, &format!("{}.sm_80", k.name), &k.ptx)?;
        count += 1;
    }
    for (name, kernel) in fused().map_err(|e| e.to_string())? {
        let text = ptx::elementwise(&kernel, &name).map_err(|e| e.to_string())?;
        write(dir, &name, &text)?;
        count += 1;
        if ptx::differs_on(&kernel, Target::Sm80) {
            let text =
                ptx::elementwise_for(&kernel, &name, Target::Sm80).map_err(|e| e.to_string())?;
            write(dir, &format!("{name}.sm_80"), &text)?;
            count += 1;
        }
    }
    for (name, prog) in row_programs().map_err(|e| e.to_string())? {
        let text = ptx::row_kernel(&prog, &name).map_err(|e| e.to_string())?;
        write(dir, &name, &text)?;
        count += 1;
    }
    Ok(count)
}

/// The elementwise built-ins whose sm_80 text differs from the sm_70 one.
fn builtin_sm80() -> Vec<builtin::Kernel> {
    let t = Target::Sm80;
    let mut out = Vec::new();
    for dtype in DTypeKind::ALL {
        for op in UnaryOp::ALL {
            out.extend(builtin::try_unary_for(op, dtype, t).ok());
        }
        for op in BinaryOp::ALL {
            out.extend(builtin::try_binary_for(op, dtype, t).ok());
        }
        for to in DTypeKind::ALL {
            out.push(builtin::cast_for(dtype, to, t));
        }
    }
    out.retain(|k| k.ptx.contains("cvt.rn.bf16x2.f32") || k.ptx.contains("fma.rn.bf16"));
    out
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: tensorfn-ptx OUTDIR");
        return ExitCode::from(2);
    };
    match run(Path::new(dir)) {
        Ok(n) => {
            println!("wrote {n} PTX modules to {dir}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tensorfn-ptx: {e}");
            ExitCode::FAILURE
        }
    }
}
