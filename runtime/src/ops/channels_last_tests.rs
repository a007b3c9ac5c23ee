//! Channels-last inputs on the CPU: convolutions, pools, batch norm and
//! elementwise ops, forward and backward, give the values of the same
//! inputs stored row-major (against f64 references where there is
//! arithmetic), and keep the channels-last order in their results.

use crate::random::SplitMix64;
use crate::{shape, BatchNormArgs, ConvArgs, Cpu, Pool2d, Tensor};
use tensorfn_kernels::UnaryOp;

/// Deterministic values in `[-1, 1)`, a fresh stream per seed.
fn values(n: usize, seed: u64) -> Vec<f64> {
    SplitMix64::new(seed).uniforms(n, -1.0, 1.0)
}

/// Every product of PyTorch's `F.conv2d`, from its definition: `tap(o,
/// xi, wi)` for output element `o` (row-major `[N, C_out, OH, OW]`),
/// input element `xi` and weight element `wi` (row-major both), skipping
/// the padding. Returns the output's element count.
fn conv_taps(
    xd: [usize; 4],
    wd: [usize; 4],
    a: &ConvArgs,
    mut tap: impl FnMut(usize, usize, usize),
) -> usize {
    let [n, c, h, wi] = xd;
    let [k, cg, kh, kw] = wd;
    let oh = (h + 2 * a.padding[0] - a.dilation[0] * (kh - 1) - 1) / a.stride[0] + 1;
    let ow = (wi + 2 * a.padding[1] - a.dilation[1] * (kw - 1) - 1) / a.stride[1] + 1;
    let kg = k / a.groups;
    for i in 0..n * k * oh * ow {
        let (img, o, r, q) = (i / (k * oh * ow), i / (oh * ow) % k, i / ow % oh, i % ow);
        let g = o / kg;
        for ci in 0..cg {
            for u in 0..kh {
                for v in 0..kw {
                    let yy = (r * a.stride[0] + u * a.dilation[0]) as isize - a.padding[0] as isize;
                    let xx = (q * a.stride[1] + v * a.dilation[1]) as isize - a.padding[1] as isize;
                    if yy < 0 || xx < 0 || yy as usize >= h || xx as usize >= wi {
                        continue;
                    }
                    let xi = ((img * c + g * cg + ci) * h + yy as usize) * wi + xx as usize;
                    tap(i, xi, ((o * cg + ci) * kh + u) * kw + v);
                }
            }
        }
    }
    n * k * oh * ow
}

/// PyTorch's `F.conv2d` in f64, directly from its definition.
fn conv_ref(
    x: &[f64],
    xd: [usize; 4],
    w: &[f64],
    wd: [usize; 4],
    b: &[f64],
    a: &ConvArgs,
) -> Vec<f64> {
    let mut acc = Vec::new();
    let len = conv_taps(xd, wd, a, |o, xi, wi| {
        acc.resize(acc.len().max(o + 1), 0.0);
        acc[o] += x[xi] * w[wi];
    });
    acc.resize(len, 0.0);
    let plane = len / (xd[0] * wd[0]).max(1);
    acc.iter()
        .enumerate()
        .map(|(o, v)| b[o / plane % wd[0]] + v)
        .collect()
}

#[test]
fn conv2d_on_channels_last_input_matches_and_stays_channels_last() {
    type X = shape![2, 4, 5, 6];
    type W = shape![6, 2, 3, 3];
    let (xv, wv, bv) = (values(240, 1), values(108, 2), values(6, 3));
    let x = Tensor::<Cpu, f64, X>::from_vec(xv.clone()).unwrap();
    let w = Tensor::<Cpu, f64, W>::from_vec(wv.clone()).unwrap();
    let b = Tensor::<Cpu, f64, shape![6]>::from_vec(bv.clone()).unwrap();
    let a = args();
    let want = conv_ref(&xv, [2, 4, 5, 6], &wv, [6, 2, 3, 3], &bv, &a);
    let xc = x.contiguous_channels_last().unwrap();
    assert_eq!(xc.layout().strides(), &[120, 1, 24, 4]);
    // OH = (5 + 2 - 2 - 1) / 2 + 1 = 3, OW = (6 + 4 - 4 - 1) + 1 = 6.
    let y: Tensor<Cpu, f64, shape![2, 6, 3, 6]> = x.conv2d(&w, Some(&b), a).unwrap();
    let yc: Tensor<Cpu, f64, shape![2, 6, 3, 6]> = xc.conv2d(&w, Some(&b), a).unwrap();
    assert!(y.is_contiguous());
    assert_eq!(
        yc.layout().strides(),
        &[108, 1, 36, 6],
        "channels-last result"
    );
    let (got, got_cl) = (y.to_vec().unwrap(), yc.to_vec().unwrap());
    assert_eq!(got, got_cl, "the same values in either order");
    close(&got, &want, "conv2d");
    // f32 with NaN and infinities: the same bits either way.
    let mut v32: Vec<f32> = xv.iter().map(|&v| v as f32).collect();
    v32[7] = f32::NAN;
    v32[100] = f32::INFINITY;
    v32[101] = -0.0;
    let x32 = Tensor::<Cpu, f32, X>::from_vec(v32).unwrap();
    let w32 = Tensor::<Cpu, f32, W>::from_vec(wv.iter().map(|&v| v as f32).collect()).unwrap();
    let a: Tensor<Cpu, f32, shape![2, 6, 3, 6]> = x32.conv2d(&w32, None, args()).unwrap();
    let c: Tensor<Cpu, f32, shape![2, 6, 3, 6]> = x32
        .contiguous_channels_last()
        .unwrap()
        .conv2d(&w32, None, args())
        .unwrap();
    let bits = |t: &Tensor<Cpu, f32, shape![2, 6, 3, 6]>| {
        t.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&a), bits(&c));
    assert!(a.to_vec().unwrap().iter().any(|v| v.is_nan()));
}

/// Sizes known only at run time with strides that do not divide them:
/// each output size is `(H + 2p - d(k-1) - 1) / s + 1` rounded down, as
/// PyTorch's, and one below 1 is an `Err` naming the operand and the dim.
#[test]
fn conv2d_and_pools_over_run_time_sizes_round_down() {
    type Any4 = shape![_, _, _, _];
    let mut seed = 10;
    for (h, w, stride) in [(7, 4, 2), (6, 9, 2), (10, 5, 3), (1, 1, 2)] {
        seed += 3;
        let a = ConvArgs {
            stride: [stride, stride],
            padding: [1, 1],
            ..Default::default()
        };
        let (xd, wd) = ([2, 2, h, w], [3, 2, 3, 3]);
        let (xv, wv, bv) = (
            values(4 * h * w, seed),
            values(54, seed + 1),
            values(3, seed + 2),
        );
        let x = Tensor::<Cpu, f64, Any4>::from_vec_dims(xv.clone(), &xd).unwrap();
        let wt = Tensor::<Cpu, f64, shape![3, 2, 3, 3]>::from_vec(wv.clone()).unwrap();
        let b = Tensor::<Cpu, f64, shape![3]>::from_vec(bv.clone()).unwrap();
        let y: Tensor<Cpu, f64, Any4> = x.conv2d(&wt, Some(&b), a).unwrap();
        let out = |n: usize| (n + 2 - 2 - 1) / stride + 1;
        assert_eq!(
            y.shape(),
            &[2, 3, out(h), out(w)],
            "{h}x{w} stride {stride}"
        );
        close(
            &y.to_vec().unwrap(),
            &conv_ref(&xv, xd, &wv, wd, &bv, &a),
            "conv2d",
        );
        let p: Tensor<Cpu, f64, Any4> = x.pool2d(Pool2d::max(3).stride(stride).padding(1)).unwrap();
        assert_eq!(p.shape(), &[2, 2, out(h), out(w)], "max_pool2d {h}x{w}");
    }
    let x = Tensor::<Cpu, f64, Any4>::from_vec_dims(values(20, 30), &[1, 2, 2, 5]).unwrap();
    let wt = Tensor::<Cpu, f64, shape![3, 2, 3, 3]>::from_vec(values(54, 31)).unwrap();
    let a = ConvArgs {
        stride: [2, 2],
        ..Default::default()
    };
    let e = x
        .conv2d::<Any4, _, _, _, _>(&wt, None, a)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("output height of `input` is (2 + 2·0 - 1·(3-1) - 1)/2 + 1 = 0"),
        "{e}"
    );
    let e = x
        .pool2d::<Any4>(Pool2d::max(3).stride(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("output the height (dim -2) of 0"), "{e}");
}

/// Strided, padded, dilated and grouped: every option the layouts meet.
fn args() -> ConvArgs {
    ConvArgs {
        stride: [2, 1],
        padding: [1, 2],
        dilation: [1, 2],
        groups: 2,
    }
}

#[test]
fn conv1d_on_a_channel_fastest_input_keeps_its_order() {
    // [N, C, L] stored as [N, L, C].
    let xv = values(2 * 3 * 7, 4);
    let x = Tensor::<Cpu, f64, shape![2, 3, 7]>::from_vec(xv).unwrap();
    let xl = channel_fastest(&x);
    let w = Tensor::<Cpu, f64, shape![4, 3, 2]>::from_vec(values(24, 5)).unwrap();
    let y: Tensor<Cpu, f64, shape![2, 4, 6]> = x.conv1d(&w, None, Default::default()).unwrap();
    let yl: Tensor<Cpu, f64, shape![2, 4, 6]> = xl.conv1d(&w, None, Default::default()).unwrap();
    assert_eq!(yl.layout().strides(), &[24, 1, 4]);
    assert_eq!(y.to_vec().unwrap(), yl.to_vec().unwrap());
}

#[test]
fn pools_on_channels_last_input_match_and_stay_channels_last() {
    let mut xv = values(2 * 3 * 7 * 6, 6);
    xv[5] = f64::NAN;
    xv[40] = f64::NEG_INFINITY;
    xv[41] = -0.0;
    let x = Tensor::<Cpu, f64, shape![2, 3, 7, 6]>::from_vec(xv).unwrap();
    let xc = x.contiguous_channels_last().unwrap();
    // Each kind, with the result dims spelled out.
    let check = |a: Vec<f64>, b: Vec<f64>, what: &str| {
        assert_eq!(a.len(), b.len());
        for (i, (u, v)) in a.iter().zip(&b).enumerate() {
            assert!(
                u.to_bits() == v.to_bits(),
                "{what} element {i}: {u} against {v}"
            );
        }
    };
    let m = Pool2d::max(3).stride(2).padding(1);
    let a: Tensor<Cpu, f64, shape![2, 3, 4, 3]> = x.pool2d(m).unwrap();
    let b: Tensor<Cpu, f64, shape![2, 3, 4, 3]> = xc.pool2d(m).unwrap();
    assert!(b.layout().is_channels_last() && !b.is_contiguous());
    assert!(a.to_vec().unwrap()[2].is_nan(), "NaN wins its window");
    check(a.to_vec().unwrap(), b.to_vec().unwrap(), "max_pool2d");
    let v = Pool2d::avg(2).stride(2).padding(1);
    let a: Tensor<Cpu, f64, shape![2, 3, 4, 4]> = x.pool2d(v).unwrap();
    let b: Tensor<Cpu, f64, shape![2, 3, 4, 4]> = xc.pool2d(v).unwrap();
    assert_eq!(b.layout().strides(), &[48, 1, 12, 3]);
    check(a.to_vec().unwrap(), b.to_vec().unwrap(), "avg_pool2d");
    let a: Tensor<Cpu, f64, shape![2, 3, 1, 1]> = x.adaptive_avg_pool2d(1).unwrap();
    let b: Tensor<Cpu, f64, shape![2, 3, 1, 1]> = xc.adaptive_avg_pool2d(1).unwrap();
    // `[N, C, 1, 1]` is both orders: row-major, so `flatten` is a view.
    assert!(b.is_contiguous());
    check(
        a.to_vec().unwrap(),
        b.to_vec().unwrap(),
        "adaptive_avg_pool2d",
    );
    // An empty batch.
    let e = Tensor::<Cpu, f64, shape![0, 3, 7, 6]>::zeros().unwrap();
    let r: Tensor<Cpu, f64, shape![0, 3, 3, 3]> =
        e.contiguous_channels_last().unwrap().max_pool2d(2).unwrap();
    assert!(r.to_vec().unwrap().is_empty());
}

#[test]
fn elementwise_ops_and_batch_norm_keep_channels_last() {
    let x = Tensor::<Cpu, f64, shape![2, 3, 4, 5]>::from_vec(values(120, 7)).unwrap();
    let r = Tensor::<Cpu, f64, shape![2, 3, 4, 5]>::from_vec(values(120, 8)).unwrap();
    let scale = Tensor::<Cpu, f64, shape![1, 3, 1, 1]>::from_vec(values(3, 9)).unwrap();
    let (xc, rc) = (
        x.contiguous_channels_last().unwrap(),
        r.contiguous_channels_last().unwrap(),
    );
    // relu(x * scale + r), the residual block's tail, in both orders.
    let run = |x: &Tensor<Cpu, f64, shape![2, 3, 4, 5]>,
               r: &Tensor<Cpu, f64, shape![2, 3, 4, 5]>| {
        let h: Tensor<Cpu, f64, shape![2, 3, 4, 5]> = x.mul_broadcast(&scale).unwrap();
        let h = h.add(r).unwrap();
        (h.unary(UnaryOp::Relu).unwrap(), h.mul_scalar(2.0).unwrap())
    };
    let (a, a2) = run(&x, &r);
    let (b, b2) = run(&xc, &rc);
    assert!(nhwc(b.layout()) && nhwc(b2.layout()) && a.is_contiguous());
    let (xv, rv, sv) = (
        x.to_vec().unwrap(),
        r.to_vec().unwrap(),
        scale.to_vec().unwrap(),
    );
    let want: Vec<f64> = (0..120)
        .map(|i| (xv[i] * sv[i / 20 % 3] + rv[i]).max(0.0))
        .collect();
    assert_eq!(a.to_vec().unwrap(), want);
    assert_eq!(b.to_vec().unwrap(), want);
    assert_eq!(a2.to_vec().unwrap(), b2.to_vec().unwrap());
    // The first operand of the full shape sets the order.
    let mixed = x.add(&rc).unwrap();
    assert!(mixed.is_contiguous());
    assert_eq!(
        mixed.to_vec().unwrap(),
        rc.add(&x).unwrap().to_vec().unwrap()
    );
    assert!(nhwc(rc.add(&x).unwrap().layout()));
    // batch_norm accepts channels-last input in both modes.
    let mean = Tensor::<Cpu, f64, shape![3]>::from_vec(values(3, 10)).unwrap();
    let var = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![0.5, 1.0, 2.0]).unwrap();
    for args in [BatchNormArgs::eval(), BatchNormArgs::train()] {
        let (mut m1, mut v1, mut m2, mut v2) =
            (mean.clone(), var.clone(), mean.clone(), var.clone());
        let a = x
            .batch_norm(Some(&mut m1), Some(&mut v1), None, None, args)
            .unwrap();
        let b = xc
            .batch_norm(Some(&mut m2), Some(&mut v2), None, None, args)
            .unwrap();
        let (a, b) = (a.to_vec().unwrap(), b.to_vec().unwrap());
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-12, "{args:?}: {u} against {v}");
        }
        assert_eq!(m1.to_vec().unwrap().len(), m2.to_vec().unwrap().len());
    }
}

/// `x` (`[N, C, L]`) stored as `[N, L, C]`: its channels fastest.
fn channel_fastest(x: &Tensor<Cpu, f64, shape![2, 3, 7]>) -> Tensor<Cpu, f64, shape![2, 3, 7]> {
    x.permute::<shape![2, 7, 3]>(&[0, 2, 1])
        .unwrap()
        .contiguous()
        .unwrap()
        .permute::<shape![2, 3, 7]>(&[0, 2, 1])
        .unwrap()
}

/// Whether `l` is channels-last and not also row-major.
fn nhwc(l: &crate::Layout) -> bool {
    l.is_channels_last() && !l.is_contiguous()
}

/// Asserts `got` equals the f64 reference `want` to rounding.
fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, r)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - r).abs() <= 1e-12 * (1.0 + r.abs()),
            "{what} element {i}: {g} against {r}"
        );
    }
}

/// The gradients of PyTorch's `F.conv2d` in f64 for the output gradient
/// `g`, from the definition: `(dx, dw)`.
fn conv_backward_ref(
    x: &[f64],
    xd: [usize; 4],
    w: &[f64],
    wd: [usize; 4],
    g: &[f64],
    a: &ConvArgs,
) -> (Vec<f64>, Vec<f64>) {
    let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; w.len()]);
    conv_taps(xd, wd, a, |o, xi, wi| {
        dx[xi] += g[o] * w[wi];
        dw[wi] += g[o] * x[xi];
    });
    (dx, dw)
}

#[test]
fn conv2d_gradients_take_their_operands_memory_format() {
    type X = shape![2, 4, 5, 6];
    type W = shape![6, 2, 3, 3];
    type Y = shape![2, 6, 3, 6];
    let (xv, wv, gv) = (values(240, 11), values(108, 12), values(216, 13));
    let x = Tensor::<Cpu, f64, X>::from_vec(xv.clone()).unwrap();
    let w = Tensor::<Cpu, f64, W>::from_vec(wv.clone()).unwrap();
    let g = Tensor::<Cpu, f64, Y>::from_vec(gv.clone()).unwrap();
    let (want_dx, want_dw) = conv_backward_ref(&xv, [2, 4, 5, 6], &wv, [6, 2, 3, 3], &gv, &args());
    let (xc, wc, gc) = (
        x.contiguous_channels_last().unwrap(),
        w.contiguous_channels_last().unwrap(),
        g.contiguous_channels_last().unwrap(),
    );
    // Every pairing of the three operands' formats.
    for (xi, wi, gi) in (0..8).map(|m| (m & 1 != 0, m & 2 != 0, m & 4 != 0)) {
        let x = if xi { &xc } else { &x };
        let w = if wi { &wc } else { &w };
        let g = if gi { &gc } else { &g };
        let what = format!("x nhwc {xi}, w krsc {wi}, g nhwc {gi}");
        let (dx, dw, db) = x.conv2d_backward(w, g, args()).unwrap();
        assert_eq!(nhwc(dx.layout()), xi, "{what}: dx's format");
        assert_eq!(nhwc(dw.layout()), wi, "{what}: dw's format");
        if xi {
            assert_eq!(dx.layout().strides(), &[120, 1, 24, 4]);
        }
        if wi {
            assert_eq!(dw.layout().strides(), &[18, 1, 6, 2]);
        }
        close(&dx.to_vec().unwrap(), &want_dx, &format!("{what}: dx"));
        close(&dw.to_vec().unwrap(), &want_dw, &format!("{what}: dw"));
        let want_db: Vec<f64> = (0..6)
            .map(|o| (0..216).filter(|i| i / 18 % 6 == o).map(|i| gv[i]).sum())
            .collect();
        close(&db.to_vec().unwrap(), &want_db, &format!("{what}: db"));
    }
    // conv1d: a channel-fastest input's gradient keeps its order.
    let x1 = Tensor::<Cpu, f64, shape![2, 3, 7]>::from_vec(values(42, 14)).unwrap();
    let x1l = channel_fastest(&x1);
    let w1 = Tensor::<Cpu, f64, shape![4, 3, 2]>::from_vec(values(24, 15)).unwrap();
    let g1 = Tensor::<Cpu, f64, shape![2, 4, 6]>::from_vec(values(48, 16)).unwrap();
    let (a, aw, _) = x1.conv1d_backward(&w1, &g1, Default::default()).unwrap();
    let (b, bw, _) = x1l.conv1d_backward(&w1, &g1, Default::default()).unwrap();
    assert!(a.is_contiguous() && bw.is_contiguous());
    assert_eq!(b.layout().strides(), &[21, 1, 3]);
    close(&b.to_vec().unwrap(), &a.to_vec().unwrap(), "conv1d dx");
    close(&bw.to_vec().unwrap(), &aw.to_vec().unwrap(), "conv1d dw");
    // An empty batch.
    let e = Tensor::<Cpu, f64, shape![0, 4, 5, 6]>::zeros()
        .unwrap()
        .contiguous_channels_last()
        .unwrap();
    let ge = Tensor::<Cpu, f64, shape![0, 6, 3, 6]>::zeros().unwrap();
    let (dx, dw, _) = e.conv2d_backward(&w, &ge, args()).unwrap();
    assert!(dx.to_vec().unwrap().is_empty());
    assert_eq!(dw.to_vec().unwrap(), vec![0.0; 108]);
}

/// The gradient of a `[N, C, 7, 6]` pooling in f64 for `g` of the
/// result: max of 3x3 windows, stride 2, padding 1 (to each window's
/// first largest element), or avg of 2x2 windows, stride 2 (a quarter
/// each).
fn pool_backward_ref(x: &[f64], g: &[f64], nc: usize, max: bool) -> Vec<f64> {
    let (h, w) = (7usize, 6usize);
    let (oh, ow) = if max { (4, 3) } else { (3, 3) };
    let mut dx = vec![0.0; x.len()];
    for p in 0..nc {
        for (r, q) in (0..oh).flat_map(|r| (0..ow).map(move |q| (r, q))) {
            let gv = g[(p * oh + r) * ow + q];
            if !max {
                for (u, v) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    dx[(p * h + 2 * r + u) * w + 2 * q + v] += gv / 4.0;
                }
                continue;
            }
            let mut best: Option<usize> = None;
            for u in 0..3 {
                for v in 0..3 {
                    let (yy, xx) = ((2 * r + u) as isize - 1, (2 * q + v) as isize - 1);
                    if yy < 0 || xx < 0 || yy as usize >= h || xx as usize >= w {
                        continue;
                    }
                    let i = (p * h + yy as usize) * w + xx as usize;
                    if best.is_none_or(|b| x[i] > x[b]) {
                        best = Some(i);
                    }
                }
            }
            dx[best.unwrap()] += gv;
        }
    }
    dx
}

#[test]
fn pool_gradients_of_channels_last_inputs_are_channels_last() {
    let xv = values(2 * 3 * 7 * 6, 17);
    let x = Tensor::<Cpu, f64, shape![2, 3, 7, 6]>::from_vec(xv.clone()).unwrap();
    let xc = x.contiguous_channels_last().unwrap();
    let m = Pool2d::max(3).stride(2).padding(1);
    let gm = Tensor::<Cpu, f64, shape![2, 3, 4, 3]>::from_vec(values(72, 18)).unwrap();
    let v = Pool2d::avg(2).stride(2);
    let ga = Tensor::<Cpu, f64, shape![2, 3, 3, 3]>::from_vec(values(54, 19)).unwrap();
    let gp = Tensor::<Cpu, f64, shape![2, 3, 1, 1]>::from_vec(values(6, 20)).unwrap();
    let cases = [
        (m, gm.to_vec().unwrap(), "max_pool2d"),
        (v, ga.to_vec().unwrap(), "avg_pool2d"),
    ];
    for (pool, g, what) in cases {
        let want = pool_backward_ref(&xv, &g, 6, what == "max_pool2d");
        let run = |x: &Tensor<Cpu, f64, shape![2, 3, 7, 6]>| match what {
            "max_pool2d" => x.pool2d_backward(&gm, pool).unwrap(),
            _ => x.pool2d_backward(&ga, pool).unwrap(),
        };
        let (a, b) = (run(&x), run(&xc));
        assert!(a.is_contiguous(), "{what}");
        assert_eq!(b.layout().strides(), &[126, 1, 18, 3], "{what}");
        close(&a.to_vec().unwrap(), &want, what);
        close(&b.to_vec().unwrap(), &want, what);
    }
    // adaptive_avg_pool2d to 1x1: each element gets its channel's share.
    let a = x.pool2d_backward(&gp, Pool2d::adaptive_avg(1)).unwrap();
    let b = xc.pool2d_backward(&gp, Pool2d::adaptive_avg(1)).unwrap();
    assert!(a.is_contiguous() && nhwc(b.layout()));
    let gv = gp.to_vec().unwrap();
    let want: Vec<f64> = (0..252).map(|i| gv[i / 42] / 42.0).collect();
    close(&a.to_vec().unwrap(), &want, "adaptive_avg_pool2d");
    close(&b.to_vec().unwrap(), &want, "adaptive_avg_pool2d");
    // NaN, infinities and signed zeros: the same bits in either format.
    let mut ev = xv.clone();
    (ev[5], ev[40], ev[41], ev[60]) = (f64::NAN, f64::NEG_INFINITY, -0.0, f64::INFINITY);
    let e = Tensor::<Cpu, f64, shape![2, 3, 7, 6]>::from_vec(ev).unwrap();
    let ec = e.contiguous_channels_last().unwrap();
    let bits = |t: Tensor<Cpu, f64, shape![2, 3, 7, 6]>| {
        t.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bits(e.pool2d_backward(&gm, m).unwrap()),
        bits(ec.pool2d_backward(&gm, m).unwrap())
    );
}

#[test]
fn batch_norm_and_its_gradient_keep_channels_last() {
    type X = shape![2, 3, 4, 5];
    let (xv, gv) = (values(120, 21), values(120, 22));
    let (wv, bv) = (values(3, 23), values(3, 24));
    let x = Tensor::<Cpu, f64, X>::from_vec(xv.clone()).unwrap();
    let g = Tensor::<Cpu, f64, X>::from_vec(gv.clone()).unwrap();
    let w = Tensor::<Cpu, f64, shape![3]>::from_vec(wv.clone()).unwrap();
    let b = Tensor::<Cpu, f64, shape![3]>::from_vec(bv.clone()).unwrap();
    let (xc, gc) = (
        x.contiguous_channels_last().unwrap(),
        g.contiguous_channels_last().unwrap(),
    );
    let eps = 1e-5;
    // Each channel's 40 elements, their biased mean and variance.
    let ch = |c: usize| (0..120).filter(move |i| i / 20 % 3 == c);
    let mean: Vec<f64> = (0..3)
        .map(|c| ch(c).map(|i| xv[i]).sum::<f64>() / 40.0)
        .collect();
    let var: Vec<f64> = (0..3)
        .map(|c| ch(c).map(|i| (xv[i] - mean[c]).powi(2)).sum::<f64>() / 40.0)
        .collect();
    let xhat = |i: usize| (xv[i] - mean[i / 20 % 3]) / (var[i / 20 % 3] + eps).sqrt();
    let want_y: Vec<f64> = (0..120)
        .map(|i| xhat(i) * wv[i / 20 % 3] + bv[i / 20 % 3])
        .collect();
    let mg: Vec<f64> = (0..3)
        .map(|c| ch(c).map(|i| gv[i]).sum::<f64>() / 40.0)
        .collect();
    let mgx: Vec<f64> = (0..3)
        .map(|c| ch(c).map(|i| gv[i] * xhat(i)).sum::<f64>() / 40.0)
        .collect();
    let want_dx: Vec<f64> = (0..120)
        .map(|i| {
            let c = i / 20 % 3;
            wv[c] / (var[c] + eps).sqrt() * (gv[i] - mg[c] - xhat(i) * mgx[c])
        })
        .collect();
    let args = BatchNormArgs::train();
    for (xi, gi) in [(false, false), (true, true), (true, false), (false, true)] {
        let (x, g) = (if xi { &xc } else { &x }, if gi { &gc } else { &g });
        let what = format!("x nhwc {xi}, g nhwc {gi}");
        let y = x.batch_norm(None, None, Some(&w), Some(&b), args).unwrap();
        assert_eq!(nhwc(y.layout()), xi, "{what}: y's format");
        close(&y.to_vec().unwrap(), &want_y, &format!("{what}: y"));
        let (dx, dw, db) = x
            .batch_norm_backward(None, None, Some(&w), g, args)
            .unwrap();
        assert_eq!(nhwc(dx.layout()), xi, "{what}: dx's format");
        if xi {
            assert_eq!(dx.layout().strides(), &[60, 1, 15, 3]);
        }
        close(&dx.to_vec().unwrap(), &want_dx, &format!("{what}: dx"));
        let want_db: Vec<f64> = mg.iter().map(|m| m * 40.0).collect();
        let want_dw: Vec<f64> = mgx.iter().map(|m| m * 40.0).collect();
        close(&db.to_vec().unwrap(), &want_db, &format!("{what}: db"));
        close(&dw.to_vec().unwrap(), &want_dw, &format!("{what}: dw"));
    }
    // Inference: `g * weight / sqrt(running_var + eps)`, same format.
    let rm = Tensor::<Cpu, f64, shape![3]>::from_vec(values(3, 25)).unwrap();
    let rv = Tensor::<Cpu, f64, shape![3]>::from_vec(vec![0.5, 1.0, 2.0]).unwrap();
    let (dx, _, _) = xc
        .batch_norm_backward(Some(&rm), Some(&rv), Some(&w), &g, BatchNormArgs::eval())
        .unwrap();
    assert!(nhwc(dx.layout()));
    let rvv = rv.to_vec().unwrap();
    let want: Vec<f64> = (0..120)
        .map(|i| gv[i] * wv[i / 20 % 3] / (rvv[i / 20 % 3] + eps).sqrt())
        .collect();
    close(&dx.to_vec().unwrap(), &want, "eval dx");
    // `[N, C, 1, 1]` is both orders: row-major.
    let p = Tensor::<Cpu, f64, shape![4, 3, 1, 1]>::from_vec(values(12, 26)).unwrap();
    let y = p
        .contiguous_channels_last()
        .unwrap()
        .batch_norm(None, None, None, None, args)
        .unwrap();
    assert!(y.is_contiguous());
}
