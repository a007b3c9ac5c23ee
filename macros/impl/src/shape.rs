//! Symbolic dims: polynomials over named sizes with integer coefficients.
//!
//! A dim written in a `tensor_fn!` shape is a literal (`784`), a const
//! generic (`B`), a run-time size (an undeclared name), or a sum or product
//! of those. Every dim is kept in one normal form (a sorted map from
//! monomials to coefficients), so two dims are equal exactly when they are
//! the same polynomial: `N * M` equals `M * N`, `N + N` equals `2 * N`.
//! [`Dim`] implements [`DimValue`], so the shared shape rules of
//! `tensorfn_core::rules` run on it unchanged.
//!
//! ```
//! use tensorfn_macros_impl::shape::Dim;
//! let (n, m) = (Dim::sym("N"), Dim::sym("M"));
//! assert_eq!(n.mul(&m), m.mul(&n));
//! assert_eq!((n.add(&m)).to_string(), "M + N");
//! assert_eq!(n.add(&n).to_string(), "2 * N");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use tensorfn_core::DimValue;

/// A product of symbols, each with a power; sorted by name, no zero powers.
/// The empty monomial is the constant term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Monomial(Vec<(Rc<str>, u32)>);

impl Monomial {
    fn one() -> Self {
        Monomial(Vec::new())
    }

    fn degree(&self) -> u32 {
        self.0.iter().map(|(_, p)| p).sum()
    }

    fn mul(&self, other: &Monomial) -> Monomial {
        let mut out: BTreeMap<Rc<str>, u32> = BTreeMap::new();
        for (s, p) in self.0.iter().chain(other.0.iter()) {
            *out.entry(s.clone()).or_insert(0) += p;
        }
        Monomial(out.into_iter().collect())
    }

    /// `self / other` when `other` divides it.
    fn div(&self, other: &Monomial) -> Option<Monomial> {
        let mut out: BTreeMap<Rc<str>, u32> = self.0.iter().cloned().collect();
        for (s, p) in &other.0 {
            let have = out.get_mut(s)?;
            if *have < *p {
                return None;
            }
            *have -= p;
            if *have == 0 {
                out.remove(s);
            }
        }
        Some(Monomial(out.into_iter().collect()))
    }

    /// The symbols with their powers.
    pub fn factors(&self) -> &[(Rc<str>, u32)] {
        &self.0
    }
}

/// A symbolic dim size: `Σ coefficient · monomial`, in normal form.
///
/// ```
/// use tensorfn_macros_impl::shape::Dim;
/// let b = Dim::sym("B");
/// let d = Dim::constant(2).mul(&b).add(&Dim::constant(3));
/// assert_eq!(d.to_string(), "2 * B + 3");
/// assert_eq!(d.eval(&|_| Some(5)), Some(13));
/// assert_eq!(Dim::constant(6).to_usize(), Some(6));
/// assert_eq!(b.to_usize(), None);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dim {
    terms: BTreeMap<Monomial, i64>,
}

impl Dim {
    /// A literal size.
    pub fn constant(n: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if n != 0 {
            terms.insert(Monomial::one(), n);
        }
        Dim { terms }
    }

    /// A named size (a const generic or a run-time dim).
    pub fn sym(name: &str) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(Monomial(vec![(Rc::from(name), 1)]), 1);
        Dim { terms }
    }

    /// The value when the dim is a constant (possibly negative).
    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Monomial::one()).copied(),
            _ => None,
        }
    }

    /// The name when the dim is exactly one symbol (`B`, not `2 * B`).
    pub fn as_symbol(&self) -> Option<&str> {
        let (m, &c) = self.terms.iter().next()?;
        if self.terms.len() == 1 && c == 1 && m.0.len() == 1 && m.0[0].1 == 1 {
            Some(&m.0[0].0)
        } else {
            None
        }
    }

    /// Every symbol the dim mentions, sorted, without repeats.
    pub fn symbols(&self) -> Vec<Rc<str>> {
        let mut out: Vec<Rc<str>> = self
            .terms
            .keys()
            .flat_map(|m| m.0.iter().map(|(s, _)| s.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The terms, highest degree first, the constant last.
    pub fn terms(&self) -> Vec<(&Monomial, i64)> {
        let mut t: Vec<(&Monomial, i64)> = self.terms.iter().map(|(m, &c)| (m, c)).collect();
        t.sort_by(|(a, _), (b, _)| b.degree().cmp(&a.degree()).then(a.cmp(b)));
        t
    }

    /// `self - other`.
    pub fn sub(&self, other: &Dim) -> Dim {
        self.add(&other.scale(-1))
    }

    /// `k · self`.
    pub fn scale(&self, k: i64) -> Dim {
        let mut out = Dim::constant(0);
        if k != 0 {
            for (m, c) in &self.terms {
                out.terms.insert(m.clone(), c * k);
            }
        }
        out
    }

    /// `self / other` when the quotient is again a polynomial with integer
    /// coefficients and `other` is a single term (`-1` in a reshape divides
    /// the element count by the product of the other dims).
    ///
    /// ```
    /// use tensorfn_macros_impl::shape::Dim;
    /// let b = Dim::sym("B");
    /// let n = b.mul(&Dim::constant(784));
    /// assert_eq!(n.div_exact(&Dim::constant(28)), Some(b.mul(&Dim::constant(28))));
    /// assert_eq!(Dim::constant(10).div_exact(&Dim::constant(3)), None);
    /// assert_eq!(Dim::constant(10).div_exact(&b), None);
    /// ```
    pub fn div_exact(&self, other: &Dim) -> Option<Dim> {
        if other.terms.len() != 1 {
            return (self == other).then(|| Dim::constant(1));
        }
        let (dm, &dc) = other.terms.iter().next()?;
        let mut out = Dim::constant(0);
        for (m, &c) in &self.terms {
            if c % dc != 0 {
                return None;
            }
            out.terms.insert(m.div(dm)?, c / dc);
        }
        Some(out)
    }

    /// The value once every symbol has one (`None` if one is missing or the
    /// arithmetic overflows).
    pub fn eval(&self, value: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        let mut total: i64 = 0;
        for (m, &c) in &self.terms {
            let mut term = c;
            for (s, p) in &m.0 {
                let v = value(s)?;
                for _ in 0..*p {
                    term = term.checked_mul(v)?;
                }
            }
            total = total.checked_add(term)?;
        }
        Some(total)
    }

    /// Replaces symbols by dims (`callee` dims seen from the caller).
    pub fn substitute(&self, value: &dyn Fn(&str) -> Option<Dim>) -> Option<Dim> {
        let mut out = Dim::constant(0);
        for (m, &c) in &self.terms {
            let mut term = Dim::constant(c);
            for (s, p) in &m.0 {
                let v = value(s)?;
                for _ in 0..*p {
                    term = term.mul(&v);
                }
            }
            out = out.add(&term);
        }
        Some(out)
    }

    /// True when every coefficient is positive (the dim cannot be negative
    /// for non-negative symbols).
    pub fn is_non_negative(&self) -> bool {
        self.terms.values().all(|&c| c > 0)
    }
}

impl DimValue for Dim {
    fn from_usize(n: usize) -> Self {
        Dim::constant(i64::try_from(n).unwrap_or(i64::MAX))
    }

    fn to_usize(&self) -> Option<usize> {
        self.as_constant().and_then(|c| usize::try_from(c).ok())
    }

    fn add(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for (m, &c) in &other.terms {
            let e = out.terms.entry(m.clone()).or_insert(0);
            *e = e.saturating_add(c);
            if *e == 0 {
                out.terms.remove(m);
            }
        }
        out
    }

    fn mul(&self, other: &Self) -> Self {
        let mut out = Dim::constant(0);
        for (ma, &ca) in &self.terms {
            for (mb, &cb) in &other.terms {
                out = out.add(&Dim {
                    terms: BTreeMap::from([(ma.mul(mb), ca.saturating_mul(cb))]),
                });
            }
        }
        out
    }

    fn conv_out(
        &self,
        kernel: &Self,
        padding: usize,
        stride: usize,
        dilation: usize,
    ) -> Option<Self> {
        // `self + 2p - d(k-1) - 1`, floor-divided by the stride: a
        // polynomial where the stride divides it, else a run-time symbol.
        let c = |n: usize| i64::try_from(n).ok();
        let num = self
            .add(&Dim::constant(2 * c(padding)? + c(dilation)? - 1))
            .sub(&kernel.scale(c(dilation)?));
        Some(num.floor_div(stride).add(&Dim::constant(1)))
    }
}

thread_local! {
    /// The floor quotients named so far (see [`Dim::floor_div`]), by
    /// symbol name. A name prints its numerator and divisor, so it is a
    /// function of them and an entry never goes stale.
    static FLOORS: std::cell::RefCell<BTreeMap<Rc<str>, (Dim, usize)>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

impl Dim {
    /// `⌊self / divisor⌋`: a polynomial where `divisor` divides every
    /// coefficient, else a symbol named `⌊(self)/divisor⌋`, a run-time dim
    /// computed from `self`'s symbols when the function is entered
    /// ([`Dim::floor_parts`]). This is how a stride above 1 over a
    /// symbolic size gets its output size.
    ///
    /// ```
    /// use tensorfn_macros_impl::shape::Dim;
    /// let h = Dim::sym("H");
    /// let even = h.scale(2).sub(&Dim::constant(1));
    /// assert_eq!(even.floor_div(2), h.sub(&Dim::constant(1)));
    /// let q = h.sub(&Dim::constant(1)).floor_div(2);
    /// assert_eq!(q.to_string(), "⌊(H - 1)/2⌋");
    /// assert_eq!(Dim::floor_parts("⌊(H - 1)/2⌋"), Some((h.sub(&Dim::constant(1)), 2)));
    /// assert_eq!(Dim::floor_parts("H"), None);
    /// ```
    pub fn floor_div(&self, divisor: usize) -> Dim {
        let d = i64::try_from(divisor.max(1)).unwrap_or(i64::MAX);
        // `⌊(a·P + c)/d⌋ = (a/d)·P + ⌊c/d⌋` where `d` divides every
        // coefficient `a` of a symbol: `(a/d)·P` is a whole number.
        let c = self.terms.get(&Monomial::one()).copied().unwrap_or(0);
        if let Some(q) = self.sub(&Dim::constant(c)).div_exact(&Dim::constant(d)) {
            return q.add(&Dim::constant(c.div_euclid(d)));
        }
        let name: Rc<str> = match self.as_symbol() {
            Some(s) => format!("⌊{s}/{d}⌋"),
            None => format!("⌊({self})/{d}⌋"),
        }
        .into();
        FLOORS.with(|f| {
            f.borrow_mut()
                .entry(name.clone())
                .or_insert_with(|| (self.clone(), divisor));
        });
        Dim::sym(&name)
    }

    /// The numerator and divisor of a symbol made by [`Dim::floor_div`];
    /// `None` for any other name.
    pub fn floor_parts(name: &str) -> Option<(Dim, usize)> {
        FLOORS.with(|f| f.borrow().get(name).cloned())
    }
}

impl Dim {
    /// `self + other` (also available through [`DimValue`]).
    pub fn add(&self, other: &Dim) -> Dim {
        DimValue::add(self, other)
    }

    /// `self * other` (also available through [`DimValue`]).
    pub fn mul(&self, other: &Dim) -> Dim {
        DimValue::mul(self, other)
    }

    /// The value when the dim is a non-negative constant.
    pub fn to_usize(&self) -> Option<usize> {
        DimValue::to_usize(self)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms = self.terms();
        if terms.is_empty() {
            return f.write_str("0");
        }
        for (i, (m, c)) in terms.iter().enumerate() {
            let (sign, mag) = if *c < 0 { ("-", -c) } else { ("+", *c) };
            match (i, sign) {
                (0, "-") => f.write_str("-")?,
                (0, _) => {}
                (_, s) => write!(f, " {s} ")?,
            }
            let factors: Vec<String> =
                m.0.iter()
                    .flat_map(|(s, p)| std::iter::repeat_n(s.to_string(), *p as usize))
                    .collect();
            if factors.is_empty() {
                write!(f, "{mag}")?;
            } else if mag == 1 {
                f.write_str(&factors.join(" * "))?;
            } else {
                write!(f, "{mag} * {}", factors.join(" * "))?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dim({self})")
    }
}

/// How a reshape's target dims regroup the source's: see [`regrouping`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Regrouping {
    /// Adjacent dims split or merged without changing their order.
    InOrder,
    /// The factors cannot be told apart (literal sizes whose split is
    /// ambiguous, sums, zeros): no verdict either way.
    Unknown,
    /// The target needs `wanted` at its dim `to_dim` while the source
    /// still has `blocker` (its dim `from_dim`, or part of it) before
    /// `wanted` (its dim `wanted_dim`, when one holds it).
    Reordered {
        /// What the source has where the target wants something else.
        blocker: Dim,
        /// The source dim `blocker` is (part of).
        from_dim: usize,
        /// True when `blocker` is only part of source dim `from_dim`.
        partial: bool,
        /// What the target wants next.
        wanted: Dim,
        /// The source dim that holds `wanted`.
        wanted_dim: Option<usize>,
        /// The target dim that wants it.
        to_dim: usize,
    },
}

/// A dim as `coefficient · monomial`, when it is one positive term.
fn single_term(d: &Dim) -> Option<(i64, &Monomial)> {
    match d.terms.iter().next() {
        Some((m, &c)) if d.terms.len() == 1 && c > 0 => Some((c, m)),
        _ => None,
    }
}

/// Whether the dims `to` regroup `from` in order: each target dim is a
/// run of adjacent source factors, in the source's order (`[B, T, H * Dh]`
/// to `[B, T, H, Dh]` splits; `[B, H, T, Dh]` to `[B, T, H * Dh]` moves
/// `T` before `H`, which a reshape cannot do: it reads the elements in
/// order, so it mixes them instead).
///
/// Symbols are the factors that can be told apart: a name in the target
/// is the same dim as that name in the source. Literal sizes are split
/// and merged only where divisibility decides it; where two literals (or
/// a sum) leave the grouping open the answer is [`Regrouping::Unknown`],
/// never a guess. Dims of size 1 carry no order and are skipped. `from`
/// and `to` are assumed to hold the same number of elements.
///
/// ```
/// use tensorfn_macros_impl::shape::{regrouping, Dim, Regrouping};
/// let [b, t, h, dh] = ["B", "T", "H", "Dh"].map(Dim::sym);
/// let c = h.mul(&dh);
/// let split = regrouping(&[b.clone(), t.clone(), c.clone()], &[b.clone(), t.clone(), h.clone(), dh.clone()]);
/// assert_eq!(split, Regrouping::InOrder);
/// let moved = regrouping(&[b.clone(), h.clone(), t.clone(), dh.clone()], &[b.clone(), t.clone(), c]);
/// assert!(matches!(moved, Regrouping::Reordered { from_dim: 1, wanted_dim: Some(2), .. }));
/// // [4, 6] to [6, 4]: literals alone cannot say whether dims moved.
/// let lit = regrouping(&[Dim::constant(4), Dim::constant(6)], &[Dim::constant(6), Dim::constant(4)]);
/// assert_eq!(lit, Regrouping::Unknown);
/// ```
pub fn regrouping(from: &[Dim], to: &[Dim]) -> Regrouping {
    let one = Dim::constant(1);
    let (mut i, mut j) = (0, 0);
    // What is left of source dim `i` and target dim `j`.
    let (mut rs, mut rt): (Option<Dim>, Option<Dim>) = (None, None);
    loop {
        if rs.is_none() {
            while from.get(i) == Some(&one) {
                i += 1;
            }
            rs = from.get(i).cloned();
        }
        if rt.is_none() {
            while to.get(j) == Some(&one) {
                j += 1;
            }
            rt = to.get(j).cloned();
        }
        let (a, b) = match (&rs, &rt) {
            (None, None) => return Regrouping::InOrder,
            (Some(a), Some(b)) => (a.clone(), b.clone()),
            _ => return Regrouping::Unknown,
        };
        if a == b {
            (rs, rt) = (None, None);
            (i, j) = (i + 1, j + 1);
            continue;
        }
        let (Some((ca, ma)), Some((cb, mb))) = (single_term(&a), single_term(&b)) else {
            return Regrouping::Unknown;
        };
        if let Some(q) = a.div_exact(&b) {
            // The target dim is the front of the source's: a split.
            (rs, rt) = (Some(q), None);
            j += 1;
            continue;
        }
        if let Some(q) = b.div_exact(&a) {
            // The source dim is the front of the target's: a merge.
            (rs, rt) = (None, Some(q));
            i += 1;
            continue;
        }
        if ma == mb {
            // Same symbols, literal parts that do not divide: open.
            return Regrouping::Unknown;
        }
        // The target wants a factor the source only has further on: a
        // symbol the source's group lacks, or (when the target's symbols
        // are all in it) the literal that does not fit.
        let wanted = match mb
            .0
            .iter()
            .find(|(s, p)| ma.0.iter().find(|(t, _)| t == s).is_none_or(|(_, q)| q < p))
        {
            Some((s, _)) => Dim::sym(s),
            None => Dim::constant(cb),
        };
        let blocker = match ma
            .0
            .iter()
            .find(|(s, p)| mb.0.iter().find(|(t, _)| t == s).is_none_or(|(_, q)| q < p))
        {
            Some((s, _)) => Dim::sym(s),
            None => Dim::constant(ca),
        };
        let holds = |d: &Dim| match (wanted.as_constant(), single_term(d)) {
            (Some(c), Some((cd, _))) => cd % c == 0,
            (None, _) => d.div_exact(&wanted).is_some(),
            _ => false,
        };
        let wanted_dim = (i + 1..from.len()).find(|&k| holds(&from[k]));
        if wanted.as_constant().is_none() && wanted_dim.is_none() {
            return Regrouping::Unknown;
        }
        return Regrouping::Reordered {
            partial: a != from[i] || blocker != a,
            blocker,
            from_dim: i,
            wanted,
            wanted_dim,
            to_dim: j,
        };
    }
}

/// A way to reach a reordering reshape's target: move the source's dims
/// first ([`Reorder::Before`]) or reshape to the target's dims in the
/// source's order and move them after ([`Reorder::After`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reorder {
    /// `x.permute(perm).reshape(to)`.
    Before(Vec<usize>),
    /// `x.reshape(order.map(|k| to[k])).permute(perm)`.
    After {
        /// The target's dims in the order the source has them.
        order: Vec<usize>,
        /// The permutation that puts them back into the target's order.
        perm: Vec<usize>,
    },
}

/// The reorder that makes `to` an in-order regrouping of `from` moving
/// the fewest dims, if one does (ranks up to 6, so the search is small).
///
/// ```
/// use tensorfn_macros_impl::shape::{reorder_fix, Dim, Reorder};
/// let [b, t, h, dh] = ["B", "T", "H", "Dh"].map(Dim::sym);
/// let fix = reorder_fix(&[b.clone(), h.clone(), t.clone(), dh.clone()], &[b.clone(), t.clone(), h.mul(&dh)]);
/// assert_eq!(fix, Some(Reorder::Before(vec![0, 2, 1, 3])));
/// let fix = reorder_fix(&[b.clone(), t.clone(), h.mul(&dh)], &[b, h, t, dh]);
/// assert_eq!(fix, Some(Reorder::After { order: vec![0, 2, 1, 3], perm: vec![0, 2, 1, 3] }));
/// ```
pub fn reorder_fix(from: &[Dim], to: &[Dim]) -> Option<Reorder> {
    let moved = |p: &[usize]| p.iter().enumerate().filter(|&(k, &v)| k != v).count();
    let before = permutations(from.len())
        .into_iter()
        .filter(|p| {
            let f: Vec<Dim> = p.iter().map(|&k| from[k].clone()).collect();
            regrouping(&f, to) == Regrouping::InOrder
        })
        .min_by_key(|p| moved(p));
    let after = permutations(to.len())
        .into_iter()
        .filter(|p| {
            let t: Vec<Dim> = p.iter().map(|&k| to[k].clone()).collect();
            regrouping(from, &t) == Regrouping::InOrder
        })
        .min_by_key(|p| moved(p));
    match (before, after) {
        (Some(b), Some(a)) if moved(&a) < moved(&b) => Some(after_fix(a)),
        (Some(b), _) => Some(Reorder::Before(b)),
        (None, Some(a)) => Some(after_fix(a)),
        (None, None) => None,
    }
}

fn after_fix(order: Vec<usize>) -> Reorder {
    // Result dim `k` of the reshape holds target dim `order[k]`; the
    // permutation picks, for each target dim, where it is.
    let mut perm = vec![0; order.len()];
    for (k, &t) in order.iter().enumerate() {
        perm[t] = k;
    }
    Reorder::After { order, perm }
}

/// Every permutation of `0..n` (`n` at most 6), the identity first, then
/// in lexicographic order.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n > 6 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    fn go(n: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == n {
            out.push(cur.clone());
            return;
        }
        for k in 0..n {
            if !cur.contains(&k) {
                cur.push(k);
                go(n, cur, out);
                cur.pop();
            }
        }
    }
    go(n, &mut cur, &mut out);
    out
}

/// Formats a shape the way the shape rules print one: `[B, 784]`.
pub fn fmt_shape(dims: &[Dim]) -> String {
    tensorfn_core::rules::fmt_dims(dims)
}

/// The element count of a shape, as a dim.
pub fn numel(dims: &[Dim]) -> Dim {
    tensorfn_core::rules::numel(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorfn_core::rules;

    fn s(n: &str) -> Dim {
        Dim::sym(n)
    }
    fn c(n: i64) -> Dim {
        Dim::constant(n)
    }

    #[test]
    fn normal_form_makes_equal_polynomials_equal() {
        assert_eq!(s("N").mul(&s("M")), s("M").mul(&s("N")));
        assert_eq!(s("N").add(&s("M")), s("M").add(&s("N")));
        assert_eq!(s("N").add(&s("N")), c(2).mul(&s("N")));
        assert_eq!(
            s("A").add(&s("B")).mul(&s("C")),
            s("C").mul(&s("B")).add(&s("A").mul(&s("C")))
        );
        assert_eq!(s("N").sub(&s("N")), c(0));
        assert_eq!(c(3).add(&c(4)), c(7));
        assert_ne!(s("B").add(&c(784)), s("B").add(&c(785)));
        assert_ne!(s("N"), s("M"));
        assert_ne!(s("N").mul(&s("N")), c(2).mul(&s("N")));
    }

    #[test]
    fn display_is_stable_and_readable() {
        assert_eq!(c(784).to_string(), "784");
        assert_eq!(c(0).to_string(), "0");
        assert_eq!(s("B").to_string(), "B");
        assert_eq!(s("N").mul(&s("M")).to_string(), "M * N");
        assert_eq!(
            s("B")
                .mul(&s("N"))
                .add(&c(2).mul(&s("M")))
                .add(&c(3))
                .to_string(),
            "B * N + 2 * M + 3"
        );
        assert_eq!(s("N").mul(&s("N")).to_string(), "N * N");
        assert_eq!(s("N").sub(&c(1)).to_string(), "N - 1");
        assert_eq!(c(-2).to_string(), "-2");
        assert_eq!(fmt_shape(&[s("B"), c(784)]), "[B, 784]");
    }

    #[test]
    fn classification_and_evaluation() {
        assert_eq!(s("B").as_symbol(), Some("B"));
        assert_eq!(c(2).mul(&s("B")).as_symbol(), None);
        assert_eq!(c(5).as_constant(), Some(5));
        assert_eq!(c(0).as_constant(), Some(0));
        assert_eq!(s("B").as_constant(), None);
        let d = s("N").mul(&s("M")).add(&c(1));
        assert_eq!(
            d.eval(&|n| match n {
                "N" => Some(3),
                "M" => Some(4),
                _ => None,
            }),
            Some(13)
        );
        assert_eq!(d.eval(&|_| None), None);
        assert_eq!(d.symbols().len(), 2);
        let sub = d.substitute(&|n| Some(if n == "N" { s("K") } else { c(2) }));
        assert_eq!(sub, Some(c(2).mul(&s("K")).add(&c(1))));
    }

    #[test]
    fn exact_division_for_reshape_inference() {
        let n = s("B").mul(&c(784));
        assert_eq!(n.div_exact(&s("B")), Some(c(784)));
        assert_eq!(n.div_exact(&c(784)), Some(s("B")));
        assert_eq!(c(20000).div_exact(&c(1)), Some(c(20000)));
        assert_eq!(s("B").add(&c(1)).div_exact(&s("B")), None);
        let sum = s("N").add(&s("M"));
        assert_eq!(sum.mul(&c(3)).div_exact(&c(3)), Some(sum.clone()));
        assert_eq!(sum.div_exact(&sum), Some(c(1)));
    }

    #[test]
    fn shared_rules_run_on_symbols() {
        let (b, n, m) = (s("B"), s("N"), s("M"));
        let out = rules::cat(
            "cat",
            &[
                ("a", &[b.clone(), n.clone()]),
                ("b", &[b.clone(), m.clone()]),
            ],
            1,
        )
        .unwrap();
        assert_eq!(out, vec![b.clone(), m.add(&n)]);
        let e = rules::matmul(
            "matmul",
            ("x", &[b.clone(), c(784)]),
            ("w", &[c(785), c(10)]),
        )
        .unwrap_err();
        assert!(
            e.message.contains("k = 784") && e.message.contains("k = 785"),
            "{e}"
        );
        let e = rules::reshape("view", ("x", &[c(1000), c(1000)]), &[c(1000001)]).unwrap_err();
        assert!(e.message.contains("1000000 elements"), "{e}");
        assert!(rules::reshape(
            "reshape",
            ("x", &[b.clone(), c(28), c(28)]),
            &[b.clone(), c(784)]
        )
        .is_ok());
        let bc = rules::broadcast(
            "add",
            &[("a", &[b.clone(), c(1)]), ("b", &[c(1), n.clone()])],
        )
        .unwrap();
        assert_eq!(bc, vec![b.clone(), n.clone()]);
        // `[B, 1]` with `[N]` grows both sides after a leading dim is added.
        let e = rules::broadcast("add", &[("a", &[b.clone(), c(1)]), ("b", &[n])]).unwrap_err();
        assert!(e.message.contains("to [B, N]"), "{e}");
        // A bias onto a batch grows one side only.
        let bc = rules::broadcast("add", &[("x", &[b.clone(), c(8)]), ("bias", &[c(8)])]).unwrap();
        assert_eq!(bc, vec![b, c(8)]);
    }
}
