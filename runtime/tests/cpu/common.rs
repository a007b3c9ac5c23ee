//! Shared helpers for the CPU integration tests: a seeded generator whose
//! seed is printed (rerun with `TENSORFN_TEST_SEED=<seed>`), random inputs
//! in every dtype, views of every kind with their logical values computed
//! here by plain index arithmetic, and per-dtype tolerances.
#![allow(dead_code)]

use tensorfn_runtime::{bf16, f16, Cpu, DType, NumDType, RemoveDim, Shape, Tensor};

/// SplitMix64, seeded from the environment or the clock.
pub struct Rng {
    state: u64,
    pub seed: u64,
}

impl Rng {
    /// A generator for one test; the seed is printed so a failure can be
    /// replayed (cargo shows the output of failing tests).
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("TENSORFN_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                t.as_nanos() as u64 ^ (test.len() as u64).rotate_left(40)
            });
        println!("{test}: seed {seed} (rerun with TENSORFN_TEST_SEED={seed})");
        Rng { state: seed, seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }

    /// Dims of `rank` in `lo..=hi`, one of them 0 about one time in four.
    pub fn dims_maybe_empty(&mut self, rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        let mut d = self.dims(rank, lo, hi);
        if rank > 0 && self.int(0, 3) == 0 {
            let k = self.int(0, rank as i64 - 1) as usize;
            d[k] = 0;
        }
        d
    }

    pub fn pick<'a, X>(&mut self, xs: &'a [X]) -> &'a X {
        &xs[self.int(0, xs.len() as i64 - 1) as usize]
    }

    /// Dims of `rank` in `lo..=hi`.
    pub fn dims(&mut self, rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        (0..rank)
            .map(|_| self.int(lo as i64, hi as i64) as usize)
            .collect()
    }
}

/// What the tests need to know about a dtype.
pub trait TestDType: NumDType {
    /// Relative tolerance of one rounding step (plus slack).
    const TOL: f64;
    const INT: bool;
    /// A random value exactly representable in this dtype, as `f64`.
    fn sample(rng: &mut Rng, lo: f64, hi: f64) -> f64;
    /// The value an integer result wraps to in this dtype.
    fn wrap(v: i128) -> f64;
}

macro_rules! float_test_dtype {
    ($t:ty, $tol:expr) => {
        impl TestDType for $t {
            const TOL: f64 = $tol;
            const INT: bool = false;
            fn sample(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
                <$t as tensorfn_runtime::DType>::from_f64(rng.uniform(lo, hi)).to_f64()
            }
            fn wrap(v: i128) -> f64 {
                v as f64
            }
        }
    };
}
float_test_dtype!(f64, 1e-12);
float_test_dtype!(f32, 1e-5);
float_test_dtype!(f16, 2e-3);
float_test_dtype!(bf16, 1.6e-2);

macro_rules! int_test_dtype {
    ($t:ty) => {
        impl TestDType for $t {
            const TOL: f64 = 0.0;
            const INT: bool = true;
            fn sample(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
                let (lo, hi) = (lo.max(<$t>::MIN as f64), hi.min(<$t>::MAX as f64));
                rng.int(lo.ceil() as i64, hi.floor() as i64) as f64
            }
            fn wrap(v: i128) -> f64 {
                (v as $t) as f64
            }
        }
    };
}
int_test_dtype!(i32);
int_test_dtype!(i64);
int_test_dtype!(u8);

/// `n` random values of `T` in `[lo, hi)`, as `f64` and as `T`.
pub fn values<T: TestDType>(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> (Vec<f64>, Vec<T>) {
    let f: Vec<f64> = (0..n).map(|_| T::sample(rng, lo, hi)).collect();
    let t = f.iter().map(|&v| T::from_f64(v)).collect();
    (f, t)
}

/// `x` rounded to `T` and back (what an exact result stored in `T` is).
pub fn round<T: TestDType>(x: f64) -> f64 {
    T::from_f64(x).to_f64()
}

pub fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// The multi-index of row-major position `i`.
pub fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for k in (0..dims.len()).rev() {
        idx[k] = i % dims[k];
        i /= dims[k];
    }
    idx
}

/// The row-major position of a multi-index.
pub fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// Every multi-index of `dims`, row-major.
pub fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
    (0..numel(dims)).map(|i| unravel(i, dims)).collect()
}

/// How a test input is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Row-major, its own buffer.
    Contiguous,
    /// The last two dims swapped from a row-major base.
    Transposed,
    /// A narrowed range of dim 0 of a larger base (an offset view).
    Sliced,
    /// All dims reversed from a row-major base.
    Permuted,
    /// Dim 0 repeated (stride 0) from a base whose dim 0 is 1.
    Broadcast,
}

pub const KINDS: [Kind; 5] = [
    Kind::Contiguous,
    Kind::Transposed,
    Kind::Sliced,
    Kind::Permuted,
    Kind::Broadcast,
];

/// Maps a logical index of a view to the index in its base.
type SourceIndex = Box<dyn Fn(&[usize]) -> Vec<usize>>;

/// A tensor of `dims` laid out as `kind`, and its logical values.
pub fn view<T: TestDType, S: Shape + RemoveDim<0>>(
    rng: &mut Rng,
    dims: &[usize],
    kind: Kind,
    lo: f64,
    hi: f64,
) -> (Tensor<Cpu, T, S>, Vec<f64>) {
    let r = dims.len();
    let kind = if kind == Kind::Transposed && r < 2 {
        Kind::Permuted
    } else {
        kind
    };
    let base_dims: Vec<usize> = match kind {
        Kind::Contiguous => dims.to_vec(),
        Kind::Transposed => {
            let mut d = dims.to_vec();
            d.swap(r - 2, r - 1);
            d
        }
        Kind::Sliced => {
            let mut d = dims.to_vec();
            d[0] += 3;
            d
        }
        Kind::Permuted => dims.iter().rev().copied().collect(),
        Kind::Broadcast => {
            let mut d = dims.to_vec();
            d[0] = 1;
            d
        }
    };
    let (data, raw) = values::<T>(rng, numel(&base_dims), lo, hi);
    let base = Tensor::<Cpu, T, S>::from_vec_dims(raw, &base_dims).unwrap();
    let (tensor, source): (Tensor<Cpu, T, S>, SourceIndex) = match kind {
        Kind::Contiguous => (base, Box::new(|i: &[usize]| i.to_vec())),
        Kind::Transposed => (
            base.transpose::<S>(r - 2, r - 1).unwrap(),
            Box::new(move |i: &[usize]| {
                let mut j = i.to_vec();
                j.swap(r - 2, r - 1);
                j
            }),
        ),
        Kind::Sliced => (
            base.narrow::<0, S>(2, dims[0]).unwrap(),
            Box::new(|i: &[usize]| {
                let mut j = i.to_vec();
                j[0] += 2;
                j
            }),
        ),
        Kind::Permuted => {
            let perm: Vec<usize> = (0..r).rev().collect();
            (
                base.permute::<S>(&perm).unwrap(),
                Box::new(|i: &[usize]| i.iter().rev().copied().collect()),
            )
        }
        Kind::Broadcast => (
            base.broadcast_to_dims::<S>(dims).unwrap(),
            Box::new(|i: &[usize]| {
                let mut j = i.to_vec();
                j[0] = 0;
                j
            }),
        ),
    };
    assert_eq!(tensor.shape(), dims);
    let logical = indices(dims)
        .iter()
        .map(|i| data[ravel(&source(i), &base_dims)])
        .collect();
    (tensor, logical)
}

/// Checks `got` against the f64 reference `want`: exact for integers,
/// within `tol` relative (and absolute near 0) for floats; NaN must match.
pub fn assert_close<T: TestDType>(got: &[T], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == *w
        } else {
            (g - w).abs() <= tol * w.abs().max(1.0)
        };
        assert!(
            ok,
            "{what}: element {i} is {g}, expected {w} (tolerance {tol})"
        );
    }
}

/// Runs `$body` once per numeric dtype with `$T` naming it.
#[macro_export]
macro_rules! for_num_dtypes {
    ($T:ident => $body:block) => {{
        {
            type $T = f32;
            $body
        }
        {
            type $T = f64;
            $body
        }
        {
            type $T = tensorfn_runtime::f16;
            $body
        }
        {
            type $T = tensorfn_runtime::bf16;
            $body
        }
        {
            type $T = i32;
            $body
        }
        {
            type $T = i64;
            $body
        }
        {
            type $T = u8;
            $body
        }
    }};
}

/// Runs `$body` once per float dtype with `$T` naming it.
#[macro_export]
macro_rules! for_float_dtypes {
    ($T:ident => $body:block) => {{
        {
            type $T = f32;
            $body
        }
        {
            type $T = f64;
            $body
        }
        {
            type $T = tensorfn_runtime::f16;
            $body
        }
        {
            type $T = tensorfn_runtime::bf16;
            $body
        }
    }};
}

pub fn name<T: tensorfn_runtime::DType>() -> &'static str {
    T::KIND.name()
}
