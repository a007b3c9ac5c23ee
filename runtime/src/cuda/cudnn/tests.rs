//! cuDNN convolutions against a direct f64 convolution on the host, the
//! plan cache, and the paths where cuDNN cannot be used. GPU tests skip
//! without a device; where the device has no cuDNN they check that every
//! entry point falls back instead of failing.

use super::graph::legacy_only;
use super::plan::{untimed, workspace_limit, Direction};
use super::*;
use crate::cuda::alloc::CudaStorage;
use crate::cuda::backend::CudaBackend;
use crate::cuda::tests::{down, eps, gpu, random, seed, up};
use crate::dtype::DType;
use crate::random::SplitMix64;
use half::{bf16, f16};

/// A problem with NCHW activations and a KCRS filter, or NHWC and KRSC.
#[allow(clippy::too_many_arguments)]
fn problem(
    dtype: DTypeKind,
    [n, c_in, h, w]: [usize; 4],
    [c_out, kh, kw]: [usize; 3],
    pad: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    nhwc: bool,
) -> ConvProblem {
    let mut p = ConvProblem {
        n,
        c_in,
        h,
        w,
        c_out,
        kh,
        kw,
        pad,
        stride,
        dilation,
        groups,
        x_strides: [0; 4],
        y_strides: [0; 4],
        w_layout: if nhwc {
            FilterLayout::Krsc
        } else {
            FilterLayout::Kcrs
        },
        dtype,
        tf32: false,
    };
    let strides = |[_, c, h, w]: [usize; 4]| {
        if nhwc {
            [h * w * c, 1, w * c, c]
        } else {
            [c * h * w, h * w, w, 1]
        }
    };
    p.x_strides = strides([n, c_in, h, w]);
    p.y_strides = strides(p.y_dims());
    p
}

/// Storage offset of logical `[a, b, c, d]` under `strides`.
fn offset(i: [usize; 4], strides: [usize; 4]) -> usize {
    i.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Elements a view of `dims` with `strides` spans.
fn span(dims: [usize; 4], strides: [usize; 4]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    offset(dims.map(|d| d - 1), strides) + 1
}

/// Row-major strides of the filter in `p`'s layout, in KCRS dim order.
fn w_strides(p: &ConvProblem) -> [usize; 4] {
    let [_, c, r, s] = p.w_dims();
    match p.w_layout {
        FilterLayout::Kcrs => [c * r * s, r * s, s, 1],
        FilterLayout::Krsc => [r * s * c, 1, s * c, c],
    }
}

/// Every logical index of `dims`, row-major.
fn indices(dims: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    let [a, b, c, d] = dims;
    (0..a).flat_map(move |i| {
        (0..b).flat_map(move |j| (0..c).flat_map(move |k| (0..d).map(move |l| [i, j, k, l])))
    })
}

/// Calls `f(x index, w index, y index)` (logical, row-major NCHW / KCRS)
/// for every product term of the convolution.
fn each_term(p: &ConvProblem, mut f: impl FnMut([usize; 4], [usize; 4], [usize; 4])) {
    let [_, cpg, kh, kw] = p.w_dims();
    let kpg = p.c_out / p.groups;
    for yi in indices(p.y_dims()) {
        let [n, k, oh, ow] = yi;
        let g = k / kpg;
        for c in 0..cpg {
            for r in 0..kh {
                for s in 0..kw {
                    let ih = (oh * p.stride[0] + r * p.dilation[0]) as isize - p.pad[0] as isize;
                    let iw = (ow * p.stride[1] + s * p.dilation[1]) as isize - p.pad[1] as isize;
                    if ih < 0 || iw < 0 || ih >= p.h as isize || iw >= p.w as isize {
                        continue;
                    }
                    let xi = [n, g * cpg + c, ih as usize, iw as usize];
                    f(xi, [k, c, r, s], yi);
                }
            }
        }
    }
}

/// Logical values (row-major over `dims`) of a strided storage.
fn logical<T: DType>(data: &[T], dims: [usize; 4], strides: [usize; 4]) -> Vec<f64> {
    indices(dims)
        .map(|i| data[offset(i, strides)].to_f64())
        .collect()
}

/// Row-major flat index of `i` in `dims`.
fn flat(i: [usize; 4], dims: [usize; 4]) -> usize {
    ((i[0] * dims[1] + i[1]) * dims[2] + i[2]) * dims[3] + i[3]
}

/// Tolerance of a sum of `terms` products of values in `[-1, 1]`:
/// `(rtol, atol)`. f32 allows for Winograd and FFT transforms, f16 and
/// bf16 for the rounding of the output.
fn tolerance(t: DTypeKind, terms: usize) -> (f64, f64) {
    let root = (terms.max(1) as f64).sqrt();
    match t {
        DTypeKind::F64 => (1e-12, 1e-12 * terms as f64),
        DTypeKind::F32 => (1e-5, 5e-5 * root),
        _ => (2.0 * eps(t), 4.0 * eps(t) * root),
    }
}

fn assert_close(what: &str, got: &[f64], want: &[f64], (rtol, atol): (f64, f64)) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Storage of `len` elements, all `fill`.
fn filled<T: DType>(be: &CudaBackend, len: usize, fill: f64) -> CudaStorage<T> {
    up(be, &vec![T::from_f64(fill); len])
}

/// Forward (with a bias), backward data, backward filter (accumulating
/// into a nonzero `dw`) and backward bias of `p` against the f64
/// reference. `Err` is the fallback reason where cuDNN does not take `p`.
fn check_problem<T: DType>(
    be: &CudaBackend,
    rng: &mut SplitMix64,
    p: &ConvProblem,
) -> std::result::Result<(), String> {
    let ctx = be.ctx();
    let what = p.describe();
    let x_dims = [p.n, p.c_in, p.h, p.w];
    let (w_dims, y_dims) = (p.w_dims(), p.y_dims());
    let ws = w_strides(p);
    let x: Vec<T> = random(rng, span(x_dims, p.x_strides), -1.0, 1.0);
    let w: Vec<T> = random(rng, span(w_dims, ws), -1.0, 1.0);
    let b: Vec<T> = random(rng, p.c_out, -1.0, 1.0);
    let dy: Vec<T> = random(rng, span(y_dims, p.y_strides), -1.0, 1.0);
    let dw0: Vec<T> = random(rng, span(w_dims, ws), -1.0, 1.0);
    let (xl, wl, dyl) = (
        logical(&x, x_dims, p.x_strides),
        logical(&w, w_dims, ws),
        logical(&dy, y_dims, p.y_strides),
    );
    let dw0l = logical(&dw0, w_dims, ws);
    let bl: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
    let ny: usize = y_dims.iter().product();
    let mut y_ref = vec![0.0; ny];
    let mut dx_ref = vec![0.0; xl.len()];
    let mut dw_ref = dw0l.clone();
    each_term(p, |xi, wi, yi| {
        let (xf, wf, yf) = (flat(xi, x_dims), flat(wi, w_dims), flat(yi, y_dims));
        y_ref[yf] += xl[xf] * wl[wf];
        dx_ref[xf] += dyl[yf] * wl[wf];
        dw_ref[wf] += xl[xf] * dyl[yf];
    });
    let db_ref: Vec<f64> = (0..p.c_out)
        .map(|k| {
            indices(y_dims)
                .filter(|i| i[1] == k)
                .map(|i| dyl[flat(i, y_dims)])
                .sum()
        })
        .collect();
    let terms = w_dims[1] * w_dims[2] * w_dims[3];

    let (xd, wd, bd, dyd) = (up(be, &x), up(be, &w), up(be, &b), up(be, &dy));
    // Outputs start as values a call with beta 0 must not read.
    let yd = filled::<T>(be, span(y_dims, p.y_strides), 7.0);
    let dxd = filled::<T>(be, span(x_dims, p.x_strides), 7.0);
    let dwd = up(be, &dw0);
    let dbd = filled::<T>(be, p.c_out, 7.0);
    let ran =
        |o: Result<Outcome>, step: &str| match o.unwrap_or_else(|e| panic!("{step} {what}: {e}")) {
            Outcome::Done => Ok(()),
            Outcome::Fallback(reason) => Err(format!("{step}: {reason}")),
        };
    let (xp, wp, bp, dyp) = (
        xd.device_ptr(),
        wd.device_ptr(),
        bd.device_ptr(),
        dyd.device_ptr(),
    );
    ran(
        conv_forward(ctx, p, xp, wp, yd.device_ptr(), 0.0),
        "forward",
    )?;
    // The bias and its gradient fall back alone (cuDNN's bias routines
    // take fewer dtypes than its convolutions); the caller adds them.
    match conv_add_bias(ctx, p, bp, yd.device_ptr()).expect("bias") {
        Outcome::Done => {
            for (i, v) in y_ref.iter_mut().enumerate() {
                *v += bl[i / (y_dims[2] * y_dims[3]) % p.c_out];
            }
        }
        Outcome::Fallback(reason) => eprintln!("bias fell back: {reason}"),
    }
    ran(
        conv_backward_data(ctx, p, dyp, wp, dxd.device_ptr(), 0.0),
        "backward data",
    )?;
    ran(
        conv_backward_filter(ctx, p, xp, dyp, dwd.device_ptr(), 1.0),
        "backward filter",
    )?;
    let db_ran = conv_backward_bias(ctx, p, dyp, dbd.device_ptr(), 0.0).expect("backward bias");
    if let Outcome::Fallback(reason) = &db_ran {
        eprintln!("backward bias fell back: {reason}");
    }
    let read = |s: &CudaStorage<T>, dims: [usize; 4], strides: [usize; 4]| {
        logical(&down(s, &[s.len()]), dims, strides)
    };
    // The dw terms add to a value in [-1, 1]: one more term of tolerance.
    assert_close(
        &format!("forward {what}"),
        &read(&yd, y_dims, p.y_strides),
        &y_ref,
        tolerance(T::KIND, terms + 1),
    );
    let per_x = p.c_out / p.groups * p.kh * p.kw;
    assert_close(
        &format!("backward data {what}"),
        &read(&dxd, x_dims, p.x_strides),
        &dx_ref,
        tolerance(T::KIND, per_x),
    );
    let per_w = p.n * y_dims[2] * y_dims[3];
    assert_close(
        &format!("backward filter {what}"),
        &read(&dwd, w_dims, ws),
        &dw_ref,
        tolerance(T::KIND, per_w + 1),
    );
    if db_ran != Outcome::Done {
        return Ok(());
    }
    assert_close(
        &format!("backward bias {what}"),
        &read(&dbd, [1, p.c_out, 1, 1], [p.c_out, 1, 1, 1]),
        &db_ref,
        tolerance(T::KIND, per_w),
    );
    Ok(())
}

/// A plan's first call times cuDNN's candidates (with autotuning on):
/// the algorithm kept is one of the heuristic's candidates and gives the
/// heuristic choice's numbers in all three directions; the accumulating
/// backward filter adds into `dw` once (the timed runs write a scratch
/// buffer); a second call times nothing.
#[test]
fn timed_choice_is_a_candidate_with_the_same_numbers() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    if !crate::cuda::lt::matmul_autotune() {
        eprintln!("skipping: autotuning is turned off");
        return;
    }
    type T = bf16;
    let mut rng = seed();
    let ctx = be.ctx();
    let dnn = ctx.cudnn().expect("cuDNN loaded above");
    // Long enough (tens of µs) that the tuner does not skip it.
    let p = problem(
        DTypeKind::BF16,
        [32, 64, 56, 56],
        [64, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        1,
        true,
    );
    let x_dims = [p.n, p.c_in, p.h, p.w];
    let (w_dims, y_dims, ws) = (p.w_dims(), p.y_dims(), w_strides(&p));
    let x: Vec<T> = random(&mut rng, span(x_dims, p.x_strides), -1.0, 1.0);
    let w: Vec<T> = random(&mut rng, span(w_dims, ws), -1.0, 1.0);
    let dy: Vec<T> = random(&mut rng, span(y_dims, p.y_strides), -1.0, 1.0);
    let dw0: Vec<T> = random(&mut rng, span(w_dims, ws), -1.0, 1.0);
    let (xd, wd, dyd) = (up(&be, &x), up(&be, &w), up(&be, &dy));
    let (xp, wp, dyp) = (xd.device_ptr(), wd.device_ptr(), dyd.device_ptr());
    let dirs = [
        Direction::Forward,
        Direction::BackwardData,
        Direction::BackwardFilter,
    ];
    // The three directions on fresh outputs (dw accumulating onto dw0):
    // their results and what the plan chose in each.
    let run_all = || {
        lock(&dnn.plans).forget(&p);
        let yd = filled::<T>(&be, span(y_dims, p.y_strides), 7.0);
        let dxd = filled::<T>(&be, span(x_dims, p.x_strides), 7.0);
        let dwd = up(&be, &dw0);
        let done = |o: Result<Outcome>, what: &str| {
            assert_eq!(o.expect(what), Outcome::Done, "{what}");
        };
        done(
            conv_forward(ctx, &p, xp, wp, yd.device_ptr(), 0.0),
            "forward",
        );
        done(
            conv_backward_data(ctx, &p, dyp, wp, dxd.device_ptr(), 0.0),
            "backward data",
        );
        done(
            conv_backward_filter(ctx, &p, xp, dyp, dwd.device_ptr(), 1.0),
            "backward filter",
        );
        let read = |s: &CudaStorage<T>, dims: [usize; 4], strides: [usize; 4]| {
            logical(&down(s, &[s.len()]), dims, strides)
        };
        let plans = lock(&dnn.plans);
        let chosen = dirs.map(|d| plans.chosen(&p, d).expect("ran"));
        (
            [
                read(&yd, y_dims, p.y_strides),
                read(&dxd, x_dims, p.x_strides),
                read(&dwd, w_dims, ws),
            ],
            chosen,
        )
    };
    let timed_before = lock(&dnn.plans).timed;
    let (got, chosen) = run_all();
    let timed_after = lock(&dnn.plans).timed;
    let expect_timed = chosen.iter().filter(|c| c.heuristic.len() > 1).count();
    assert_eq!(
        timed_after - timed_before,
        expect_timed,
        "each direction with several candidates is timed once"
    );
    for (d, c) in dirs.iter().zip(&chosen) {
        assert!(
            c.heuristic.contains(&c.chosen),
            "{d:?}: algorithm {} is not among the candidates {:?}",
            c.chosen,
            c.heuristic
        );
        assert_eq!(c.timed, c.heuristic.len() > 1, "{d:?}");
        eprintln!(
            "{d:?}: heuristic {:?}, kept {} (graph engines: {})",
            c.heuristic, c.chosen, c.graph
        );
        // cuDNN 9 builds NHWC bf16 graphs of this shape on sm_80 and later.
        if ctx.compute_capability.0 >= 8 {
            let why = lock(&dnn.plans).graph_declined(&p, *d);
            assert!(c.graph, "{d:?} ran the legacy algorithms: {why:?}");
        }
    }
    // A second call of the same problem reuses the choice, untimed.
    let yd = filled::<T>(&be, span(y_dims, p.y_strides), 0.0);
    let out = conv_forward(ctx, &p, xp, wp, yd.device_ptr(), 0.0).expect("forward");
    assert_eq!(out, Outcome::Done);
    assert_eq!(lock(&dnn.plans).timed, timed_after, "the second call times");
    assert_eq!(
        lock(&dnn.plans).chosen(&p, Direction::Forward),
        Some(chosen[0].clone())
    );
    // The heuristic's own first choices, untimed.
    let (want, heuristic) = untimed(run_all);
    for (c, h) in chosen.iter().zip(&heuristic) {
        assert!(!h.timed);
        assert_eq!(h.chosen, h.heuristic[0]);
        assert_eq!(h.heuristic, c.heuristic, "the same candidates");
    }
    let terms = [
        w_dims[1] * w_dims[2] * w_dims[3],
        p.c_out / p.groups * p.kh * p.kw,
        p.n * y_dims[2] * y_dims[3] + 1,
    ];
    for ((d, (g, w)), n) in dirs.iter().zip(got.iter().zip(&want)).zip(terms) {
        // Each is within the tolerance of the exact result.
        let (rtol, atol) = tolerance(T::KIND, n);
        assert_close(&format!("{d:?}"), g, w, (2.0 * rtol, 2.0 * atol));
    }
}

/// The backend of cuda:0 when it has cuDNN; `None` after printing why
/// the test skips (and, with a GPU but no cuDNN, after checking that a
/// convolution falls back instead of failing).
fn gpu_with_cudnn() -> Option<(std::sync::MutexGuard<'static, ()>, CudaBackend)> {
    let (guard, be) = gpu()?;
    match be.ctx().cudnn() {
        Ok(_) => Some((guard, be)),
        Err(reason) => {
            let p = problem(
                DTypeKind::F32,
                [1, 1, 3, 3],
                [1, 1, 1],
                [0, 0],
                [1, 1],
                [1, 1],
                1,
                false,
            );
            let out = conv_forward(be.ctx(), &p, 0, 0, 0, 0.0).expect("no error");
            assert!(matches!(out, Outcome::Fallback(_)), "{out:?}");
            eprintln!("skipping: cuDNN not available ({reason})");
            None
        }
    }
}

/// Random problems around the shapes of small convnets: strides,
/// padding, dilation, groups and depthwise, both layouts.
fn problems(rng: &mut SplitMix64, dtype: DTypeKind) -> Vec<ConvProblem> {
    let mut pick = |lo: usize, hi: usize| lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize;
    let mut out = Vec::new();
    for nhwc in [false, true] {
        // Plain 3x3, padding 1.
        let c = pick(1, 8);
        out.push(problem(
            dtype,
            [pick(1, 3), c, pick(5, 12), pick(5, 12)],
            [pick(1, 9), 3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            nhwc,
        ));
        // Stride 2, uneven kernel and padding.
        out.push(problem(
            dtype,
            [2, pick(1, 6), pick(7, 15), pick(7, 15)],
            [pick(1, 6), 3, 2],
            [1, 0],
            [2, 2],
            [1, 1],
            1,
            nhwc,
        ));
        // Dilation 2, stride 1 and 3.
        out.push(problem(
            dtype,
            [1, pick(2, 5), 11, 13],
            [4, 3, 3],
            [2, 1],
            [1, 3],
            [2, 2],
            1,
            nhwc,
        ));
        // Groups.
        let g = pick(2, 3);
        out.push(problem(
            dtype,
            [2, 2 * g, 9, 8],
            [3 * g, 3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            g,
            nhwc,
        ));
        // Depthwise, with a channel multiplier of 1 and 2.
        let c = pick(2, 8);
        out.push(problem(
            dtype,
            [2, c, 10, 9],
            [c, 3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            c,
            nhwc,
        ));
        out.push(problem(
            dtype,
            [1, c, 8, 8],
            [2 * c, 5, 5],
            [2, 2],
            [2, 2],
            [1, 1],
            c,
            nhwc,
        ));
        // 1x1, the ResNet projection, stride 2.
        out.push(problem(
            dtype,
            [2, 8, 8, 8],
            [16, 1, 1],
            [0, 0],
            [2, 2],
            [1, 1],
            1,
            nhwc,
        ));
    }
    out
}

/// Each problem through the backend graph's engines (where one takes
/// it), then through the legacy algorithms alone.
fn check_dtype<T: DType>(be: &CudaBackend, rng: &mut SplitMix64) {
    for p in problems(rng, T::KIND) {
        let checked = check_problem::<T>(be, rng, &p)
            .and_then(|()| legacy_only(|| check_problem::<T>(be, rng, &p)));
        if let Err(reason) = checked {
            // cuDNN's f64 support is narrower (channels-last, some
            // groupings): a fallback there is handled by the caller. The
            // other dtypes are what cuDNN is for.
            eprintln!("cuDNN fell back for {}: {reason}", p.describe());
            assert!(
                T::KIND == DTypeKind::F64,
                "f32, f16 and bf16 convolutions must run on cuDNN: {reason}"
            );
        }
    }
}

#[test]
fn conv_matches_f64_reference_in_f32() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    check_dtype::<f32>(&be, &mut seed());
}

#[test]
fn conv_matches_f64_reference_in_f64() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    check_dtype::<f64>(&be, &mut seed());
}

#[test]
fn conv_matches_f64_reference_in_f16() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    check_dtype::<f16>(&be, &mut seed());
}

#[test]
fn conv_matches_f64_reference_in_bf16() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    if be.ctx().compute_capability.0 < 8 {
        eprintln!("skipping: bf16 convolutions need sm_80");
        return;
    }
    check_dtype::<bf16>(&be, &mut seed());
}

#[test]
fn tf32_conv_is_close_to_f64() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    let mut rng = seed();
    let mut p = problem(
        DTypeKind::F32,
        [4, 32, 14, 14],
        [32, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        1,
        true,
    );
    p.tf32 = true;
    let x: Vec<f32> = random(
        &mut rng,
        span([p.n, p.c_in, p.h, p.w], p.x_strides),
        -1.0,
        1.0,
    );
    let w: Vec<f32> = random(&mut rng, span(p.w_dims(), w_strides(&p)), -1.0, 1.0);
    let (xd, wd) = (up(&be, &x), up(&be, &w));
    let yd = filled::<f32>(&be, span(p.y_dims(), p.y_strides), 0.0);
    let out = conv_forward(
        be.ctx(),
        &p,
        xd.device_ptr(),
        wd.device_ptr(),
        yd.device_ptr(),
        0.0,
    );
    assert_eq!(out.expect("tf32 forward"), Outcome::Done);
    let mut want = vec![0.0; p.y_dims().iter().product()];
    let (xl, wl) = (
        logical(&x, [p.n, p.c_in, p.h, p.w], p.x_strides),
        logical(&w, p.w_dims(), w_strides(&p)),
    );
    each_term(&p, |xi, wi, yi| {
        want[flat(yi, p.y_dims())] +=
            xl[flat(xi, [p.n, p.c_in, p.h, p.w])] * wl[flat(wi, p.w_dims())];
    });
    let got = logical(&down(&yd, &[yd.len()]), p.y_dims(), p.y_strides);
    // TF32 keeps 10 mantissa bits of each input.
    assert_close(
        "tf32 forward",
        &got,
        &want,
        (2e-3, 2e-3 * (32.0f64 * 9.0).sqrt()),
    );
}

#[test]
fn padded_strides_run_or_fall_back() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    let mut rng = seed();
    let mut p = problem(
        DTypeKind::F32,
        [2, 3, 6, 7],
        [4, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        1,
        false,
    );
    // Rows of 7 stored 10 apart, images 200 apart: a sliced view.
    p.x_strides = [200, 60, 10, 1];
    if let Err(reason) = check_problem::<f32>(&be, &mut rng, &p) {
        eprintln!("cuDNN fell back for padded strides: {reason}");
    }
}

#[test]
fn second_call_reuses_the_plan() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    let mut rng = seed();
    let ctx = be.ctx();
    let dnn = ctx.cudnn().expect("cuDNN loaded above");
    let p = problem(
        DTypeKind::F32,
        [2, 3, 9, 9],
        [5, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        1,
        false,
    );
    let counts = || {
        let plans = lock(&dnn.plans);
        (plans.len(), plans.built, plans.ranked)
    };
    check_problem::<f32>(&be, &mut rng, &p).expect("cuDNN runs a plain f32 conv");
    let first = counts();
    check_problem::<f32>(&be, &mut rng, &p).expect("second call");
    assert_eq!(
        counts(),
        first,
        "the same problem builds nothing and asks no heuristic"
    );
    let mut q = p;
    q.stride = [2, 2];
    q.y_strides = problem(
        DTypeKind::F32,
        [2, 3, 9, 9],
        [5, 3, 3],
        [1, 1],
        [2, 2],
        [1, 1],
        1,
        false,
    )
    .y_strides;
    let yd = filled::<f32>(&be, q.y_dims().iter().product(), 0.0);
    let (xd, wd) = (
        filled::<f32>(&be, 2 * 3 * 81, 0.5),
        filled::<f32>(&be, 5 * 27, 0.5),
    );
    let out = conv_forward(
        ctx,
        &q,
        xd.device_ptr(),
        wd.device_ptr(),
        yd.device_ptr(),
        0.0,
    );
    assert_eq!(out.expect("forward"), Outcome::Done);
    let (len, built, ranked) = counts();
    assert_eq!(
        (len, built),
        (first.0 + 1, first.1 + 1),
        "a new problem is planned once"
    );
    // The graph's heuristic, and the legacy one where no engine takes it.
    assert!(
        (first.2 + 1..=first.2 + 2).contains(&ranked),
        "{ranked} after {}",
        first.2
    );
}

#[test]
fn workspace_limit_is_bounded() {
    assert_eq!(workspace_limit(1 << 30), 128 << 20);
    assert_eq!(workspace_limit(80 << 30), 2 << 30);
    assert_eq!(workspace_limit(128 << 20), 64 << 20);
}

#[test]
fn a_missing_library_is_a_reason_not_a_panic() {
    let reason = load(&["libtensorfn_no_such_cudnn.so.9".to_string()]).unwrap_err();
    assert!(
        reason.contains("libtensorfn_no_such_cudnn.so.9"),
        "{reason}"
    );
    assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
    let line = notice_text(&reason);
    assert!(line.starts_with("tensorfn: cuDNN not found ("), "{line}");
    assert!(
        line.ends_with("); convolutions run on the built-in GPU kernels (im2col and cuBLAS)"),
        "{line}"
    );
    assert!(!line.contains('\n'));
}

#[test]
fn a_bogus_library_falls_back_on_a_gpu() {
    let Some((_serial, be)) = gpu() else { return };
    let bogus = load(&["libtensorfn_no_such_cudnn.so.9".to_string()]);
    let reason = create_cudnn(be.ctx(), &bogus).err().expect("no handle");
    assert!(reason.contains("libtensorfn_no_such_cudnn"), "{reason}");
    // Turned off, every entry point falls back before touching a pointer.
    let p = problem(
        DTypeKind::F32,
        [1, 2, 4, 4],
        [3, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        1,
        false,
    );
    let ctx = be.ctx();
    without_cudnn(|| {
        let outs = [
            conv_forward(ctx, &p, 0, 0, 0, 0.0),
            conv_add_bias(ctx, &p, 0, 0),
            conv_backward_data(ctx, &p, 0, 0, 0, 0.0),
            conv_backward_filter(ctx, &p, 0, 0, 0, 1.0),
            conv_backward_bias(ctx, &p, 0, 0, 0.0),
        ];
        for out in outs {
            assert!(matches!(out, Ok(Outcome::Fallback(_))), "{out:?}");
        }
    });
}

#[test]
fn versions_read_as_releases() {
    assert_eq!(version_text(90100), "9.1.0");
    assert_eq!(version_text(91002), "9.10.2");
    assert_eq!(version_text(8907), "8.9.7");
}

#[test]
fn output_sizes_follow_pytorch() {
    // (H + 2p - d(k - 1) - 1) / s + 1
    let p = problem(
        DTypeKind::F32,
        [1, 3, 224, 224],
        [64, 7, 7],
        [3, 3],
        [2, 2],
        [1, 1],
        1,
        false,
    );
    assert_eq!(p.out_hw(), Some([112, 112]));
    let p = problem(
        DTypeKind::F32,
        [1, 1, 11, 13],
        [1, 3, 3],
        [2, 1],
        [1, 3],
        [2, 2],
        1,
        false,
    );
    assert_eq!(p.out_hw(), Some([11, 4]));
    let mut p = problem(
        DTypeKind::F32,
        [1, 1, 2, 2],
        [1, 3, 3],
        [0, 0],
        [1, 1],
        [1, 1],
        1,
        false,
    );
    assert_eq!(p.out_hw(), None);
    p.pad = [1, 1];
    assert_eq!(p.out_hw(), Some([2, 2]));
}

#[test]
fn bad_problems_are_errors_and_empty_ones_fall_back() {
    let ok = problem(
        DTypeKind::F32,
        [2, 4, 5, 5],
        [6, 3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        2,
        false,
    );
    assert_eq!(ok.check().unwrap(), None);
    let mut p = ok;
    p.groups = 3;
    let e = p.check().unwrap_err();
    assert!(e.to_string().contains("groups"), "{e}");
    let mut p = ok;
    p.dtype = DTypeKind::I32;
    assert!(matches!(p.check(), Err(Error::DType { .. })));
    let mut p = ok;
    p.stride = [0, 1];
    assert!(p.check().is_err());
    let mut p = ok;
    p.pad = [0, 0];
    p.kh = 7;
    assert!(p.check().unwrap_err().to_string().contains("padded input"));
    let mut p = ok;
    p.n = 0;
    let reason = p.check().unwrap().expect("a fallback");
    assert!(reason.contains("empty"), "{reason}");
    let mut p = ok;
    p.x_strides[0] = 1 << 31;
    assert!(p.check().unwrap().expect("a fallback").contains("32-bit"));
}

/// Times `dir` of `p` on the device, planned afresh: the legacy
/// algorithms (timed, as a plan does) and the backend graph's engines
/// (timed), each the mean of 50 calls after 5 warm-up calls, printed as
/// one line with what each path chose.
fn time_direction(be: &CudaBackend, name: &str, p: &ConvProblem, dir: Direction) {
    use crate::cuda::event::Event;
    let ctx = be.ctx();
    let size = |dims: [usize; 4]| dims.iter().product::<usize>() * p.dtype.size_bytes();
    let bytes = |n: usize| ctx.storage::<u8>(n).expect("alloc");
    let (xd, wd, yd) = (
        bytes(size([p.n, p.c_in, p.h, p.w])),
        bytes(size(p.w_dims())),
        bytes(size(p.y_dims())),
    );
    let (x, w, y) = (xd.device_ptr(), wd.device_ptr(), yd.device_ptr());
    let run = || {
        let out = match dir {
            Direction::Forward => conv_forward(ctx, p, x, w, y, 0.0),
            Direction::BackwardData => conv_backward_data(ctx, p, y, w, x, 0.0),
            Direction::BackwardFilter => conv_backward_filter(ctx, p, x, y, w, 0.0),
        };
        assert_eq!(out.expect("convolution"), Outcome::Done, "{name}");
    };
    let dnn = ctx.cudnn().expect("cuDNN loaded above");
    let measure = || {
        lock(&dnn.plans).forget(p);
        for _ in 0..5 {
            run();
        }
        let (start, end) = (Event::timing().unwrap(), Event::timing().unwrap());
        let iters = 50;
        start.record(ctx.stream).unwrap();
        for _ in 0..iters {
            run();
        }
        end.record(ctx.stream).unwrap();
        end.synchronize("timing").unwrap();
        let ms = end.elapsed_ms(&start).unwrap() as f64 / iters as f64;
        let plans = lock(&dnn.plans);
        let chosen = plans.chosen(p, dir).expect("ran");
        (chosen, plans.graph_declined(p, dir), ms)
    };
    let (legacy, _, ms_legacy) = legacy_only(measure);
    let (graph, declined, ms) = measure();
    let flops = 2.0
        * p.y_dims().iter().product::<usize>() as f64
        * (p.c_in / p.groups * p.kh * p.kw) as f64;
    let path = if graph.graph {
        format!("graph engine {} of {:?}", graph.chosen, graph.heuristic)
    } else {
        format!(
            "legacy algo {} (graph declined: {declined:?})",
            graph.chosen
        )
    };
    println!(
        "cudnn conv2d {name} {dir:?}: {ms:.4} ms, {:.1} TFLOP/s, {path}, timed {}; \
         legacy alone: algo {} {ms_legacy:.4} ms ({:.2}x)",
        flops / ms / 1e9,
        graph.timed,
        legacy.chosen,
        ms_legacy / ms,
    );
}

/// The convolutions of issue 24's table (NHWC activations, a KRSC
/// filter, NHWC output), the 3x3 one in every direction.
fn timed_cases() -> [(&'static str, ConvProblem); 3] {
    let case = |dtype, x, k, pad, stride| {
        let mut p = problem(dtype, x, k, pad, stride, [1, 1], 1, true);
        p.tf32 = true;
        p
    };
    [
        (
            "bf16 N32 64->64 56x56 3x3",
            case(
                DTypeKind::BF16,
                [32, 64, 56, 56],
                [64, 3, 3],
                [1, 1],
                [1, 1],
            ),
        ),
        (
            "f32 (TF32) same",
            case(DTypeKind::F32, [32, 64, 56, 56], [64, 3, 3], [1, 1], [1, 1]),
        ),
        (
            "bf16 N32 3->64 224x224 7x7 s2",
            case(
                DTypeKind::BF16,
                [32, 3, 224, 224],
                [64, 7, 7],
                [3, 3],
                [2, 2],
            ),
        ),
    ]
}

/// Times the forward convolutions of issue 24's table on the device:
/// `cargo test --release -p tensorfn-runtime --lib
/// cudnn::tests::time_forward -- --ignored --nocapture`.
#[test]
#[ignore = "timing, run by hand on a GPU"]
fn time_forward() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    for (name, p) in timed_cases() {
        time_direction(&be, name, &p, Direction::Forward);
    }
}

/// Times the backward passes (data and filter) of the table's 3x3
/// convolution, bf16 and TF32: `cudnn::tests::time_backward`.
#[test]
#[ignore = "timing, run by hand on a GPU"]
fn time_backward() {
    let Some((_serial, be)) = gpu_with_cudnn() else {
        return;
    };
    for (name, p) in timed_cases().into_iter().take(2) {
        for dir in [Direction::BackwardData, Direction::BackwardFilter] {
            time_direction(&be, name, &p, dir);
        }
    }
}
