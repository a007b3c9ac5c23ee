//! The shape rule of every operation, written once.
//!
//! Each rule takes its operands as `(name, dims)` pairs so that its error
//! names the operand the user wrote (`bias`, `gpu_vector`) both when the
//! macro reports it at compile time and when the runtime returns it as an
//! `Err`. Rules follow PyTorch's semantics.
//!
//! ```
//! use tensorfn_core::rules;
//! let out = rules::matmul("matmul", ("a", &[4usize, 2, 3][..]), ("b", &[3, 5][..])).unwrap();
//! assert_eq!(out, vec![4, 2, 5]);
//! let err = rules::dot("dot", ("a", &[3usize][..]), ("b", &[4][..])).unwrap_err();
//! assert!(err.to_string().contains("equal lengths"));
//! ```

use crate::ops::conv::{out_size, ConvArgs};
use crate::ops::RowOp;
use std::fmt;

/// A dimension size the rules can reason about: a plain `usize` at run
/// time, or a symbolic expression inside the macro.
///
/// ```
/// use tensorfn_core::DimValue;
/// assert_eq!(<usize as DimValue>::from_usize(3).add(&4), 7);
/// assert_eq!(6usize.mul(&7).to_usize(), Some(42));
/// ```
pub trait DimValue: Clone + PartialEq + fmt::Display {
    /// The dim of a literal size.
    fn from_usize(n: usize) -> Self;
    /// The size, when it is known.
    fn to_usize(&self) -> Option<usize>;
    /// The sum of two dims (`cat`).
    fn add(&self, other: &Self) -> Self;
    /// The product of two dims (element counts).
    fn mul(&self, other: &Self) -> Self;
    /// A convolution's output size along a dim of this size with a kernel
    /// of `kernel` taps, `(self + 2p - d(k-1) - 1) / s + 1` (the division
    /// rounding down), when one of them is not a known number: `Some` with
    /// the size as a dim of this type (the macro's dims name a quotient that
    /// is not a polynomial as a dim computed at run time), else `None` (the
    /// default: the rules compute known sizes themselves).
    fn conv_out(
        &self,
        kernel: &Self,
        padding: usize,
        stride: usize,
        dilation: usize,
    ) -> Option<Self> {
        let _ = (kernel, padding, stride, dilation);
        None
    }
}

impl DimValue for usize {
    fn from_usize(n: usize) -> Self {
        n
    }
    fn to_usize(&self) -> Option<usize> {
        Some(*self)
    }
    fn add(&self, other: &Self) -> Self {
        self + other
    }
    fn mul(&self, other: &Self) -> Self {
        self.saturating_mul(*other)
    }
}

/// An operand as the rules see it: the name the user gave it and its dims.
///
/// ```
/// use tensorfn_core::rules::{self, Operand};
/// let a: Operand<'_, usize> = ("a", &[2, 3]);
/// let b: Operand<'_, usize> = ("b", &[3, 4]);
/// assert_eq!(rules::mm("mm", a, b).unwrap(), vec![2, 4]);
/// ```
pub type Operand<'a, D> = (&'a str, &'a [D]);

/// Why an operation's shapes do not fit, as a sentence naming the operand.
///
/// ```
/// use tensorfn_core::rules;
/// let e = rules::cat("cat", &[("a", &[2usize, 3][..]), ("b", &[2, 5][..])], 0).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("dim 1 is 3 in `a` and 5 in `b`"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// The operation (`cat`, `addmm`, ...).
    pub op: String,
    /// Index of the operand the error is about (for spans).
    pub operand: usize,
    /// What was expected, what was found and how to fix it.
    pub message: String,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuleError {}

fn err<T>(op: &str, operand: usize, message: String) -> Result<T, RuleError> {
    Err(RuleError {
        op: op.to_string(),
        operand,
        message,
    })
}

/// Formats dims the way PyTorch prints a size: `[2, 3]`.
///
/// ```
/// use tensorfn_core::rules::fmt_dims;
/// assert_eq!(fmt_dims(&[2usize, 3]), "[2, 3]");
/// assert_eq!(fmt_dims::<usize>(&[]), "[]");
/// ```
pub fn fmt_dims<D: fmt::Display>(dims: &[D]) -> String {
    let inner: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", inner.join(", "))
}

/// The number of elements: the product of the dims (1 for a scalar).
///
/// ```
/// use tensorfn_core::rules::numel;
/// assert_eq!(numel(&[2usize, 3, 4]), 24);
/// assert_eq!(numel::<usize>(&[]), 1);
/// assert_eq!(numel(&[5usize, 0]), 0);
/// ```
pub fn numel<D: DimValue>(dims: &[D]) -> D {
    dims.iter().fold(D::from_usize(1), |acc, d| acc.mul(d))
}

fn is_one<D: DimValue>(d: &D) -> bool {
    d.to_usize() == Some(1)
}

/// Turns a possibly negative dim index (`-1` = last) into a position,
/// or an error listing the valid range when it is out of range. Like
/// PyTorch, a scalar (rank 0) counts as one dim: 0 and -1 both name it.
///
/// ```
/// use tensorfn_core::rules::normalize_dim;
/// assert_eq!(normalize_dim("sum", "x", -1, 3).unwrap(), 2);
/// assert_eq!(normalize_dim("sum", "x", 1, 3).unwrap(), 1);
/// assert_eq!(normalize_dim("sum", "x", -1, 0).unwrap(), 0);
/// let e = normalize_dim("sum", "x", 3, 3).unwrap_err();
/// assert!(e.message.contains("valid dims are 0..=2 or -3..=-1"));
/// ```
pub fn normalize_dim(op: &str, name: &str, dim: isize, rank: usize) -> Result<usize, RuleError> {
    let span = rank.max(1) as isize;
    let pos = if dim < 0 { dim + span } else { dim };
    if !(0..span).contains(&pos) {
        let valid = if rank == 0 {
            "a scalar takes dim 0 or -1".to_string()
        } else {
            format!("valid dims are 0..={} or -{}..=-1", rank - 1, rank)
        };
        return err(
            op,
            0,
            format!("`{op}` got dim {dim} for `{name}`, which has {rank} dims: {valid}"),
        );
    }
    Ok(pos as usize)
}

/// Broadcasting of any number of elementwise operands: PyTorch's rule
/// (right-aligned; each pair of dims equal or one of them 1), made strict
/// where implicit rank promotion meets a size-1 dim.
///
/// An operand with fewer dims gets leading dims added. When it then grows
/// *and* another operand grows too, the result is larger than both, which
/// is how `pred` `[N, 1]` minus `target` `[N]` silently becomes `[N, N]`.
/// That pairing is an error naming both shapes, the shape they would
/// give and the fix. Still legal: outer products where every 1 is written
/// (`[N, 1]` with `[1, M]`), one side growing (a bias `[C]` onto
/// `[B, C]`), and scalars or all-1 tensors. [`broadcast_implicit`] is
/// PyTorch's rule without the strict check.
///
/// ```
/// use tensorfn_core::rules::broadcast;
/// let out = broadcast::<usize>("add", &[("a", &[4, 1, 3]), ("b", &[1, 5, 1])]).unwrap();
/// assert_eq!(out, vec![4, 5, 3]);
/// assert_eq!(broadcast::<usize>("add", &[("x", &[2, 3]), ("bias", &[3])]).unwrap(), vec![2, 3]);
/// let e = broadcast::<usize>("add", &[("a", &[2, 3]), ("b", &[4])]).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("dim -1 is 3 in `a` and 4 in `b`"));
/// let e = broadcast::<usize>("sub", &[("pred", &[5, 1]), ("target", &[5])]).unwrap_err();
/// assert!(e.message.contains("to [5, 5]"));
/// assert!(e.message.contains("`target.unsqueeze(1)`") && e.message.contains("`pred.squeeze(1)`"));
/// // A row that gets leading dims, while a third operand grows along its
/// // own 1 because of the second: not the bug.
/// let w = [("condition", &[3, 1, 4][..]), ("input", &[3, 2, 4][..]), ("other", &[4][..])];
/// assert_eq!(broadcast::<usize>("where", &w).unwrap(), vec![3, 2, 4]);
/// ```
pub fn broadcast<D: DimValue>(op: &str, operands: &[Operand<'_, D>]) -> Result<Vec<D>, RuleError> {
    let out = broadcast_implicit(op, operands)?;
    let rank = out.len();
    // The bug: `p` gets leading dims, grows along them, and another
    // operand `q` grows because of `p`, a 1 of `q` facing a dim of `p`
    // that is not 1 (`[N, 1]` and `[N]` to `[N, N]`). Growth from a third
    // operand (a bias `[C]` in a `where_` whose condition is `[B, 1, C]`)
    // is not that bug. All-1 operands are scalars in effect: they cannot
    // be confused with a dim of the other side.
    let scalar = |dims: &[D]| dims.iter().all(is_one);
    let grows_from = |q: &[D], p: &[D]| {
        let (qpad, ppad) = (rank - q.len(), rank - p.len());
        (ppad..rank)
            .any(|k| !is_one(&p[k - ppad]) && k.checked_sub(qpad).is_none_or(|j| is_one(&q[j])))
    };
    for (i, &(pname, pdims)) in operands.iter().enumerate() {
        let pad = rank - pdims.len();
        if pad == 0 || scalar(pdims) || out[..pad].iter().all(is_one) {
            continue;
        }
        let other = operands
            .iter()
            .enumerate()
            .find(|&(j, (_, q))| j != i && !scalar(q) && grows_from(q, pdims));
        if let Some((_, &(qname, qdims))) = other {
            return err(
                op,
                i,
                promotion_message(op, (pname, pdims), (qname, qdims), &out),
            );
        }
    }
    Ok(out)
}

/// The error of [`broadcast`] when `p` gets leading dims and both `p` and
/// `q` grow: both shapes, the result, and the fixes that fit them.
fn promotion_message<D: DimValue>(
    op: &str,
    (p, pd): Operand<'_, D>,
    (q, qd): Operand<'_, D>,
    out: &[D],
) -> String {
    let added = out.len() - pd.len();
    let mut fixes = Vec::new();
    // A 1 inserted into `p` that gives `q`'s shape: `p.unsqueeze(k)`.
    if added == 1 && qd.len() == out.len() {
        for k in 0..=pd.len() {
            let mut with = pd.to_vec();
            with.insert(k, D::from_usize(1));
            if with == qd {
                fixes.push(format!("`{p}.unsqueeze({k})`"));
                break;
            }
        }
        // A 1 removed from `q` that gives `p`'s shape: `q.squeeze(k)`.
        for k in 0..qd.len() {
            if is_one(&qd[k]) {
                let mut without = qd.to_vec();
                without.remove(k);
                if without == pd {
                    fixes.push(format!("`{q}.squeeze({k})`"));
                    break;
                }
            }
        }
    }
    let same = if fixes.is_empty() {
        "make the shapes agree first (`.unsqueeze(d)` / `.squeeze(d)` / `.reshape([..])`)"
            .to_string()
    } else {
        format!("use {}", fixes.join(" or "))
    };
    let explicit = if added == 1 {
        format!("`{p}.unsqueeze(0)`")
    } else {
        let mut padded: Vec<D> = vec![D::from_usize(1); added];
        padded.extend(pd.iter().cloned());
        format!("`{p}.reshape({})`", fmt_dims(&padded))
    };
    format!(
        "`{op}` would broadcast `{q}` {} with `{p}` {} to {}: `{p}` gets {} and then both operands grow, which is how `[N, 1]` and `[N]` silently become `[N, N]`; if the shapes should match, {same}; if the growth is meant, write the new dims of `{p}` explicitly with {explicit}",
        fmt_dims(qd),
        fmt_dims(pd),
        fmt_dims(out),
        if added == 1 {
            "a leading dim".to_string()
        } else {
            format!("{added} leading dims")
        }
    )
}

/// PyTorch's broadcasting, implicit rank promotion included (right-aligned;
/// each pair of dims equal or one of them 1): the rule of `matmul`'s batch
/// dims, and the first step of [`broadcast`].
///
/// ```
/// use tensorfn_core::rules::broadcast_implicit;
/// let out = broadcast_implicit::<usize>("matmul", &[("a", &[7, 1]), ("b", &[5])]).unwrap();
/// assert_eq!(out, vec![7, 5]);
/// ```
pub fn broadcast_implicit<D: DimValue>(
    op: &str,
    operands: &[Operand<'_, D>],
) -> Result<Vec<D>, RuleError> {
    let rank = operands.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let mut out: Vec<D> = vec![D::from_usize(1); rank];
    // Which operand fixed each output dim, for the error message.
    let mut owner: Vec<Option<usize>> = vec![None; rank];
    for (i, (name, dims)) in operands.iter().enumerate() {
        let pad = rank - dims.len();
        for (j, d) in dims.iter().enumerate() {
            let k = pad + j;
            if is_one(d) {
                continue;
            }
            match owner[k] {
                None => {
                    out[k] = d.clone();
                    owner[k] = Some(i);
                }
                Some(o) if out[k] == *d => {
                    let _ = o;
                }
                Some(o) => {
                    let (oname, odims) = operands[o];
                    return err(
                        op,
                        i,
                        format!(
                            "`{op}` cannot broadcast `{oname}` {} with `{name}` {}: dim {} is {} in `{oname}` and {} in `{name}`; broadcasting needs them equal or one of them 1",
                            fmt_dims(odims),
                            fmt_dims(dims),
                            k as isize - rank as isize,
                            out[k],
                            d
                        ),
                    );
                }
            }
        }
    }
    Ok(out)
}

/// Checks that `operand` broadcasts to exactly `target` (an `addmm` bias
/// to the product, an input to a preallocated output).
///
/// ```
/// use tensorfn_core::rules::broadcast_to;
/// assert!(broadcast_to::<usize>("addmm", ("bias", &[4]), &[3, 4]).is_ok());
/// assert!(broadcast_to::<usize>("addmm", ("bias", &[3, 1]), &[3, 4]).is_ok());
/// // Broadcasting only goes one way: `[3]` does not align with the last dim 4.
/// assert!(broadcast_to::<usize>("addmm", ("bias", &[3]), &[3, 4]).is_err());
/// ```
pub fn broadcast_to<D: DimValue>(
    op: &str,
    operand: Operand<'_, D>,
    target: &[D],
) -> Result<(), RuleError> {
    let (name, dims) = operand;
    let ok = dims.len() <= target.len()
        && dims
            .iter()
            .rev()
            .zip(target.iter().rev())
            .all(|(d, t)| is_one(d) || d == t);
    if ok {
        Ok(())
    } else {
        err(
            op,
            0,
            format!(
                "`{op}` cannot broadcast `{name}` {} to the result shape {}: each dim of `{name}`, aligned from the right, must equal the result's or be 1",
                fmt_dims(dims),
                fmt_dims(target)
            ),
        )
    }
}

/// Checks that two operands have exactly the same shape (in-place ops and
/// `*_into` outputs).
///
/// ```
/// use tensorfn_core::rules::same_shape;
/// assert!(same_shape::<usize>("add_", ("x", &[2, 3]), ("y", &[2, 3])).is_ok());
/// let e = same_shape::<usize>("add_", ("x", &[2, 3]), ("y", &[3, 2])).unwrap_err();
/// assert_eq!(e.message, "`add_` needs `y` to have the shape of `x`: expected [2, 3], found [3, 2]");
/// ```
pub fn same_shape<D: DimValue>(
    op: &str,
    expected: Operand<'_, D>,
    found: Operand<'_, D>,
) -> Result<(), RuleError> {
    if expected.1 == found.1 {
        return Ok(());
    }
    err(
        op,
        1,
        format!(
            "`{op}` needs `{}` to have the shape of `{}`: expected {}, found {}",
            found.0,
            expected.0,
            fmt_dims(expected.1),
            fmt_dims(found.1)
        ),
    )
}

fn rank_word(rank: usize) -> String {
    match rank {
        0 => "a scalar".to_string(),
        n => format!("{n}-D"),
    }
}

/// `torch.matmul`: 1-D·1-D is a dot product, 2-D·2-D a matrix product,
/// a 1-D operand is promoted to a row/column and removed again, and
/// leading batch dims broadcast.
///
/// ```
/// use tensorfn_core::rules::matmul;
/// assert_eq!(matmul::<usize>("matmul", ("a", &[3]), ("b", &[3])).unwrap(), Vec::<usize>::new());
/// assert_eq!(matmul::<usize>("matmul", ("a", &[2, 3]), ("b", &[3])).unwrap(), vec![2]);
/// assert_eq!(matmul::<usize>("matmul", ("a", &[7, 1, 2, 3]), ("b", &[5, 3, 4])).unwrap(), vec![7, 5, 2, 4]);
/// let e = matmul::<usize>("matmul", ("x", &[2, 3]), ("y", &[4, 5])).unwrap_err();
/// assert!(e.message.contains("k = 3") && e.message.contains("k = 4"));
/// ```
pub fn matmul<D: DimValue>(
    op: &str,
    a: Operand<'_, D>,
    b: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let (an, ad) = a;
    let (bn, bd) = b;
    for (i, (n, d)) in [(an, ad), (bn, bd)].into_iter().enumerate() {
        if d.is_empty() {
            return err(
                op,
                i,
                format!("`{op}` needs tensors of at least 1 dim, but `{n}` is a scalar"),
            );
        }
    }
    let a_k = ad.last().expect("checked non-empty");
    let b_k = if bd.len() == 1 {
        &bd[0]
    } else {
        &bd[bd.len() - 2]
    };
    if a_k != b_k {
        let b_pos = if bd.len() == 1 {
            "its only dim"
        } else {
            "its second-to-last dim"
        };
        return err(
            op,
            1,
            format!(
                "`{op}` needs the last dim of `{an}` to equal {b_pos} of `{bn}`: `{an}` is {} (k = {a_k}) but `{bn}` is {} (k = {b_k}); transpose one with `.t()` or fix the shapes",
                fmt_dims(ad),
                fmt_dims(bd)
            ),
        );
    }
    if ad.len() == 1 && bd.len() == 1 {
        return Ok(vec![]);
    }
    let a_batch = if ad.len() > 2 {
        &ad[..ad.len() - 2]
    } else {
        &[][..]
    };
    let b_batch = if bd.len() > 2 {
        &bd[..bd.len() - 2]
    } else {
        &[][..]
    };
    let mut out = broadcast_implicit(op, &[(an, a_batch), (bn, b_batch)])?;
    if ad.len() >= 2 {
        out.push(ad[ad.len() - 2].clone());
    }
    if bd.len() >= 2 {
        out.push(bd[bd.len() - 1].clone());
    }
    Ok(out)
}

fn need_matrix<D: DimValue>(op: &str, i: usize, (n, d): Operand<'_, D>) -> Result<(), RuleError> {
    if d.len() == 2 {
        return Ok(());
    }
    let hint = if d.len() == 1 {
        format!(
            "; for a matrix-vector product use `matmul`, or reshape it to a column with `.reshape([{}, 1])`",
            d[0]
        )
    } else {
        String::new()
    };
    err(
        op,
        i,
        format!(
            "`{op}` needs a matrix (2-D) for `{n}`, found shape {} ({}){hint}",
            fmt_dims(d),
            rank_word(d.len())
        ),
    )
}

/// `torch.mm`: `[n, k] x [k, m] -> [n, m]`, both operands exactly 2-D.
///
/// ```
/// use tensorfn_core::rules::mm;
/// assert_eq!(mm::<usize>("mm", ("a", &[2, 3]), ("b", &[3, 4])).unwrap(), vec![2, 4]);
/// let e = mm::<usize>("mm", ("a", &[2, 3]), ("v", &[3])).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("use `matmul`"));
/// ```
pub fn mm<D: DimValue>(
    op: &str,
    a: Operand<'_, D>,
    b: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    need_matrix(op, 0, a)?;
    need_matrix(op, 1, b)?;
    matmul(op, a, b)
}

/// `torch.bmm`: `[b, n, k] x [b, k, m] -> [b, n, m]`, both exactly 3-D with
/// equal batch.
///
/// ```
/// use tensorfn_core::rules::bmm;
/// assert_eq!(bmm::<usize>("bmm", ("a", &[8, 2, 3]), ("b", &[8, 3, 4])).unwrap(), vec![8, 2, 4]);
/// let e = bmm::<usize>("bmm", ("a", &[8, 2, 3]), ("b", &[1, 3, 4])).unwrap_err();
/// assert!(e.message.contains("equal batch sizes"));
/// ```
pub fn bmm<D: DimValue>(
    op: &str,
    a: Operand<'_, D>,
    b: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    for (i, (n, d)) in [a, b].into_iter().enumerate() {
        if d.len() != 3 {
            return err(
                op,
                i,
                format!(
                    "`{op}` needs a batch of matrices (3-D) for `{n}`, found shape {} ({})",
                    fmt_dims(d),
                    rank_word(d.len())
                ),
            );
        }
    }
    if a.1[0] != b.1[0] {
        return err(
            op,
            1,
            format!(
                "`{op}` needs equal batch sizes: `{}` has {} matrices and `{}` has {}",
                a.0, a.1[0], b.0, b.1[0]
            ),
        );
    }
    matmul(op, a, b)
}

/// `torch.addmm(bias, m1, m2)`: `bias + m1 @ m2` with `bias` broadcast to
/// the `[n, m]` product.
///
/// ```
/// use tensorfn_core::rules::addmm;
/// let out = addmm::<usize>("addmm", ("bias", &[4]), ("m1", &[3, 2]), ("m2", &[2, 4])).unwrap();
/// assert_eq!(out, vec![3, 4]);
/// let e = addmm::<usize>("addmm", ("bias", &[3]), ("m1", &[3, 2]), ("m2", &[2, 4])).unwrap_err();
/// assert!(e.message.contains("cannot broadcast `bias` [3] to the result shape [3, 4]"));
/// ```
pub fn addmm<D: DimValue>(
    op: &str,
    bias: Operand<'_, D>,
    m1: Operand<'_, D>,
    m2: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let out = mm(op, m1, m2).map_err(|mut e| {
        e.operand += 1;
        e
    })?;
    broadcast_to(op, bias, &out)?;
    Ok(out)
}

/// `torch.dot`: two 1-D tensors of equal length, giving a scalar.
///
/// ```
/// use tensorfn_core::rules::dot;
/// assert_eq!(dot::<usize>("dot", ("a", &[5]), ("b", &[5])).unwrap(), Vec::<usize>::new());
/// let e = dot::<usize>("dot", ("a", &[2, 3]), ("b", &[6])).unwrap_err();
/// assert!(e.message.contains("flatten it with `.reshape([6])`"));
/// ```
pub fn dot<D: DimValue>(
    op: &str,
    a: Operand<'_, D>,
    b: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    for (i, (n, d)) in [a, b].into_iter().enumerate() {
        if d.len() != 1 {
            return err(
                op,
                i,
                format!(
                    "`{op}` needs 1-D tensors, but `{n}` has shape {} ({}): flatten it with `.reshape([{}])` or use `matmul` for matrices",
                    fmt_dims(d),
                    rank_word(d.len()),
                    numel(d)
                ),
            );
        }
    }
    if a.1[0] != b.1[0] {
        return err(
            op,
            1,
            format!(
                "`{op}` needs equal lengths: `{}` has {} elements and `{}` has {}",
                a.0, a.1[0], b.0, b.1[0]
            ),
        );
    }
    Ok(vec![])
}

/// `torch.cat(tensors, dim)`: equal ranks, equal dims except `dim`, whose
/// sizes add up.
///
/// ```
/// use tensorfn_core::rules::cat;
/// assert_eq!(cat::<usize>("cat", &[("a", &[2, 3]), ("b", &[2, 5])], 1).unwrap(), vec![2, 8]);
/// assert!(cat::<usize>("cat", &[("a", &[2, 3]), ("b", &[2, 5])], 0).is_err());
/// assert!(cat::<usize>("cat", &[], 0).is_err());
/// ```
pub fn cat<D: DimValue>(
    op: &str,
    operands: &[Operand<'_, D>],
    dim: usize,
) -> Result<Vec<D>, RuleError> {
    let Some(&(first_name, first)) = operands.first() else {
        return err(op, 0, format!("`{op}` needs at least one tensor"));
    };
    if dim >= first.len() {
        return err(
            op,
            0,
            format!(
                "`{op}` along dim {dim}, but `{first_name}` has shape {} ({}): valid dims are 0..{}",
                fmt_dims(first),
                rank_word(first.len()),
                first.len()
            ),
        );
    }
    let mut out = first.to_vec();
    for (i, &(name, dims)) in operands.iter().enumerate().skip(1) {
        if dims.len() != first.len() {
            return err(
                op,
                i,
                format!(
                    "`{op}` needs tensors of equal rank: `{first_name}` is {} {} and `{name}` is {} {}",
                    rank_word(first.len()),
                    fmt_dims(first),
                    rank_word(dims.len()),
                    fmt_dims(dims)
                ),
            );
        }
        for (k, (f, d)) in first.iter().zip(dims).enumerate() {
            if k != dim && f != d {
                return err(
                    op,
                    i,
                    format!(
                        "`{op}` along dim {dim} needs equal dims elsewhere: dim {k} is {f} in `{first_name}` and {d} in `{name}`"
                    ),
                );
            }
        }
        out[dim] = out[dim].add(&dims[dim]);
    }
    Ok(out)
}

/// `torch.nn.functional.scaled_dot_product_attention`: `query` is
/// `[.., L, E]`, `key` `[.., S, E]`, `value` `[.., S, Ev]`, the result
/// `[.., L, Ev]`; the leading dims broadcast as in `matmul`, and
/// `attn_mask` (operand 3) broadcasts to `[.., L, S]` and cannot come
/// with `is_causal` (PyTorch refuses the pair too). With `enable_gqa`
/// (grouped-query attention), `key` and `value` may hold fewer heads
/// (dim -3, `Hkv`) than `query` (`H`) when `H` is a multiple of `Hkv`:
/// query head `h` reads key and value head `h / (H / Hkv)`, as PyTorch's
/// `enable_gqa=True` does.
///
/// ```
/// use tensorfn_core::rules::attention;
/// let q = ("q", &[2usize, 4, 10, 64][..]);
/// let k = ("k", &[2usize, 4, 12, 64][..]);
/// let v = ("v", &[2usize, 4, 12, 32][..]);
/// assert_eq!(attention("sdpa", q, k, v, None, true, false).unwrap(), vec![2, 4, 10, 32]);
/// let m = ("m", &[10usize, 12][..]);
/// assert!(attention("sdpa", q, k, v, Some(m), false, false).is_ok());
/// assert!(attention("sdpa", q, k, v, Some(m), true, false).is_err());
/// let e = attention("sdpa", q, ("k", &[2, 4, 12, 32][..]), v, None, false, false).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("E = 64") && e.message.contains("E = 32"));
/// let e = attention("sdpa", q, k, v, Some(("m", &[12, 10][..])), false, false).unwrap_err();
/// assert_eq!(e.operand, 3);
/// // grouped-query attention: 4 query heads share 2 key and value heads
/// let (k2, v2) = (("k", &[2usize, 2, 12, 64][..]), ("v", &[2usize, 2, 12, 32][..]));
/// assert_eq!(attention("sdpa", q, k2, v2, None, true, true).unwrap(), vec![2, 4, 10, 32]);
/// let e = attention("sdpa", q, k2, v2, None, true, false).unwrap_err();
/// assert!(e.message.contains("enable_gqa = true"));
/// let (k3, v3) = (("k", &[2usize, 3, 12, 64][..]), ("v", &[2usize, 3, 12, 32][..]));
/// let e = attention("sdpa", q, k3, v3, None, true, true).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("multiple"));
/// ```
pub fn attention<D: DimValue>(
    op: &str,
    query: Operand<'_, D>,
    key: Operand<'_, D>,
    value: Operand<'_, D>,
    attn_mask: Option<Operand<'_, D>>,
    is_causal: bool,
    enable_gqa: bool,
) -> Result<Vec<D>, RuleError> {
    if let (Some((mn, _)), true) = (attn_mask, is_causal) {
        return err(
            op,
            3,
            format!(
                "`{op}` takes `attn_mask` or `is_causal = true`, not both (as in PyTorch): fold the causal mask into `{mn}` or drop `{mn}`"
            ),
        );
    }
    let what = ["[.., L, E]", "[.., S, E]", "[.., S, Ev]"];
    for (i, (n, d)) in [query, key, value].into_iter().enumerate() {
        if d.len() < 2 {
            return err(
                op,
                i,
                format!(
                    "`{op}` needs `{n}` to be {} (at least 2-D), found shape {} ({})",
                    what[i],
                    fmt_dims(d),
                    rank_word(d.len())
                ),
            );
        }
    }
    let ((qn, qd), (kn, kd), (vn, vd)) = (query, key, value);
    let (qr, kr, vr) = (qd.len(), kd.len(), vd.len());
    if qd[qr - 1] != kd[kr - 1] {
        return err(
            op,
            1,
            format!(
                "`{op}` needs the last dim of `{kn}` to equal the last dim of `{qn}` (the head dim E): `{qn}` is {} (E = {}) but `{kn}` is {} (E = {}); project both to one head dim",
                fmt_dims(qd),
                qd[qr - 1],
                fmt_dims(kd),
                kd[kr - 1]
            ),
        );
    }
    if kd[kr - 2] != vd[vr - 2] {
        return err(
            op,
            2,
            format!(
                "`{op}` needs one value per key: `{kn}` is {} (S = {}) but `{vn}` is {} (S = {}); the second-to-last dims must be equal",
                fmt_dims(kd),
                kd[kr - 2],
                fmt_dims(vd),
                vd[vr - 2]
            ),
        );
    }
    // The heads (dim -3) of each operand that has them.
    let heads = |d: &[D]| (d.len() >= 3).then(|| d[d.len() - 3].clone());
    let (qh, kh, vh) = (heads(qd), heads(kd), heads(vd));
    let grouped = |h: &Option<D>| match (&qh, h) {
        (Some(q), Some(k)) if q != k && !is_one(k) => Some(k.clone()),
        _ => None,
    };
    // Under `enable_gqa`, keys and values of fewer heads are read as
    // `H / Hkv` copies of each (`repeat_interleave` on dim -3).
    let (mut kd_b, mut vd_b) = (kd[..kr - 2].to_vec(), vd[..vr - 2].to_vec());
    if enable_gqa {
        if let (Some(q), Some(k)) = (&qh, grouped(&kh)) {
            if vh.as_ref() != Some(&k) {
                return err(
                    op,
                    2,
                    format!(
                        "`{op}` with `enable_gqa = true` needs as many heads (dim -3) in `{vn}` as in `{kn}`: `{kn}` is {} ({k} heads) but `{vn}` is {} ({} heads)",
                        fmt_dims(kd),
                        fmt_dims(vd),
                        vh.as_ref().map_or("no".to_string(), |h| h.to_string())
                    ),
                );
            }
            if let (Some(a), Some(b)) = (q.to_usize(), k.to_usize()) {
                if b == 0 || a % b != 0 {
                    return err(
                        op,
                        1,
                        format!(
                            "`{op}` with `enable_gqa = true` needs the query heads (dim -3) to be a multiple of the key heads: `{qn}` is {} ({a} heads) but `{kn}` is {} ({b} heads); give `{kn}` and `{vn}` a number of heads that divides {a}",
                            fmt_dims(qd),
                            fmt_dims(kd)
                        ),
                    );
                }
            }
            let (nk, nv) = (kd_b.len(), vd_b.len());
            kd_b[nk - 1] = q.clone();
            vd_b[nv - 1] = q.clone();
        }
    }
    if !enable_gqa {
        // Fewer key or value heads that divide the query's: the grouped
        // case, named as such.
        for (i, (n, d, h)) in [(kn, kd, &kh), (vn, vd, &vh)].into_iter().enumerate() {
            let (Some(q), Some(k)) = (&qh, grouped(h)) else {
                continue;
            };
            if let (Some(a), Some(b)) = (q.to_usize(), k.to_usize()) {
                if b > 0 && a % b == 0 {
                    return err(
                        op,
                        i + 1,
                        format!(
                            "`{op}` needs as many heads (dim -3) in `{n}` as in `{qn}`, or 1: `{qn}` is {} ({a} heads) but `{n}` is {} ({b} heads); for grouped-query attention (each key and value head shared by {} query heads) pass `enable_gqa = true`",
                            fmt_dims(qd),
                            fmt_dims(d),
                            a / b
                        ),
                    );
                }
            }
        }
    }
    let mut out = broadcast_implicit(op, &[(qn, &qd[..qr - 2]), (kn, &kd_b), (vn, &vd_b)])?;
    if let Some((mn, md)) = attn_mask {
        let mut scores = out.clone();
        scores.push(qd[qr - 2].clone());
        scores.push(kd[kr - 2].clone());
        let fits = md.len() <= scores.len()
            && md
                .iter()
                .rev()
                .zip(scores.iter().rev())
                .all(|(d, t)| is_one(d) || d == t);
        if !fits {
            return err(
                op,
                3,
                format!(
                    "`{op}` cannot broadcast `{mn}` {} to the scores' shape {} (the queries of `{qn}` by the keys of `{kn}`): each dim of `{mn}`, aligned from the right, must equal the scores' or be 1",
                    fmt_dims(md),
                    fmt_dims(&scores)
                ),
            );
        }
    }
    out.push(qd[qr - 2].clone());
    out.push(vd[vr - 1].clone());
    Ok(out)
}

/// `reshape`/`view`: the element count must not change.
///
/// ```
/// use tensorfn_core::rules::reshape;
/// assert!(reshape::<usize>("view", ("x", &[4, 6]), &[2, 12]).is_ok());
/// let e = reshape::<usize>("view", ("x", &[4, 6]), &[5, 5]).unwrap_err();
/// assert!(e.message.contains("24 elements") && e.message.contains("25 elements"));
/// ```
pub fn reshape<D: DimValue>(op: &str, from: Operand<'_, D>, to: &[D]) -> Result<(), RuleError> {
    let (name, dims) = from;
    let (a, b) = (numel(dims), numel(to));
    if a == b {
        return Ok(());
    }
    err(
        op,
        0,
        format!(
            "`{op}` of `{name}` from {} ({a} elements) to {} ({b} elements): the element counts must match",
            fmt_dims(dims),
            fmt_dims(to)
        ),
    )
}

/// `unsqueeze(dim)`: a dim of size 1 inserted before position `dim`
/// (`0..=rank`; `rank` appends it).
///
/// ```
/// use tensorfn_core::rules::unsqueeze;
/// assert_eq!(unsqueeze::<usize>("unsqueeze", ("x", &[5]), 1).unwrap(), vec![5, 1]);
/// assert_eq!(unsqueeze::<usize>("unsqueeze", ("x", &[5]), 0).unwrap(), vec![1, 5]);
/// assert!(unsqueeze::<usize>("unsqueeze", ("x", &[5]), 2).is_err());
/// ```
pub fn unsqueeze<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    if dim > dims.len() {
        return err(
            op,
            0,
            format!(
                "`{op}` at dim {dim}, but `{name}` has shape {} ({}): valid dims are 0..={}",
                fmt_dims(dims),
                rank_word(dims.len()),
                dims.len()
            ),
        );
    }
    let mut out = dims.to_vec();
    out.insert(dim, D::from_usize(1));
    Ok(out)
}

/// `expand(size)`: a view with dims of size 1 (or new leading dims)
/// repeated, PyTorch's `Tensor.expand`. `None` in `size` keeps the
/// input's dim (PyTorch's `-1`); a dim that is not 1 keeps its size.
///
/// ```
/// use tensorfn_core::rules::expand;
/// assert_eq!(expand::<usize>("expand", ("x", &[3, 1]), &[Some(2), None, Some(4)]).unwrap(), vec![2, 3, 4]);
/// let e = expand::<usize>("expand", ("x", &[3, 2]), &[Some(3), Some(4)]).unwrap_err();
/// assert!(e.message.contains("dim 1 of `x` [3, 2] has size 2"), "{}", e.message);
/// ```
pub fn expand<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    size: &[Option<D>],
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    if size.len() < dims.len() {
        return err(
            op,
            0,
            format!(
                "`{op}` of `{name}` {} ({}) to {} dims: the size names every dim of `{name}` (new ones lead)",
                fmt_dims(dims),
                rank_word(dims.len()),
                size.len()
            ),
        );
    }
    let lead = size.len() - dims.len();
    let mut out = Vec::with_capacity(size.len());
    for (k, s) in size.iter().enumerate() {
        let old = k.checked_sub(lead).map(|i| &dims[i]);
        match (s, old) {
            (None, Some(d)) => out.push(d.clone()),
            (None, None) => {
                return err(op, 0, format!("`{op}` of `{name}`: `-1` at new leading dim {k} has no size to keep; name it"))
            }
            (Some(s), None) => out.push(s.clone()),
            (Some(s), Some(d)) if d == s || is_one(d) => out.push(s.clone()),
            (Some(s), Some(d)) => {
                return err(
                    op,
                    0,
                    format!(
                        "`{op}` of `{name}` to size {s} at dim {k}, but dim {} of `{name}` {} has size {d}: only dims of size 1 expand (`repeat_interleave` or `cat` copy a dim several times)",
                        k - lead,
                        fmt_dims(dims)
                    ),
                )
            }
        }
    }
    Ok(out)
}

/// `repeat_interleave(repeats, dim)`: each element along `dim` repeated
/// `repeats` times in place (`[a, b]` → `[a, a, b, b]`), the dim
/// `repeats` times longer.
///
/// ```
/// use tensorfn_core::rules::repeat_interleave;
/// assert_eq!(repeat_interleave::<usize>("repeat_interleave", ("k", &[2, 4, 64]), &3, 0).unwrap(), vec![6, 4, 64]);
/// assert!(repeat_interleave::<usize>("repeat_interleave", ("k", &[2]), &3, 1).is_err());
/// ```
pub fn repeat_interleave<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    repeats: &D,
    dim: usize,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    if dim >= dims.len() {
        return err(
            op,
            0,
            format!(
                "`{op}` along dim {dim}, but `{name}` has shape {} ({}): valid dims are 0..{}",
                fmt_dims(dims),
                rank_word(dims.len()),
                dims.len()
            ),
        );
    }
    let mut out = dims.to_vec();
    out[dim] = dims[dim].mul(repeats);
    Ok(out)
}

/// `stack(tensors, dim)`: tensors of one shape joined along a new dim
/// `dim` (`0..=rank`).
///
/// ```
/// use tensorfn_core::rules::stack;
/// assert_eq!(stack::<usize>("stack", &[("a", &[2, 3]), ("b", &[2, 3])], 1).unwrap(), vec![2, 2, 3]);
/// let e = stack::<usize>("stack", &[("a", &[2, 3]), ("b", &[3, 2])], 0).unwrap_err();
/// assert_eq!(e.operand, 1);
/// ```
pub fn stack<D: DimValue>(
    op: &str,
    operands: &[Operand<'_, D>],
    dim: usize,
) -> Result<Vec<D>, RuleError> {
    let Some(&(first_name, first)) = operands.first() else {
        return err(op, 0, format!("`{op}` needs at least one tensor"));
    };
    for (i, &(name, dims)) in operands.iter().enumerate().skip(1) {
        if dims != first {
            return err(
                op,
                i,
                format!(
                    "`{op}` needs tensors of one shape: `{first_name}` is {} and `{name}` is {}",
                    fmt_dims(first),
                    fmt_dims(dims)
                ),
            );
        }
    }
    let mut out = unsqueeze(op, (first_name, first), dim)?;
    out[dim] = D::from_usize(operands.len());
    Ok(out)
}

/// `squeeze(dim)`: removes dim `dim`, which must have size 1. (PyTorch
/// returns the tensor unchanged when it does not; here the result's rank
/// is part of its type, so that is an error.)
///
/// ```
/// use tensorfn_core::rules::squeeze;
/// assert_eq!(squeeze::<usize>("squeeze", ("x", &[5, 1]), 1).unwrap(), vec![5]);
/// let e = squeeze::<usize>("squeeze", ("x", &[5, 1]), 0).unwrap_err();
/// assert!(e.message.contains("dim 0 of `x` [5, 1] has size 5"));
/// ```
pub fn squeeze<D: DimValue>(op: &str, x: Operand<'_, D>, dim: usize) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    let out = reduce(op, x, dim, false)?;
    if !is_one(&dims[dim]) {
        let ones: Vec<String> = (0..dims.len())
            .filter(|&k| is_one(&dims[k]))
            .map(|k| k.to_string())
            .collect();
        let hint = if ones.is_empty() {
            format!("`{name}` has no dim of size 1")
        } else {
            format!("its dims of size 1 are {}", ones.join(", "))
        };
        return err(
            op,
            0,
            format!(
                "`{op}` removes a dim of size 1, but dim {dim} of `{name}` {} has size {}: {hint}",
                fmt_dims(dims),
                dims[dim]
            ),
        );
    }
    Ok(out)
}

/// A reduction (or a row op, `softmax`) along a dim whose size is known
/// to be 1 does nothing useful: `sum`/`max` return the input, `argmax`
/// zeros, `softmax` ones (a row op's table entry says what it returns). The macro reports it for dims that are literally 1 in
/// the types; a run-time size of 1 is ordinary data, so the runtime does
/// not call this.
///
/// ```
/// use tensorfn_core::rules::reduce_size_one;
/// assert!(reduce_size_one::<usize>("argmax", ("logits", &[8, 10]), 1).is_ok());
/// let e = reduce_size_one::<usize>("argmax", ("logits", &[8, 1]), 1).unwrap_err();
/// assert!(e.message.contains("dim 1 of `logits` [8, 1] has size 1"));
/// assert!(e.message.contains("did you mean dim 0 (size 8)"));
/// ```
pub fn reduce_size_one<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
) -> Result<(), RuleError> {
    let (name, dims) = x;
    if dim >= dims.len() || !is_one(&dims[dim]) {
        return Ok(());
    }
    let effect = match op {
        "argmax" | "argmin" => "every index it returns is 0",
        "mean" | "max" | "min" | "sum" => "it returns the input's values unchanged",
        _ => RowOp::from_name(op).map_or("it does nothing", RowOp::size_one),
    };
    let others: Vec<String> = (0..dims.len())
        .filter(|&k| !is_one(&dims[k]))
        .map(|k| format!("dim {k} (size {})", dims[k]))
        .collect();
    let meant = match others.as_slice() {
        [] => String::new(),
        [one] => format!("did you mean {one}? "),
        many => format!("did you mean one of {}? ", many.join(", ")),
    };
    let one_logit = if matches!(op, "argmax" | "argmin") {
        format!(" For one score per row, compare it with a threshold instead (`{name}.gt(0.0)`).")
    } else {
        String::new()
    };
    err(
        op,
        0,
        format!(
            "`{op}` along dim {dim}, but dim {dim} of `{name}` {} has size 1, so {effect}: {meant}To drop the dim, use `{name}.squeeze({dim})`.{one_logit}",
            fmt_dims(dims)
        ),
    )
}

/// `permute(perm)`: `perm` must list each dim exactly once.
///
/// ```
/// use tensorfn_core::rules::permute;
/// assert_eq!(permute::<usize>("permute", ("x", &[2, 3, 4]), &[2, 0, 1]).unwrap(), vec![4, 2, 3]);
/// assert!(permute::<usize>("permute", ("x", &[2, 3, 4]), &[0, 0, 1]).is_err());
/// assert!(permute::<usize>("permute", ("x", &[2, 3, 4]), &[1, 0]).is_err());
/// ```
pub fn permute<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    perm: &[usize],
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    let mut seen = vec![false; dims.len()];
    let valid = perm.len() == dims.len()
        && perm
            .iter()
            .all(|&p| p < dims.len() && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return err(
            op,
            0,
            format!(
                "`{op}` of `{name}` {} needs a permutation of 0..{}, found {:?}",
                fmt_dims(dims),
                dims.len(),
                perm
            ),
        );
    }
    Ok(perm.iter().map(|&p| dims[p].clone()).collect())
}

/// `t()`: transposes a matrix; 0-D and 1-D tensors are returned as is.
///
/// ```
/// use tensorfn_core::rules::t;
/// assert_eq!(t::<usize>("t", ("x", &[2, 3])).unwrap(), vec![3, 2]);
/// assert_eq!(t::<usize>("t", ("x", &[5])).unwrap(), vec![5]);
/// assert!(t::<usize>("t", ("x", &[2, 3, 4])).is_err());
/// ```
pub fn t<D: DimValue>(op: &str, x: Operand<'_, D>) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    match dims.len() {
        0 | 1 => Ok(dims.to_vec()),
        2 => Ok(vec![dims[1].clone(), dims[0].clone()]),
        n => err(
            op,
            0,
            format!(
                "`{op}` transposes tensors of at most 2 dims, but `{name}` is {n}-D {}: use `.permute([..])` or `.transpose(d0, d1)`",
                fmt_dims(dims)
            ),
        ),
    }
}

/// `transpose(d0, d1)`: swaps two dims.
///
/// ```
/// use tensorfn_core::rules::transpose;
/// assert_eq!(transpose::<usize>("transpose", ("x", &[2, 3, 4]), 0, 2).unwrap(), vec![4, 3, 2]);
/// assert!(transpose::<usize>("transpose", ("x", &[2, 3]), 0, 2).is_err());
/// ```
pub fn transpose<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    d0: usize,
    d1: usize,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    for d in [d0, d1] {
        if d >= dims.len() {
            return err(
                op,
                0,
                format!(
                    "`{op}` of dim {d}, but `{name}` has shape {} ({})",
                    fmt_dims(dims),
                    rank_word(dims.len())
                ),
            );
        }
    }
    let mut out = dims.to_vec();
    out.swap(d0, d1);
    Ok(out)
}

/// A reduction along `dim` (`sum`, `mean`, `max`, `softmax`'s dim check):
/// the dim disappears unless `keepdim`, where it becomes 1.
///
/// ```
/// use tensorfn_core::rules::reduce;
/// assert_eq!(reduce::<usize>("sum", ("x", &[2, 3, 4]), 1, false).unwrap(), vec![2, 4]);
/// assert_eq!(reduce::<usize>("sum", ("x", &[2, 3, 4]), 1, true).unwrap(), vec![2, 1, 4]);
/// assert!(reduce::<usize>("sum", ("x", &[2, 3]), 2, false).is_err());
/// let e = reduce::<usize>("sum", ("x", &[]), 0, false).unwrap_err();
/// assert!(e.message.contains("a scalar, no dims"));
/// ```
pub fn reduce<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
    keepdim: bool,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    if dims.is_empty() {
        // PyTorch accepts dim 0 of a 0-d tensor as the tensor itself.
        return err(
            op,
            0,
            format!("`{op}` along dim {dim}, but `{name}` has shape [] (a scalar, no dims): `{name}` already is its own `{op}` along every dim"),
        );
    }
    if dim >= dims.len() {
        return err(
            op,
            0,
            format!(
                "`{op}` along dim {dim}, but `{name}` has shape {} ({}): valid dims are 0..{}",
                fmt_dims(dims),
                rank_word(dims.len()),
                dims.len()
            ),
        );
    }
    let mut out = dims.to_vec();
    if keepdim {
        out[dim] = D::from_usize(1);
    } else {
        out.remove(dim);
    }
    Ok(out)
}

/// `topk(x, k, dim)`: the `k` largest (or smallest) elements along `dim`
/// and their positions; the result (values and indices alike) has the
/// dims of `x` with `dim` of size `k`. A `k` larger than the dim is an
/// error (where both are known: the macro checks static sizes, the
/// runtime every call).
///
/// ```
/// use tensorfn_core::rules::topk;
/// assert_eq!(topk::<usize>("topk", ("logits", &[4, 50257]), 1, &40).unwrap(), vec![4, 40]);
/// assert_eq!(topk::<usize>("topk", ("x", &[3, 0]), 1, &0).unwrap(), vec![3, 0]);
/// let e = topk::<usize>("topk", ("x", &[4, 10]), 1, &11).unwrap_err();
/// assert!(e.message.contains("`k` at most 10"), "{e}");
/// assert!(topk::<usize>("topk", ("x", &[]), 0, &1).is_err());
/// ```
pub fn topk<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
    k: &D,
) -> Result<Vec<D>, RuleError> {
    reduce(op, x, dim, false)?;
    let (name, dims) = x;
    if let (Some(size), Some(kn)) = (dims[dim].to_usize(), k.to_usize()) {
        if kn > size {
            return err(
                op,
                0,
                format!(
                    "`{op}` picks `k` elements along dim {dim} of `{name}`, so `k` at most {size} (the size of that dim), found k = {kn}: pass a `k` of at most {size}, or pick along another dim"
                ),
            );
        }
    }
    let mut out = dims.to_vec();
    out[dim] = k.clone();
    Ok(out)
}

/// `multinomial(probs, num_samples, replacement)`: `probs` is `[.., K]`,
/// `K` categories of weights along the last dim; the result holds
/// `num_samples` category indices per row, `[.., num_samples]`. `K` must
/// be 1 or more, `num_samples` 1 or more, and without replacement at most
/// `K` (where the sizes are known: the macro checks static sizes, the
/// runtime every call).
///
/// ```
/// use tensorfn_core::rules::multinomial;
/// assert_eq!(multinomial::<usize>("multinomial", ("probs", &[4, 10]), &1, false).unwrap(), vec![4, 1]);
/// assert_eq!(multinomial::<usize>("multinomial", ("probs", &[10]), &20, true).unwrap(), vec![20]);
/// let e = multinomial::<usize>("multinomial", ("probs", &[4, 10]), &11, false).unwrap_err();
/// assert!(e.message.contains("`num_samples` at most 10"), "{e}");
/// assert!(multinomial::<usize>("multinomial", ("probs", &[4, 10]), &0, true).is_err());
/// assert!(multinomial::<usize>("multinomial", ("probs", &[4, 0]), &1, true).is_err());
/// assert!(multinomial::<usize>("multinomial", ("probs", &[]), &1, true).is_err());
/// ```
pub fn multinomial<D: DimValue>(
    op: &str,
    probs: Operand<'_, D>,
    num_samples: &D,
    replacement: bool,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = probs;
    let Some(last) = dims.last() else {
        return err(
            op,
            0,
            format!("`{op}` draws categories along the last dim of `{name}`, which must have at least one dim, but it is a scalar (shape [])"),
        );
    };
    if last.to_usize() == Some(0) {
        return err(
            op,
            0,
            format!(
                "`{op}` draws from the categories along the last dim of `{name}`, which must be 1 or more, but its shape is {}",
                fmt_dims(dims)
            ),
        );
    }
    if num_samples.to_usize() == Some(0) {
        return err(
            op,
            0,
            format!("`{op}` draws `num_samples` of 1 or more, found num_samples = 0"),
        );
    }
    if let (false, Some(k), Some(n)) = (replacement, last.to_usize(), num_samples.to_usize()) {
        if n > k {
            return err(
                op,
                0,
                format!(
                    "`{op}` without replacement draws each of the {k} categories of `{name}` at most once, so `num_samples` at most {k}, found num_samples = {n}: pass `replacement = true` to draw more"
                ),
            );
        }
    }
    let mut out = dims.to_vec();
    *out.last_mut().expect("rank 1 or more") = num_samples.clone();
    Ok(out)
}

/// Indexing `x[.., index, ..]` along `dim`: the dim disappears; an index
/// past the end is an error (never an illegal memory access).
///
/// ```
/// use tensorfn_core::rules::index;
/// assert_eq!(index::<usize>("index", ("x", &[10, 4]), 0, 9).unwrap(), vec![4]);
/// let e = index::<usize>("index", ("x", &[10, 4]), 0, 10).unwrap_err();
/// assert!(e.message.contains("valid indices are 0..=9"));
/// ```
pub fn index<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
    index: usize,
) -> Result<Vec<D>, RuleError> {
    if x.1.is_empty() {
        return err(
            op,
            0,
            format!(
                "`{}` has shape [] (a scalar): there is no dim to index",
                x.0
            ),
        );
    }
    let out = reduce(op, x, dim, false)?;
    let (name, dims) = x;
    if let Some(size) = dims[dim].to_usize() {
        if index >= size {
            let valid = if size == 0 {
                "the dim is empty".to_string()
            } else {
                format!("valid indices are 0..={}", size - 1)
            };
            return err(
                op,
                0,
                format!(
                    "index {index} is out of range for dim {dim} of `{name}`, which has size {size}: {valid}"
                ),
            );
        }
    }
    Ok(out)
}

/// Slicing `start..end` along `dim`: `start <= end <= size`.
///
/// ```
/// use tensorfn_core::rules::slice;
/// assert_eq!(slice::<usize>("slice", ("x", &[10, 4]), 0, 2, 5).unwrap(), vec![3, 4]);
/// assert_eq!(slice::<usize>("slice", ("x", &[10, 4]), 0, 5, 5).unwrap(), vec![0, 4]);
/// assert!(slice::<usize>("slice", ("x", &[10, 4]), 0, 2, 11).is_err());
/// ```
pub fn slice<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    dim: usize,
    start: usize,
    end: usize,
) -> Result<Vec<D>, RuleError> {
    reduce(op, x, dim, false)?;
    let (name, dims) = x;
    let size = dims[dim].to_usize();
    if start > end || size.is_some_and(|s| end > s) {
        return err(
            op,
            0,
            format!(
                "slice {start}..{end} is out of range for dim {dim} of `{name}`, which has size {}",
                dims[dim]
            ),
        );
    }
    let mut out = dims.to_vec();
    out[dim] = D::from_usize(end - start);
    Ok(out)
}

/// `embedding(input, weight)`: `input` holds ids of any shape `[..]`,
/// `weight` is a table `[V, E]`; the result is `[.., E]`, one row of the
/// table per id (PyTorch's `F.embedding`). The ids' values are checked
/// when they are read (`0 <= id < V`).
///
/// ```
/// use tensorfn_core::rules::embedding;
/// assert_eq!(embedding::<usize>("embedding", ("ids", &[2, 7]), ("wte", &[50, 16])).unwrap(), vec![2, 7, 16]);
/// let e = embedding::<usize>("embedding", ("ids", &[2]), ("wte", &[50])).unwrap_err();
/// assert!(e.message.contains("`wte` must be a table [V, E]"));
/// ```
pub fn embedding<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    weight: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let (wname, wdims) = weight;
    if wdims.len() != 2 {
        return err(
            op,
            1,
            format!(
                "`{wname}` must be a table [V, E] (one row of E values per id), found shape {}",
                fmt_dims(wdims)
            ),
        );
    }
    if input.1.len() + 1 > 6 {
        return err(
            op,
            0,
            format!(
                "`{}` has {} dims, so the result would have {}: tensors have at most 6 dims",
                input.0,
                input.1.len(),
                input.1.len() + 1
            ),
        );
    }
    let mut out = input.1.to_vec();
    out.push(wdims[1].clone());
    Ok(out)
}

/// `index_select(input, dim, index)`: `index` is a 1-D list of positions
/// along `dim`; the result is `input`'s dims with that dim's size
/// replaced by `index`'s length.
///
/// ```
/// use tensorfn_core::rules::index_select;
/// assert_eq!(index_select::<usize>("index_select", ("x", &[4, 5]), 1, ("idx", &[3])).unwrap(), vec![4, 3]);
/// let e = index_select::<usize>("index_select", ("x", &[4, 5]), 1, ("idx", &[3, 1])).unwrap_err();
/// assert!(e.message.contains("`idx` must be 1-D"));
/// assert!(index_select::<usize>("index_select", ("x", &[]), 0, ("idx", &[3])).is_err());
/// ```
pub fn index_select<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    dim: usize,
    index: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let (iname, idims) = index;
    if idims.len() != 1 {
        return err(
            op,
            2,
            format!(
                "`{iname}` must be 1-D (a list of positions along dim {dim}), found shape {}; flatten it with `.reshape([-1])`",
                fmt_dims(idims)
            ),
        );
    }
    let (name, dims) = input;
    no_dim_to_pick(op, name, dims, dim)?;
    let mut out = dims.to_vec();
    out[dim] = idims[0].clone();
    Ok(out)
}

/// An error unless `dims` has a dim `dim` to pick along (a scalar has
/// none).
fn no_dim_to_pick<D: DimValue>(
    op: &str,
    name: &str,
    dims: &[D],
    dim: usize,
) -> Result<(), RuleError> {
    if dims.is_empty() {
        return err(
            op,
            0,
            format!("`{name}` has shape [] (a scalar): there is no dim to pick along; `unsqueeze(0)` it first"),
        );
    }
    if dim >= dims.len() {
        return err(
            op,
            0,
            format!("`{name}` {} has no dim {dim}", fmt_dims(dims)),
        );
    }
    Ok(())
}

/// `gather(input, dim, index)`: `index` has `input`'s rank and the result
/// has `index`'s shape; off `dim`, each of `index`'s dims is at most
/// `input`'s (PyTorch's rule). Dims not known yet (symbols) are checked
/// when they are.
///
/// ```
/// use tensorfn_core::rules::gather;
/// assert_eq!(gather::<usize>("gather", ("x", &[4, 5]), 1, ("idx", &[3, 7])).unwrap(), vec![3, 7]);
/// let e = gather::<usize>("gather", ("x", &[4, 5]), 1, ("idx", &[6, 2])).unwrap_err();
/// assert!(e.message.contains("dim 0 of `idx` is 6"));
/// assert!(gather::<usize>("gather", ("x", &[4, 5]), 1, ("idx", &[4])).is_err());
/// ```
pub fn gather<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    dim: usize,
    index: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let ((name, dims), (iname, idims)) = (input, index);
    if dims.len() != idims.len() {
        return err(
            op,
            2,
            format!(
                "`{iname}` must have the rank of `{name}` ({} dims), found shape {} against {}",
                dims.len(),
                fmt_dims(idims),
                fmt_dims(dims)
            ),
        );
    }
    no_dim_to_pick(op, name, dims, dim)?;
    for (d, (a, i)) in dims.iter().zip(idims).enumerate() {
        if d == dim {
            continue;
        }
        if let (Some(a), Some(i)) = (a.to_usize(), i.to_usize()) {
            if i > a {
                return err(
                    op,
                    2,
                    format!(
                        "dim {d} of `{iname}` is {i} but dim {d} of `{name}` is {a}: off dim {dim}, `{iname}` may not be larger than `{name}`"
                    ),
                );
            }
        }
    }
    Ok(idims.to_vec())
}

/// `index_add(input, dim, index, source)` (PyTorch's
/// `Tensor.index_add`): `index` is a 1-D list of positions along `dim`,
/// `source` has `input`'s dims except along `dim`, where it has one entry
/// per index; entry `j` of `source` along `dim` is added at position
/// `index[j]` of the result, which has `input`'s dims. The indices'
/// values are checked when they are read.
///
/// ```
/// use tensorfn_core::rules::index_add;
/// assert_eq!(index_add::<usize>("index_add", ("x", &[4, 5]), 0, ("idx", &[3]), ("src", &[3, 5])).unwrap(), vec![4, 5]);
/// let e = index_add::<usize>("index_add", ("x", &[4, 5]), 0, ("idx", &[3]), ("src", &[2, 5])).unwrap_err();
/// assert!(e.message.contains("dim 0 of `src` is 2 but `idx` has 3 entries"));
/// assert_eq!(e.operand, 3);
/// assert!(index_add::<usize>("index_add", ("x", &[4, 5]), 0, ("idx", &[3, 1]), ("src", &[3, 5])).is_err());
/// ```
pub fn index_add<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    dim: usize,
    index: Operand<'_, D>,
    source: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let ((name, dims), (iname, idims), (sname, sdims)) = (input, index, source);
    if idims.len() != 1 {
        return err(
            op,
            2,
            format!(
                "`{iname}` must be 1-D (a list of positions along dim {dim}), found shape {}; flatten it with `.reshape([-1])`",
                fmt_dims(idims)
            ),
        );
    }
    no_dim_to_pick(op, name, dims, dim)?;
    if sdims.len() != dims.len() {
        return err(
            op,
            3,
            format!(
                "`{sname}` must have the rank of `{name}` ({} dims), found shape {} against {}",
                dims.len(),
                fmt_dims(sdims),
                fmt_dims(dims)
            ),
        );
    }
    for (d, (a, s)) in dims.iter().zip(sdims).enumerate() {
        if d == dim && *s != idims[0] {
            return err(
                op,
                3,
                format!(
                    "dim {dim} of `{sname}` is {s} but `{iname}` has {} entries: `{sname}` needs one entry along dim {dim} per index",
                    idims[0]
                ),
            );
        }
        if d != dim && a != s {
            return err(
                op,
                3,
                format!(
                    "dim {d} of `{sname}` is {s} but dim {d} of `{name}` is {a}: off dim {dim}, `{sname}` must have `{name}`'s dims"
                ),
            );
        }
    }
    Ok(dims.to_vec())
}

/// `scatter_add(input, dim, index, src)` (PyTorch's
/// `Tensor.scatter_add`): `index` and `src` have `input`'s rank; each of
/// `index`'s dims is at most `src`'s, and off `dim` at most `input`'s
/// (PyTorch's rule). `src[c]` is added at `c` with its dim `dim` replaced
/// by `index[c]`, for every position `c` of `index`; the result has
/// `input`'s dims.
///
/// ```
/// use tensorfn_core::rules::scatter_add;
/// assert_eq!(scatter_add::<usize>("scatter_add", ("x", &[4, 5]), 1, ("idx", &[3, 7]), ("src", &[3, 7])).unwrap(), vec![4, 5]);
/// let e = scatter_add::<usize>("scatter_add", ("x", &[4, 5]), 1, ("idx", &[6, 2]), ("src", &[6, 2])).unwrap_err();
/// assert!(e.message.contains("dim 0 of `idx` is 6"));
/// let e = scatter_add::<usize>("scatter_add", ("x", &[4, 5]), 1, ("idx", &[3, 2]), ("src", &[2, 2])).unwrap_err();
/// assert_eq!(e.operand, 3);
/// ```
pub fn scatter_add<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    dim: usize,
    index: Operand<'_, D>,
    src: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let ((name, dims), (iname, idims), (sname, sdims)) = (input, index, src);
    gather(op, (name, dims), dim, (iname, idims))?;
    if sdims.len() != idims.len() {
        return err(
            op,
            3,
            format!(
                "`{sname}` must have the rank of `{iname}` ({} dims), found shape {} against {}",
                idims.len(),
                fmt_dims(sdims),
                fmt_dims(idims)
            ),
        );
    }
    for (d, (i, s)) in idims.iter().zip(sdims).enumerate() {
        if let (Some(i), Some(s)) = (i.to_usize(), s.to_usize()) {
            if i > s {
                return err(
                    op,
                    3,
                    format!(
                        "dim {d} of `{iname}` is {i} but dim {d} of `{sname}` is {s}: `{iname}` may not be larger than `{sname}` (one value of `{sname}` per index)"
                    ),
                );
            }
        }
    }
    Ok(dims.to_vec())
}

/// `cross_entropy(input, target)`: class logits `input` `[N, C]` and
/// class indices `target` `[N]`, or PyTorch's K-dimensional form, logits
/// `[N, C, d1, .., dk]` (the classes in dim 1) against targets
/// `[N, d1, .., dk]`; the result is the targets' shape for
/// `reduction = "none"` (`per_row`), else a scalar. The targets' values
/// are checked when they are read (`0 <= t < C`, or `ignore_index`).
///
/// ```
/// use tensorfn_core::rules::cross_entropy;
/// assert_eq!(cross_entropy::<usize>("cross_entropy", ("x", &[4, 10]), ("y", &[4]), false).unwrap(), Vec::<usize>::new());
/// assert_eq!(cross_entropy::<usize>("cross_entropy", ("x", &[4, 10]), ("y", &[4]), true).unwrap(), vec![4]);
/// assert_eq!(cross_entropy::<usize>("cross_entropy", ("x", &[4, 10, 5, 6]), ("y", &[4, 5, 6]), true).unwrap(), vec![4, 5, 6]);
/// let e = cross_entropy::<usize>("cross_entropy", ("x", &[4, 10]), ("y", &[5]), false).unwrap_err();
/// assert_eq!(e.operand, 1);
/// assert!(e.message.contains("one class index per row of `x`"));
/// let e = cross_entropy::<usize>("cross_entropy", ("x", &[4, 10, 5]), ("y", &[4, 6]), false).unwrap_err();
/// assert!(e.message.contains("dim 1 of `y` is 6 but must equal dim 2 of `x` (5)"));
/// ```
pub fn cross_entropy<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    target: Operand<'_, D>,
    per_row: bool,
) -> Result<Vec<D>, RuleError> {
    let ((name, dims), (tname, tdims)) = (input, target);
    if dims.len() < 2 {
        return err(
            op,
            0,
            format!(
                "`{op}` takes class logits [N, C] (one row of C class scores per sample) or [N, C, d1, .., dk] (classes in dim 1), but `{name}` has shape {} ({}): give it a dim of samples, `.unsqueeze(0)`",
                fmt_dims(dims),
                rank_word(dims.len()),
            ),
        );
    }
    // The targets' shape: the logits' without the class dim.
    let mut want = vec![dims[0].clone()];
    want.extend(dims[2..].iter().cloned());
    let what = if dims.len() == 2 {
        format!("one class index per row of `{name}`, {}", fmt_dims(dims))
    } else {
        format!(
            "one class index per position of `{name}`, {}, whose classes are dim 1",
            fmt_dims(dims)
        )
    };
    if tdims.len() != want.len() {
        return err(
            op,
            1,
            format!(
                "`{tname}` must have shape {} ({what}), but has shape {}",
                fmt_dims(&want),
                fmt_dims(tdims)
            ),
        );
    }
    if let Some(k) = (0..want.len()).find(|&k| tdims[k] != want[k]) {
        let message = if dims.len() == 2 {
            format!(
                "`{tname}` must have shape {} ({what}), but has shape {}",
                fmt_dims(&want),
                fmt_dims(tdims)
            )
        } else {
            format!(
                "dim {k} of `{tname}` is {} but must equal dim {} of `{name}` ({}): `{tname}` must have shape {} ({what}), but has shape {}",
                tdims[k],
                if k == 0 { 0 } else { k + 1 },
                want[k],
                fmt_dims(&want),
                fmt_dims(tdims)
            )
        };
        return err(op, 1, message);
    }
    Ok(if per_row { want } else { Vec::new() })
}

/// `tril`/`triu` of `input`: the last two dims are the matrices, so the
/// rank must be at least 2; the result has `input`'s dims.
///
/// ```
/// use tensorfn_core::rules::triangle;
/// assert_eq!(triangle::<usize>("tril", ("x", &[2, 3, 3])).unwrap(), vec![2, 3, 3]);
/// assert!(triangle::<usize>("triu", ("x", &[3])).unwrap_err().message.contains("at least 2 dims"));
/// ```
pub fn triangle<D: DimValue>(op: &str, input: Operand<'_, D>) -> Result<Vec<D>, RuleError> {
    let (name, dims) = input;
    if dims.len() < 2 {
        return err(
            op,
            0,
            format!(
                "`{op}` works on the last two dims (matrices): `{name}` must have at least 2 dims, found shape {}",
                fmt_dims(dims)
            ),
        );
    }
    Ok(dims.to_vec())
}

/// `layer_norm`/`rms_norm` over the last dim (PyTorch's
/// `normalized_shape = (N,)`): `x` has at least one dim, and each of
/// `params` (`weight`, then `bias`) has the shape `[N]`, `N` the last dim
/// of `x`. The result has the dims of `x`. An error about `params[i]`
/// names operand `i + 1`.
///
/// ```
/// use tensorfn_core::rules::norm;
/// let x: &[usize] = &[4, 768];
/// assert_eq!(norm("layer_norm", ("x", x), &[("w", &[768]), ("b", &[768])]).unwrap(), vec![4, 768]);
/// let e = norm("layer_norm", ("x", x), &[("w", &[768]), ("b", &[4, 768])]).unwrap_err();
/// assert_eq!(e.operand, 2);
/// assert!(e.message.contains("`b` must have shape [768] (the last dim of `x`), but has shape [4, 768]"));
/// assert!(norm::<usize>("rms_norm", ("x", &[]), &[("w", &[1])]).is_err());
/// ```
pub fn norm<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    params: &[Operand<'_, D>],
) -> Result<Vec<D>, RuleError> {
    let (xn, xd) = x;
    let Some(last) = xd.last() else {
        return err(
            op,
            0,
            format!(
                "`{op}` normalises over the last dim, but `{xn}` is a scalar (no dims): give it at least one dim, e.g. `.reshape([1])`"
            ),
        );
    };
    for (i, &(pn, pd)) in params.iter().enumerate() {
        if pd.len() != 1 || pd[0] != *last {
            return err(
                op,
                i + 1,
                format!(
                    "`{op}` normalises over the last dim of `{xn}` ({} of {}): `{pn}` must have shape [{last}] (the last dim of `{xn}`), but has shape {}",
                    last,
                    fmt_dims(xd),
                    fmt_dims(pd)
                ),
            );
        }
    }
    Ok(xd.to_vec())
}

/// `batch_norm` per channel, PyTorch's `F.batch_norm(input, running_mean,
/// running_var, weight, bias, ..)`: `input` is `[N, C, *]` (at least two
/// dims: `[N, C]`, `[N, C, L]`, `[N, C, H, W]`), and each of `params`
/// (the running statistics, the weight and the bias the call gives) has
/// the shape `[C]`, `C` the dim 1 of `input`. The result has the dims of
/// `input`. An error about `params[i]` names operand `i + 1`.
///
/// ```
/// use tensorfn_core::rules::batch_norm;
/// let x: &[usize] = &[8, 64, 56, 56];
/// assert_eq!(batch_norm("batch_norm", ("x", x), &[("w", &[64])]).unwrap(), x.to_vec());
/// let e = batch_norm("batch_norm", ("x", x), &[("w", &[64]), ("b", &[32])]).unwrap_err();
/// assert_eq!(e.operand, 2);
/// assert!(e.message.contains("`b` must have shape [64]"), "{}", e.message);
/// let e = batch_norm::<usize>("batch_norm", ("x", &[64]), &[]).unwrap_err();
/// assert!(e.message.contains("at least 2 dims"), "{}", e.message);
/// ```
pub fn batch_norm<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    params: &[Operand<'_, D>],
) -> Result<Vec<D>, RuleError> {
    let (xn, xd) = x;
    if xd.len() < 2 {
        return err(
            op,
            0,
            format!(
                "`{op}` normalises each channel (dim 1) of an input [N, C, *], so `{xn}` must have at least 2 dims, found shape {}: for a single sample add the batch dim, e.g. `.unsqueeze(0)`",
                fmt_dims(xd)
            ),
        );
    }
    let c = &xd[1];
    for (i, &(pn, pd)) in params.iter().enumerate() {
        if pd.len() != 1 || pd[0] != *c {
            return err(
                op,
                i + 1,
                format!(
                    "`{op}` has one statistic per channel of `{xn}` (dim 1, {c} of {}): `{pn}` must have shape [{c}], but has shape {}",
                    fmt_dims(xd),
                    fmt_dims(pd)
                ),
            );
        }
    }
    Ok(xd.to_vec())
}

/// `rope(input, cos, sin)`: `input` is `[.., T, D]` with `D` even, and
/// `cos` and `sin` are `[T, D]` (broadcast over the leading dims). The
/// result has the dims of `input`.
///
/// ```
/// use tensorfn_core::rules::rope;
/// let q: &[usize] = &[2, 12, 16, 64];
/// assert_eq!(rope("rope", ("q", q), ("cos", &[16, 64]), ("sin", &[16, 64])).unwrap(), q.to_vec());
/// let e = rope("rope", ("q", q), ("cos", &[16, 64]), ("sin", &[1, 16, 64])).unwrap_err();
/// assert_eq!(e.operand, 2);
/// assert!(e.message.contains("`sin` must have shape [16, 64]"));
/// assert!(rope::<usize>("rope", ("q", &[16, 63]), ("c", &[16, 63]), ("s", &[16, 63])).is_err());
/// ```
pub fn rope<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    cos: Operand<'_, D>,
    sin: Operand<'_, D>,
) -> Result<Vec<D>, RuleError> {
    let (xn, xd) = x;
    if xd.len() < 2 {
        return err(
            op,
            0,
            format!(
                "`{op}` rotates the last dim of positions along the dim before it, but `{xn}` has shape {} ({}): give it dims `[.., T, D]`",
                fmt_dims(xd),
                rank_word(xd.len())
            ),
        );
    }
    let td = &xd[xd.len() - 2..];
    if let Some(d) = td[1].to_usize() {
        if d % 2 != 0 {
            return err(
                op,
                0,
                format!(
                    "`{op}` rotates pairs of the last dim's two halves, but the last dim of `{xn}` is {d}, which is odd"
                ),
            );
        }
    }
    for (i, (n, d)) in [cos, sin].into_iter().enumerate() {
        if d != td {
            return err(
                op,
                i + 1,
                format!(
                    "`{op}` takes one row of `{n}` per position: `{n}` must have shape {} (the last two dims of `{xn}`, {}), but has shape {}",
                    fmt_dims(td),
                    fmt_dims(xd),
                    fmt_dims(d)
                ),
            );
        }
    }
    Ok(xd.to_vec())
}

/// The pooling ops (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`)
/// over the last two dims of `x`, `[N, C, H, W]` or `[C, H, W]`: the
/// leading dims kept, `H` and `W` replaced by the output size that
/// [`Pool2d::output_dims`](crate::ops::pool::Pool2d::output_dims) computes
/// (its error names the dim and how its size was computed). A symbolic `H`
/// or `W` gets `DimValue::conv_out`'s size (the same rounded-down
/// formula) unless `ceil_mode` is set; `adaptive_avg_pool2d`'s output size
/// does not depend on them.
///
/// ```
/// use tensorfn_core::ops::pool::Pool2d;
/// use tensorfn_core::rules::pool2d;
/// let p = Pool2d::max(2);
/// assert_eq!(pool2d("max_pool2d", ("x", &[8usize, 16, 10, 10][..]), &p).unwrap(), vec![8, 16, 5, 5]);
/// let e = pool2d("max_pool2d", ("x", &[16usize, 10][..]), &p).unwrap_err();
/// assert!(e.message.contains("[N, C, H, W] or [C, H, W]"), "{e}");
/// let e = pool2d("max_pool2d", ("x", &[1usize, 1, 1, 5][..]), &p).unwrap_err();
/// assert!(e.message.contains("dim 2 of `x`"), "{e}");
/// ```
pub fn pool2d<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    pool: &crate::ops::pool::Pool2d,
) -> Result<Vec<D>, RuleError> {
    use crate::ops::pool::PoolKind;
    let (name, dims) = x;
    let rank = dims.len();
    if !(3..=4).contains(&rank) {
        return err(
            op,
            0,
            format!(
                "`{op}` pools the last two dims of [N, C, H, W] or [C, H, W], but `{name}` has shape {} ({}): reshape it to 3 or 4 dims",
                fmt_dims(dims),
                rank_word(rank)
            ),
        );
    }
    let mut out = dims[..rank - 2].to_vec();
    if pool.kind == PoolKind::AdaptiveAvg {
        let o = pool.output_dims([1, 1]).map_err(|e| RuleError {
            op: op.to_string(),
            operand: 0,
            message: e.message,
        })?;
        out.extend(o.iter().map(|&n| D::from_usize(n)));
        return Ok(out);
    }
    // A symbolic size is stood in for by the window's span (the smallest
    // input the options fit), so that `output_dims` checks the options;
    // its output size is then `conv_out`'s, the same rounded-down formula.
    let mut hw = [0; 2];
    let mut symbolic = [None, None];
    for a in 0..2 {
        let d = &dims[rank - 2 + a];
        match d.to_usize() {
            Some(n) => hw[a] = n,
            None => {
                let (k, s, p, dl) = (
                    pool.kernel_size[a],
                    pool.stride[a],
                    pool.padding[a],
                    pool.dilation[a],
                );
                let out = (!pool.ceil_mode)
                    .then(|| d.conv_out(&D::from_usize(k), p, s, dl))
                    .flatten();
                let Some(o) = out else {
                    let why = if pool.ceil_mode {
                        "with `ceil_mode = true` the last window may start past the input, which only a number decides: use `ceil_mode = false`, or give"
                    } else {
                        "give"
                    };
                    return err(
                        op,
                        0,
                        format!(
                            "`{op}` computes its output size from dim {} of `{name}` ({}), which is `{d}`, not a number: {why} `{name}` a literal or `const` size there",
                            rank - 2 + a,
                            fmt_dims(dims)
                        ),
                    );
                };
                hw[a] = dl.saturating_mul(k.saturating_sub(1)) + 1;
                symbolic[a] = Some(o);
            }
        }
    }
    match pool.output_dims(hw) {
        Ok(o) => {
            for (a, n) in o.into_iter().enumerate() {
                out.push(symbolic[a].take().unwrap_or_else(|| D::from_usize(n)));
            }
            Ok(out)
        }
        Err(e) => err(
            op,
            0,
            format!(
                "{} (dim {} of `{name}` {})",
                e.message,
                rank - 2 + e.dim,
                fmt_dims(dims)
            ),
        ),
    }
}

/// `flatten(x, start_dim, end_dim)` (dims already normalised, `start <=
/// end`): dims `start..=end` of `x` merged into their product. A scalar
/// flattens to one dim of 1, as PyTorch.
///
/// ```
/// use tensorfn_core::rules::flatten;
/// assert_eq!(flatten("flatten", ("x", &[8usize, 16, 5, 5][..]), 1, 3).unwrap(), vec![8, 400]);
/// assert_eq!(flatten("flatten", ("x", &[2usize, 3][..]), 0, 1).unwrap(), vec![6]);
/// assert!(flatten("flatten", ("x", &[2usize, 3][..]), 1, 0).is_err());
/// ```
pub fn flatten<D: DimValue>(
    op: &str,
    x: Operand<'_, D>,
    start: usize,
    end: usize,
) -> Result<Vec<D>, RuleError> {
    let (name, dims) = x;
    if dims.is_empty() {
        return Ok(vec![D::from_usize(1)]);
    }
    if start > end {
        return err(
            op,
            0,
            format!(
                "`{op}` of `{name}` ({}) got `start_dim` {start} after `end_dim` {end}: `start_dim` must come first",
                fmt_dims(dims)
            ),
        );
    }
    let mut out = dims[..start].to_vec();
    out.push(numel(&dims[start..=end]));
    out.extend_from_slice(&dims[end + 1..]);
    Ok(out)
}

/// `conv2d(input, weight, bias)` (`spatial = 2`) or `conv1d` (`spatial =
/// 1`), PyTorch's `F.conv2d`/`F.conv1d`: `input` is `[N, C_in, H, W]`
/// (`[N, C_in, L]`), `weight` `[C_out, C_in / groups, kH, kW]` (`[C_out,
/// C_in / groups, k]`) and `bias` `[C_out]`; the result is `[N, C_out, OH,
/// OW]` with each output size `(H + 2p - d(k-1) - 1) / s + 1`, at least 1.
/// The options are `args`' (a `conv1d` reads their width entries).
///
/// ```
/// use tensorfn_core::ops::conv::ConvArgs;
/// use tensorfn_core::rules::conv;
/// let a = ConvArgs { stride: [2, 2], padding: [3, 3], ..Default::default() };
/// let out = conv::<usize>("conv2d", ("x", &[8, 3, 224, 224]), ("w", &[64, 3, 7, 7]), None, &a, 2);
/// assert_eq!(out.unwrap(), vec![8, 64, 112, 112]);
/// let e = conv::<usize>("conv2d", ("x", &[1, 3, 5, 5]), ("w", &[4, 3, 7, 7]), None, &ConvArgs::default(), 2).unwrap_err();
/// assert!(e.message.contains("output height of `x` is (5 + 2·0 - 1·(7-1) - 1)/1 + 1 = -1"));
/// let e = conv::<usize>("conv2d", ("x", &[1, 4, 5, 5]), ("w", &[4, 3, 3, 3]), None, &ConvArgs::default(), 2).unwrap_err();
/// assert_eq!(e.operand, 1);
/// ```
pub fn conv<D: DimValue>(
    op: &str,
    input: Operand<'_, D>,
    weight: Operand<'_, D>,
    bias: Option<Operand<'_, D>>,
    args: &ConvArgs,
    spatial: usize,
) -> Result<Vec<D>, RuleError> {
    let ((name, dims), (wname, wdims)) = (input, weight);
    if let Err(m) = args.check(op) {
        return err(op, 0, m);
    }
    let (layout, wlayout, names): (&str, &str, &[&str]) = if spatial == 1 {
        ("[N, C_in, L]", "[C_out, C_in / groups, kL]", &["length"])
    } else {
        (
            "[N, C_in, H, W]",
            "[C_out, C_in / groups, kH, kW]",
            &["height", "width"],
        )
    };
    let rank = 2 + spatial;
    if dims.len() != rank {
        let fix = if dims.len() + 1 == rank {
            "give it a batch dim of 1 with `.unsqueeze(0)`".to_string()
        } else {
            format!("reshape it to {rank} dims")
        };
        return err(
            op,
            0,
            format!(
                "`{op}` takes `{name}` as {layout} ({rank}-D), but `{name}` has shape {} ({}): {fix}",
                fmt_dims(dims),
                rank_word(dims.len())
            ),
        );
    }
    if wdims.len() != rank {
        return err(
            op,
            1,
            format!(
                "`{op}` takes `{wname}` as {wlayout} ({rank}-D), but `{wname}` has shape {} ({}): a {} kernel has {rank} dims",
                fmt_dims(wdims),
                rank_word(wdims.len()),
                if spatial == 1 { "1-D" } else { "2-D" }
            ),
        );
    }
    let g = args.groups;
    let (cin, cout) = (&dims[1], &wdims[0]);
    for (what, c, i) in [("C_in", cin, 0), ("C_out", cout, 1)] {
        if let Some(c) = c.to_usize() {
            if c % g != 0 {
                let owner = if i == 0 { name } else { wname };
                return err(
                    op,
                    i,
                    format!(
                        "`groups = {g}` splits the channels into {g} groups, but {what} is {c} (dim {} of `{owner}`), which {g} does not divide: choose `groups` dividing both C_in and C_out",
                        if i == 0 { 1 } else { 0 }
                    ),
                );
            }
        }
    }
    let want = wdims[1].mul(&D::from_usize(g));
    if want != *cin {
        let per = if g == 1 {
            String::new()
        } else {
            format!(" × groups ({g}) = {want}")
        };
        return err(
            op,
            1,
            format!(
                "`{wname}` has {} input channels per group (dim 1 of {}){per}, but `{name}` has C_in = {cin} (dim 1 of {}): give `{wname}` shape {}",
                wdims[1],
                fmt_dims(wdims),
                fmt_dims(dims),
                {
                    let mut w: Vec<String> = wdims.iter().map(|d| d.to_string()).collect();
                    w[1] = match cin.to_usize() {
                        Some(c) => (c / g).to_string(),
                        None if g == 1 => cin.to_string(),
                        None => format!("{cin} / {g}"),
                    };
                    format!("[{}]", w.join(", "))
                }
            ),
        );
    }
    if let Some((bname, bdims)) = bias {
        if bdims.len() != 1 || bdims[0] != *cout {
            return err(
                op,
                2,
                format!(
                    "`{bname}` must have shape [{cout}] (one bias per output channel, C_out = dim 0 of `{wname}` {}), but has shape {}",
                    fmt_dims(wdims),
                    fmt_dims(bdims)
                ),
            );
        }
    }
    let mut out = vec![dims[0].clone(), cout.clone()];
    for i in 0..spatial {
        let a = 2 - spatial + i;
        let (p, s, d) = (args.padding[a], args.stride[a], args.dilation[a]);
        let (h, k) = (&dims[2 + i], &wdims[2 + i]);
        let formula = format!("({h} + 2·{p} - {d}·({k}-1) - 1)/{s} + 1");
        match (h.to_usize(), k.to_usize()) {
            (Some(hv), Some(kv)) => match out_size(hv, kv, p, s, d) {
                Ok(o) => out.push(D::from_usize(o)),
                Err(num) => {
                    let value = num.div_euclid(s as i64) + 1;
                    let span = d * kv.saturating_sub(1) + 1;
                    let need = span.saturating_sub(hv).div_ceil(2);
                    let fix = if kv == 0 {
                        format!("a kernel has at least one tap: `{wname}`'s dim {} is 0", 2 + i)
                    } else {
                        format!(
                            "a {kv}-tap kernel with dilation {d} spans {span}; use a smaller kernel or dilation, or `padding` of at least {need}"
                        )
                    };
                    return err(
                        op,
                        0,
                        format!(
                            "the output {} of `{name}` is {formula} = {value}, but it must be at least 1 (`{name}` has shape {}, `{wname}` {}): {fix}",
                            names[i],
                            fmt_dims(dims),
                            fmt_dims(wdims)
                        ),
                    );
                }
            },
            _ => match h.conv_out(k, p, s, d) {
                Some(o) => out.push(o),
                None => {
                    return err(
                        op,
                        0,
                        format!(
                            "the output {} of `{name}` is {formula}, which is not a whole size for every {h}: give `{name}` a concrete {}, or use `stride = 1`",
                            names[i], names[i]
                        ),
                    )
                }
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_pytorch() {
        let out = broadcast::<usize>("add", &[("a", &[4, 1, 3]), ("b", &[1, 5, 1])]).unwrap();
        assert_eq!(out, vec![4, 5, 3]);
        let out = broadcast_implicit::<usize>("add", &[("a", &[4, 1, 3]), ("b", &[5, 1])]).unwrap();
        assert_eq!(out, vec![4, 5, 3]);
        assert_eq!(
            broadcast::<usize>("add", &[("a", &[]), ("b", &[2])]).unwrap(),
            vec![2]
        );
        assert_eq!(
            broadcast::<usize>("add", &[("a", &[0, 1]), ("b", &[1, 3])]).unwrap(),
            vec![0, 3]
        );
        let e = broadcast::<usize>("add", &[("a", &[2, 3]), ("b", &[4])]).unwrap_err();
        assert_eq!(e.operand, 1);
        assert!(e.message.contains("dim -1 is 3 in `a` and 4 in `b`"), "{e}");
    }

    #[test]
    fn broadcast_is_strict_about_promotion_meeting_a_one() {
        let bc = |a: &[usize], b: &[usize]| broadcast::<usize>("mul", &[("a", a), ("b", b)]);
        // Both grow after `b` gets a leading dim.
        let e = bc(&[7, 1], &[7]).unwrap_err();
        assert_eq!(e.operand, 1);
        assert_eq!(
            e.message,
            "`mul` would broadcast `a` [7, 1] with `b` [7] to [7, 7]: `b` gets a leading dim and then both operands grow, which is how `[N, 1]` and `[N]` silently become `[N, N]`; if the shapes should match, use `b.unsqueeze(1)` or `a.squeeze(1)`; if the growth is meant, write the new dims of `b` explicitly with `b.unsqueeze(0)`"
        );
        let e = bc(&[2, 1, 4, 5], &[2, 4, 5]).unwrap_err();
        assert!(e.message.contains("to [2, 2, 4, 5]"), "{e}");
        assert!(
            e.message.contains("`b.unsqueeze(1)` or `a.squeeze(1)`"),
            "{e}"
        );
        // The promoted operand may come first.
        let e = bc(&[3], &[3, 1]).unwrap_err();
        assert_eq!(e.operand, 0);
        // Two added dims: the explicit form is a reshape.
        let e = bc(&[2, 1, 1], &[3]).unwrap_err();
        assert!(e.message.contains("`b.reshape([1, 1, 3])`"), "{e}");
        assert!(e.message.contains("make the shapes agree"), "{e}");
        // Legal: every 1 written, one side growing, scalars and all-1s.
        assert_eq!(bc(&[7, 1], &[1, 5]).unwrap(), vec![7, 5]);
        assert_eq!(bc(&[1, 64, 1], &[2, 1, 9]).unwrap(), vec![2, 64, 9]);
        assert_eq!(bc(&[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(bc(&[2, 3], &[1, 3]).unwrap(), vec![2, 3]);
        assert_eq!(bc(&[2, 3], &[]).unwrap(), vec![2, 3]);
        assert_eq!(bc(&[7, 1], &[1]).unwrap(), vec![7, 1]);
        assert_eq!(bc(&[1, 1], &[3]).unwrap(), vec![1, 3]);
        assert_eq!(bc(&[2, 3], &[2, 3]).unwrap(), vec![2, 3]);
        assert_eq!(
            broadcast::<usize>("where", &[("c", &[4, 1]), ("x", &[1, 5]), ("y", &[1])]).unwrap(),
            vec![4, 5]
        );
        assert!(
            broadcast::<usize>("where", &[("c", &[4, 1]), ("x", &[1, 5]), ("y", &[5])]).is_err()
        );
        // matmul's batch dims keep PyTorch's rule.
        assert_eq!(
            matmul::<usize>("m", ("a", &[7, 1, 2, 3]), ("b", &[5, 3, 4])).unwrap(),
            vec![7, 5, 2, 4]
        );
    }

    #[test]
    fn matmul_cases() {
        assert_eq!(
            matmul::<usize>("m", ("a", &[3]), ("b", &[3])).unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(
            matmul::<usize>("m", ("a", &[3]), ("b", &[3, 4])).unwrap(),
            vec![4]
        );
        assert_eq!(
            matmul::<usize>("m", ("a", &[2, 3]), ("b", &[3])).unwrap(),
            vec![2]
        );
        assert_eq!(
            matmul::<usize>("m", ("a", &[7, 1, 2, 3]), ("b", &[5, 3, 4])).unwrap(),
            vec![7, 5, 2, 4]
        );
        let e = matmul::<usize>("matmul", ("x", &[100, 200]), ("y", &[300, 400])).unwrap_err();
        assert!(
            e.message.contains("k = 200") && e.message.contains("k = 300"),
            "{e}"
        );
    }

    #[test]
    fn addmm_rejects_vector_and_bad_bias() {
        let e = addmm::<usize>(
            "addmm",
            ("bias", &[10, 10]),
            ("m1", &[10, 10]),
            ("vec", &[10]),
        )
        .unwrap_err();
        assert_eq!(e.operand, 2);
        assert!(e.message.contains("matrix (2-D) for `vec`"), "{e}");
        assert_eq!(
            addmm::<usize>("addmm", ("b", &[4]), ("m1", &[3, 2]), ("m2", &[2, 4])).unwrap(),
            vec![3, 4]
        );
        assert!(addmm::<usize>("addmm", ("b", &[3]), ("m1", &[3, 2]), ("m2", &[2, 4])).is_err());
    }

    #[test]
    fn cat_sums_and_checks() {
        assert_eq!(
            cat::<usize>("cat", &[("a", &[2, 3, 4]), ("b", &[2, 5, 4])], 1).unwrap(),
            vec![2, 8, 4]
        );
        let e = cat::<usize>("cat", &[("a", &[2, 3, 4]), ("b", &[2, 5, 4])], 0).unwrap_err();
        assert!(e.message.contains("dim 1 is 3 in `a` and 5 in `b`"), "{e}");
        assert!(cat::<usize>("cat", &[("a", &[2]), ("b", &[2, 1])], 0).is_err());
        assert!(cat::<usize>("cat", &[("a", &[2])], 1).is_err());
    }

    #[test]
    fn reshape_index_slice_permute() {
        assert!(reshape::<usize>("view", ("x", &[1000, 1000]), &[1000000]).is_ok());
        let e = reshape::<usize>("view", ("x", &[1000, 1000]), &[1000001]).unwrap_err();
        assert!(e.message.contains("1000000 elements"), "{e}");
        assert!(index::<usize>("index", ("x", &[10, 10]), 0, 10).is_err());
        assert_eq!(
            index::<usize>("index", ("x", &[10, 4]), 0, 9).unwrap(),
            vec![4]
        );
        assert_eq!(
            slice::<usize>("slice", ("x", &[10, 4]), 0, 2, 5).unwrap(),
            vec![3, 4]
        );
        assert!(slice::<usize>("slice", ("x", &[10, 4]), 0, 2, 11).is_err());
        assert_eq!(
            permute::<usize>("permute", ("x", &[2, 3, 4]), &[2, 0, 1]).unwrap(),
            vec![4, 2, 3]
        );
        assert!(permute::<usize>("permute", ("x", &[2, 3, 4]), &[0, 0, 1]).is_err());
        assert_eq!(normalize_dim("sum", "x", -1, 3).unwrap(), 2);
        assert!(normalize_dim("sum", "x", 3, 3).is_err());
    }
}
