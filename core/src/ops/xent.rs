//! `cross_entropy(input, target)`, PyTorch's `F.cross_entropy` over class
//! logits `[N, C]` and class indices `[N]` (a `tensor_fn!` takes PyTorch's
//! K-dimensional form too, `[N, C, d..]` against `[N, d..]`, as rows of
//! classes): per row `lse(x) - x[t]`, with
//! PyTorch's `ignore_index`, `reduction` and `label_smoothing`. Its
//! backward, `(softmax(x) - smoothed one-hot) * grad`, is a kernel of its
//! own too (the runtime's `cross_entropy_backward`).

/// How the per-row losses are combined (PyTorch's `reduction`).
///
/// ```
/// use tensorfn_core::ops::xent::Reduction;
/// assert_eq!(Reduction::from_name("sum"), Some(Reduction::Sum));
/// assert_eq!(Reduction::default().name(), "mean");
/// assert_eq!(Reduction::from_name("avg"), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The mean over the rows that are not ignored (NaN when all are).
    #[default]
    Mean,
    /// The sum over the rows (ignored ones add 0).
    Sum,
    /// One loss per row, `[N]` (0 for an ignored row).
    None,
}

impl Reduction {
    /// Every reduction, PyTorch's default first.
    pub const ALL: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

    /// PyTorch's name (`"mean"`, `"sum"`, `"none"`).
    ///
    /// ```
    /// assert_eq!(tensorfn_core::ops::xent::Reduction::None.name(), "none");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
            Reduction::None => "none",
        }
    }

    /// The reduction PyTorch calls `name`.
    ///
    /// ```
    /// use tensorfn_core::ops::xent::Reduction;
    /// assert_eq!(Reduction::from_name("none"), Some(Reduction::None));
    /// ```
    pub fn from_name(name: &str) -> Option<Reduction> {
        Reduction::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// PyTorch's default `ignore_index`.
pub const DEFAULT_IGNORE_INDEX: i64 = -100;

/// The loss of one row of logits with class `target`, in `f64` (the
/// reference every back-end is tested against): `None` for an ignored
/// row, else `(1 - s) * (lse - x[t]) + s / C * (C * lse - sum(x))` with
/// `s = label_smoothing` and `lse` computed as PyTorch's `log_softmax`
/// does (shifted by the row's max, so a row with an infinite max gives
/// NaN). A target outside `0..C` is `Err(target)`.
///
/// ```
/// use tensorfn_core::ops::xent::cross_entropy_row_f64;
/// let l = cross_entropy_row_f64(&[0.0, 0.0], 1, -100, 0.0).unwrap().unwrap();
/// assert!((l - 2f64.ln()).abs() < 1e-15);
/// assert_eq!(cross_entropy_row_f64(&[1.0, 2.0], -100, -100, 0.0), Ok(None));
/// assert_eq!(cross_entropy_row_f64(&[1.0, 2.0], 2, -100, 0.0), Err(2));
/// ```
pub fn cross_entropy_row_f64(
    row: &[f64],
    target: i64,
    ignore_index: i64,
    label_smoothing: f64,
) -> Result<Option<f64>, i64> {
    if target == ignore_index {
        return Ok(None);
    }
    if target < 0 || target as usize >= row.len() {
        return Err(target);
    }
    let m = row.iter().copied().fold(f64::NEG_INFINITY, |a, x| {
        if a.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            a.max(x)
        }
    });
    let s: f64 = row.iter().map(|&x| (x - m).exp()).sum();
    let lse = m + s.ln();
    let nll = lse - row[target as usize];
    if label_smoothing == 0.0 {
        return Ok(Some(nll));
    }
    let c = row.len() as f64;
    let sum: f64 = row.iter().sum();
    let smooth = c * lse - sum;
    Ok(Some(
        (1.0 - label_smoothing) * nll + label_smoothing / c * smooth,
    ))
}

/// `cross_entropy` of `rows` rows of `logits` (row-major `[N, C]`) with
/// `targets` (`[N]`), in `f64`: the `[N]` losses for `Reduction::None`,
/// else one value. A target out of range is `Err(target)`.
///
/// ```
/// use tensorfn_core::ops::xent::{cross_entropy_f64, Reduction};
/// let x = [0.0, 0.0, 5.0, 1.0];
/// let none = cross_entropy_f64(&x, 2, &[0, -100], Reduction::None, -100, 0.0).unwrap();
/// assert_eq!(none[1], 0.0);
/// let mean = cross_entropy_f64(&x, 2, &[0, -100], Reduction::Mean, -100, 0.0).unwrap();
/// assert_eq!(mean, vec![none[0]]);
/// ```
pub fn cross_entropy_f64(
    logits: &[f64],
    classes: usize,
    targets: &[i64],
    reduction: Reduction,
    ignore_index: i64,
    label_smoothing: f64,
) -> Result<Vec<f64>, i64> {
    let mut losses = Vec::with_capacity(targets.len());
    let mut count = 0usize;
    for (r, &t) in targets.iter().enumerate() {
        let row = &logits[r * classes..(r + 1) * classes];
        match cross_entropy_row_f64(row, t, ignore_index, label_smoothing)? {
            Some(l) => {
                count += 1;
                losses.push(l);
            }
            None => losses.push(0.0),
        }
    }
    Ok(match reduction {
        Reduction::None => losses,
        Reduction::Sum => vec![losses.iter().sum()],
        Reduction::Mean => vec![losses.iter().sum::<f64>() / count as f64],
    })
}

/// The keyword arguments of `cross_entropy` and its backward, with
/// PyTorch's names and defaults (`reduction = "mean"`,
/// `ignore_index = -100`, `label_smoothing = 0.0`).
///
/// ```
/// use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
/// let args = CrossEntropyArgs { label_smoothing: 0.1, ..Default::default() };
/// assert_eq!((args.reduction, args.ignore_index), (Reduction::Mean, -100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyArgs {
    /// How the per-row losses are combined.
    pub reduction: Reduction,
    /// A target that marks a row to leave out (it adds 0 and does not count
    /// in the mean's divisor).
    pub ignore_index: i64,
    /// `s` in `[0, 1]`: the target distribution is `(1 - s)` on the class
    /// and `s / C` spread over every class.
    pub label_smoothing: f64,
}

impl Default for CrossEntropyArgs {
    fn default() -> Self {
        CrossEntropyArgs {
            reduction: Reduction::Mean,
            ignore_index: DEFAULT_IGNORE_INDEX,
            label_smoothing: 0.0,
        }
    }
}

impl CrossEntropyArgs {
    /// `Err` with the reason unless `label_smoothing` is in `[0, 1]` (as
    /// PyTorch requires).
    ///
    /// ```
    /// use tensorfn_core::ops::xent::CrossEntropyArgs;
    /// let bad = CrossEntropyArgs { label_smoothing: 1.5, ..Default::default() };
    /// assert!(bad.check().unwrap_err().contains("between 0 and 1"));
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let s = self.label_smoothing;
        if !(0.0..=1.0).contains(&s) {
            return Err(format!(
                "cross_entropy: `label_smoothing` must be between 0 and 1, found {s}"
            ));
        }
        Ok(())
    }
}
