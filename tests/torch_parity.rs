//! The cases PyTorch users compare first (`addmm`, `matmul`, batched
//! products, `cat`, softmax, `layer_norm`, `rms_norm`, `rope`, `conv2d`, fused
//! elementwise chains, a few AdamW and SGD steps), per float dtype,
//! with fresh random inputs: computed on the GPU (and on the CPU), each
//! checked here against an f64 reference.
//!
//! With `TENSORFN_PARITY_DIR` set, every case is also written out (inputs,
//! our output, the op and its arguments) for `scripts/compare_with_torch.py`,
//! which reruns each case in PyTorch on the same inputs and compares
//! element by element; `scripts/gpu-check` runs both.

#[path = "../examples/common/mod.rs"]
mod common;

use common::matmul_f64;
use std::fmt::Write as _;
use std::path::PathBuf;
use tensorfn::prelude::*;
use tensorfn::{BatchNormArgs, BiasFor, DType, Device, DeviceKind, FloatDType, Shape};

type V = shape![_];
type M2 = shape![_, _];
type B4 = shape![_, _, _, _];
type B3 = shape![_, _, _];

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(11)
}

/// Unit roundoff of `T`'s significand.
fn eps<T: DType>() -> f64 {
    match T::KIND.name() {
        "f64" => f64::EPSILON,
        "f32" => f32::EPSILON as f64,
        "f16" => 9.77e-4,
        _ => 7.82e-3,
    }
}

/// Writes cases as raw little-endian f64 files plus one `manifest.jsonl`
/// line each; does nothing when `TENSORFN_PARITY_DIR` is unset.
struct Recorder {
    dir: Option<PathBuf>,
    manifest: String,
    files: usize,
}

impl Recorder {
    fn new(device: &str) -> Self {
        let dir = std::env::var_os("TENSORFN_PARITY_DIR").map(|d| PathBuf::from(d).join(device));
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).expect("the parity folder can be created");
        }
        Recorder {
            dir,
            manifest: String::new(),
            files: 0,
        }
    }

    /// Writes `t`'s values (exact in f64 for every float dtype) and returns
    /// the JSON describing the file.
    fn array<G: Device, T: DType, S: Shape>(&mut self, t: &Tensor<G, T, S>) -> String {
        let Some(dir) = &self.dir else {
            return String::new();
        };
        let values = t.to_vec().expect("results come back to the host");
        let bytes: Vec<u8> = values
            .iter()
            .flat_map(|v| v.to_f64().to_le_bytes())
            .collect();
        let file = format!("a{}.f64", self.files);
        self.files += 1;
        std::fs::write(dir.join(&file), bytes).expect("the parity file can be written");
        format!(r#"{{"file":"{file}","shape":{:?}}}"#, t.dims())
    }

    /// One manifest line: `op` applied to `inputs` gave `output`.
    fn case(&mut self, op: &str, dtype: &str, inputs: &[String], output: &str, args: &str) {
        if self.dir.is_none() {
            return;
        }
        let _ = writeln!(
            self.manifest,
            r#"{{"op":"{op}","dtype":"{dtype}","inputs":[{}],"output":{output},"args":{{{args}}}}}"#,
            inputs.join(",")
        );
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            std::fs::write(dir.join("manifest.jsonl"), &self.manifest)
                .expect("the manifest can be written");
        }
    }
}

/// A fresh random tensor on `G`, uniform in `[-1, 1)`, and its values in f64.
fn random<G: Device, T: FloatDType, S: Shape>(dims: &[usize]) -> (Tensor<G, T, S>, Vec<f64>) {
    let u = Tensor::<Cpu, f64, S>::rand_dims(seed(), dims).unwrap();
    let data: Vec<T> = u
        .to_vec()
        .unwrap()
        .iter()
        .map(|&v| T::from_f64(2.0 * v - 1.0))
        .collect();
    let exact: Vec<f64> = data.iter().map(|v| v.to_f64()).collect();
    let t = Tensor::<Cpu, T, S>::from_vec_dims(data, dims).unwrap();
    (t.to_device::<G>().unwrap(), exact)
}

/// `got` is within `k` units of `T`'s roundoff of `want`, relative to the
/// largest reference value (the error a product or a sum accumulates
/// scales with its magnitude, not with each element's).
fn check<G: Device, T: DType, S: Shape>(what: &str, got: &Tensor<G, T, S>, want: &[f64], k: f64) {
    let got = got.to_vec().unwrap();
    assert_eq!(got.len(), want.len(), "{what} {}: element count", T::KIND);
    let scale = want.iter().fold(f64::MIN_POSITIVE, |m, w| m.max(w.abs()));
    let (mut worst, mut at) = (0.0f64, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let e = (g.to_f64() - w).abs() / scale;
        if e > worst || e.is_nan() {
            (worst, at) = (e, i);
        }
    }
    let tol = k * eps::<T>();
    assert!(
        worst <= tol,
        "{what} {} on {}: error {worst:.3e} of the largest value at [{at}] \
         (got {}, want {}), tolerance {tol:.3e}",
        T::KIND,
        match G::KIND {
            DeviceKind::Cpu => "cpu".to_string(),
            DeviceKind::Cuda(o) => format!("cuda:{o}"),
        },
        got[at].to_f64(),
        want[at]
    );
}

fn transpose_ref(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols * rows)
        .map(|i| a[(i % rows) * cols + i / rows])
        .collect()
}

fn softmax_ref(x: &[f64], cols: usize, log: bool) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            row.iter()
                .map(move |v| {
                    if log {
                        v - max - sum.ln()
                    } else {
                        (v - max).exp() / sum
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `bias + a @ b` for a bias of `bias_dims`, broadcast like PyTorch's.
fn addmm_case<G: Device, T: FloatDType, SB: BiasFor<M2>>(
    rec: &mut Recorder,
    (a, av): (&Tensor<G, T, M2>, &[f64]),
    (b, bv): (&Tensor<G, T, M2>, &[f64]),
    bias_dims: &[usize],
    (m, k, n): (usize, usize, usize),
) {
    let (bias, biasv) = random::<G, T, SB>(bias_dims);
    let prod = matmul_f64(av, bv, m, k, n);
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            let at = match biasv.len() {
                1 => 0,
                l if l == n => i % n,
                _ => i,
            };
            prod[i] + biasv[at]
        })
        .collect();
    let c = Tensor::addmm(&bias, a, b).unwrap();
    check(&format!("addmm with a {bias_dims:?} bias"), &c, &want, 32.0);
    let (ib, i1, i2, oc) = (rec.array(&bias), rec.array(a), rec.array(b), rec.array(&c));
    rec.case(
        "addmm",
        T::KIND.name(),
        &[ib, i1, i2],
        &oc,
        r#""beta":1.0,"alpha":1.0"#,
    );
}

fn products<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let (m, k, n) = (67, 300, 129);
    let (a, av) = random::<G, T, M2>(&[m, k]);
    let (b, bv) = random::<G, T, M2>(&[k, n]);
    let want = matmul_f64(&av, &bv, m, k, n);
    let c = a.matmul(&b).unwrap();
    check("matmul", &c, &want, 32.0);
    let (ia, ib, oc) = (rec.array(&a), rec.array(&b), rec.array(&c));
    rec.case("matmul", dt, &[ia, ib], &oc, "");

    // A transposed view goes to cuBLAS as a flag, not a copy.
    let (bt, btv) = random::<G, T, M2>(&[n, k]);
    let c = a.matmul(&bt.t().unwrap()).unwrap();
    check(
        "matmul with a transposed operand",
        &c,
        &matmul_f64(&av, &transpose_ref(&btv, n, k), m, k, n),
        32.0,
    );
    let (ia, ib, oc) = (rec.array(&a), rec.array(&bt), rec.array(&c));
    rec.case("matmul_nt", dt, &[ia, ib], &oc, "");

    addmm_case::<G, T, V>(rec, (&a, &av), (&b, &bv), &[n], (m, k, n));
    addmm_case::<G, T, M2>(rec, (&a, &av), (&b, &bv), &[m, n], (m, k, n));
    addmm_case::<G, T, M2>(rec, (&a, &av), (&b, &bv), &[1, n], (m, k, n));
    addmm_case::<G, T, shape![]>(rec, (&a, &av), (&b, &bv), &[], (m, k, n));

    let (bias, biasv) = random::<G, T, V>(&[n]);
    let (beta, alpha) = (0.5, -2.0);
    let c = Tensor::addmm_scaled(&bias, &a, &b, T::from_f64(beta), T::from_f64(alpha)).unwrap();
    let prod = matmul_f64(&av, &bv, m, k, n);
    let want: Vec<f64> = (0..m * n)
        .map(|i| beta * biasv[i % n] + alpha * prod[i])
        .collect();
    check("addmm_scaled", &c, &want, 64.0);
    let (ib, i1, i2, oc) = (
        rec.array(&bias),
        rec.array(&a),
        rec.array(&b),
        rec.array(&c),
    );
    rec.case(
        "addmm",
        dt,
        &[ib, i1, i2],
        &oc,
        r#""beta":0.5,"alpha":-2.0"#,
    );

    let batch = 5;
    let (x, xv) = random::<G, T, B3>(&[batch, m, k]);
    let (y, yv) = random::<G, T, B3>(&[batch, k, n]);
    let want: Vec<f64> = (0..batch)
        .flat_map(|i| {
            matmul_f64(
                &xv[i * m * k..][..m * k],
                &yv[i * k * n..][..k * n],
                m,
                k,
                n,
            )
        })
        .collect();
    let z = x.bmm(&y).unwrap();
    check("bmm", &z, &want, 32.0);
    let (ix, iy, oz) = (rec.array(&x), rec.array(&y), rec.array(&z));
    rec.case("bmm", dt, &[ix, iy], &oz, "");

    // One matrix shared by the whole batch: PyTorch's matmul broadcasting.
    let z = x.matmul(&b).unwrap();
    let want: Vec<f64> = (0..batch)
        .flat_map(|i| matmul_f64(&xv[i * m * k..][..m * k], &bv, m, k, n))
        .collect();
    check("batched matmul with a shared matrix", &z, &want, 32.0);
    let (ix, ib, oz) = (rec.array(&x), rec.array(&b), rec.array(&z));
    rec.case("matmul", dt, &[ix, ib], &oz, "");

    // Attention-shaped: [2, heads, m, k] against per-head [heads, k, n]
    // matrices, the batch dim of 2 broadcast (torch.matmul's rule).
    let heads = 3;
    let (q, qv) = random::<G, T, B4>(&[2, heads, m, k]);
    let (w, wv) = random::<G, T, B3>(&[heads, k, n]);
    let z = q.matmul_broadcast::<B4>(&w).unwrap();
    let want: Vec<f64> = (0..2 * heads)
        .flat_map(|i| {
            let h = i % heads;
            matmul_f64(
                &qv[i * m * k..][..m * k],
                &wv[h * k * n..][..k * n],
                m,
                k,
                n,
            )
        })
        .collect();
    check("4-D matmul broadcasting its batch", &z, &want, 32.0);
    let (iq, iw, oz) = (rec.array(&q), rec.array(&w), rec.array(&z));
    rec.case("matmul", dt, &[iq, iw], &oz, "");
}

fn joins<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let (a, av) = random::<G, T, B3>(&[3, 5, 7]);
    let (b, bv) = random::<G, T, B3>(&[3, 9, 7]);
    let c: Tensor<G, T, B3> = a.cat::<1, _>(&b).unwrap();
    let want: Vec<f64> = (0..3)
        .flat_map(|i| {
            av[i * 35..][..35]
                .iter()
                .chain(&bv[i * 63..][..63])
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    check("cat along dim 1", &c, &want, 0.0);
    let (ia, ib, oc) = (rec.array(&a), rec.array(&b), rec.array(&c));
    rec.case("cat", dt, &[ia, ib], &oc, r#""dim":1"#);

    let parts: Vec<(Tensor<G, T, M2>, Vec<f64>)> = (0..8).map(|_| random(&[33, 40])).collect();
    let refs: Vec<&Tensor<G, T, M2>> = parts.iter().map(|(t, _)| t).collect();
    let c = Tensor::cat_slice::<1, M2>(&refs).unwrap();
    let want: Vec<f64> = (0..33)
        .flat_map(|r| {
            parts
                .iter()
                .flat_map(move |(_, v)| v[r * 40..][..40].to_vec())
        })
        .collect();
    check("cat of 8 along dim 1", &c, &want, 0.0);
    let inputs: Vec<String> = parts.iter().map(|(t, _)| rec.array(t)).collect();
    let oc = rec.array(&c);
    rec.case("cat", dt, &inputs, &oc, r#""dim":1"#);

    // A transposed (non-contiguous) input takes the strided path.
    let (t, tv) = random::<G, T, M2>(&[40, 33]);
    let tt = t.t().unwrap();
    let c = Tensor::cat_slice::<0, M2>(&[&refs[0].clone(), &tt.contiguous().unwrap()]).unwrap();
    let c2: Tensor<G, T, M2> = refs[0].cat::<0, _>(&tt).unwrap();
    let want: Vec<f64> = parts[0]
        .1
        .iter()
        .copied()
        .chain(transpose_ref(&tv, 40, 33))
        .collect();
    check(
        "cat of a contiguous and a transposed input",
        &c2,
        &want,
        0.0,
    );
    check("cat_slice of copies", &c, &want, 0.0);
    let (ia, ib, oc) = (rec.array(refs[0]), rec.array(&tt), rec.array(&c2));
    rec.case("cat", dt, &[ia, ib], &oc, r#""dim":0"#);
}

fn softmaxes<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    for (rows, cols) in [(64, 4096), (300, 33), (7, 10000)] {
        let (x, xv) = random::<G, T, M2>(&[rows, cols]);
        // Spread the logits so that the max subtraction matters.
        let x = x.mul_scalar(T::from_f64(8.0)).unwrap();
        let xv: Vec<f64> = xv.iter().map(|v| T::from_f64(v * 8.0).to_f64()).collect();
        for log in [false, true] {
            let y = if log {
                x.log_softmax::<1>()
            } else {
                x.softmax::<1>()
            }
            .unwrap();
            let want = softmax_ref(&xv, cols, log);
            check(if log { "log_softmax" } else { "softmax" }, &y, &want, 8.0);
            let (ix, oy) = (rec.array(&x), rec.array(&y));
            rec.case(
                if log { "log_softmax" } else { "softmax" },
                dt,
                &[ix],
                &oy,
                r#""dim":1"#,
            );
        }
    }
    // Along dim 0: the rows are strided.
    let (x, xv) = random::<G, T, M2>(&[50, 30]);
    let y = x.softmax::<0>().unwrap();
    let want = transpose_ref(&softmax_ref(&transpose_ref(&xv, 50, 30), 50, false), 30, 50);
    check("softmax along dim 0", &y, &want, 8.0);
    let (ix, oy) = (rec.array(&x), rec.array(&y));
    rec.case("softmax", dt, &[ix], &oy, r#""dim":0"#);
}

fn norms<G: Device, T: FloatDType>(rec: &mut Recorder) {
    use tensorfn_core::ops::NormOp;
    let dt = T::KIND.name();
    // A warp per row, a block per row, and a row past the registers; the
    // inputs shifted so that the mean is far from 0.
    for (rows, cols) in [(64, 768), (16, 4096), (3, 9000)] {
        let (x, xv) = random::<G, T, M2>(&[rows, cols]);
        let x = x.add_scalar(T::from_f64(3.0)).unwrap();
        let xv: Vec<f64> = xv.iter().map(|v| T::from_f64(v + 3.0).to_f64()).collect();
        let (w, wv) = random::<G, T, V>(&[cols]);
        let (b, bv) = random::<G, T, V>(&[cols]);
        for op in NormOp::ALL {
            let eps = 1e-5;
            let y = match op {
                NormOp::LayerNorm => x.layer_norm(&w, &b, eps),
                NormOp::RmsNorm => x.rms_norm(&w, Some(eps)),
            }
            .unwrap();
            let want: Vec<f64> = xv
                .chunks(cols)
                .flat_map(|row| op.eval_f64(row, &wv, &bv, eps))
                .collect();
            check(op.name(), &y, &want, 8.0);
            let mut inputs = vec![rec.array(&x), rec.array(&w)];
            if op.has_bias() {
                inputs.push(rec.array(&b));
            }
            let oy = rec.array(&y);
            rec.case(op.name(), dt, &inputs, &oy, r#""eps":1e-5"#);
        }
    }
    // Queries [B * H, T, D] with [T, D] tables.
    let (x, xv) = random::<G, T, B3>(&[8, 16, 64]);
    let (c, cv) = random::<G, T, M2>(&[16, 64]);
    let (s, sv) = random::<G, T, M2>(&[16, 64]);
    let y = x.rope(&c, &s).unwrap();
    let want: Vec<f64> = xv
        .chunks(64)
        .enumerate()
        .flat_map(|(r, row)| {
            let p = (r % 16) * 64;
            tensorfn_core::ops::rope::rope_f64(row, &cv[p..p + 64], &sv[p..p + 64])
        })
        .collect();
    check("rope", &y, &want, 4.0);
    let inputs = [rec.array(&x), rec.array(&c), rec.array(&s)];
    let oy = rec.array(&y);
    rec.case("rope", dt, &inputs, &oy, "");
}

/// The fused chains of the elementwise benchmarks, per device and dtype.
trait Chains<G: Device>: FloatDType {
    fn sin_affine(x: &Tensor<G, Self, V>) -> Result<Tensor<G, Self, V>>;
    fn gelu_tanh(x: &Tensor<G, Self, V>) -> Result<Tensor<G, Self, V>>;
    fn chain6(x: &Tensor<G, Self, V>, y: &Tensor<G, Self, V>) -> Result<Tensor<G, Self, V>>;
}

macro_rules! chains {
    ($dev:ident, $t:ident, $module:ident) => {
        mod $module {
            use tensorfn::prelude::*;

            tensor_fn! {
                pub fn sin_affine(x: &Tensor<$dev, $t, [N]>) -> Tensor<$dev, $t, [N]> {
                    sin(x) * 2.0 + 5.0
                }

                pub fn gelu_tanh(x: &Tensor<$dev, $t, [N]>) -> Tensor<$dev, $t, [N]> {
                    x * 0.5 * (tanh((x + x * x * x * 0.044715) * 0.7978846) + 1.0)
                }

                pub fn chain6(
                    x: &Tensor<$dev, $t, [N]>,
                    y: &Tensor<$dev, $t, [N]>,
                ) -> Tensor<$dev, $t, [N]> {
                    tanh(sigmoid(x * y + 1.0) * x) - y
                }
            }
        }

        impl Chains<$dev> for $t {
            fn sin_affine(x: &Tensor<$dev, $t, V>) -> Result<Tensor<$dev, $t, V>> {
                $module::sin_affine(x)
            }
            fn gelu_tanh(x: &Tensor<$dev, $t, V>) -> Result<Tensor<$dev, $t, V>> {
                $module::gelu_tanh(x)
            }
            fn chain6(
                x: &Tensor<$dev, $t, V>,
                y: &Tensor<$dev, $t, V>,
            ) -> Result<Tensor<$dev, $t, V>> {
                $module::chain6(x, y)
            }
        }
    };
}

chains!(Cuda, f32, cuda_f32);
chains!(Cuda, f16, cuda_f16);
chains!(Cuda, bf16, cuda_bf16);
chains!(Cpu, f32, cpu_f32);
chains!(Cpu, f16, cpu_f16);
chains!(Cpu, bf16, cpu_bf16);

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

fn fused<G: Device, T: Chains<G>>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let n = 100_003;
    let (x, xv) = random::<G, T, V>(&[n]);
    let x = x.mul_scalar(T::from_f64(4.0)).unwrap();
    let xv: Vec<f64> = xv.iter().map(|v| T::from_f64(v * 4.0).to_f64()).collect();
    let (y, yv) = random::<G, T, V>(&[n]);
    // Fused chains round once, at the end: within an ulp or so of the
    // output dtype (f32 transcendentals are good to about 3 f32 ulps).
    let k = if T::KIND.name() == "f32" { 16.0 } else { 1.0 };

    let z = T::sin_affine(&x).unwrap();
    let want: Vec<f64> = xv.iter().map(|v| v.sin() * 2.0 + 5.0).collect();
    check("sin(x) * 2 + 5", &z, &want, k);
    let (ix, oz) = (rec.array(&x), rec.array(&z));
    rec.case("sin_affine", dt, &[ix], &oz, "");

    let z = T::gelu_tanh(&x).unwrap();
    let c = T::from_f64(0.7978846).to_f64();
    let want: Vec<f64> = xv
        .iter()
        .map(|v| v * 0.5 * (((v + v * v * v * 0.044715) * c).tanh() + 1.0))
        .collect();
    check("gelu (tanh)", &z, &want, k);
    let (ix, oz) = (rec.array(&x), rec.array(&z));
    rec.case("gelu_tanh", dt, &[ix], &oz, "");

    let z = T::chain6(&x, &y).unwrap();
    let want: Vec<f64> = xv
        .iter()
        .zip(&yv)
        .map(|(a, b)| (sigmoid(a * b + 1.0) * a).tanh() - b)
        .collect();
    check("tanh(sigmoid(x*y + 1) * x) - y", &z, &want, k);
    let (ix, iy, oz) = (rec.array(&x), rec.array(&y), rec.array(&z));
    rec.case("chain6", dt, &[ix, iy], &oz, "");
}

/// The gradients of `layer_norm` and `rms_norm` (`dx`, `dweight`,
/// `dbias`), each a case against `torch.autograd.grad` of `F.layer_norm` /
/// `F.rms_norm` for the same `grad_output`.
fn norm_backwards<G: Device, T: FloatDType>(rec: &mut Recorder) {
    use tensorfn_core::ops::NormOp;
    let dt = T::KIND.name();
    let exact = |v: &[f64], dims: &[usize]| {
        Tensor::<Cpu, f64, M2>::from_vec_dims(v.to_vec(), dims).unwrap()
    };
    // A warp per row and a row past the registers, the mean far from 0.
    for (rows, cols) in [(64, 768), (3, 9000)] {
        let (x, xv) = random::<G, T, M2>(&[rows, cols]);
        let x = x.add_scalar(T::from_f64(3.0)).unwrap();
        let xv: Vec<f64> = xv.iter().map(|v| T::from_f64(v + 3.0).to_f64()).collect();
        let (w, wv) = random::<G, T, V>(&[cols]);
        let (b, _) = random::<G, T, V>(&[cols]);
        let (g, gv) = random::<G, T, M2>(&[rows, cols]);
        let (x64, g64) = (exact(&xv, &[rows, cols]), exact(&gv, &[rows, cols]));
        let w64 = Tensor::<Cpu, f64, V>::from_vec_dims(wv.clone(), &[cols]).unwrap();
        for op in NormOp::ALL {
            let eps = 1e-5;
            let (got, want) = match op {
                NormOp::LayerNorm => {
                    let (dx, dw, db) = x.layer_norm_backward(&w, &g, eps).unwrap();
                    let (ex, ew, eb) = x64.layer_norm_backward(&w64, &g64, eps).unwrap();
                    (
                        vec![dx.reshape_dims::<V>(&[rows * cols]).unwrap(), dw, db],
                        vec![
                            ex.to_vec().unwrap(),
                            ew.to_vec().unwrap(),
                            eb.to_vec().unwrap(),
                        ],
                    )
                }
                NormOp::RmsNorm => {
                    let (dx, dw) = x.rms_norm_backward(&w, &g, Some(eps)).unwrap();
                    let (ex, ew) = x64.rms_norm_backward(&w64, &g64, Some(eps)).unwrap();
                    (
                        vec![dx.reshape_dims::<V>(&[rows * cols]).unwrap(), dw],
                        vec![ex.to_vec().unwrap(), ew.to_vec().unwrap()],
                    )
                }
            };
            let mut inputs = vec![rec.array(&x), rec.array(&w)];
            if op.has_bias() {
                inputs.push(rec.array(&b));
            }
            inputs.push(rec.array(&g));
            let name = format!("{}_backward", op.name());
            for ((t, e), grad) in got.iter().zip(&want).zip(["dx", "dweight", "dbias"]) {
                // `dx` sums over a row, `dweight` and `dbias` over the rows.
                let terms = if grad == "dx" { cols } else { rows };
                check(&format!("{name} {grad}"), t, e, 8.0 + (terms as f64).sqrt());
                let out = if grad == "dx" {
                    rec.array(&t.reshape_dims::<M2>(&[rows, cols]).unwrap())
                } else {
                    rec.array(t)
                };
                let args = format!(r#""eps":1e-5,"grad":"{grad}""#);
                rec.case(&name, dt, &inputs, &out, &args);
            }
        }
    }
}

/// `batch_norm` over `[N, C, H, W]`, in training (the running statistics
/// updated: their new values are cases too) and in inference, and its
/// gradients (`dx`, `dweight`, `dbias`) in both modes, against the f64
/// CPU run and `F.batch_norm` / `torch.autograd.grad` on the same inputs.
fn batch_norms<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let (n, c, h, w) = (8, 16, 7, 7);
    let dims = [n, c, h, w];
    let (x, xv) = random::<G, T, B4>(&dims);
    // The mean far from 0, where a one-pass variance loses digits.
    let x = x.add_scalar(T::from_f64(3.0)).unwrap();
    let xv: Vec<f64> = xv.iter().map(|v| T::from_f64(v + 3.0).to_f64()).collect();
    let (g, gv) = random::<G, T, B4>(&dims);
    let (wt, wv) = random::<G, T, V>(&[c]);
    let (b, bv) = random::<G, T, V>(&[c]);
    let (rm, rmv) = random::<G, T, V>(&[c]);
    let (rv, rvv) = random::<G, T, V>(&[c]);
    let rv = rv.add_scalar(T::from_f64(2.0)).unwrap();
    let rvv: Vec<f64> = rvv.iter().map(|v| T::from_f64(v + 2.0).to_f64()).collect();
    let x64 = Tensor::<Cpu, f64, B4>::from_vec_dims(xv, &dims).unwrap();
    let g64 = Tensor::<Cpu, f64, B4>::from_vec_dims(gv, &dims).unwrap();
    let v64 = |v: &[f64]| Tensor::<Cpu, f64, V>::from_vec_dims(v.to_vec(), &[c]).unwrap();
    let (w64, b64) = (v64(&wv), v64(&bv));
    let flat = |t: &Tensor<G, T, B4>| t.reshape_dims::<V>(&[n * c * h * w]).unwrap();
    // Sums over N * H * W per channel.
    let k = 8.0 + ((n * h * w) as f64).sqrt();
    for training in [true, false] {
        let args = BatchNormArgs {
            training,
            ..BatchNormArgs::default()
        };
        let (mut m, mut v) = (rm.clone(), rv.clone());
        let (mut m64, mut v64_) = (v64(&rmv), v64(&rvv));
        let y = x
            .batch_norm(Some(&mut m), Some(&mut v), Some(&wt), Some(&b), args)
            .unwrap();
        let e = x64
            .batch_norm(
                Some(&mut m64),
                Some(&mut v64_),
                Some(&w64),
                Some(&b64),
                args,
            )
            .unwrap();
        let inputs = [
            rec.array(&x),
            rec.array(&rm),
            rec.array(&rv),
            rec.array(&wt),
            rec.array(&b),
        ];
        let what = format!("batch_norm training {training}");
        check(&what, &flat(&y), &e.to_vec().unwrap(), k);
        check(
            &format!("{what} running_mean"),
            &m,
            &m64.to_vec().unwrap(),
            k,
        );
        check(
            &format!("{what} running_var"),
            &v,
            &v64_.to_vec().unwrap(),
            k,
        );
        for (out, name) in [
            (rec.array(&y), "y"),
            (rec.array(&m), "running_mean"),
            (rec.array(&v), "running_var"),
        ] {
            let a = format!(r#""training":{training},"momentum":0.1,"eps":1e-5,"out":"{name}""#);
            rec.case("batch_norm", dt, &inputs, &out, &a);
        }
        let (dx, dw, db) = x
            .batch_norm_backward(Some(&rm), Some(&rv), Some(&wt), &g, args)
            .unwrap();
        let (ex, ew, eb) = x64
            .batch_norm_backward(Some(&v64(&rmv)), Some(&v64(&rvv)), Some(&w64), &g64, args)
            .unwrap();
        check(&format!("{what} dx"), &flat(&dx), &ex.to_vec().unwrap(), k);
        check(&format!("{what} dweight"), &dw, &ew.to_vec().unwrap(), k);
        check(&format!("{what} dbias"), &db, &eb.to_vec().unwrap(), k);
        let mut inputs = inputs.to_vec();
        inputs.push(rec.array(&g));
        for (out, grad) in [
            (rec.array(&dx), "dx"),
            (rec.array(&dw), "dweight"),
            (rec.array(&db), "dbias"),
        ] {
            let a = format!(r#""training":{training},"momentum":0.1,"eps":1e-5,"grad":"{grad}""#);
            rec.case("batch_norm_backward", dt, &inputs, &out, &a);
        }
    }
}

/// The gradients of `scaled_dot_product_attention` (`dq`, `dk`, `dv`),
/// causal and not, `L != S`, lengths that are not multiples of a block,
/// each a case against `torch.autograd.grad` of
/// `F.scaled_dot_product_attention` for the same `grad_output`.
fn attention_backwards<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let exact = |v: &[f64], dims: &[usize]| {
        Tensor::<Cpu, f64, B4>::from_vec_dims(v.to_vec(), dims).unwrap()
    };
    for ([b, h, l, s, e], causal) in [([1, 2, 77, 77, 64], true), ([2, 2, 45, 93, 128], false)] {
        let (q, qv) = random::<G, T, B4>(&[b, h, l, e]);
        let (k, kv) = random::<G, T, B4>(&[b, h, s, e]);
        let (v, vv) = random::<G, T, B4>(&[b, h, s, e]);
        let (g, gv) = random::<G, T, B4>(&[b, h, l, e]);
        let args = || tensorfn::AttentionArgs::new().is_causal(causal);
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<B4, B3>(&k, &v, args())
            .unwrap();
        let got = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, args())
            .unwrap();
        let (q64, k64, v64, g64) = (
            exact(&qv, &[b, h, l, e]),
            exact(&kv, &[b, h, s, e]),
            exact(&vv, &[b, h, s, e]),
            exact(&gv, &[b, h, l, e]),
        );
        let args64 = || tensorfn::AttentionArgs::new().is_causal(causal);
        let (y64, lse64) = q64
            .scaled_dot_product_attention_with_lse_dims::<B4, B3>(&k64, &v64, args64())
            .unwrap();
        let want = q64
            .scaled_dot_product_attention_backward_dims(&k64, &v64, &y64, &g64, &lse64, args64())
            .unwrap();
        let inputs = vec![rec.array(&q), rec.array(&k), rec.array(&v), rec.array(&g)];
        for (t, e64, grad) in [
            (&got.0, &want.0, "dq"),
            (&got.1, &want.1, "dk"),
            (&got.2, &want.2, "dv"),
        ] {
            // Each gradient sums over the keys or the queries; the 16-bit
            // output and gradient round `D = dO . O` too.
            let terms = l.max(s) + e;
            check(
                &format!("attention_backward {grad}"),
                t,
                &e64.to_vec().unwrap(),
                8.0 + (terms as f64).sqrt(),
            );
            let out = rec.array(t);
            let args = format!(r#""causal":{causal},"grad":"{grad}""#);
            rec.case("attention_backward", dt, &inputs, &out, &args);
        }
    }
}

/// Grouped-query `scaled_dot_product_attention` (`enable_gqa`: keys and
/// values of fewer heads than the query), forward and gradients, causal
/// and not, head dims 64 and 128 (the GPU's tensor-core path in f16 and
/// bf16), against the f64 attention of keys and values repeated per
/// group here and `F.scaled_dot_product_attention(.., enable_gqa=True)`
/// in PyTorch.
fn grouped_attentions<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let exact = |v: &[f64], dims: &[usize]| {
        Tensor::<Cpu, f64, B4>::from_vec_dims(v.to_vec(), dims).unwrap()
    };
    for ([b, h, hkv, l, s, e], causal) in [
        ([1, 8, 2, 77, 77, 64], true),
        ([2, 6, 3, 45, 93, 128], false),
        ([1, 4, 1, 33, 40, 64], true),
    ] {
        let (q, qv) = random::<G, T, B4>(&[b, h, l, e]);
        let (k, kv) = random::<G, T, B4>(&[b, hkv, s, e]);
        let (v, vv) = random::<G, T, B4>(&[b, hkv, s, e]);
        let (g, gv) = random::<G, T, B4>(&[b, h, l, e]);
        let args = || {
            tensorfn::AttentionArgs::new()
                .is_causal(causal)
                .enable_gqa(true)
        };
        let y = q
            .scaled_dot_product_attention_dims::<B4>(&k, &v, args())
            .unwrap();
        let (y2, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<B4, B3>(&k, &v, args())
            .unwrap();
        let grads = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &y2, &g, &lse, args())
            .unwrap();
        // The reference: each key and value head repeated for its group.
        let (q64, g64) = (exact(&qv, &[b, h, l, e]), exact(&gv, &[b, h, l, e]));
        let rep = |x: &[f64]| {
            exact(x, &[b, hkv, s, e])
                .repeat_interleave::<B4>(h / hkv, 1)
                .unwrap()
        };
        let (k64, v64) = (rep(&kv), rep(&vv));
        let args64 = || tensorfn::AttentionArgs::new().is_causal(causal);
        let (y64, lse64) = q64
            .scaled_dot_product_attention_with_lse_dims::<B4, B3>(&k64, &v64, args64())
            .unwrap();
        let (dq64, dk64, dv64) = q64
            .scaled_dot_product_attention_backward_dims(&k64, &v64, &y64, &g64, &lse64, args64())
            .unwrap();
        // The repeated heads' gradients summed over each group.
        let group_sum = |x: Tensor<Cpu, f64, B4>| -> Vec<f64> {
            let x = x.to_vec().unwrap();
            let per = s * e;
            let mut out = vec![0.0; b * hkv * per];
            for bi in 0..b {
                for hi in 0..h {
                    let (src, dst) = ((bi * h + hi) * per, (bi * hkv + hi / (h / hkv)) * per);
                    for t in 0..per {
                        out[dst + t] += x[src + t];
                    }
                }
            }
            out
        };
        let want = y64.to_vec().unwrap();
        check("attention enable_gqa", &y, &want, 8.0);
        check("attention enable_gqa (with lse)", &y2, &want, 8.0);
        let inputs = vec![rec.array(&q), rec.array(&k), rec.array(&v)];
        let out = rec.array(&y);
        rec.case(
            "attention",
            dt,
            &inputs,
            &out,
            &format!(r#""causal":{causal},"enable_gqa":true"#),
        );
        let inputs = vec![rec.array(&q), rec.array(&k), rec.array(&v), rec.array(&g)];
        let terms = (l.max(s) + e) as f64 * (h / hkv) as f64;
        for (t, e64, grad) in [
            (&grads.0, dq64.to_vec().unwrap(), "dq"),
            (&grads.1, group_sum(dk64), "dk"),
            (&grads.2, group_sum(dv64), "dv"),
        ] {
            check(
                &format!("attention_backward enable_gqa {grad}"),
                t,
                &e64,
                8.0 + terms.sqrt(),
            );
            let out = rec.array(t);
            let args = format!(r#""causal":{causal},"enable_gqa":true,"grad":"{grad}""#);
            rec.case("attention_backward", dt, &inputs, &out, &args);
        }
    }
}

/// `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d` and their input
/// gradients, against the f64 pooling (and, in PyTorch, `F.max_pool2d`,
/// ... and `torch.autograd.grad` for the same `grad_output`). `dropout` is
/// not compared: its masks are drawn by its own generator, not PyTorch's.
fn pools<G: Device, T: FloatDType>(rec: &mut Recorder) {
    use tensorfn::{Pool2d, PoolKind};
    let dt = T::KIND.name();
    let dims = [2usize, 3, 11, 10];
    let (x, xv) = random::<G, T, B4>(&dims);
    let x64 = Tensor::<Cpu, f64, B4>::from_vec_dims(xv, &dims).unwrap();
    for p in [
        Pool2d::max(2),
        Pool2d::max(3).stride(2).padding(1).ceil_mode(true),
        Pool2d::max([3, 2]).stride(1).dilation([2, 3]),
        Pool2d::avg(3).stride(2).padding(1),
        Pool2d::avg(3)
            .stride(2)
            .padding(1)
            .ceil_mode(true)
            .count_include_pad(false),
        Pool2d::avg(2).divisor_override(3),
        Pool2d::adaptive_avg([4, 3]),
        Pool2d::adaptive_avg(1),
    ] {
        let name = p.kind.name();
        let y = x.pool2d::<B4>(p).unwrap();
        let want = x64.pool2d::<B4>(p).unwrap();
        check(name, &y, &want.to_vec().unwrap(), 2.0);
        let (g, gv) = random::<G, T, B4>(y.dims());
        let g64 = Tensor::<Cpu, f64, B4>::from_vec_dims(gv, y.dims()).unwrap();
        let dx = x.pool2d_backward(&g, p).unwrap();
        let want_dx = x64.pool2d_backward(&g64, p).unwrap();
        check(
            &format!("{name}_backward"),
            &dx,
            &want_dx.to_vec().unwrap(),
            4.0,
        );
        let pair = |v: [usize; 2]| format!("[{},{}]", v[0], v[1]);
        let args = match p.kind {
            PoolKind::AdaptiveAvg => format!(r#""output_size":{}"#, pair(p.output_size)),
            _ => format!(
                r#""kernel_size":{},"stride":{},"padding":{},"dilation":{},"ceil_mode":{},"count_include_pad":{},"divisor_override":{}"#,
                pair(p.kernel_size),
                pair(p.stride),
                pair(p.padding),
                pair(p.dilation),
                p.ceil_mode,
                p.count_include_pad,
                p.divisor_override
                    .map_or("null".to_string(), |d| d.to_string())
            ),
        };
        let (xa, ya, ga, da) = (rec.array(&x), rec.array(&y), rec.array(&g), rec.array(&dx));
        rec.case(name, dt, std::slice::from_ref(&xa), &ya, &args);
        rec.case(&format!("{name}_backward"), dt, &[xa, ga], &da, &args);
    }
}

/// `index_add`, `scatter_add` and `embedding`'s gradient (the
/// `index_add` of the gradient rows into zeros that `#[grad]` derives),
/// with many repeated indices, against f64 sums.
fn index_adds<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    // Indices as exact small integers (every float dtype holds them).
    let ids = |n: usize, below: usize| -> (Vec<i64>, Vec<f64>) {
        let (u, _) = random::<Cpu, f64, V>(&[n]);
        let k: Vec<i64> = u
            .to_vec()
            .unwrap()
            .iter()
            .map(|&v| (((v + 1.0) / 2.0 * below as f64) as i64).min(below as i64 - 1))
            .collect();
        let f = k.iter().map(|&i| i as f64).collect();
        (k, f)
    };
    let (rows, cols, n) = (48, 64, 700);
    let (x, xv) = random::<G, T, M2>(&[rows, cols]);
    let (src, sv) = random::<G, T, M2>(&[n, cols]);
    let (k, kf) = ids(n, rows);
    let idx = Tensor::<Cpu, i64, V>::from_vec_dims(k.clone(), &[n])
        .unwrap()
        .to_device::<G>()
        .unwrap();
    let idx_f = Tensor::<Cpu, f64, V>::from_vec_dims(kf, &[n]).unwrap();
    // index_add along dim 0 with alpha, and the embedding gradient.
    let got = x.index_add::<0>(&idx, &src, 0.5).unwrap();
    let mut want = xv.clone();
    let mut grad = vec![0.0; rows * cols];
    for (j, &r) in k.iter().enumerate() {
        for c in 0..cols {
            want[r as usize * cols + c] += 0.5 * sv[j * cols + c];
            grad[r as usize * cols + c] += sv[j * cols + c];
        }
    }
    let terms = (n / rows) as f64;
    check("index_add", &got, &want, 4.0 + terms);
    let inputs = [rec.array(&x), rec.array(&idx_f), rec.array(&src)];
    let out = rec.array(&got);
    rec.case("index_add", dt, &inputs, &out, r#""dim":0,"alpha":0.5"#);
    let zeros = Tensor::<G, T, M2>::zeros_dims(&[rows, cols]).unwrap();
    let got = zeros.index_add::<0>(&idx, &src, 1.0).unwrap();
    check("embedding gradient", &got, &grad, 4.0 + terms);
    let ids_2d = idx_f.reshape_dims::<M2>(&[7, n / 7]).unwrap();
    let g3 = src.reshape_dims::<B3>(&[7, n / 7, cols]).unwrap();
    let inputs = [rec.array(&ids_2d), rec.array(&x), rec.array(&g3)];
    let out = rec.array(&got);
    rec.case("embedding_backward", dt, &inputs, &out, "");
    // scatter_add along dim 1: an index narrower than `src`.
    let (k, kf) = ids(rows * 100, cols);
    let (src, sv) = random::<G, T, M2>(&[rows, 120]);
    let idx = Tensor::<Cpu, i64, M2>::from_vec_dims(k.clone(), &[rows, 100])
        .unwrap()
        .to_device::<G>()
        .unwrap();
    let idx_f = Tensor::<Cpu, f64, M2>::from_vec_dims(kf, &[rows, 100]).unwrap();
    let got = x.scatter_add::<1>(&idx, &src).unwrap();
    let mut want = xv.clone();
    for (p, &c) in k.iter().enumerate() {
        let (r, j) = (p / 100, p % 100);
        want[r * cols + c as usize] += sv[r * 120 + j];
    }
    check("scatter_add", &got, &want, 4.0 + 100.0 / cols as f64);
    let inputs = [rec.array(&x), rec.array(&idx_f), rec.array(&src)];
    let out = rec.array(&got);
    rec.case("scatter_add", dt, &inputs, &out, r#""dim":1"#);
}

/// A few AdamW and SGD-with-momentum steps on one parameter tensor, from
/// the same parameters and gradients as `torch.optim.AdamW` / `SGD` get.
fn optimizers<G: Device, T: FloatDType>(rec: &mut Recorder) {
    let dt = T::KIND.name();
    let (n, steps) = (40_000, 5);
    let (p0, p0v) = random::<G, T, V>(&[n]);
    let grads: Vec<(Tensor<G, T, V>, Vec<f64>)> =
        (0..steps).map(|_| random::<G, T, V>(&[n])).collect();
    let all: Vec<T> = grads
        .iter()
        .flat_map(|(_, v)| v.iter().map(|&x| T::from_f64(x)))
        .collect();
    let stacked = Tensor::<Cpu, T, M2>::from_vec_dims(all, &[steps, n])
        .unwrap()
        .to_device::<G>()
        .unwrap();

    let c = AdamWConfig {
        lr: 1e-2,
        weight_decay: 0.1,
        ..Default::default()
    };
    let mut p = p0.clone();
    let mut opt = AdamW::new(&p, c).unwrap();
    for (g, _) in &grads {
        opt.step(&mut p, g).unwrap();
    }
    let (mut want, mut m, mut v) = (p0v.clone(), vec![0.0; n], vec![0.0; n]);
    for (t, (_, g)) in grads.iter().enumerate() {
        let t = (t + 1) as f64;
        let (b1, b2) = c.betas;
        for i in 0..n {
            want[i] *= 1.0 - c.lr * c.weight_decay;
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            let denom = v[i].sqrt() / (1.0 - b2.powf(t)).sqrt() + c.eps;
            want[i] -= c.lr / (1.0 - b1.powf(t)) * m[i] / denom;
        }
    }
    // f32 state and master weights: a few roundings of the result.
    check("AdamW, 5 steps", &p, &want, 8.0);
    let (ip, ig, op) = (rec.array(&p0), rec.array(&stacked), rec.array(&p));
    let args = format!(
        r#""lr":{:?},"beta1":{:?},"beta2":{:?},"eps":{:?},"weight_decay":{:?},"amsgrad":false"#,
        c.lr, c.betas.0, c.betas.1, c.eps, c.weight_decay
    );
    rec.case("adamw", dt, &[ip, ig], &op, &args);

    let c = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
        ..Default::default()
    };
    let mut p = p0.clone();
    let mut opt = Sgd::new(&p, c).unwrap();
    for (g, _) in &grads {
        opt.step(&mut p, g).unwrap();
    }
    let (mut want, mut buf) = (p0v.clone(), vec![0.0; n]);
    for (t, (_, g)) in grads.iter().enumerate() {
        for i in 0..n {
            let d = g[i] + c.weight_decay * want[i];
            buf[i] = if t == 0 { d } else { c.momentum * buf[i] + d };
            want[i] -= c.lr * buf[i];
        }
    }
    // The parameter is rounded to its dtype every step.
    check("SGD with momentum, 5 steps", &p, &want, 8.0);
    let (ip, ig, op) = (rec.array(&p0), rec.array(&stacked), rec.array(&p));
    let args = format!(
        r#""lr":{:?},"momentum":{:?},"dampening":0.0,"weight_decay":{:?},"nesterov":false"#,
        c.lr, c.momentum, c.weight_decay
    );
    rec.case("sgd", dt, &[ip, ig], &op, &args);
}

/// `conv2d` (stride, padding, dilation, groups, a bias) and its three
/// gradients, each a case against `F.conv2d` and `torch.autograd.grad` of
/// it for the same `grad_output`.
fn convs<G: Device, T: FloatDType>(rec: &mut Recorder) {
    use tensorfn::ConvArgs;
    type S4 = shape![_, _, _, _];
    let dt = T::KIND.name();
    let exact4 = |v: &[f64], dims: &[usize]| {
        Tensor::<Cpu, f64, S4>::from_vec_dims(v.to_vec(), dims).unwrap()
    };
    // A ResNet-like 3x3 with groups, and a strided, dilated 5x3.
    let cases = [
        (
            [4, 16, 14, 14],
            [32, 8, 3, 3],
            ConvArgs {
                padding: [1, 1],
                groups: 2,
                ..Default::default()
            },
        ),
        (
            [2, 3, 17, 12],
            [8, 3, 5, 3],
            ConvArgs {
                stride: [2, 1],
                padding: [2, 0],
                dilation: [1, 2],
                groups: 1,
            },
        ),
    ];
    for (xd, wd, a) in cases {
        let (x, xv) = random::<G, T, S4>(&xd);
        let (w, wv) = random::<G, T, S4>(&wd);
        let (b, bv) = random::<G, T, V>(&[wd[0]]);
        let (x64, w64) = (exact4(&xv, &xd), exact4(&wv, &wd));
        let b64 = Tensor::<Cpu, f64, V>::from_vec_dims(bv, &[wd[0]]).unwrap();
        let y = x.conv2d::<S4, _, _, _, _>(&w, Some(&b), a).unwrap();
        let want: Tensor<Cpu, f64, S4> = x64.conv2d(&w64, Some(&b64), a).unwrap();
        let terms = (wd[1] * wd[2] * wd[3]) as f64;
        check("conv2d", &y, &want.to_vec().unwrap(), 8.0 + terms.sqrt());
        let args = format!(
            r#""stride":{:?},"padding":{:?},"dilation":{:?},"groups":{}"#,
            a.stride, a.padding, a.dilation, a.groups
        );
        let inputs = [rec.array(&x), rec.array(&w), rec.array(&b)];
        let out = rec.array(&y);
        rec.case("conv2d", dt, &inputs, &out, &args);
        let (g, gv) = random::<G, T, S4>(y.dims());
        let g64 = exact4(&gv, y.dims());
        let (dx, dw, db) = x.conv2d_backward(&w, &g, a).unwrap();
        let (ex, ew, eb) = x64.conv2d_backward(&w64, &g64, a).unwrap();
        let inputs = [rec.array(&x), rec.array(&w), rec.array(&b), rec.array(&g)];
        let per_out = (y.dims()[0] * y.dims()[2] * y.dims()[3]) as f64;
        let dxv = dx.reshape_dims::<V>(&[dx.dims().iter().product()]).unwrap();
        let dwv = dw.reshape_dims::<V>(&[dw.dims().iter().product()]).unwrap();
        check(
            "conv2d_backward dx",
            &dxv,
            &ex.to_vec().unwrap(),
            8.0 + (wd[0] as f64 * terms).sqrt(),
        );
        check(
            "conv2d_backward dweight",
            &dwv,
            &ew.to_vec().unwrap(),
            8.0 + per_out.sqrt(),
        );
        check(
            "conv2d_backward dbias",
            &db,
            &eb.to_vec().unwrap(),
            8.0 + per_out.sqrt(),
        );
        for (out, grad) in [
            (rec.array(&dx), "dx"),
            (rec.array(&dw), "dweight"),
            (rec.array(&db), "dbias"),
        ] {
            rec.case(
                "conv2d_backward",
                dt,
                &inputs,
                &out,
                &format!(r#"{args},"grad":"{grad}""#),
            );
        }
    }
}

fn all_cases<G: Device>(device: &str)
where
    f32: Chains<G>,
    f16: Chains<G>,
    bf16: Chains<G>,
{
    let mut rec = Recorder::new(device);
    products::<G, f64>(&mut rec);
    products::<G, f32>(&mut rec);
    products::<G, f16>(&mut rec);
    products::<G, bf16>(&mut rec);
    joins::<G, f32>(&mut rec);
    joins::<G, f16>(&mut rec);
    joins::<G, bf16>(&mut rec);
    softmaxes::<G, f32>(&mut rec);
    softmaxes::<G, f16>(&mut rec);
    softmaxes::<G, bf16>(&mut rec);
    norms::<G, f32>(&mut rec);
    norms::<G, f16>(&mut rec);
    norms::<G, bf16>(&mut rec);
    norm_backwards::<G, f64>(&mut rec);
    norm_backwards::<G, f32>(&mut rec);
    norm_backwards::<G, f16>(&mut rec);
    norm_backwards::<G, bf16>(&mut rec);
    batch_norms::<G, f64>(&mut rec);
    batch_norms::<G, f32>(&mut rec);
    batch_norms::<G, f16>(&mut rec);
    batch_norms::<G, bf16>(&mut rec);
    attention_backwards::<G, f64>(&mut rec);
    attention_backwards::<G, f32>(&mut rec);
    attention_backwards::<G, f16>(&mut rec);
    attention_backwards::<G, bf16>(&mut rec);
    grouped_attentions::<G, f64>(&mut rec);
    grouped_attentions::<G, f32>(&mut rec);
    grouped_attentions::<G, f16>(&mut rec);
    grouped_attentions::<G, bf16>(&mut rec);
    pools::<G, f64>(&mut rec);
    pools::<G, f32>(&mut rec);
    pools::<G, f16>(&mut rec);
    pools::<G, bf16>(&mut rec);
    convs::<G, f64>(&mut rec);
    convs::<G, f32>(&mut rec);
    convs::<G, f16>(&mut rec);
    convs::<G, bf16>(&mut rec);
    fused::<G, f32>(&mut rec);
    fused::<G, f16>(&mut rec);
    fused::<G, bf16>(&mut rec);
    index_adds::<G, f64>(&mut rec);
    index_adds::<G, f32>(&mut rec);
    index_adds::<G, f16>(&mut rec);
    index_adds::<G, bf16>(&mut rec);
    optimizers::<G, f64>(&mut rec);
    optimizers::<G, f32>(&mut rec);
    optimizers::<G, f16>(&mut rec);
    optimizers::<G, bf16>(&mut rec);
}

#[test]
fn on_the_gpu_against_f64_references() {
    if let Err(e) = tensorfn::cuda_device_count() {
        eprintln!("skipping: no CUDA device ({e})");
        return;
    }
    all_cases::<Cuda>("cuda");
}

#[test]
fn on_the_cpu_against_f64_references() {
    all_cases::<Cpu>("cpu");
}
