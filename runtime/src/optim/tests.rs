//! The optimizers against f64 references of PyTorch's formulas, on fresh
//! random parameters and gradients of every float dtype, and their edge
//! cases.

use super::*;
use crate::{shape, Cpu, Cuda, Device, Params, Tensor};
use std::time::{SystemTime, UNIX_EPOCH};

type V<T> = Vec<Tensor<Cpu, T, shape![_]>>;
type VD<D, T> = Vec<Tensor<D, T, shape![_]>>;

/// A seed that differs from run to run (printed by failing asserts).
fn fresh_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// splitmix64 normal samples.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.next().max(1e-300), self.next());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// Sizes: empty, small, and more than one chunk of the parallel loop.
const SIZES: [usize; 4] = [0, 7, CHUNK + 13, 300];

fn tensors<T: DType>(vals: &[Vec<f64>]) -> V<T> {
    tensors_on::<Cpu, T>(vals)
}

fn tensors_on<D: Device, T: DType>(vals: &[Vec<f64>]) -> VD<D, T> {
    vals.iter()
        .map(|v| {
            Tensor::from_vec_dims(v.iter().map(|&x| T::from_f64(x)).collect(), &[v.len()]).unwrap()
        })
        .collect()
}

fn read<D: Device, T: DType>(p: &VD<D, T>) -> Vec<Vec<f64>> {
    p.iter()
        .map(|t| t.to_vec().unwrap().iter().map(|x| x.to_f64()).collect())
        .collect()
}

/// The values as `T` holds them.
fn rounded<T: DType>(vals: &[Vec<f64>]) -> Vec<Vec<f64>> {
    vals.iter()
        .map(|v| v.iter().map(|&x| T::from_f64(x).to_f64()).collect())
        .collect()
}

/// `torch.optim.AdamW`'s update in f64, one tensor.
struct RefAdamW {
    m: Vec<f64>,
    v: Vec<f64>,
    vmax: Vec<f64>,
}
impl RefAdamW {
    fn new(n: usize) -> Self {
        RefAdamW {
            m: vec![0.0; n],
            v: vec![0.0; n],
            vmax: vec![0.0; n],
        }
    }
    fn step(&mut self, c: &AdamWConfig, t: u64, p: &mut [f64], g: &[f64]) {
        let (b1, b2) = c.betas;
        let bc1 = 1.0 - b1.powf(t as f64);
        let bc2 = 1.0 - b2.powf(t as f64);
        for i in 0..p.len() {
            let g = if c.maximize { -g[i] } else { g[i] };
            p[i] *= 1.0 - c.lr * c.weight_decay;
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g;
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g * g;
            let second = if c.amsgrad {
                self.vmax[i] = self.vmax[i].max(self.v[i]);
                self.vmax[i]
            } else {
                self.v[i]
            };
            let denom = second.sqrt() / bc2.sqrt() + c.eps;
            p[i] -= c.lr / bc1 * self.m[i] / denom;
        }
    }
}

/// `torch.optim.SGD`'s update in f64, one tensor.
fn ref_sgd(c: &SgdConfig, first: bool, buf: &mut [f64], p: &mut [f64], g: &[f64]) {
    for i in 0..p.len() {
        let mut d = if c.maximize { -g[i] } else { g[i] };
        d += c.weight_decay * p[i];
        if c.momentum != 0.0 {
            buf[i] = if first {
                d
            } else {
                c.momentum * buf[i] + (1.0 - c.dampening) * d
            };
            d = if c.nesterov {
                d + c.momentum * buf[i]
            } else {
                buf[i]
            };
        }
        p[i] -= c.lr * d;
    }
}

/// Asserts `got` is within `tol * (1 + |want|)` of `want`.
fn close(what: &str, got: &[Vec<f64>], want: &[Vec<f64>], tol: f64) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{what}: tensor {k} element {i}: {a} vs reference {b}"
            );
        }
    }
}

/// The tolerance of `T` after `steps` steps: the parameter is rounded to
/// `T` each step (no master weights) or once (master weights), the state
/// to f32.
fn tol<T: DType>(steps: usize, master: bool) -> f64 {
    let eps = match T::KIND {
        DTypeKind::F64 => 1e-13,
        DTypeKind::F32 => 2e-6,
        DTypeKind::F16 => 1e-3,
        _ => 8e-3,
    };
    match (T::KIND, master) {
        (DTypeKind::F16 | DTypeKind::BF16, true) => eps,
        _ => eps * steps as f64,
    }
}

fn adamw_case<D: Device, T: DType>(c: AdamWConfig, seed: u64) {
    let mut rng = Rng(seed);
    let init: Vec<Vec<f64>> = SIZES.iter().map(|&n| rng.vec(n)).collect();
    let mut p = tensors_on::<D, T>(&init);
    let mut want = rounded::<T>(&init);
    let mut refs: Vec<RefAdamW> = SIZES.iter().map(|&n| RefAdamW::new(n)).collect();
    let mut opt = AdamW::new(&p, c).unwrap();
    let steps = 5;
    for t in 1..=steps {
        let g: Vec<Vec<f64>> = rounded::<T>(&SIZES.iter().map(|&n| rng.vec(n)).collect::<Vec<_>>());
        opt.step(&mut p, &tensors_on::<D, T>(&g)).unwrap();
        for ((r, w), g) in refs.iter_mut().zip(&mut want).zip(&g) {
            r.step(&c, t, w, g);
        }
    }
    let master = c.master_weights && matches!(T::KIND, DTypeKind::F16 | DTypeKind::BF16);
    close(
        &format!("AdamW {} {:?} {c:?} seed {seed}", D::KIND, T::KIND),
        &read(&p),
        &want,
        tol::<T>(steps as usize, master),
    );
    assert_eq!(opt.steps(), steps);
}

fn adamw_all<D: Device, T: DType>() {
    let seed = fresh_seed();
    let base = AdamWConfig {
        lr: 1e-2,
        ..Default::default()
    };
    adamw_case::<D, T>(base, seed);
    adamw_case::<D, T>(
        AdamWConfig {
            weight_decay: 0.1,
            amsgrad: true,
            maximize: true,
            betas: (0.8, 0.99),
            eps: 1e-6,
            ..base
        },
        seed ^ 1,
    );
    adamw_case::<D, T>(
        AdamWConfig {
            master_weights: false,
            weight_decay: 0.0,
            ..base
        },
        seed ^ 2,
    );
}

#[test]
fn adamw_matches_reference_f32() {
    adamw_all::<Cpu, f32>();
}

#[test]
fn adamw_matches_reference_f64() {
    adamw_all::<Cpu, f64>();
}

#[test]
fn adamw_matches_reference_f16() {
    adamw_all::<Cpu, half::f16>();
}

#[test]
fn adamw_matches_reference_bf16() {
    adamw_all::<Cpu, half::bf16>();
}

/// Master weights keep updates below a bf16 step: without them the
/// parameter does not move.
#[test]
fn adamw_master_weights_accumulate_small_updates() {
    let c = AdamWConfig {
        lr: 1e-4,
        weight_decay: 0.0,
        ..Default::default()
    };
    let g = tensors::<half::bf16>(&[vec![1.0; 4]]);
    for master in [true, false] {
        let mut p = tensors::<half::bf16>(&[vec![1.0; 4]]);
        let mut opt = AdamW::new(
            &p,
            AdamWConfig {
                master_weights: master,
                ..c
            },
        )
        .unwrap();
        for _ in 0..100 {
            opt.step(&mut p, &g).unwrap();
        }
        let v = read(&p)[0][0];
        // 100 steps of about 1e-4: 0.99 as f32, rounded to bf16 (0.98828125 or 0.9921875).
        match master {
            true => assert!((v - 0.99).abs() < 4e-3, "{v}"),
            false => assert_eq!(v, 1.0),
        }
    }
}

fn sgd_case<D: Device, T: DType>(c: SgdConfig, seed: u64) {
    let mut rng = Rng(seed);
    let init: Vec<Vec<f64>> = SIZES.iter().map(|&n| rng.vec(n)).collect();
    let mut p = tensors_on::<D, T>(&init);
    let mut want = rounded::<T>(&init);
    let mut bufs: Vec<Vec<f64>> = SIZES.iter().map(|&n| vec![0.0; n]).collect();
    let mut opt = Sgd::new(&p, c).unwrap();
    let steps = 5;
    for t in 0..steps {
        let g = rounded::<T>(&SIZES.iter().map(|&n| rng.vec(n)).collect::<Vec<_>>());
        opt.step(&mut p, &tensors_on::<D, T>(&g)).unwrap();
        for ((b, w), g) in bufs.iter_mut().zip(&mut want).zip(&g) {
            ref_sgd(&c, t == 0, b, w, g);
        }
    }
    close(
        &format!("SGD {} {:?} {c:?} seed {seed}", D::KIND, T::KIND),
        &read(&p),
        &want,
        tol::<T>(steps, false),
    );
}

fn sgd_all<D: Device, T: DType>() {
    let seed = fresh_seed();
    let base = SgdConfig {
        lr: 0.05,
        ..Default::default()
    };
    sgd_case::<D, T>(base, seed);
    sgd_case::<D, T>(
        SgdConfig {
            momentum: 0.9,
            dampening: 0.1,
            weight_decay: 0.01,
            ..base
        },
        seed ^ 1,
    );
    sgd_case::<D, T>(
        SgdConfig {
            momentum: 0.9,
            nesterov: true,
            maximize: true,
            ..base
        },
        seed ^ 2,
    );
}

#[test]
fn sgd_matches_reference_f32() {
    sgd_all::<Cpu, f32>();
}

#[test]
fn sgd_matches_reference_f64() {
    sgd_all::<Cpu, f64>();
}

#[test]
fn sgd_matches_reference_f16() {
    sgd_all::<Cpu, half::f16>();
}

#[test]
fn sgd_matches_reference_bf16() {
    sgd_all::<Cpu, half::bf16>();
}

#[test]
fn zero_grads_only_decay() {
    let mut p = tensors::<f32>(&[vec![2.0, -4.0]]);
    let g = tensors::<f32>(&[vec![0.0, 0.0]]);
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            lr: 0.1,
            weight_decay: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &g).unwrap();
    assert_eq!(read(&p), rounded::<f32>(&[vec![2.0 * 0.95, -4.0 * 0.95]]));
    let mut opt = Sgd::new(&p, SgdConfig::default()).unwrap();
    let before = read(&p);
    opt.step(&mut p, &g).unwrap();
    assert_eq!(read(&p), before);
}

/// A NaN gradient makes its own element NaN, as in PyTorch, and no other.
#[test]
fn nan_grads_propagate() {
    let g = tensors::<f32>(&[vec![f32::NAN as f64, 1.0]]);
    let mut p = tensors::<f32>(&[vec![1.0, 1.0]]);
    let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    opt.step(&mut p, &g).unwrap();
    let v = read(&p)[0].clone();
    assert!(v[0].is_nan() && v[1].is_finite(), "{v:?}");
    let mut p = tensors::<half::bf16>(&[vec![1.0, 1.0]]);
    let mut opt = Sgd::new(
        &p,
        SgdConfig {
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &tensors(&[vec![f64::NAN, 1.0]])).unwrap();
    let v = read(&p)[0].clone();
    assert!(v[0].is_nan() && v[1].is_finite(), "{v:?}");
}

#[test]
fn mismatched_params_are_errors_naming_them() {
    let mut p = tensors::<f32>(&[vec![1.0; 2], vec![1.0; 3]]);
    let mut opt = AdamW::new(&p, AdamWConfig::default()).unwrap();
    // A gradient of other dims.
    let e = opt
        .step(&mut p, &tensors(&[vec![1.0; 2], vec![1.0; 4]]))
        .unwrap_err();
    assert!(e.to_string().contains("gradient `1`"), "{e}");
    // A `Vec` of another length.
    let e = opt.step(&mut p, &tensors(&[vec![1.0; 2]])).unwrap_err();
    assert!(e.to_string().contains("the gradients have no `1`"), "{e}");
    // Parameters that changed since the optimizer was made.
    let mut q = tensors::<f32>(&[vec![1.0; 2], vec![1.0; 5]]);
    let e = opt
        .step(&mut q, &tensors(&[vec![1.0; 2], vec![1.0; 5]]))
        .unwrap_err();
    assert!(e.to_string().contains("parameter `1`"), "{e}");
    // Nothing was updated by the failed steps.
    assert_eq!(opt.steps(), 0);
    assert_eq!(read(&p), vec![vec![1.0; 2], vec![1.0; 3]]);
}

#[test]
fn invalid_settings_are_errors() {
    let p = tensors::<f32>(&[vec![1.0]]);
    let sgd = |c: SgdConfig| Sgd::new(&p, c).unwrap_err().to_string();
    assert!(sgd(SgdConfig {
        nesterov: true,
        momentum: 0.9,
        dampening: 0.1,
        ..Default::default()
    })
    .contains("dampening = 0.1"));
    assert!(sgd(SgdConfig {
        momentum: -0.1,
        ..Default::default()
    })
    .contains("momentum = -0.1"));
    assert!(sgd(SgdConfig {
        weight_decay: f64::NAN,
        ..Default::default()
    })
    .contains("weight_decay"));
    let adam = |c: AdamWConfig| AdamW::new(&p, c).unwrap_err().to_string();
    assert!(adam(AdamWConfig {
        eps: -1.0,
        ..Default::default()
    })
    .contains("eps = -1"));
    assert!(adam(AdamWConfig {
        betas: (-0.1, 0.9),
        ..Default::default()
    })
    .contains("betas.0"));
    let ints = vec![Tensor::<Cpu, i64, shape![_]>::zeros_dims(&[2]).unwrap()];
    let e = Sgd::new(&ints, SgdConfig::default()).unwrap_err();
    assert!(e.to_string().contains("parameter `0`"), "{e}");
}

/// A parameter that shares its buffer with another tensor is copied
/// before the update (copy-on-write), and a strided one made contiguous.
#[test]
fn shared_and_strided_params() {
    let mut p = tensors::<f32>(&[vec![1.0, 2.0]]);
    let alias = p[0].clone();
    let mut opt = Sgd::new(
        &p,
        SgdConfig {
            lr: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &tensors(&[vec![1.0, 1.0]])).unwrap();
    assert_eq!(read(&p)[0], vec![0.0, 1.0]);
    assert_eq!(alias.to_vec().unwrap(), vec![1.0, 2.0]);

    let base = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let mut w = [base.t().unwrap()];
    let g = [base.t().unwrap()];
    let mut opt = Sgd::new(
        &w,
        SgdConfig {
            lr: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut w, &g).unwrap();
    assert_eq!(w[0].to_vec().unwrap(), vec![0.5, 2.0, 1.0, 2.5, 1.5, 3.0]);
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tf_optim_{}_{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("state.safetensors")
}

/// Stopping after 3 steps, saving, loading and taking 3 more gives the
/// numbers of 6 steps without stopping, bit for bit.
#[test]
fn adamw_resume_is_bit_exact() {
    let seed = fresh_seed();
    let mut rng = Rng(seed);
    let c = AdamWConfig {
        amsgrad: true,
        lr: 1e-2,
        ..Default::default()
    };
    let init: Vec<Vec<f64>> = [5, 0, 70].iter().map(|&n| rng.vec(n)).collect();
    let grads: Vec<V<half::bf16>> = (0..6)
        .map(|_| tensors(&[rng.vec(5), vec![], rng.vec(70)]))
        .collect();
    let mut a = tensors::<half::bf16>(&init);
    let mut opt = AdamW::new(&a, c).unwrap();
    for g in &grads {
        opt.step(&mut a, g).unwrap();
    }
    let mut b = tensors::<half::bf16>(&init);
    let mut opt = AdamW::new(&b, c).unwrap();
    for g in &grads[..3] {
        opt.step(&mut b, g).unwrap();
    }
    let path = temp("adamw");
    opt.save_safetensors(&path).unwrap();
    b.save_safetensors(path.with_extension("params")).unwrap();
    drop(opt);
    let mut b = V::<half::bf16>::load_safetensors(path.with_extension("params")).unwrap();
    let mut opt = AdamW::load_safetensors(&path, &b, c).unwrap();
    assert_eq!(opt.steps(), 3);
    for g in &grads[3..] {
        opt.step(&mut b, g).unwrap();
    }
    let bits = |p: &V<half::bf16>| -> Vec<Vec<u16>> {
        p.iter()
            .map(|t| t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&a), bits(&b), "seed {seed}");
    // The state without `amsgrad` is another set of keys.
    let e = AdamW::load_safetensors(
        &path,
        &b,
        AdamWConfig {
            amsgrad: false,
            ..c
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("max_exp_avg_sq.0"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn sgd_resume_is_bit_exact() {
    let seed = fresh_seed();
    let mut rng = Rng(seed);
    let c = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        nesterov: true,
        ..Default::default()
    };
    let init = vec![rng.vec(9)];
    let grads: Vec<V<f32>> = (0..4).map(|_| tensors(&[rng.vec(9)])).collect();
    let mut a = tensors::<f32>(&init);
    let mut opt = Sgd::new(&a, c).unwrap();
    for g in &grads {
        opt.step(&mut a, g).unwrap();
    }
    let mut b = tensors::<f32>(&init);
    let mut opt = Sgd::new(&b, c).unwrap();
    opt.step(&mut b, &grads[0]).unwrap();
    let path = temp("sgd");
    opt.save_safetensors(&path).unwrap();
    let mut opt = Sgd::load_safetensors(&path, &b, c).unwrap();
    for g in &grads[1..] {
        opt.step(&mut b, g).unwrap();
    }
    assert_eq!(read(&a), read(&b), "seed {seed}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

fn clip_case<D: Device, T: DType>(seed: u64) {
    let mut rng = Rng(seed);
    let vals = rounded::<T>(&SIZES.iter().map(|&n| rng.vec(n)).collect::<Vec<_>>());
    let total: f64 = vals.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    // Below the norm: scaled.
    let mut g = tensors_on::<D, T>(&vals);
    let got = clip_grad_norm(&mut g, 1.0).unwrap();
    // A GPU sums each tensor's squares in f32 (f64 for f64), as PyTorch.
    let rel = match (D::KIND, T::KIND) {
        (crate::DeviceKind::Cuda(_), k) if k != DTypeKind::F64 => 1e-5,
        _ => 1e-9,
    };
    assert!((got - total).abs() <= rel * total, "{got} vs {total}");
    let coef = 1.0 / (total + 1e-6);
    let want: Vec<Vec<f64>> = vals
        .iter()
        .map(|v| v.iter().map(|x| x * coef).collect())
        .collect();
    close(
        &format!("clip {:?} seed {seed}", T::KIND),
        &read(&g),
        &want,
        tol::<T>(1, false),
    );
    // Above it: unchanged.
    let mut g = tensors_on::<D, T>(&vals);
    clip_grad_norm(&mut g, total * 2.0).unwrap();
    assert_eq!(read(&g), vals);
}

#[test]
fn clip_grad_norm_matches_reference() {
    let seed = fresh_seed();
    clip_case::<Cpu, f32>(seed);
    clip_case::<Cpu, f64>(seed);
    clip_case::<Cpu, half::f16>(seed);
    clip_case::<Cpu, half::bf16>(seed);
}

#[test]
fn clip_grad_norm_nonfinite() {
    // NaN: every gradient becomes NaN, as in PyTorch.
    let mut g = tensors::<f32>(&[vec![f64::NAN, 1.0], vec![2.0]]);
    assert!(clip_grad_norm(&mut g, 1.0).unwrap().is_nan());
    assert!(read(&g).iter().flatten().all(|x| x.is_nan()));
    // inf: scaled by 0, so the inf element is NaN and the others 0.
    let mut g = tensors::<f32>(&[vec![f64::INFINITY, 1.0], vec![-2.0]]);
    assert_eq!(clip_grad_norm(&mut g, 1.0).unwrap(), f64::INFINITY);
    let v = read(&g);
    assert!(
        v[0][0].is_nan() && v[0][1] == 0.0 && v[1][0] == 0.0,
        "{v:?}"
    );
    // Refused, and left as they were.
    let mut g = tensors::<f32>(&[vec![f64::INFINITY, 1.0]]);
    let strict = ClipOptions {
        error_if_nonfinite: true,
        ..Default::default()
    };
    let e = clip_grad_norm_with(&mut g, 1.0, strict).unwrap_err();
    assert!(e.to_string().contains("inf"), "{e}");
    assert_eq!(read(&g)[0][1], 1.0);
    // No elements: a norm of 0.
    let mut g = tensors::<f32>(&[vec![]]);
    assert_eq!(clip_grad_norm(&mut g, 1.0).unwrap(), 0.0);
    // The 1-norm.
    let mut g = tensors::<f64>(&[vec![-3.0, 1.0]]);
    let l1 = ClipOptions {
        norm_type: 1.0,
        ..Default::default()
    };
    assert_eq!(clip_grad_norm_with(&mut g, 8.0, l1).unwrap(), 4.0);
}

/// `step_clipped` against `clip_grad_norm` then `step` on the CPU, three
/// steps of AdamW (with weight decay) and SGD (with momentum): clipping
/// (a `max_norm` below the total) and not (above it); the gradients are
/// left as they are and the returned norm is the total.
fn clipped_step_case<D: Device, T: DType>(seed: u64) {
    let mut rng = Rng(seed);
    let init = rounded::<T>(&SIZES.iter().map(|&n| rng.vec(n)).collect::<Vec<_>>());
    let grads: Vec<Vec<Vec<f64>>> = (0..3)
        .map(|_| rounded::<T>(&SIZES.iter().map(|&n| rng.vec(n)).collect::<Vec<_>>()))
        .collect();
    let what = format!("step_clipped {:?} on {:?} seed {seed}", T::KIND, D::KIND);
    // The GPU sums the squares in f32 (f64 for f64) per thread.
    let rel = match (D::KIND, T::KIND) {
        (crate::DeviceKind::Cuda(_), k) if k != DTypeKind::F64 => 1e-5,
        _ => 1e-9,
    };
    for scale in [0.5, 2.0] {
        let adamw = AdamWConfig {
            lr: 1e-2,
            weight_decay: 0.1,
            ..Default::default()
        };
        let sgd = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        };
        let (mut a, mut b) = (tensors_on::<D, T>(&init), tensors::<T>(&init));
        let (mut c, mut d) = (tensors_on::<D, T>(&init), tensors::<T>(&init));
        let mut oa = AdamW::new(&a, adamw).unwrap();
        let mut ob = AdamW::new(&b, adamw).unwrap();
        let mut oc = Sgd::new(&c, sgd).unwrap();
        let mut od = Sgd::new(&d, sgd).unwrap();
        for gv in &grads {
            let total: f64 = gv.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
            let max_norm = scale * total;
            let g = tensors_on::<D, T>(gv);
            let na = oa.step_clipped(&mut a, &g, max_norm).unwrap();
            let nc = oc.step_clipped(&mut c, &g, max_norm).unwrap();
            assert_eq!(read(&g), *gv, "{what}: the gradients are left as they are");
            for n in [na, nc] {
                let n = n.value().unwrap();
                assert!((n - total).abs() <= rel * total, "{what}: {n} vs {total}");
            }
            let mut h = tensors::<T>(gv);
            clip_grad_norm(&mut h, max_norm).unwrap();
            ob.step(&mut b, &h).unwrap();
            od.step(&mut d, &h).unwrap();
        }
        close(
            &format!("{what}: AdamW"),
            &read(&a),
            &read(&b),
            tol::<T>(6, false),
        );
        close(
            &format!("{what}: SGD"),
            &read(&c),
            &read(&d),
            tol::<T>(6, false),
        );
    }
}

#[test]
fn clipped_steps_match_clip_then_step() {
    let seed = fresh_seed();
    clipped_step_case::<Cpu, f32>(seed);
    clipped_step_case::<Cpu, f64>(seed);
    clipped_step_case::<Cpu, half::f16>(seed);
    clipped_step_case::<Cpu, half::bf16>(seed);
}

/// `clip_grad_norm_`'s non-finite totals in a clipped step: NaN makes
/// every parameter NaN; inf scales by 0, so the infinite element's update
/// is NaN and the others only decay.
fn clipped_step_nonfinite<D: Device>() {
    let c = AdamWConfig {
        lr: 0.1,
        weight_decay: 0.5,
        ..Default::default()
    };
    let mut p = tensors_on::<D, f32>(&[vec![1.0, 1.0], vec![2.0]]);
    let g = tensors_on::<D, f32>(&[vec![f64::NAN, 1.0], vec![3.0]]);
    let mut opt = AdamW::new(&p, c).unwrap();
    assert!(opt
        .step_clipped(&mut p, &g, 1.0)
        .unwrap()
        .value()
        .unwrap()
        .is_nan());
    assert!(
        read(&p).iter().flatten().all(|x| x.is_nan()),
        "{:?}",
        read(&p)
    );
    let mut p = tensors_on::<D, f32>(&[vec![1.0, 1.0], vec![2.0]]);
    let g = tensors_on::<D, f32>(&[vec![f64::INFINITY, 1.0], vec![-3.0]]);
    let mut opt = AdamW::new(&p, c).unwrap();
    let n = opt.step_clipped(&mut p, &g, 1.0).unwrap().value().unwrap();
    assert_eq!(n, f64::INFINITY);
    let v = read(&p);
    assert!(v[0][0].is_nan(), "{v:?}");
    assert_eq!(
        (v[0][1], v[1][0]),
        (0.95f32 as f64, (2.0f32 * 0.95f32) as f64)
    );
    // No elements: a norm of 0, nothing scaled.
    let mut p = tensors_on::<D, f32>(&[vec![]]);
    let mut opt = Sgd::new(&p, SgdConfig::default()).unwrap();
    let g = tensors_on::<D, f32>(&[vec![]]);
    assert_eq!(
        opt.step_clipped(&mut p, &g, 1.0).unwrap().value().unwrap(),
        0.0
    );
}

#[test]
fn clipped_step_nonfinite_totals() {
    clipped_step_nonfinite::<Cpu>();
}

#[test]
fn schedules() {
    let s = CosineWithWarmup {
        warmup_steps: 4,
        total_steps: 12,
        min_lr: 0.1,
    };
    let lrs: Vec<f64> = (0..14).map(|t| s.lr_at(1.0, t)).collect();
    assert_eq!(&lrs[..4], &[0.25, 0.5, 0.75, 1.0]);
    assert_eq!(lrs[4], 1.0);
    assert!((lrs[8] - 0.55).abs() < 1e-12, "{lrs:?}");
    assert!(lrs[4..12].windows(2).all(|w| w[1] < w[0]), "{lrs:?}");
    assert_eq!(&lrs[12..], &[0.1, 0.1]);
    let s = StepLr {
        step_size: 2,
        gamma: 0.5,
    };
    let lrs: Vec<f64> = (0..5).map(|t| s.lr_at(1.0, t)).collect();
    assert_eq!(lrs, vec![1.0, 1.0, 0.5, 0.5, 0.25]);
}

/// True when a GPU is present; otherwise prints why the test skips.
fn gpu() -> bool {
    match Tensor::<Cuda, f32, shape![1]>::zeros() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipping: no CUDA device ({e})");
            false
        }
    }
}

/// The multi-tensor kernels against the f64 references, as the CPU loop
/// is checked: every dtype, several settings, tensors of several chunks.
#[test]
fn cuda_optimizers_match_reference() {
    if !gpu() {
        return;
    }
    adamw_all::<Cuda, f32>();
    adamw_all::<Cuda, f64>();
    adamw_all::<Cuda, half::f16>();
    adamw_all::<Cuda, half::bf16>();
    sgd_all::<Cuda, f32>();
    sgd_all::<Cuda, f64>();
    sgd_all::<Cuda, half::f16>();
    sgd_all::<Cuda, half::bf16>();
}

/// The GPU and the CPU agree, the GPU computing in f32: within a few f32
/// ulps for f32 parameters, one rounding for bf16 ones.
#[test]
fn cuda_optimizers_match_cpu() {
    if !gpu() {
        return;
    }
    let seed = fresh_seed();
    let mut rng = Rng(seed);
    let init: Vec<Vec<f64>> = SIZES.iter().map(|&n| rng.vec(n)).collect();
    let grads: Vec<Vec<Vec<f64>>> = (0..4)
        .map(|_| SIZES.iter().map(|&n| rng.vec(n)).collect())
        .collect();
    let c = AdamWConfig {
        lr: 1e-2,
        weight_decay: 0.1,
        amsgrad: true,
        ..Default::default()
    };
    let mut pc = tensors_on::<Cpu, half::bf16>(&init);
    let mut pg = tensors_on::<Cuda, half::bf16>(&init);
    let mut oc = AdamW::new(&pc, c).unwrap();
    let mut og = AdamW::new(&pg, c).unwrap();
    for g in &grads {
        oc.step(&mut pc, &tensors_on(g)).unwrap();
        og.step(&mut pg, &tensors_on(g)).unwrap();
    }
    close(
        &format!("AdamW bf16 GPU vs CPU seed {seed}"),
        &read(&pg),
        &read(&pc),
        8e-3,
    );
    let c = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        weight_decay: 0.01,
        ..Default::default()
    };
    let mut pc = tensors_on::<Cpu, f32>(&init);
    let mut pg = tensors_on::<Cuda, f32>(&init);
    let mut oc = Sgd::new(&pc, c).unwrap();
    let mut og = Sgd::new(&pg, c).unwrap();
    for g in &grads {
        oc.step(&mut pc, &tensors_on(g)).unwrap();
        og.step(&mut pg, &tensors_on(g)).unwrap();
    }
    close(
        &format!("SGD f32 GPU vs CPU seed {seed}"),
        &read(&pg),
        &read(&pc),
        1e-6,
    );
}

/// NaN gradients, zero gradients and empty tensors on the GPU; state saved
/// from the GPU and restored onto it continues bit for bit; clipping.
#[test]
fn cuda_optimizer_edges_resume_and_clip() {
    if !gpu() {
        return;
    }
    let mut p = tensors_on::<Cuda, f32>(&[vec![1.0, 1.0], vec![], vec![2.0]]);
    let g = tensors_on::<Cuda, f32>(&[vec![f64::NAN, 1.0], vec![], vec![0.0]]);
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            lr: 0.1,
            weight_decay: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &g).unwrap();
    let v = read(&p);
    assert!(v[0][0].is_nan() && v[0][1].is_finite(), "{v:?}");
    assert_eq!(v[2][0], (2.0f32 * 0.95f32) as f64);

    let seed = fresh_seed();
    let mut rng = Rng(seed);
    let c = AdamWConfig {
        lr: 1e-2,
        ..Default::default()
    };
    let init: Vec<Vec<f64>> = [5, CHUNK + 3].iter().map(|&n| rng.vec(n)).collect();
    let grads: Vec<VD<Cuda, half::bf16>> = (0..6)
        .map(|_| tensors_on(&[rng.vec(5), rng.vec(CHUNK + 3)]))
        .collect();
    let mut a = tensors_on::<Cuda, half::bf16>(&init);
    let mut opt = AdamW::new(&a, c).unwrap();
    for g in &grads {
        opt.step(&mut a, g).unwrap();
    }
    let mut b = tensors_on::<Cuda, half::bf16>(&init);
    let mut opt = AdamW::new(&b, c).unwrap();
    for g in &grads[..3] {
        opt.step(&mut b, g).unwrap();
    }
    let path = temp("cuda_adamw");
    opt.save_safetensors(&path).unwrap();
    let mut opt = AdamW::load_safetensors(&path, &b, c).unwrap();
    for g in &grads[3..] {
        opt.step(&mut b, g).unwrap();
    }
    assert_eq!(read(&a), read(&b), "seed {seed}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();

    clip_case::<Cuda, f32>(seed);
    clip_case::<Cuda, half::bf16>(seed);
    // Clipping inside the step: the norm summed and the coefficient
    // computed on the GPU, against the CPU's clip then step.
    clipped_step_case::<Cuda, f32>(seed);
    clipped_step_case::<Cuda, half::bf16>(seed);
    clipped_step_case::<Cuda, f64>(seed);
    clipped_step_nonfinite::<Cuda>();
    let mut g = tensors_on::<Cuda, f32>(&[vec![f64::NAN, 1.0]]);
    assert!(clip_grad_norm(&mut g, 1.0).unwrap().is_nan());
    assert!(read(&g)[0].iter().all(|x| x.is_nan()));
}

/// An infinite gradient gives NaN in AdamW (`inf / inf`) and an infinite
/// step in SGD, as in PyTorch; a zero update keeps the sign of -0.
#[test]
fn infinite_grads_and_signed_zeros() {
    let mut p = tensors::<f32>(&[vec![1.0, -0.0]]);
    let g = tensors::<f32>(&[vec![f64::INFINITY, 0.0]]);
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            weight_decay: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &g).unwrap();
    let v = read(&p)[0].clone();
    assert!(v[0].is_nan(), "{v:?}");
    assert!(v[1] == 0.0 && v[1].is_sign_negative(), "{v:?}");
    let mut p = tensors::<f64>(&[vec![1.0, -0.0]]);
    let mut opt = Sgd::new(&p, SgdConfig::default()).unwrap();
    opt.step(&mut p, &tensors(&[vec![f64::INFINITY, 0.0]]))
        .unwrap();
    let v = read(&p)[0].clone();
    assert_eq!(v[0], f64::NEG_INFINITY);
    assert!(v[1] == 0.0 && v[1].is_sign_negative(), "{v:?}");
}

/// `without_weight_decay`: the parameters left out step as an optimizer
/// with `weight_decay = 0` would, the others as one with the decay, bit
/// for bit, across a save and load (where the choice is made again).
fn adamw_without_decay_case<D: Device, T: DType>(seed: u64) {
    let mut rng = Rng(seed);
    let sizes = [5, CHUNK + 3, 0, 9];
    let init: Vec<Vec<f64>> = sizes.iter().map(|&n| rng.vec(n)).collect();
    let grads: Vec<Vec<Vec<f64>>> = (0..3)
        .map(|_| sizes.iter().map(|&n| rng.vec(n)).collect())
        .collect();
    let c = AdamWConfig {
        lr: 0.05,
        weight_decay: 0.3,
        ..Default::default()
    };
    let skip = |name: &str, _: &[usize]| name == "1" || name == "3";
    let mut all = tensors_on::<D, T>(&init);
    let mut opt = AdamW::new(&all, c).unwrap().without_weight_decay(skip);
    let pick = |v: &[Vec<f64>], odd: usize| -> Vec<Vec<f64>> {
        v.iter().skip(odd).step_by(2).cloned().collect()
    };
    let mut even = tensors_on::<D, T>(&pick(&init, 0));
    let mut odd = tensors_on::<D, T>(&pick(&init, 1));
    let mut opt_even = AdamW::new(&even, c).unwrap();
    let no_decay = AdamWConfig {
        weight_decay: 0.0,
        ..c
    };
    let mut opt_odd = AdamW::new(&odd, no_decay).unwrap();
    let path = temp(&format!("adamw_groups_{seed}.safetensors"));
    for (i, g) in grads.iter().enumerate() {
        if i == 2 {
            opt.save_safetensors(&path).unwrap();
            opt = AdamW::load_safetensors(&path, &all, c)
                .unwrap()
                .without_weight_decay(skip);
        }
        opt.step(&mut all, &tensors_on::<D, T>(g)).unwrap();
        opt_even
            .step(&mut even, &tensors_on::<D, T>(&pick(g, 0)))
            .unwrap();
        opt_odd
            .step(&mut odd, &tensors_on::<D, T>(&pick(g, 1)))
            .unwrap();
    }
    let got = read(&all);
    assert_eq!(pick(&got, 0), read(&even), "seed {seed}: decayed group");
    assert_eq!(pick(&got, 1), read(&odd), "seed {seed}: group left out");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn adamw_without_weight_decay_groups() {
    let seed = fresh_seed();
    adamw_without_decay_case::<Cpu, f32>(seed);
    adamw_without_decay_case::<Cpu, half::bf16>(seed);
}

#[test]
fn cuda_adamw_without_weight_decay_groups() {
    if !gpu() {
        return;
    }
    let seed = fresh_seed();
    adamw_without_decay_case::<Cuda, f32>(seed);
    adamw_without_decay_case::<Cuda, half::bf16>(seed);
}
