//! Row kernels written in `tensor_fn!` (`#[kernel]` over `Row<T>`): a
//! user's layer norm and RMS norm against the built-in ones, per-row
//! results, broadcast rows and scalar arguments, in f32, f64, f16 and
//! bf16, on random rows and on rows of NaN, ±inf, ±0 and empty rows.

use tensorfn::prelude::*;

tensor_fn! {
    /// PyTorch's `layer_norm` over the last dim, written as a row kernel.
    #[kernel]
    fn my_layer_norm(x: Row<f32>, w: Row<f32>, b: Row<f32>, eps: f32) -> Row<f32> {
        let mean = mean(x);
        let var = mean((x - mean) * (x - mean));
        (x - mean) * (1.0 / sqrt(var + eps)) * w + b
    }
    #[kernel]
    fn my_layer_norm64(x: Row<f64>, w: Row<f64>, b: Row<f64>, eps: f64) -> Row<f64> {
        let mean = x.mean();
        let var = ((x - mean) * (x - mean)).mean();
        (x - mean) * (1.0 / sqrt(var + eps)) * w + b
    }
    #[kernel]
    fn my_layer_norm16(x: Row<f16>, w: Row<f16>, b: Row<f16>, eps: f32) -> Row<f16> {
        let mean = mean(x);
        let var = mean((x - mean) * (x - mean));
        (x - mean) * (1.0 / sqrt(var + eps)) * w + b
    }
    #[kernel]
    fn my_layer_norm_bf16(x: Row<bf16>, w: Row<bf16>, b: Row<bf16>, eps: f32) -> Row<bf16> {
        let mean = mean(x);
        let var = mean((x - mean) * (x - mean));
        (x - mean) * (1.0 / sqrt(var + eps)) * w + b
    }
    /// RMS norm, as the example.
    #[kernel]
    pub fn my_rms_norm(x: Row<bf16>, w: Row<bf16>, eps: f32) -> Row<bf16> {
        let ms = mean(x * x);
        x * rsqrt(ms + eps) * w
    }
    /// `logsumexp` over the row: one value per row.
    #[kernel]
    fn my_logsumexp(x: Row<f32>) -> f32 {
        let m = max(x);
        let shift = if m == m && m != -INFINITY && m != INFINITY { m } else { 0.0 };
        log(sum(exp(x - shift))) + shift
    }
    /// Range of a row: `max - min`.
    #[kernel]
    fn spread(x: Row<f64>) -> f64 {
        max(x) - min(x)
    }

    fn ln32(x: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [R, N]> {
        my_layer_norm(x, w, b, 1e-5)
    }
    fn ln64(x: &Tensor<Cpu, f64, [R, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> Tensor<Cpu, f64, [R, N]> {
        my_layer_norm64(x, w, b, 1e-5)
    }
    fn ln16(x: &Tensor<Cpu, f16, [R, N]>, w: &Tensor<Cpu, f16, [N]>, b: &Tensor<Cpu, f16, [N]>) -> Tensor<Cpu, f16, [R, N]> {
        my_layer_norm16(x, w, b, 1e-5)
    }
    fn lnbf16(x: &Tensor<Cpu, bf16, [R, N]>, w: &Tensor<Cpu, bf16, [N]>, b: &Tensor<Cpu, bf16, [N]>) -> Tensor<Cpu, bf16, [R, N]> {
        my_layer_norm_bf16(x, w, b, 1e-5)
    }
    fn rms_plus_one(x: &Tensor<Cpu, bf16, [B, T, N]>, w: &Tensor<Cpu, bf16, [N]>) -> Tensor<Cpu, bf16, [B, T, N]> {
        my_rms_norm(x, w, 1e-6) + 1.0
    }
    fn lse(x: &Tensor<Cpu, f32, [R, N]>) -> Tensor<Cpu, f32, [R]> {
        my_logsumexp(x)
    }
    fn spreads(x: &Tensor<Cpu, f64, [A, B, N]>) -> Tensor<Cpu, f64, [A, B]> {
        spread(x)
    }

    fn gpu_ln32(x: &Tensor<Cuda, f32, [R, N]>, w: &Tensor<Cuda, f32, [N]>, b: &Tensor<Cuda, f32, [N]>) -> Tensor<Cuda, f32, [R, N]> {
        my_layer_norm(x, w, b, 1e-5)
    }
    fn gpu_ln64(x: &Tensor<Cuda, f64, [R, N]>, w: &Tensor<Cuda, f64, [N]>, b: &Tensor<Cuda, f64, [N]>) -> Tensor<Cuda, f64, [R, N]> {
        my_layer_norm64(x, w, b, 1e-5)
    }
    fn gpu_ln16(x: &Tensor<Cuda, f16, [R, N]>, w: &Tensor<Cuda, f16, [N]>, b: &Tensor<Cuda, f16, [N]>) -> Tensor<Cuda, f16, [R, N]> {
        my_layer_norm16(x, w, b, 1e-5)
    }
    fn gpu_lnbf16(x: &Tensor<Cuda, bf16, [R, N]>, w: &Tensor<Cuda, bf16, [N]>, b: &Tensor<Cuda, bf16, [N]>) -> Tensor<Cuda, bf16, [R, N]> {
        my_layer_norm_bf16(x, w, b, 1e-5)
    }
    fn gpu_rms_plus_one(x: &Tensor<Cuda, bf16, [B, T, N]>, w: &Tensor<Cuda, bf16, [N]>) -> Tensor<Cuda, bf16, [B, T, N]> {
        my_rms_norm(x, w, 1e-6) + 1.0
    }
    fn gpu_lse(x: &Tensor<Cuda, f32, [R, N]>) -> Tensor<Cuda, f32, [R]> {
        my_logsumexp(x)
    }

    // A residual sum folded into the loads and a gate into the stores,
    // against the same three steps each materialised by a function of
    // its own.
    fn fused_block(x: &Tensor<Cpu, bf16, [B, T, N]>, r: &Tensor<Cpu, bf16, [B, T, N]>, w: &Tensor<Cpu, bf16, [N]>, g: &Tensor<Cpu, bf16, [B, T, N]>) -> Tensor<Cpu, bf16, [B, T, N]> {
        my_rms_norm(x + r * 0.5, w, 1e-6) * g + 1.0
    }
    fn step_sum(x: &Tensor<Cpu, bf16, [B, T, N]>, r: &Tensor<Cpu, bf16, [B, T, N]>) -> Tensor<Cpu, bf16, [B, T, N]> {
        x + r * 0.5
    }
    fn step_norm(h: &Tensor<Cpu, bf16, [B, T, N]>, w: &Tensor<Cpu, bf16, [N]>) -> Tensor<Cpu, bf16, [B, T, N]> {
        my_rms_norm(h, w, 1e-6)
    }
    fn step_gate(y: &Tensor<Cpu, bf16, [B, T, N]>, g: &Tensor<Cpu, bf16, [B, T, N]>) -> Tensor<Cpu, bf16, [B, T, N]> {
        y * g + 1.0
    }
    fn fused_ln(x: &Tensor<Cpu, f32, [R, N]>, r: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>, s: f32) -> Tensor<Cpu, f32, [R, N]> {
        relu(my_layer_norm(exp(x) - r * s, w, b, 1e-5)) + w
    }
    fn step_ln_in(x: &Tensor<Cpu, f32, [R, N]>, r: &Tensor<Cpu, f32, [R, N]>, s: f32) -> Tensor<Cpu, f32, [R, N]> {
        exp(x) - r * s
    }
    fn step_ln(h: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [R, N]> {
        my_layer_norm(h, w, b, 1e-5)
    }
    fn step_ln_out(y: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [R, N]> {
        relu(y) + w
    }
    // Read twice: the sum is materialised, the norm runs unfused.
    fn shared_input(x: &Tensor<Cpu, f32, [R, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> (Tensor<Cpu, f32, [R, N]>, Tensor<Cpu, f32, [R, N]>) {
        let h = x + 1.0;
        (my_layer_norm(h, w, b, 1e-5), h * 2.0)
    }

    fn gpu_fused_block(x: &Tensor<Cuda, bf16, [B, T, N]>, r: &Tensor<Cuda, bf16, [B, T, N]>, w: &Tensor<Cuda, bf16, [N]>, g: &Tensor<Cuda, bf16, [B, T, N]>) -> Tensor<Cuda, bf16, [B, T, N]> {
        my_rms_norm(x + r * 0.5, w, 1e-6) * g + 1.0
    }
    fn gpu_fused_ln(x: &Tensor<Cuda, f32, [R, N]>, r: &Tensor<Cuda, f32, [R, N]>, w: &Tensor<Cuda, f32, [N]>, b: &Tensor<Cuda, f32, [N]>, s: f32) -> Tensor<Cuda, f32, [R, N]> {
        relu(my_layer_norm(exp(x) - r * s, w, b, 1e-5)) + w
    }
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

fn f64s<T: DType, S: tensorfn::Shape>(t: &Tensor<Cpu, T, S>) -> Vec<f64> {
    t.to_vec()
        .unwrap()
        .into_iter()
        .map(|v| v.to_f64())
        .collect()
}

/// Rows of random values, then rows with NaN, ±inf and ±0.
fn rows(r: usize, n: usize, seed: u64) -> Vec<f64> {
    let x = Tensor::<Cpu, f64, shape![_, _]>::randn_dims(seed, &[r, n]).unwrap();
    let mut v = x.to_vec().unwrap();
    if r >= 4 && n >= 2 {
        v[n] = f64::NAN;
        v[2 * n] = f64::INFINITY;
        v[3 * n + 1] = f64::NEG_INFINITY;
        for (j, x) in v[..n].iter_mut().enumerate() {
            *x = if j % 2 == 0 { 0.0 } else { -0.0 };
        }
    }
    v
}

macro_rules! layer_norm_case {
    ($name:ident, $t:ty, $f:ident, $g:ident, $tol:expr) => {
        #[test]
        fn $name() {
            for (r, n, seed) in [
                (6usize, 33usize, 1u64),
                (5, 768, 2),
                (4, 1, 3),
                (3, 0, 4),
                (0, 5, 5),
            ] {
                let xv = rows(r, n, seed);
                let conv = |v: &[f64]| -> Vec<$t> {
                    v.iter().map(|&a| <$t as DType>::from_f64(a)).collect()
                };
                let x = Tensor::<Cpu, $t, shape![_, _]>::from_vec_dims(conv(&xv), &[r, n]).unwrap();
                let wv: Vec<f64> = (0..n).map(|j| 0.5 + (j % 7) as f64 * 0.25).collect();
                let bv: Vec<f64> = (0..n).map(|j| (j % 5) as f64 * 0.1 - 0.2).collect();
                let w = Tensor::<Cpu, $t, shape![_]>::from_vec_dims(conv(&wv), &[n]).unwrap();
                let b = Tensor::<Cpu, $t, shape![_]>::from_vec_dims(conv(&bv), &[n]).unwrap();
                let got = $f(&x, &w, &b).unwrap();
                let builtin = x.layer_norm(&w, &b, 1e-5).unwrap();
                close(
                    &f64s(&got),
                    &f64s(&builtin),
                    $tol,
                    concat!(stringify!($name), " vs layer_norm"),
                );
                // The same kernel's PTX on the GPU, where there is one.
                let Ok(gx) = x.to_device::<Cuda>() else {
                    eprintln!("skipping the GPU part: no CUDA device");
                    continue;
                };
                let (gw, gb) = (
                    w.to_device::<Cuda>().unwrap(),
                    b.to_device::<Cuda>().unwrap(),
                );
                let on_gpu = $g(&gx, &gw, &gb).unwrap().to_device::<Cpu>().unwrap();
                close(
                    &f64s(&on_gpu),
                    &f64s(&builtin),
                    $tol,
                    concat!(stringify!($name), " on the GPU vs layer_norm"),
                );
            }
        }
    };
}

layer_norm_case!(layer_norm_f32, f32, ln32, gpu_ln32, 1e-5);
layer_norm_case!(layer_norm_f64, f64, ln64, gpu_ln64, 1e-12);
layer_norm_case!(layer_norm_f16, f16, ln16, gpu_ln16, 2e-3);
layer_norm_case!(layer_norm_bf16, bf16, lnbf16, gpu_lnbf16, 1.6e-2);

#[test]
fn rms_norm_broadcasts_its_weight_and_fuses_a_consumer() {
    let (b, t, n) = (2, 3, 64);
    let x = Tensor::<Cpu, bf16, shape![_, _, _]>::randn_dims(7, &[b, t, n]).unwrap();
    let w = Tensor::<Cpu, bf16, shape![_]>::randn_dims(8, &[n]).unwrap();
    let got = rms_plus_one(&x, &w).unwrap();
    let builtin = x.rms_norm(&w, Some(1e-6)).unwrap();
    let want: Vec<f64> = f64s(&builtin)
        .iter()
        .map(|v| bf16::from_f64(v + 1.0).to_f64())
        .collect();
    close(&f64s(&got), &want, 1.6e-2, "rms_norm + 1");
    let Ok(gx) = x.to_device::<Cuda>() else {
        eprintln!("skipping the GPU part: no CUDA device");
        return;
    };
    let on_gpu = gpu_rms_plus_one(&gx, &w.to_device::<Cuda>().unwrap()).unwrap();
    close(
        &f64s(&on_gpu.to_device::<Cpu>().unwrap()),
        &want,
        1.6e-2,
        "rms_norm + 1 on the GPU",
    );
}

#[test]
fn per_row_results() {
    let (r, n) = (5, 40);
    let mut xv = rows(r, n, 9);
    xv[4 * n..].iter_mut().for_each(|v| *v = f64::NEG_INFINITY);
    let x = Tensor::<Cpu, f32, shape![_, _]>::from_vec_dims(
        xv.iter().map(|&v| v as f32).collect(),
        &[r, n],
    )
    .unwrap();
    let got = lse(&x).unwrap();
    let want = x.logsumexp::<1>().unwrap();
    close(&f64s(&got), &f64s(&want), 1e-6, "logsumexp");
    if let Ok(gx) = x.to_device::<Cuda>() {
        let on_gpu = gpu_lse(&gx).unwrap().to_device::<Cpu>().unwrap();
        close(&f64s(&on_gpu), &f64s(&want), 1e-6, "logsumexp on the GPU");
    }

    let x = Tensor::<Cpu, f64, shape![_, _, _]>::randn_dims(10, &[2, 3, 7]).unwrap();
    let got = spreads(&x).unwrap();
    let v = x.to_vec().unwrap();
    let want: Vec<f64> = v
        .chunks(7)
        .map(|r| {
            r.iter().cloned().fold(f64::MIN, f64::max) - r.iter().cloned().fold(f64::MAX, f64::min)
        })
        .collect();
    close(&f64s(&got), &want, 0.0, "spread");
    // Empty rows: max of nothing is -inf, min +inf.
    let e = Tensor::<Cpu, f64, shape![_, _, _]>::zeros_dims(&[2, 1, 0]).unwrap();
    assert!(spreads(&e)
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| *v == f64::NEG_INFINITY));
}

fn bits<T: DType, S: tensorfn::Shape>(t: &Tensor<Cpu, T, S>) -> Vec<u64> {
    f64s(t).iter().map(|v| v.to_bits()).collect()
}

/// Elementwise producers folded into a row kernel's loads and consumers
/// into its stores give, on the CPU, the bits of the unfused steps; on a
/// GPU (rows for a warp, for a block and longer) the same values within
/// the rounding of a different order of summation.
#[test]
fn fused_neighbours_match_the_unfused_steps() {
    for (b, t, n) in [(2, 3, 64), (1, 4, 1), (2, 2, 3000), (1, 2, 9000), (2, 1, 0)] {
        let mut xv = rows(b * t, n, 11);
        xv.truncate(b * t * n);
        let x = Tensor::<Cpu, bf16, shape![_, _, _]>::from_vec_dims(
            xv.iter().map(|&v| bf16::from_f64(v)).collect(),
            &[b, t, n],
        )
        .unwrap();
        let r = Tensor::<Cpu, bf16, shape![_, _, _]>::randn_dims(12, &[b, t, n]).unwrap();
        let w = Tensor::<Cpu, bf16, shape![_]>::randn_dims(13, &[n]).unwrap();
        let g = Tensor::<Cpu, bf16, shape![_, _, _]>::randn_dims(14, &[b, t, n]).unwrap();
        let got = fused_block(&x, &r, &w, &g).unwrap();
        let h = step_sum(&x, &r).unwrap();
        let want = step_gate(&step_norm(&h, &w).unwrap(), &g).unwrap();
        assert_eq!(bits(&got), bits(&want), "rms_norm block [{b}, {t}, {n}]");
        if let Ok(gx) = x.to_device::<Cuda>() {
            let up = |v: &Tensor<Cpu, bf16, _>| v.to_device::<Cuda>().unwrap();
            let on_gpu = gpu_fused_block(&gx, &up(&r), &w.to_device::<Cuda>().unwrap(), &up(&g))
                .unwrap()
                .to_device::<Cpu>()
                .unwrap();
            // Two bf16 roundings after the norm's own (the product, the sum).
            close(
                &f64s(&on_gpu),
                &f64s(&want),
                3.2e-2,
                "rms_norm block on the GPU",
            );
        }
    }
    for (rr, n) in [(5, 40), (3, 1), (4, 2048), (2, 5000), (3, 0)] {
        let mut xv = rows(rr, n, 15);
        xv.truncate(rr * n);
        let x = Tensor::<Cpu, f32, shape![_, _]>::from_vec_dims(
            xv.iter().map(|&v| v as f32).collect(),
            &[rr, n],
        )
        .unwrap();
        let r = Tensor::<Cpu, f32, shape![_, _]>::randn_dims(16, &[rr, n]).unwrap();
        let w = Tensor::<Cpu, f32, shape![_]>::randn_dims(17, &[n]).unwrap();
        let bias = Tensor::<Cpu, f32, shape![_]>::randn_dims(18, &[n]).unwrap();
        let got = fused_ln(&x, &r, &w, &bias, 0.25).unwrap();
        let h = step_ln_in(&x, &r, 0.25).unwrap();
        let want = step_ln_out(&step_ln(&h, &w, &bias).unwrap(), &w).unwrap();
        assert_eq!(bits(&got), bits(&want), "layer_norm [{rr}, {n}]");
        if let Ok(gx) = x.to_device::<Cuda>() {
            let up = |v: &Tensor<Cpu, f32, _>| v.to_device::<Cuda>().unwrap();
            let (gw, gb) = (
                w.to_device::<Cuda>().unwrap(),
                bias.to_device::<Cuda>().unwrap(),
            );
            let on_gpu = gpu_fused_ln(&gx, &up(&r), &gw, &gb, 0.25)
                .unwrap()
                .to_device::<Cpu>()
                .unwrap();
            close(&f64s(&on_gpu), &f64s(&want), 1e-4, "layer_norm on the GPU");
        } else {
            eprintln!("skipping the GPU part: no CUDA device");
        }
    }
    // A producer read elsewhere too stays materialised; the results agree.
    let x = Tensor::<Cpu, f32, shape![_, _]>::randn_dims(19, &[3, 16]).unwrap();
    let w = Tensor::<Cpu, f32, shape![_]>::randn_dims(20, &[16]).unwrap();
    let bias = Tensor::<Cpu, f32, shape![_]>::randn_dims(21, &[16]).unwrap();
    let (y, h2) = shared_input(&x, &w, &bias).unwrap();
    let mut plus = x.clone();
    plus.add_scalar_(1.0).unwrap();
    assert_eq!(bits(&y), bits(&step_ln(&plus, &w, &bias).unwrap()));
    plus.mul_scalar_(2.0).unwrap();
    assert_eq!(bits(&h2), bits(&plus));
}
