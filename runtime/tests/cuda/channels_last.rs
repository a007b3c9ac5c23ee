//! Channels-last tensors on the GPU: convolutions (cuDNN, and the
//! built-in kernels with cuDNN off), pools, elementwise ops and batch
//! norm give the values of the same inputs stored row-major, and keep the
//! channels-last order (strides as PyTorch's `channels_last`). Skips with
//! a one-line notice when no GPU is present.

use crate::gpu;
use gpu::{has_gpu, seed};

use tensorfn_kernels::UnaryOp;
use tensorfn_runtime::{
    bf16, set_cudnn_enabled, shape, BatchNormArgs, ConvArgs, Cpu, Cuda, FloatDType, Pool2d, Tensor,
};

type X = shape![4, 16, 14, 12];
type W = shape![32, 16, 3, 3];
type Y = shape![4, 32, 7, 12];

/// A fresh random tensor of `S` in `[-1, 1)`, on the CPU.
fn rand<S: tensorfn_runtime::Shape>() -> Tensor<Cpu, f64, S> {
    Tensor::<Cpu, f64, S>::rand(seed())
        .unwrap()
        .mul_scalar(2.0)
        .unwrap()
        .add_scalar(-1.0)
        .unwrap()
}

fn channels_last<S: tensorfn_runtime::Shape, T: FloatDType>(t: &Tensor<Cuda, T, S>) -> bool {
    t.layout().is_channels_last() && !t.is_contiguous()
}

/// `got` within `tol * (1 + |want|)` of `want`, NaN where it is NaN.
fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: {g} against {w}");
    }
}

/// `t` in `T` on the GPU.
fn dev<T: FloatDType, S: tensorfn_runtime::Shape>(t: &Tensor<Cpu, f64, S>) -> Tensor<Cuda, T, S> {
    t.cast::<T>().unwrap().to_device::<Cuda>().unwrap()
}

/// The bits of each element of a bf16 tensor, in logical order.
fn bits<S: tensorfn_runtime::Shape>(t: &Tensor<Cuda, bf16, S>) -> Vec<u16> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

fn values<S: tensorfn_runtime::Shape, T: FloatDType>(t: &Tensor<Cuda, T, S>) -> Vec<f64> {
    t.cast::<f64>().unwrap().to_vec().unwrap()
}

fn conv_case<T: FloatDType>(tol: f64) {
    let (x, w, b) = (rand::<X>(), rand::<W>(), rand::<shape![32]>());
    let args = ConvArgs {
        stride: [2, 1],
        padding: [1, 1],
        ..Default::default()
    };
    let want: Tensor<Cpu, f64, Y> = x.conv2d(&w, Some(&b), args).unwrap();
    let want = want.to_vec().unwrap();
    let xg: Tensor<Cuda, T, X> = dev(&x);
    let wg: Tensor<Cuda, T, W> = dev(&w);
    let bg: Tensor<Cuda, T, shape![32]> = dev(&b);
    let (xl, wl) = (
        xg.contiguous_channels_last().unwrap(),
        wg.contiguous_channels_last().unwrap(),
    );
    for cudnn in [true, false] {
        set_cudnn_enabled(cudnn);
        let what = format!("conv2d {} cudnn {cudnn}", T::KIND.name());
        let nchw: Tensor<Cuda, T, Y> = xg.conv2d(&wg, Some(&bg), args).unwrap();
        let nhwc: Tensor<Cuda, T, Y> = xl.conv2d(&wl, Some(&bg), args).unwrap();
        assert!(nchw.is_contiguous(), "{what}");
        assert!(
            channels_last(&nhwc),
            "{what}: strides {:?}",
            nhwc.layout().strides()
        );
        assert_eq!(nhwc.layout().strides(), &[2688, 1, 384, 32]);
        close(&format!("{what} nchw"), &values(&nchw), &want, tol);
        close(&format!("{what} nhwc"), &values(&nhwc), &want, tol);
        // An NCHW filter with channels-last images: still channels-last.
        let mixed: Tensor<Cuda, T, Y> = xl.conv2d(&wg, Some(&bg), args).unwrap();
        assert!(channels_last(&mixed), "{what}");
        close(&format!("{what} mixed"), &values(&mixed), &want, tol);
    }
    set_cudnn_enabled(true);
}

#[test]
fn conv2d_keeps_channels_last_and_matches_nchw() {
    if !has_gpu() {
        return;
    }
    conv_case::<f32>(1e-4);
    conv_case::<bf16>(8e-2);
}

#[test]
fn pools_keep_channels_last_with_the_same_bits() {
    if !has_gpu() {
        return;
    }
    let mut v = rand::<shape![3, 24, 15, 13]>().to_vec().unwrap();
    v[17] = f64::NAN;
    v[300] = f64::INFINITY;
    v[301] = f64::NEG_INFINITY;
    let x = Tensor::<Cpu, f64, shape![3, 24, 15, 13]>::from_vec(v).unwrap();
    let xg = x.cast::<bf16>().unwrap().to_device::<Cuda>().unwrap();
    let xl = xg.contiguous_channels_last().unwrap();
    let m = Pool2d::max(3).stride(2).padding(1);
    let a: Tensor<Cuda, bf16, shape![3, 24, 8, 7]> = xg.pool2d(m).unwrap();
    let b: Tensor<Cuda, bf16, shape![3, 24, 8, 7]> = xl.pool2d(m).unwrap();
    assert!(channels_last(&b) && a.is_contiguous());
    assert_eq!(b.layout().strides(), &[1344, 1, 168, 24]);
    assert_eq!(bits(&a), bits(&b), "max_pool2d");
    let cpu: Tensor<Cpu, bf16, shape![3, 24, 8, 7]> = x.cast::<bf16>().unwrap().pool2d(m).unwrap();
    let cpu: Vec<u16> = cpu.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits(&b), cpu, "max_pool2d against the CPU");
    let v = Pool2d::avg(2).stride(2).padding(1);
    let a: Tensor<Cuda, bf16, shape![3, 24, 8, 7]> = xg.pool2d(v).unwrap();
    let b: Tensor<Cuda, bf16, shape![3, 24, 8, 7]> = xl.pool2d(v).unwrap();
    assert!(channels_last(&b));
    assert_eq!(bits(&a), bits(&b), "avg_pool2d");
    let a: Tensor<Cuda, bf16, shape![3, 24, 1, 1]> = xg.adaptive_avg_pool2d(1).unwrap();
    let b: Tensor<Cuda, bf16, shape![3, 24, 1, 1]> = xl.adaptive_avg_pool2d(1).unwrap();
    assert!(b.is_contiguous(), "[N, C, 1, 1] is both orders");
    assert_eq!(bits(&a), bits(&b), "adaptive_avg_pool2d");
    let a: Tensor<Cuda, bf16, shape![3, 24, 4, 3]> = xg.adaptive_avg_pool2d([4, 3]).unwrap();
    let b: Tensor<Cuda, bf16, shape![3, 24, 4, 3]> = xl.adaptive_avg_pool2d([4, 3]).unwrap();
    assert!(channels_last(&b));
    assert_eq!(bits(&a), bits(&b), "adaptive_avg_pool2d 4x3");
}

#[test]
fn elementwise_and_batch_norm_accept_and_keep_channels_last() {
    if !has_gpu() {
        return;
    }
    type S = shape![4, 16, 9, 11];
    let (x, r) = (rand::<S>(), rand::<S>());
    let s = rand::<shape![1, 16, 1, 1]>();
    let xg: Tensor<Cuda, f32, S> = dev(&x);
    let rg: Tensor<Cuda, f32, S> = dev(&r);
    let sg: Tensor<Cuda, f32, shape![1, 16, 1, 1]> = dev(&s);
    let (xl, rl) = (
        xg.contiguous_channels_last().unwrap(),
        rg.contiguous_channels_last().unwrap(),
    );
    let tail = |x: &Tensor<Cuda, f32, S>, r: &Tensor<Cuda, f32, S>| {
        let h: Tensor<Cuda, f32, S> = x.mul_broadcast(&sg).unwrap();
        h.add(r).unwrap().unary(UnaryOp::Relu).unwrap()
    };
    let (a, b) = (tail(&xg, &rg), tail(&xl, &rl));
    assert!(channels_last(&b) && a.is_contiguous());
    assert_eq!(a.to_vec().unwrap(), b.to_vec().unwrap());
    let mean: Tensor<Cuda, f32, shape![16]> = dev(&rand::<shape![16]>());
    let var: Tensor<Cuda, f32, shape![16]> = dev(&rand::<shape![16]>()
        .unary(UnaryOp::Abs)
        .unwrap()
        .add_scalar(0.5)
        .unwrap());
    for args in [BatchNormArgs::eval(), BatchNormArgs::train()] {
        let (mut m1, mut v1, mut m2, mut v2) =
            (mean.clone(), var.clone(), mean.clone(), var.clone());
        let a = xg
            .batch_norm(Some(&mut m1), Some(&mut v1), None, None, args)
            .unwrap();
        let b = xl
            .batch_norm(Some(&mut m2), Some(&mut v2), None, None, args)
            .unwrap();
        let (a, b) = (values(&a), values(&b));
        close(&format!("batch_norm {args:?}"), &b, &a, 1e-5);
        close("running mean", &values(&m2), &values(&m1), 1e-6);
        close("running var", &values(&v2), &values(&v1), 1e-6);
    }
}
