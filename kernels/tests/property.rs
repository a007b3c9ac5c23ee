//! Property tests: random kernels (op chains over random dtypes, with
//! casts, comparisons and selects), random shapes (empty dims included) and
//! random layouts (broadcast, permuted, offset and overlapping views), run
//! by the interpreter and compared with an independent model of the IR's
//! semantics that computes in `f64`/`i128` and rounds each result to its
//! dtype exactly. For these operations the two must agree bit for bit
//! (NaN payloads and the sign of zero from `max`/`min` aside).

#[path = "../src/test_support.rs"]
mod test_support;
use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
use tensorfn_kernels::ir::{ElementwiseBuilder, Kernel, Value};
use tensorfn_kernels::{BinaryOp, CmpOp, DTypeKind, Error, UnaryOp};
use test_support::Rng;

// ---------------------------------------------------------------- model

/// Exact round-to-nearest-even of a finite `x` to a binary format with
/// `bits` of precision and exponents `emin..=emax` (subnormals included).
fn round_bits(x: f64, bits: i32, emin: i32, emax: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let b = x.abs().to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let frac = b & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp - 1075)
    };
    let top = 63 - m.leading_zeros() as i32 + e;
    let q = top.max(emin) - (bits - 1);
    let shift = q - e;
    let r = if shift <= 0 {
        (m as u128) << (-shift)
    } else if shift >= 100 {
        0
    } else {
        let m = m as u128;
        let down = m >> shift;
        let rem = m - (down << shift);
        let half = 1u128 << (shift - 1);
        if rem > half || (rem == half && down & 1 == 1) {
            down + 1
        } else {
            down
        }
    };
    let v = r as f64 * 2f64.powi(q);
    let max = (2.0 - 2f64.powi(1 - bits)) * 2f64.powi(emax);
    (if v > max { f64::INFINITY } else { v }).copysign(x)
}

/// `v` rounded once to float dtype `dt`.
fn round_float(v: f64, dt: DTypeKind) -> f64 {
    match dt {
        DTypeKind::F64 => v,
        DTypeKind::F32 => v as f32 as f64,
        DTypeKind::F16 => round_bits(v, 11, -14, 15),
        DTypeKind::BF16 => round_bits(v, 8, -126, 127),
        _ => unreachable!(),
    }
}

/// Integer `v` rounded once to float dtype `dt`.
fn round_int(v: i128, dt: DTypeKind) -> f64 {
    let (bits, emax) = match dt {
        DTypeKind::F64 => (53, 1023),
        DTypeKind::F32 => (24, 127),
        DTypeKind::F16 => (11, 15),
        _ => (8, 127),
    };
    if v == 0 {
        return 0.0;
    }
    let mag = v.unsigned_abs();
    let top = 127 - mag.leading_zeros() as i32;
    let r = if top < bits {
        mag as f64
    } else {
        let shift = top - (bits - 1);
        let down = mag >> shift;
        let rem = mag & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let up = rem > half || (rem == half && down & 1 == 1);
        (down + up as u128) as f64 * 2f64.powi(shift)
    };
    let max = (2.0 - 2f64.powi(1 - bits)) * 2f64.powi(emax);
    let r = if r > max { f64::INFINITY } else { r };
    if v < 0 {
        -r
    } else {
        r
    }
}

fn wrap(v: i128, dt: DTypeKind) -> i128 {
    match dt {
        DTypeKind::I32 => v as i32 as i128,
        DTypeKind::I64 => v as i64 as i128,
        DTypeKind::U8 => v as u8 as i128,
        _ => unreachable!(),
    }
}

/// A value of the model, valid for its dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    F(f64),
    I(i128),
    B(bool),
}

impl V {
    fn f(self) -> f64 {
        match self {
            V::F(x) => x,
            V::I(x) => x as f64,
            V::B(b) => b as u8 as f64,
        }
    }
    fn same(self, other: V) -> bool {
        match (self, other) {
            (V::F(a), V::F(b)) => (a.is_nan() && b.is_nan()) || a == b,
            _ => self == other,
        }
    }
}

fn cast(v: V, to: DTypeKind) -> V {
    use DTypeKind::*;
    match (v, to) {
        (V::F(x), Bool) => V::B(x != 0.0),
        (V::I(x), Bool) => V::B(x != 0),
        (V::B(b), Bool) => V::B(b),
        (V::B(b), F32 | F64 | F16 | BF16) => V::F(b as u8 as f64),
        (V::B(b), _) => V::I(b as i128),
        (V::F(x), F32 | F64 | F16 | BF16) => V::F(round_float(x, to)),
        (V::I(x), F32 | F64 | F16 | BF16) => V::F(round_int(x, to)),
        (V::F(x), I32) => V::I(x as i32 as i128),
        (V::F(x), I64) => V::I(x as i64 as i128),
        (V::F(x), U8) => V::I(x as u8 as i128),
        (V::I(x), _) => V::I(wrap(x, to)),
    }
}

/// max/min as the GPU's `max.f32`/`min.f32` (and so the interpreter) order
/// zeros: -0 < +0; NaN propagates (the IR's Max/Min).
fn fmax(a: f64, b: f64, max: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == b {
        let neg = a.is_sign_negative() && b.is_sign_negative();
        let pos = a.is_sign_positive() && b.is_sign_positive();
        return if max {
            if pos || !neg {
                a.abs()
            } else {
                a
            }
        } else if neg || !pos {
            -a.abs()
        } else {
            a
        };
    }
    if (a > b) == max {
        a
    } else {
        b
    }
}

fn unary(op: UnaryOp, x: V, dt: DTypeKind) -> V {
    match x {
        V::F(v) => {
            let r = match op {
                UnaryOp::Relu => fmax(v, 0.0, true),
                _ => op.eval_f64(v),
            };
            V::F(round_float(r, dt))
        }
        V::I(v) => V::I(wrap(
            match op {
                UnaryOp::Neg => -v,
                UnaryOp::Abs => v.abs(),
                UnaryOp::Relu => v.max(0),
                UnaryOp::Square => v * v,
                _ => unreachable!(),
            },
            dt,
        )),
        V::B(_) => unreachable!(),
    }
}

fn binary(op: BinaryOp, a: V, b: V, dt: DTypeKind) -> V {
    match (a, b) {
        (V::F(x), V::F(y)) => V::F(round_float(
            match op {
                BinaryOp::Max => fmax(x, y, true),
                BinaryOp::Min => fmax(x, y, false),
                _ => op.eval_f64(x, y),
            },
            dt,
        )),
        (V::I(x), V::I(y)) => V::I(wrap(
            match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div if y == 0 => 0,
                BinaryOp::Div => x / y,
                BinaryOp::Max => x.max(y),
                BinaryOp::Min => x.min(y),
                _ => unreachable!("{} on integers", op.name()),
            },
            dt,
        )),
        _ => unreachable!(),
    }
}

fn compare(op: CmpOp, a: V, b: V) -> V {
    V::B(match (a, b) {
        (V::I(x), V::I(y)) => match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        },
        _ => op.eval_f64(a.f(), b.f()),
    })
}

/// The model of a kernel: the builder calls, replayed per element.
#[derive(Clone, Debug)]
enum Node {
    Input(usize),
    Const(V),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Compare(CmpOp, usize, usize),
    Select(usize, usize, usize),
    Cast(usize, DTypeKind),
}

struct Model {
    nodes: Vec<(Node, DTypeKind)>,
}

impl Model {
    fn eval(&self, inputs: &[V], out: usize) -> V {
        let mut vals: Vec<V> = Vec::with_capacity(self.nodes.len());
        for (node, dt) in &self.nodes {
            let v = match *node {
                Node::Input(i) => inputs[i],
                Node::Const(v) => v,
                Node::Unary(op, a) => unary(op, vals[a], *dt),
                Node::Binary(op, a, b) => binary(op, vals[a], vals[b], *dt),
                Node::Compare(op, a, b) => compare(op, vals[a], vals[b]),
                Node::Select(c, a, b) => {
                    if vals[c] == V::B(true) {
                        vals[a]
                    } else {
                        vals[b]
                    }
                }
                Node::Cast(a, to) => cast(vals[a], to),
            };
            vals.push(v);
        }
        vals[out]
    }
}

// ---------------------------------------------------------------- generator

const DTYPES: [DTypeKind; 8] = DTypeKind::ALL;
/// Unary ops whose result is exact before the rounding to the dtype.
const EXACT_UNARY: [UnaryOp; 4] = [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Square];
/// Binary ops the model reproduces exactly (division included: rounding
/// an f64 quotient to f32 or narrower is correct rounding).
const EXACT_BINARY: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
];

fn random_value(rng: &mut Rng, dt: DTypeKind) -> V {
    use DTypeKind::*;
    match dt {
        Bool => V::B(rng.chance(50)),
        U8 => V::I(rng.below(256) as i128),
        I32 | I64 => {
            let v: i128 = match rng.below(10) {
                0 => {
                    if dt == I32 {
                        rng.pick(&[i32::MIN as i128, i32::MAX as i128, -1, 0])
                    } else {
                        rng.pick(&[i64::MIN as i128, i64::MAX as i128, -1, 0])
                    }
                }
                1 => rng.next() as i64 as i128,
                _ => rng.below(2001) as i128 - 1000,
            };
            V::I(wrap(v, dt))
        }
        _ => {
            let v = match rng.below(40) {
                0 => rng.pick(&[
                    0.0,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::NAN,
                    1e30,
                    -1e-30,
                ]),
                1 => (rng.unit() - 0.5) * 1e6,
                2 => (rng.unit() - 0.5) * 1e-6,
                _ => (rng.unit() - 0.5) * 20.0,
            };
            V::F(round_float(v, dt))
        }
    }
}

/// Builds a random kernel and its model side by side.
struct Gen<'a> {
    rng: &'a mut Rng,
    k: ElementwiseBuilder,
    model: Model,
    vals: Vec<Value>,
}

impl Gen<'_> {
    fn push(&mut self, node: Node, dt: DTypeKind, v: Value) -> usize {
        assert_eq!(self.k.dtype(v), Some(dt), "{node:?}");
        self.model.nodes.push((node, dt));
        self.vals.push(v);
        self.vals.len() - 1
    }
    fn dtype(&self, i: usize) -> DTypeKind {
        self.model.nodes[i].1
    }
    fn cast_to(&mut self, i: usize, to: DTypeKind) -> usize {
        if self.dtype(i) == to {
            return i;
        }
        let v = self.k.cast(self.vals[i], to);
        self.push(Node::Cast(i, to), to, v)
    }
    /// A value of dtype `dt`: an existing one, a cast of one, or a constant.
    fn operand(&mut self, dt: DTypeKind) -> usize {
        let same: Vec<usize> = (0..self.vals.len())
            .filter(|&i| self.dtype(i) == dt)
            .collect();
        if !same.is_empty() && self.rng.chance(60) {
            return self.rng.pick(&same);
        }
        if self.rng.chance(30) {
            let c = random_value(self.rng, dt);
            let v = match c {
                V::F(x) => self.k.constant(x, dt),
                V::I(x) => self.k.constant_int(x as i64, dt),
                V::B(b) => self.k.constant(b as u8 as f64, dt),
            };
            return self.push(Node::Const(c), dt, v);
        }
        let src = self.rng.below(self.vals.len());
        self.cast_to(src, dt)
    }
    fn numeric(&mut self) -> DTypeKind {
        self.rng.pick(&DTYPES[..7])
    }
    fn step(&mut self) -> usize {
        match self.rng.below(5) {
            0 => {
                let dt = self.numeric();
                let a = self.operand(dt);
                let op = self.rng.pick(&EXACT_UNARY);
                let v = self.k.unary(op, self.vals[a]);
                self.push(Node::Unary(op, a), dt, v)
            }
            1 | 2 => {
                let dt = self.numeric();
                let a = self.operand(dt);
                let b = self.operand(dt);
                let op = self.rng.pick(&EXACT_BINARY);
                let v = self.k.binary(op, self.vals[a], self.vals[b]);
                self.push(Node::Binary(op, a, b), dt, v)
            }
            3 => {
                let dt = self.rng.pick(&DTYPES);
                let a = self.operand(dt);
                let b = self.operand(dt);
                let op = self.rng.pick(&CmpOp::ALL);
                let v = self.k.compare(op, self.vals[a], self.vals[b]);
                self.push(Node::Compare(op, a, b), DTypeKind::Bool, v)
            }
            _ => {
                if self.rng.chance(50) {
                    let c = self.operand(DTypeKind::Bool);
                    let dt = self.rng.pick(&DTYPES);
                    let a = self.operand(dt);
                    let b = self.operand(dt);
                    let v = self.k.select(self.vals[c], self.vals[a], self.vals[b]);
                    self.push(Node::Select(c, a, b), dt, v)
                } else {
                    let src = self.rng.below(self.vals.len());
                    let to = self.rng.pick(&DTYPES);
                    let v = self.k.cast(self.vals[src], to);
                    self.push(Node::Cast(src, to), to, v)
                }
            }
        }
    }
}

/// A random kernel over `inputs` and its model; returns the output index.
fn random_kernel(rng: &mut Rng, inputs: &[DTypeKind], steps: usize) -> (Kernel, Model, usize) {
    let mut g = Gen {
        rng,
        k: ElementwiseBuilder::new(),
        model: Model { nodes: Vec::new() },
        vals: Vec::new(),
    };
    for (i, &dt) in inputs.iter().enumerate() {
        let v = g.k.input(dt);
        g.push(Node::Input(i), dt, v);
    }
    let mut last = 0;
    for _ in 0..steps {
        last = g.step();
    }
    let out = g.vals[last];
    let Gen { k, model, .. } = g;
    (
        k.output(out).expect("well-typed by construction"),
        model,
        last,
    )
}

/// A random layout for `dims`: each dim contiguous-ish, broadcast (stride
/// 0), strided or permuted; returns (offset, strides, buffer length).
fn random_layout(rng: &mut Rng, dims: &[usize]) -> (usize, Vec<usize>, usize) {
    let rank = dims.len();
    let mut strides = vec![0; rank];
    match rng.below(4) {
        0 => {
            // row-major
            let mut acc = 1;
            for d in (0..rank).rev() {
                strides[d] = acc;
                acc *= dims[d].max(1);
            }
        }
        1 => {
            // permuted row-major (a transposed view)
            let mut order: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                order.swap(i, rng.below(i + 1));
            }
            let mut acc = 1;
            for &d in order.iter().rev() {
                strides[d] = acc;
                acc *= dims[d].max(1);
            }
        }
        _ => {
            for s in strides.iter_mut() {
                *s = rng.pick(&[0, 0, 1, 2, 3, 5, 7]);
            }
        }
    }
    let offset = rng.below(4);
    let span: usize = dims
        .iter()
        .zip(&strides)
        .map(|(&d, &s)| d.saturating_sub(1) * s)
        .sum();
    (offset, strides, offset + span + 1 + rng.below(3))
}

fn host_data(dt: DTypeKind, vals: &[V]) -> HostData {
    match dt {
        DTypeKind::Bool => HostData::Bool(vals.iter().map(|v| *v == V::B(true)).collect()),
        DTypeKind::I64 => HostData::I64(
            vals.iter()
                .map(|v| match v {
                    V::I(x) => *x as i64,
                    _ => unreachable!(),
                })
                .collect(),
        ),
        _ => HostData::from_f64(dt, &vals.iter().map(|v| v.f()).collect::<Vec<_>>()),
    }
}

fn model_value(data: &HostData, i: usize) -> V {
    match data {
        HostData::Bool(v) => V::B(v[i]),
        HostData::I32(v) => V::I(v[i] as i128),
        HostData::I64(v) => V::I(v[i] as i128),
        HostData::U8(v) => V::I(v[i] as i128),
        other => V::F(other.to_f64_vec()[i]),
    }
}

fn index_of(mut i: usize, dims: &[usize], strides: &[usize], offset: usize) -> usize {
    let mut off = offset;
    for d in (0..dims.len()).rev() {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
    }
    off
}

#[test]
fn random_chains_match_the_model_bit_for_bit() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut checked = 0usize;
    for case in 0..1500 {
        let n_inputs = 1 + rng.below(4);
        let inputs: Vec<DTypeKind> = (0..n_inputs).map(|_| rng.pick(&DTYPES)).collect();
        let steps = 1 + rng.below(8);
        let (kernel, model, out) = random_kernel(&mut rng, &inputs, steps);
        let rank = rng.below(5);
        let dims: Vec<usize> = (0..rank)
            .map(|_| if rng.chance(5) { 0 } else { 1 + rng.below(5) })
            .collect();
        let n: usize = dims.iter().product();
        let mut buffers = Vec::new();
        let mut layouts = Vec::new();
        for &dt in &inputs {
            let (offset, strides, len) = random_layout(&mut rng, &dims);
            let vals: Vec<V> = (0..len).map(|_| random_value(&mut rng, dt)).collect();
            buffers.push(host_data(dt, &vals));
            layouts.push((offset, strides));
        }
        let views: Vec<HostView> = buffers
            .iter()
            .zip(&layouts)
            .map(|(b, (o, s))| HostView::strided(b, *o, s.clone()))
            .collect();
        let got = run_elementwise(&kernel, &views, &dims)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{kernel}"));
        assert_eq!(got.len(), n);
        assert_eq!(got.dtype(), kernel.output_dtype());
        for i in 0..n {
            let ins: Vec<V> = buffers
                .iter()
                .zip(&layouts)
                .map(|(b, (o, s))| model_value(b, index_of(i, &dims, s, *o)))
                .collect();
            let want = model.eval(&ins, out);
            let have = model_value(&got, i);
            assert!(
                have.same(want),
                "case {case}, element {i}: got {have:?}, want {want:?}\ninputs {ins:?}\n{kernel}"
            );
            checked += 1;
        }
    }
    println!("{checked} elements checked");
    assert!(checked > 20_000, "only {checked} elements checked");
}

/// Transcendental ops on every float dtype, strided, against `f64`: within
/// the stated f32 bounds for f32, and one unit of the narrow format (plus
/// the f32 error) for f16/bf16.
#[test]
fn float_ops_on_every_float_dtype_and_layout() {
    let mut rng = Rng(0xfeed_0000_0000_0003);
    let floats = [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ];
    for &dt in &floats {
        for op in UnaryOp::ALL {
            let mut k = ElementwiseBuilder::new();
            let x = k.input(dt);
            let y = k.unary(op, x);
            let kernel = k.output(y).unwrap();
            let dims = [3, 1 + rng.below(40)];
            let (offset, strides, len) = random_layout(&mut rng, &dims);
            let vals: Vec<f64> = (0..len)
                .map(|_| {
                    let v = (rng.unit() - 0.5) * 16.0;
                    if matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt) {
                        v.abs() + 1e-3
                    } else {
                        v
                    }
                })
                .collect();
            let data = HostData::from_f64(dt, &vals);
            let got = run_elementwise(
                &kernel,
                &[HostView::strided(&data, offset, strides.clone())],
                &dims,
            )
            .unwrap()
            .to_f64_vec();
            let src = data.to_f64_vec();
            let (rel, narrow) = match dt {
                DTypeKind::F32 => (3.5 * f32::EPSILON as f64, false),
                DTypeKind::F64 => (8.0 * f64::EPSILON, false),
                DTypeKind::F16 => (2.0f64.powi(-10), true),
                _ => (2.0f64.powi(-7), true),
            };
            for (i, &g) in got.iter().enumerate() {
                let x = src[index_of(i, &dims, &strides, offset)];
                let want = op.eval_f64(x);
                // The f64 reference of gelu rounds its exponent's argument
                // (about |2u| ulps); allow for it.
                let cond = if op == UnaryOp::Gelu {
                    1.0 + 1.6 * (x + 0.044715 * x * x * x).abs()
                } else if op == UnaryOp::GeluErf && dt == DTypeKind::F64 {
                    // The same for exact GELU's erfc argument, in f64
                    // (f32 computes it in f64).
                    1.0 + x * x / 2.0
                } else {
                    1.0
                };
                let tol = cond * rel * want.abs().max(if narrow { 6.1e-5 } else { 1e-300 });
                assert!(
                    (g - want).abs() <= tol || (g.is_nan() && want.is_nan()),
                    "{} {dt} at {x}: {g} vs {want}",
                    op.name()
                );
            }
        }
    }
}

#[test]
fn pow_follows_powf_special_cases() {
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-300,
        1e300,
    ];
    for dt in [DTypeKind::F32, DTypeKind::F64] {
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for &x in &specials {
            for &y in &specials {
                xs.push(x);
                ys.push(y);
            }
        }
        let mut k = ElementwiseBuilder::new();
        let a = k.input(dt);
        let b = k.input(dt);
        let c = k.binary(BinaryOp::Pow, a, b);
        let kernel = k.output(c).unwrap();
        let xa = HostData::from_f64(dt, &xs);
        let ya = HostData::from_f64(dt, &ys);
        let got = run_elementwise(
            &kernel,
            &[HostView::contiguous(&xa), HostView::contiguous(&ya)],
            &[xs.len()],
        )
        .unwrap()
        .to_f64_vec();
        let (xa, ya) = (xa.to_f64_vec(), ya.to_f64_vec());
        for i in 0..xs.len() {
            let want = if dt == DTypeKind::F32 {
                (xa[i] as f32).powf(ya[i] as f32) as f64
            } else {
                xa[i].powf(ya[i])
            };
            let ok = (got[i].is_nan() && want.is_nan())
                || (got[i] == want && got[i].is_sign_negative() == want.is_sign_negative())
                || (got[i] - want).abs() <= want.abs() * 1e-6;
            assert!(
                ok,
                "pow {dt}({}, {}) = {} want {want}",
                xa[i], ya[i], got[i]
            );
        }
    }
}

#[test]
fn builder_reports_type_errors_without_panicking() {
    let mut rng = Rng(77);
    let mut errors = 0;
    for _ in 0..500 {
        let mut k = ElementwiseBuilder::new();
        let a = k.input(rng.pick(&DTYPES));
        let b = k.input(rng.pick(&DTYPES));
        let v = match rng.below(4) {
            0 => k.binary(rng.pick(&BinaryOp::ALL), a, b),
            1 => k.unary(rng.pick(&UnaryOp::ALL), a),
            2 => k.select(a, a, b),
            _ => k.compare(rng.pick(&CmpOp::ALL), a, b),
        };
        match k.output(v) {
            Ok(kernel) => assert!(tensorfn_kernels::ptx::elementwise(&kernel, "k").is_ok()),
            Err(Error::Type { message, .. }) => {
                assert!(!message.is_empty());
                errors += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(errors > 100);
    // a value from another builder
    let mut k1 = ElementwiseBuilder::new();
    let mut k2 = ElementwiseBuilder::new();
    let x = k1.input(DTypeKind::F32);
    let y = k2.input(DTypeKind::F32);
    let z = k2.binary(BinaryOp::Add, x, y);
    assert!(matches!(k2.output(z), Err(Error::ForeignValue { .. })));
}

#[test]
fn interpreter_rejects_bad_buffers() {
    let mut k = ElementwiseBuilder::new();
    let a = k.input(DTypeKind::F32);
    let kernel = k.output(a).unwrap();
    let f = HostData::F32(vec![1.0; 4]);
    let i = HostData::I32(vec![1; 4]);
    assert!(run_elementwise(&kernel, &[], &[4]).is_err());
    assert!(run_elementwise(&kernel, &[HostView::contiguous(&i)], &[4]).is_err());
    assert!(run_elementwise(&kernel, &[HostView::contiguous(&f)], &[5]).is_err());
    assert!(run_elementwise(&kernel, &[HostView::strided(&f, 0, vec![1, 1])], &[4]).is_err());
    assert!(run_elementwise(&kernel, &[HostView::strided(&f, 3, vec![1])], &[2]).is_err());
    assert!(run_elementwise(&kernel, &[HostView::contiguous(&f)], &[usize::MAX, 3]).is_err());
    // empty dims read nothing, even from an empty buffer
    let e = HostData::F32(vec![]);
    let out = run_elementwise(&kernel, &[HostView::contiguous(&e)], &[0, 7]).unwrap();
    assert!(out.is_empty());
}
