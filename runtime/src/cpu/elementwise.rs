//! Elementwise loops: unary and binary ops, scalar operands, `addcmul`
//! and dtype casts, over any strided or broadcast views.

use super::blocks::{fill_blocks, Lanes};
use super::scalar::{float_unary, CpuFloat, CpuNum};
use super::simd::vectorized;
use super::strided::{as_slots, fill_runs, write_runs};
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::mem::MaybeUninit;
use tensorfn_kernels::{BinaryOp, UnaryOp};

/// Defines `with_unary_op!(op, k)` and `with_binary_op!(op, k)`, which
/// call the local macro `k!(OP)` with `OP` the constant path of `op`
/// (`UnaryOp::Gelu`): one arm per op of the catalogue's tables, so each op
/// gets a loop of its own, with its function inlined and vectorised.
/// (`$d` carries a `$` into the macros it defines.)
macro_rules! define_op_dispatch {
    ($name:ident, $Op:ident, ($d:tt) $($V:ident)*) => {
        macro_rules! $name {
            ($d op:expr, $d k:ident) => {
                match $d op {
                    $($Op::$V => $d k!($Op::$V),)*
                }
            };
        }
    };
}

macro_rules! unary_dispatch {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
        define_op_dispatch!(with_unary_op, UnaryOp, ($) $($V)*);
    };
}
tensorfn_core::for_each_unary_op!(unary_dispatch);

macro_rules! binary_dispatch {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
        define_op_dispatch!(with_binary_op, BinaryOp, ($) $($V)*);
    };
}
tensorfn_core::for_each_binary_op!(binary_dispatch);

/// Calls `$k!(f)` with `f` the scalar function of `$op` on `$U`.
macro_rules! with_binary_fn {
    ($op:expr, $U:ty, $k:ident) => {{
        macro_rules! each {
            ($o:expr) => {
                $k!({
                    // A function item, always inlined into the loop.
                    #[inline(always)]
                    fn f<U: CpuNum>(a: U, b: U) -> U {
                        a.num_binary($o, b)
                    }
                    f::<$U>
                })
            };
        }
        with_binary_op!($op, each)
    }};
}

/// `f(x)` for every element `l` selects, row-major.
pub(crate) fn map1<I: Copy + Sync, O: Copy + Send>(
    x: &[I],
    l: &Layout,
    f: impl Fn(I) -> O + Sync,
) -> Vec<O> {
    let body = |o: &mut [MaybeUninit<O>], b: [usize; 1], s: [usize; 1]| {
        let len = o.len();
        if s[0] == 1 {
            let x = &x[b[0]..b[0] + len];
            vectorized(
                #[inline(always)]
                || {
                    for (o, &x) in o.iter_mut().zip(x) {
                        o.write(f(x));
                    }
                },
            )
        } else {
            for (j, o) in o.iter_mut().enumerate() {
                o.write(f(x[b[0] + j * s[0]]));
            }
        }
    };
    // SAFETY: both branches write every element of the run.
    unsafe { fill_runs(l.dims(), [l], body) }
}

/// [`map1`] for an `f` that calls functions of its [`Lanes`], run block by
/// block (see [`fill_blocks`], which wants `f` `#[inline(always)]`).
pub(crate) fn map1_lanes<I: Copy + Sync, O: Copy + Send>(
    x: &[I],
    l: &Layout,
    f: impl Fn(&mut Lanes, I) -> O + Sync,
) -> Vec<O> {
    let body = |o: &mut [MaybeUninit<O>], b: [usize; 1], s: [usize; 1]| {
        if s[0] == 1 {
            vectorized(
                #[inline(always)]
                || {
                    fill_blocks(
                        o,
                        #[inline(always)]
                        |lanes, start, o| {
                            let x = &x[b[0] + start..b[0] + start + o.len()];
                            for (o, &x) in o.iter_mut().zip(x) {
                                o.write(f(lanes, x));
                            }
                        },
                    )
                },
            )
        } else {
            fill_blocks(
                o,
                #[inline(always)]
                |lanes, start, o| {
                    for (j, o) in o.iter_mut().enumerate() {
                        o.write(f(lanes, x[b[0] + (start + j) * s[0]]));
                    }
                },
            )
        }
    };
    // SAFETY: every block of the run is written (twice where the exact
    // path reruns it).
    unsafe { fill_runs(l.dims(), [l], body) }
}

/// `f(a, b)` for every pair of elements (`la` and `lb` have equal dims).
pub(crate) fn map2<A: Copy + Sync, B: Copy + Sync, O: Copy + Send>(
    a: &[A],
    la: &Layout,
    b: &[B],
    lb: &Layout,
    f: impl Fn(A, B) -> O + Sync,
) -> Vec<O> {
    // SAFETY: `pair_run` writes every element of the run.
    unsafe {
        fill_runs(la.dims(), [la, lb], |o: &mut [MaybeUninit<O>], base, s| {
            pair_run(o, base, s, a, b, &f)
        })
    }
}

/// [`map2`] into the contiguous `out`, every element of which it writes.
pub(crate) fn map2_into<A: Copy + Sync, B: Copy + Sync, O: Copy + Send>(
    out: &mut [MaybeUninit<O>],
    a: &[A],
    la: &Layout,
    b: &[B],
    lb: &Layout,
    f: impl Fn(A, B) -> O + Sync,
) {
    write_runs(
        out,
        la.dims(),
        [la, lb],
        |o: &mut [MaybeUninit<O>], base, s| pair_run(o, base, s, a, b, &f),
    )
}

/// One run of [`map2`]: writes `f(a, b)` into every element of `o`, with
/// a vectorised loop where both inputs are contiguous or one is broadcast.
#[inline(always)]
fn pair_run<A: Copy, B: Copy, O>(
    o: &mut [MaybeUninit<O>],
    base: [usize; 2],
    s: [usize; 2],
    a: &[A],
    b: &[B],
    f: &impl Fn(A, B) -> O,
) {
    let len = o.len();
    if s == [1, 1] {
        let a = &a[base[0]..base[0] + len];
        let b = &b[base[1]..base[1] + len];
        vectorized(
            #[inline(always)]
            || {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    o.write(f(x, y));
                }
            },
        )
    } else if s == [1, 0] {
        // The two broadcast loops stay written out: routed through one
        // helper with a closure capturing the broadcast value, they were
        // no longer vectorised (a 2^16-element `x * col` went from 6.7 to
        // 22 us on one thread).
        let y = b[base[1]];
        let a = &a[base[0]..base[0] + len];
        vectorized(
            #[inline(always)]
            || {
                for (o, &x) in o.iter_mut().zip(a) {
                    o.write(f(x, y));
                }
            },
        )
    } else if s == [0, 1] {
        let x = a[base[0]];
        let b = &b[base[1]..base[1] + len];
        vectorized(
            #[inline(always)]
            || {
                for (o, &y) in o.iter_mut().zip(b) {
                    o.write(f(x, y));
                }
            },
        )
    } else {
        for (j, o) in o.iter_mut().enumerate() {
            o.write(f(a[base[0] + j * s[0]], b[base[1] + j * s[1]]));
        }
    }
}

/// `f(a, b, c)` for every triple of elements (equal dims).
pub(crate) fn map3<T: Copy + Sync + Send>(
    x: [(&[T], &Layout); 3],
    f: impl Fn(T, T, T) -> T + Sync,
) -> Vec<T> {
    let [(a, la), (b, lb), (c, lc)] = x;
    let body = |o: &mut [MaybeUninit<T>], base: [usize; 3], s: [usize; 3]| {
        if s == [1, 1, 1] {
            let len = o.len();
            let a = &a[base[0]..base[0] + len];
            let b = &b[base[1]..base[1] + len];
            let c = &c[base[2]..base[2] + len];
            vectorized(
                #[inline(always)]
                || {
                    for j in 0..len {
                        o[j].write(f(a[j], b[j], c[j]));
                    }
                },
            )
        } else {
            for (j, o) in o.iter_mut().enumerate() {
                o.write(f(
                    a[base[0] + j * s[0]],
                    b[base[1] + j * s[1]],
                    c[base[2] + j * s[2]],
                ));
            }
        }
    };
    // SAFETY: both branches write every element of the run.
    unsafe { fill_runs(la.dims(), [la, lb, lc], body) }
}

/// `op(x)` for an op defined on integers (`op.needs_float()` is false).
pub(crate) fn unary_num<U: CpuNum>(op: UnaryOp, x: &[U], l: &Layout) -> Result<Vec<U>> {
    if op.needs_float() {
        return Err(Error::float_only(op.name(), U::KIND));
    }
    macro_rules! run {
        ($op:expr) => {
            map1(x, l, |v: U| v.num_unary($op))
        };
    }
    Ok(with_unary_op!(op, run))
}

/// `op(x)` for a float dtype, computed in `U::Acc` and rounded once.
pub(crate) fn unary_float<U: CpuFloat>(op: UnaryOp, x: &[U], l: &Layout) -> Vec<U> {
    macro_rules! run {
        ($op:expr) => {
            map1_lanes(
                x,
                l,
                #[inline(always)]
                |lanes: &mut Lanes, v: U| U::from_acc(float_unary($op, v.to_acc(), lanes)),
            )
        };
    }
    with_unary_op!(op, run)
}

/// Rejects integer divisors equal to zero and negative integer exponents,
/// which PyTorch reports as errors; `operand` names the offending input.
pub(crate) fn check_int_operand<U: CpuNum>(
    op: BinaryOp,
    values: impl IntoIterator<Item = U>,
    operand: &str,
) -> Result<()> {
    if !U::IS_INT || !matches!(op, BinaryOp::Div | BinaryOp::Pow) {
        return Ok(());
    }
    let mut values = values.into_iter();
    match op {
        BinaryOp::Div if values.any(U::is_zero) => Err(Error::Arithmetic {
            op: op.name().into(),
            message: format!(
                "integer division by zero: {operand} contains 0 (PyTorch raises ZeroDivisionError); cast to a float dtype with `.cast::<f32>()` to get inf/NaN instead"
            ),
        }),
        BinaryOp::Pow if values.any(U::is_negative) => Err(Error::Arithmetic {
            op: op.name().into(),
            message: format!(
                "integers to negative integer powers are not allowed: {operand} contains a negative exponent; cast to a float dtype first"
            ),
        }),
        _ => Ok(()),
    }
}

/// The elements `l` selects, without copying them.
pub(crate) fn selected<'a, U: Copy>(x: &'a [U], l: &'a Layout) -> impl Iterator<Item = U> + 'a {
    l.offsets().map(move |i| x[i])
}

/// `op(a, b)` elementwise.
pub(crate) fn binary<U: CpuNum>(
    op: BinaryOp,
    a: &[U],
    la: &Layout,
    b: &[U],
    lb: &Layout,
) -> Result<Vec<U>> {
    check_int_operand(op, selected(b, lb), "the divisor `other`")?;
    macro_rules! run {
        ($f:expr) => {
            map2(a, la, b, lb, $f)
        };
    }
    Ok(with_binary_fn!(op, U, run))
}

/// `op(a, b)` elementwise into the contiguous `out`.
pub(crate) fn binary_into<U: CpuNum>(
    op: BinaryOp,
    a: &[U],
    la: &Layout,
    b: &[U],
    lb: &Layout,
    out: &mut [U],
) -> Result<()> {
    check_int_operand(op, selected(b, lb), "the divisor `other`")?;
    macro_rules! run {
        ($f:expr) => {
            // SAFETY: `map2_into` writes only values of `f`.
            map2_into(unsafe { as_slots(out) }, a, la, b, lb, $f)
        };
    }
    with_binary_fn!(op, U, run);
    Ok(())
}

/// `op(x, s)`, or `op(s, x)` when `scalar_first`.
pub(crate) fn binary_scalar<U: CpuNum>(
    op: BinaryOp,
    x: &[U],
    l: &Layout,
    s: U,
    scalar_first: bool,
) -> Result<Vec<U>> {
    if scalar_first {
        check_int_operand(op, selected(x, l), "the divisor `self`")?;
    } else {
        check_int_operand(op, [s], "the scalar divisor")?;
    }
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            if scalar_first {
                map1(x, l, |v| f(s, v))
            } else {
                map1(x, l, |v| f(v, s))
            }
        }};
    }
    Ok(with_binary_fn!(op, U, run))
}

/// `op(dst, b)` written back into the contiguous `dst`.
pub(crate) fn binary_assign<U: CpuNum>(
    op: BinaryOp,
    dst: &mut [U],
    dims: &[usize],
    b: &[U],
    lb: &Layout,
) -> Result<()> {
    check_int_operand(op, selected(b, lb), "the divisor `other`")?;
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            write_runs(dst, dims, [lb], |o: &mut [U], base, s| {
                if s[0] == 1 {
                    let b = &b[base[0]..];
                    vectorized(
                        #[inline(always)]
                        || {
                            for (o, &y) in o.iter_mut().zip(b) {
                                *o = f(*o, y);
                            }
                        },
                    )
                } else {
                    for (j, o) in o.iter_mut().enumerate() {
                        *o = f(*o, b[base[0] + j * s[0]]);
                    }
                }
            })
        }};
    }
    with_binary_fn!(op, U, run);
    Ok(())
}

/// `op(dst, s)` written back into the contiguous `dst`.
pub(crate) fn binary_scalar_assign<U: CpuNum>(op: BinaryOp, dst: &mut [U], s: U) -> Result<()> {
    check_int_operand(op, [s], "the scalar divisor")?;
    let dims = [dst.len()];
    let l = Layout::contiguous(&dims);
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            write_runs(dst, &dims, [&l], |o: &mut [U], _, _| {
                vectorized(
                    #[inline(always)]
                    || {
                        for o in o.iter_mut() {
                            *o = f(*o, s);
                        }
                    },
                )
            })
        }};
    }
    with_binary_fn!(op, U, run);
    Ok(())
}

/// `input + value * t1 * t2`, in the accumulation precision for floats.
pub(crate) fn addcmul<U: CpuNum>(x: [(&[U], &Layout); 3], value: U) -> Vec<U> {
    if U::IS_INT {
        map3(x, |a, b, c| a.add(value.mul(b).mul(c)))
    } else {
        let v = value.to_f64();
        // f64 keeps every dtype's products exact enough to round once.
        map3(x, |a, b, c| {
            U::from_f64(a.to_f64() + v * b.to_f64() * c.to_f64())
        })
    }
}
