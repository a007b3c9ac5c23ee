//! GPU tests of the backend primitives against f64 references computed on
//! the host. Each test skips with a one-line notice when no CUDA device is
//! present.

use super::alloc::CudaStorage;
use super::backend::CudaBackend;
use super::blas::set_allow_tf32;
use super::context::{context, lock};
use super::grid::set_elementwise_autotune;
use super::launch::{launch_fused, Builtin, ModuleKey};
use super::lt::set_matmul_autotune;
use super::transfer::{download, upload_to};
use crate::backend::Backend;
use crate::dtype::{DType, DTypeKind};
use crate::error::Error;
use crate::layout::Layout;
use crate::ops::dispatch::ProductExtra;
use crate::random::SplitMix64;
use half::{bf16, f16};
use std::sync::{Mutex, MutexGuard};
use tensorfn_kernels::abi::FusedKernel;
use tensorfn_kernels::{BinaryOp, NormOp, ReduceOp, RowOp, RowShape, UnaryOp};

/// The backend of cuda:0, with a lock that runs the GPU tests one at a
/// time (they read the shared allocator's counters), or `None` after
/// printing why the test skips.
pub(super) fn gpu() -> Option<(MutexGuard<'static, ()>, CudaBackend)> {
    static SERIAL: Mutex<()> = Mutex::new(());
    match CudaBackend::for_ordinal(0) {
        Ok(b) => Some((SERIAL.lock().unwrap_or_else(|p| p.into_inner()), b)),
        Err(e) => {
            eprintln!("skipping: no CUDA device ({e})");
            None
        }
    }
}

/// Fresh uniform values in `[lo, hi)` as `T` (integers truncated).
pub(super) fn random<T: DType>(rng: &mut SplitMix64, n: usize, lo: f64, hi: f64) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f64(lo + (hi - lo) * rng.uniform()))
        .collect()
}

pub(crate) fn seed() -> SplitMix64 {
    // A different stream each run: the inputs must not be tuned to pass.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    SplitMix64::new(t)
}

pub(super) fn up<T: DType>(be: &CudaBackend, data: &[T]) -> CudaStorage<T> {
    upload_to(be.ctx(), data).expect("upload")
}

pub(super) fn down<T: DType>(s: &CudaStorage<T>, dims: &[usize]) -> Vec<T> {
    download(s, &Layout::contiguous(dims)).expect("download")
}

/// Relative precision of a dtype, for tolerances.
pub(super) fn eps(t: DTypeKind) -> f64 {
    match t {
        DTypeKind::F64 => 1e-15,
        DTypeKind::F32 => 1.2e-7,
        DTypeKind::F16 => 9.8e-4,
        DTypeKind::BF16 => 7.9e-3,
        _ => 0.0,
    }
}

/// Asserts `got` matches `want` within `atol + rtol * |want|`, NaN only
/// where NaN is expected.
fn assert_close<T: DType>(what: &str, got: &[T], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
            continue;
        }
        assert!(
            (g - w).abs() <= atol + rtol * w.abs() || (g.is_infinite() && g == *w),
            "{what}[{i}]: got {g}, want {w} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Host values selected by a layout, in row-major order.
fn gather<T: Copy>(data: &[T], l: &Layout) -> Vec<T> {
    l.offsets().map(|i| data[i]).collect()
}

/// Layouts exercising every path: contiguous, transposed, sliced with an
/// offset, broadcast, and empty. Each is `(description, storage len, layout)`.
fn views() -> Vec<(&'static str, usize, Layout)> {
    vec![
        ("contiguous [3, 5, 7]", 105, Layout::contiguous(&[3, 5, 7])),
        (
            "permuted [7, 3, 5]",
            105,
            Layout::contiguous(&[3, 5, 7]).permute(&[2, 0, 1]),
        ),
        (
            "sliced [2, 3, 4] at an offset",
            105,
            Layout::contiguous(&[3, 5, 7])
                .slice(0, 1, 3)
                .slice(1, 1, 4)
                .slice(2, 2, 6),
        ),
        (
            "broadcast [4, 6] from [6]",
            6,
            Layout::contiguous(&[6]).broadcast_to(&[4, 6]),
        ),
        ("scalar []", 1, Layout::contiguous(&[])),
        ("empty [3, 0, 2]", 0, Layout::contiguous(&[3, 0, 2])),
        (
            "large [1031, 257]",
            1031 * 257,
            Layout::contiguous(&[1031, 257]),
        ),
    ]
}

#[test]
fn transfers_round_trip_every_dtype() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: DType>(be: &CudaBackend, rng: &mut SplitMix64, n: usize) {
        let data: Vec<T> = random(rng, n, -100.0, 100.0);
        let s = up(be, &data);
        assert_eq!(down(&s, &[n]), data, "{} round trip of {n}", T::KIND);
    }
    // 0, tiny, and more than two staging halves (8 MiB each) of f32.
    for n in [0, 1, 1000, 5_000_001] {
        check::<f32>(&be, &mut rng, n);
    }
    check::<f64>(&be, &mut rng, 4097);
    check::<f16>(&be, &mut rng, 4097);
    check::<bf16>(&be, &mut rng, 4097);
    check::<i32>(&be, &mut rng, 4097);
    check::<i64>(&be, &mut rng, 4097);
    let bytes: Vec<u8> = random(&mut rng, 4097, 0.0, 256.0);
    assert_eq!(down(&up(&be, &bytes), &[4097]), bytes);
    let bools: Vec<bool> = (0..4097).map(|_| rng.uniform() < 0.5).collect();
    assert_eq!(down(&up(&be, &bools), &[4097]), bools);
}

/// Small uploads through the staging ring, queued back to back without
/// a read in between, several rings' worth (so it comes round and waits),
/// with the ring's largest size, one byte past it (the halves), empty
/// ones and a large one in between: every buffer holds its own bytes.
#[test]
fn small_uploads_through_the_ring_keep_their_bytes() {
    use super::staging::{RING_BYTES, SMALL_BYTES};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let mut sizes: Vec<usize> = vec![1, SMALL_BYTES, SMALL_BYTES + 1, 0, 3, 17];
    let mut total = 0;
    while total < 3 * RING_BYTES {
        let n = 1 + (rng.uniform() * (SMALL_BYTES / 8) as f64) as usize;
        total += n;
        sizes.push(n);
    }
    sizes.insert(sizes.len() / 2, 3 << 20);
    let mut kept = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = random(&mut rng, n, 0.0, 256.0);
        kept.push((i, up(&be, &data), data));
    }
    for (i, s, data) in &kept {
        assert!(
            down(s, &[data.len()]) == *data,
            "upload {i} of {} bytes",
            data.len()
        );
    }
}

#[test]
fn downloads_of_views_match_the_host() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    for (what, len, l) in views() {
        let data: Vec<f64> = random(&mut rng, len, -1.0, 1.0);
        let s = up(&be, &data);
        assert_eq!(download(&s, &l).unwrap(), gather(&data, &l), "{what}");
        let c = be.contiguous(&s, &l).unwrap();
        assert_eq!(down(&c, l.dims()), gather(&data, &l), "contiguous {what}");
    }
}

#[test]
fn full_writes_every_dtype() {
    let Some((_serial, be)) = gpu() else { return };
    fn check<T: DType>(be: &CudaBackend, v: T) {
        for n in [0, 1, 3, 100_003] {
            let s = be.full(n, v).unwrap();
            assert_eq!(down(&s, &[n]), vec![v; n], "full {} {v}", T::KIND);
        }
    }
    check(&be, -1.25f32);
    check(&be, 0.0f64);
    check(&be, -3.5e300f64);
    check(&be, f16::from_f32(0.333));
    check(&be, bf16::from_f32(-7.5));
    check(&be, -123_456i32);
    check(&be, i64::MIN + 5);
    check(&be, 0xa5u8);
    check(&be, true);
}

#[test]
fn copy_into_writes_a_strided_destination() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let src: Vec<i32> = random(&mut rng, 12, -1000.0, 1000.0);
    let s = up(&be, &src);
    let before: Vec<i32> = random(&mut rng, 40, -1000.0, 1000.0);
    let mut d = up(&be, &before);
    // Write a [3, 4] source into the transpose of a [4, 3] block inside
    // a [5, 8] buffer, i.e. a strided, offset destination.
    let ld = Layout::contiguous(&[5, 8])
        .slice(0, 1, 5)
        .slice(1, 2, 5)
        .transpose(0, 1);
    let ls = Layout::contiguous(&[3, 4]);
    be.copy_into(&s, &ls, &mut d, &ld).unwrap();
    let mut want = before.clone();
    for (i, o) in ld.offsets().enumerate() {
        want[o] = src[i];
    }
    assert_eq!(down(&d, &[40]), want);
    // A destination view that runs past its buffer is an Err, not a fault.
    let too_far = Layout::new(vec![3, 4], vec![10, 1], 17);
    assert!(matches!(
        be.copy_into(&s, &ls, &mut d, &too_far),
        Err(Error::Index(_))
    ));
}

#[test]
fn products_with_an_activation_in_the_epilogue_match_f64() {
    use crate::device::{Cpu, Cuda};
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type M = (Dyn, Dyn);
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    // A linear layer with its activation: the GELU (tanh form) and ReLU
    // epilogues of cuBLASLt (bias per column), and a full-matrix bias
    // (the product then the activation's kernel), against f64.
    fn run<T: crate::FloatDType>(rng: &mut SplitMix64, act: UnaryOp, full_bias: bool) {
        let (m, k, n) = (67, 128, 96);
        let x: Vec<T> = random(rng, m * k, -1.0, 1.0);
        let w: Vec<T> = random(rng, k * n, -0.2, 0.2);
        let nb = if full_bias { m * n } else { n };
        let b: Vec<T> = random(rng, nb, -1.0, 1.0);
        let xt = Tensor::<Cpu, T, M>::from_vec_dims(x.clone(), &[m, k]).unwrap();
        let wt = Tensor::<Cpu, T, M>::from_vec_dims(w.clone(), &[k, n]).unwrap();
        let gpu = if full_bias {
            let bt = Tensor::<Cpu, T, M>::from_vec_dims(b.clone(), &[m, n]).unwrap();
            Tensor::addmm_act(
                &bt.to_device::<Cuda>().unwrap(),
                &xt.to_device::<Cuda>().unwrap(),
                &wt.to_device::<Cuda>().unwrap(),
                act,
            )
        } else {
            let bt = Tensor::<Cpu, T, (Dyn,)>::from_vec_dims(b.clone(), &[n]).unwrap();
            Tensor::addmm_act(
                &bt.to_device::<Cuda>().unwrap(),
                &xt.to_device::<Cuda>().unwrap(),
                &wt.to_device::<Cuda>().unwrap(),
                act,
            )
        }
        .unwrap()
        .to_vec()
        .unwrap();
        let tol = eps(T::KIND).max(1e-6) * 4.0;
        for i in 0..m {
            for j in 0..n {
                let mut acc = b[if full_bias { i * n + j } else { j }].to_f64();
                for t in 0..k {
                    acc += x[i * k + t].to_f64() * w[t * n + j].to_f64();
                }
                let want = act.eval_f64(acc);
                let got = gpu[i * n + j].to_f64();
                assert!(
                    (got - want).abs() <= tol * (1.0 + want.abs()) + 1e-5,
                    "{:?} {act:?} full bias {full_bias}: ({i}, {j}) is {got}, f64 gives {want}",
                    T::KIND
                );
            }
        }
    }
    for act in [UnaryOp::Gelu, UnaryOp::Relu] {
        for full in [false, true] {
            run::<bf16>(&mut rng, act, full);
            run::<f16>(&mut rng, act, full);
            run::<f32>(&mut rng, act, full);
        }
    }
}

#[test]
fn strided_copies_move_every_element_bit_for_bit_at_every_width() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    // Views of a [2, 5, 3, 4, 8] buffer (a batch of `qkv` rows: T = 5,
    // three of H = 4 heads of D = 8): head splits as GPT-2 takes them
    // (widened to 8-byte words), a narrowed last dim (4-byte words for
    // 2-byte elements), an odd offset (no widening), a transpose of the
    // last dim (element by element), and empty and 1-element views.
    let base = Layout::contiguous(&[2, 5, 3, 4, 8]);
    let views: Vec<Layout> = vec![
        base.select(2, 1).transpose(1, 2),
        base.select(2, 2).transpose(1, 2).slice(3, 2, 6),
        base.select(2, 0).slice(3, 1, 8).transpose(1, 2),
        base.select(2, 0).transpose(2, 3),
        base.slice(1, 0, 0),
        base.select(0, 1)
            .select(0, 4)
            .select(0, 2)
            .select(0, 3)
            .slice(0, 5, 6),
    ];
    fn check<T: DType>(be: &CudaBackend, rng: &mut SplitMix64, views: &[Layout]) {
        let data: Vec<T> = random(rng, 2 * 5 * 3 * 4 * 8, -100.0, 100.0);
        let s = up(be, &data);
        for l in views {
            let want: Vec<T> = l.offsets().map(|o| data[o]).collect();
            let got = down(&be.contiguous(&s, l).unwrap(), l.dims());
            let bits = |v: &[T]| v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{:?} over {l:?}", T::KIND);
            // And into a strided destination: the transpose of a buffer.
            if l.rank() >= 2 {
                let r = l.rank();
                let mut dims = l.dims().to_vec();
                dims.swap(r - 2, r - 1);
                let ld = Layout::contiguous(&dims).transpose(r - 2, r - 1);
                let mut d = be.full::<T>(ld.numel(), T::from_f64(0.0)).unwrap();
                be.copy_into(&s, l, &mut d, &ld).unwrap();
                let back = down(&be.contiguous(&d, &ld).unwrap(), l.dims());
                assert_eq!(bits(&back), bits(&want), "{:?} into {ld:?}", T::KIND);
            }
        }
    }
    check::<bf16>(&be, &mut rng, &views);
    check::<f16>(&be, &mut rng, &views);
    check::<f32>(&be, &mut rng, &views);
    check::<u8>(&be, &mut rng, &views);
    check::<f64>(&be, &mut rng, &views);
}

fn unary_input(op: UnaryOp) -> (f64, f64) {
    op.test_domain()
}

#[test]
fn unary_ops_match_f64_on_every_view_and_float_dtype() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType>(be: &CudaBackend, rng: &mut SplitMix64, op: UnaryOp) {
        let (lo, hi) = unary_input(op);
        let e = eps(T::KIND);
        for (what, len, l) in views() {
            let data: Vec<T> = random(rng, len, lo, hi);
            let s = up(be, &data);
            let got = down(&be.unary(op, &s, &l).unwrap(), l.dims());
            let want: Vec<f64> = gather(&data, &l)
                .iter()
                .map(|x| op.eval_f64(x.to_f64()))
                .collect();
            let what = format!("{} {} {what}", op.name(), T::KIND);
            assert_close(&what, &got, &want, 4.0 * e, 4.0 * e);
        }
    }
    for op in UnaryOp::ALL {
        check::<f32>(&be, &mut rng, op);
        check::<f64>(&be, &mut rng, op);
        check::<f16>(&be, &mut rng, op);
        check::<bf16>(&be, &mut rng, op);
        if !op.needs_float() {
            check::<i32>(&be, &mut rng, op);
            check::<i64>(&be, &mut rng, op);
        }
    }
    // u8: no negation; small values keep squares in range.
    for op in [UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Square] {
        let data: Vec<u8> = random(&mut rng, 300, 0.0, 16.0);
        let l = Layout::contiguous(&[300]);
        let got = down(&be.unary(op, &up(&be, &data), &l).unwrap(), &[300]);
        let want: Vec<f64> = data.iter().map(|&x| op.eval_f64(x as f64)).collect();
        assert_close(&format!("{} u8", op.name()), &got, &want, 0.0, 0.0);
    }
}

/// Input ranges that keep every op of a dtype in range (no overflow, no
/// division by zero, positive bases for `pow`).
fn binary_inputs(op: BinaryOp, t: DTypeKind) -> ((f64, f64), (f64, f64)) {
    match (op, t) {
        (BinaryOp::Pow, _) => ((0.5, 2.0), (-2.0, 2.0)),
        (_, DTypeKind::U8) => ((16.0, 32.0), (1.0, 8.0)),
        (BinaryOp::Div, _) if !t.is_float() => ((-1000.0, 1000.0), (1.0, 50.0)),
        (BinaryOp::Div, _) => ((-10.0, 10.0), (0.5, 3.0)),
        _ => ((-100.0, 100.0), (-100.0, 100.0)),
    }
}

/// Binary op in f64 with integer division truncating like Rust.
fn binary_ref(op: BinaryOp, t: DTypeKind, a: f64, b: f64) -> f64 {
    if op == BinaryOp::Div && !t.is_float() {
        return (a / b).trunc();
    }
    op.eval_f64(a, b)
}

/// Asserts the GPU's `op` of `a` and `b` (views of one output shape)
/// equals [`binary_ref`] within four ulps of `T`.
fn binary_matches_f64<T: crate::NumDType>(
    be: &CudaBackend,
    op: BinaryOp,
    (a, la): (&[T], &Layout),
    (b, lb): (&[T], &Layout),
    what: &str,
) {
    let got = down(
        &be.binary(op, &up(be, a), la, &up(be, b), lb).unwrap(),
        la.dims(),
    );
    let want: Vec<f64> = la
        .offsets()
        .zip(lb.offsets())
        .map(|(i, j)| binary_ref(op, T::KIND, a[i].to_f64(), b[j].to_f64()))
        .collect();
    let e = eps(T::KIND);
    assert_close(what, &got, &want, 4.0 * e, 4.0 * e);
}

#[test]
fn binary_ops_broadcast_and_match_f64() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType>(be: &CudaBackend, rng: &mut SplitMix64, op: BinaryOp) {
        let ((alo, ahi), (blo, bhi)) = binary_inputs(op, T::KIND);
        let e = eps(T::KIND);
        // [4, 1, 5] against a transposed [3, 5] view: output [4, 3, 5].
        let out = [4, 3, 5];
        let la = Layout::contiguous(&[4, 1, 5]).broadcast_to(&out);
        let lb = Layout::contiguous(&[5, 3])
            .transpose(0, 1)
            .broadcast_to(&out);
        let a: Vec<T> = random(rng, 20, alo, ahi);
        let b: Vec<T> = random(rng, 15, blo, bhi);
        let what = format!("{} {}", op.name(), T::KIND);
        binary_matches_f64(be, op, (&a, &la), (&b, &lb), &what);
        // Contiguous, same shape, large enough for many blocks.
        let n = 70_001;
        let l = Layout::contiguous(&[n]);
        let a: Vec<T> = random(rng, n, alo, ahi);
        let b: Vec<T> = random(rng, n, blo, bhi);
        binary_matches_f64(be, op, (&a, &l), (&b, &l), &format!("{what} contiguous"));
        // A scalar on either side.
        let s = T::from_f64((blo + bhi) / 2.0 + 0.25);
        let ls = Layout::contiguous(&[7, 3]).transpose(0, 1);
        let x: Vec<T> = random(rng, 21, alo, ahi);
        let xs = up(be, &x);
        for first in [false, true] {
            let out_of_range = match op {
                BinaryOp::Pow => true,
                BinaryOp::Div => !T::KIND.is_float(),
                BinaryOp::Sub => T::KIND == DTypeKind::U8,
                _ => false,
            };
            if first && out_of_range {
                continue; // the ranges above are for x op s only
            }
            let got = down(
                &be.binary_scalar(op, &xs, &ls, s, first).unwrap(),
                ls.dims(),
            );
            let want: Vec<f64> = ls
                .offsets()
                .map(|i| {
                    let (p, q) = if first {
                        (s.to_f64(), x[i].to_f64())
                    } else {
                        (x[i].to_f64(), s.to_f64())
                    };
                    binary_ref(op, T::KIND, p, q)
                })
                .collect();
            assert_close(
                &format!("{what} scalar first={first}"),
                &got,
                &want,
                4.0 * e,
                4.0 * e,
            );
        }
    }
    for op in BinaryOp::ALL {
        check::<f32>(&be, &mut rng, op);
        check::<f64>(&be, &mut rng, op);
        check::<f16>(&be, &mut rng, op);
        check::<bf16>(&be, &mut rng, op);
        if !op.needs_float() {
            check::<i32>(&be, &mut rng, op);
            check::<i64>(&be, &mut rng, op);
            check::<u8>(&be, &mut rng, op);
        }
    }
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    let Some((_serial, be)) = gpu() else { return };
    let a = [1.0f32, f32::NAN, 3.0, f32::NAN];
    let b = [f32::NAN, 2.0, -1.0, f32::NAN];
    let l = Layout::contiguous(&[4]);
    for op in [BinaryOp::Max, BinaryOp::Min] {
        let got = down(
            &be.binary(op, &up(&be, &a), &l, &up(&be, &b), &l).unwrap(),
            &[4],
        );
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| op.eval_f64(x as f64, y as f64))
            .collect();
        assert_close(op.name(), &got, &want, 0.0, 0.0);
    }
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn to<T: DType, U: DType>(be: &CudaBackend, data: &[T], l: &Layout) {
        let s = up(be, data);
        let got: Vec<U> = down(&be.cast::<T, U>(&s, l).unwrap(), l.dims());
        let want: Vec<U> = gather(data, l).into_iter().map(|x| x.cast::<U>()).collect();
        assert_eq!(
            got,
            want,
            "cast {} -> {} of {:?}",
            T::KIND,
            U::KIND,
            gather(data, l)
        );
    }
    fn from<T: DType>(be: &CudaBackend, data: &[T]) {
        // A transposed view, so the strided entry runs too.
        let l = Layout::contiguous(&[data.len() / 2, 2]).transpose(0, 1);
        let c = Layout::contiguous(&[data.len()]);
        for layout in [&c, &l] {
            to::<T, f32>(be, data, layout);
            to::<T, f64>(be, data, layout);
            to::<T, f16>(be, data, layout);
            to::<T, bf16>(be, data, layout);
            to::<T, i32>(be, data, layout);
            to::<T, i64>(be, data, layout);
            to::<T, bool>(be, data, layout);
        }
    }
    // Values every target holds exactly (f16/bf16 integers up to 256),
    // so the comparison can be exact.
    let ints: Vec<f64> = (0..64)
        .map(|_| (rng.uniform() * 512.0 - 256.0).trunc() / 2.0)
        .collect();
    let ints: Vec<f64> = ints.iter().map(|v| v.trunc()).collect();
    from::<f32>(&be, &ints.iter().map(|&v| v as f32).collect::<Vec<_>>());
    from::<f64>(&be, &ints);
    from::<f16>(
        &be,
        &ints.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(),
    );
    from::<bf16>(
        &be,
        &ints.iter().map(|&v| bf16::from_f64(v)).collect::<Vec<_>>(),
    );
    from::<i32>(&be, &ints.iter().map(|&v| v as i32).collect::<Vec<_>>());
    from::<i64>(&be, &ints.iter().map(|&v| v as i64).collect::<Vec<_>>());
    from::<bool>(&be, &ints.iter().map(|&v| v != 0.0).collect::<Vec<_>>());
    let bytes: Vec<u8> = random(&mut rng, 64, 0.0, 256.0);
    from::<u8>(&be, &bytes);
    // Into u8, from values inside its range.
    let small: Vec<f32> = random(&mut rng, 64, 0.0, 255.0);
    let small: Vec<f32> = small.iter().map(|v| v.trunc()).collect();
    to::<f32, u8>(&be, &small, &Layout::contiguous(&[64]));
    to::<i64, u8>(
        &be,
        &small.iter().map(|&v| v as i64).collect::<Vec<_>>(),
        &Layout::contiguous(&[64]),
    );
    // Fractions truncate toward zero, like Rust's `as`.
    let fractions = [2.75f32, -2.75, 0.5, -0.5, 1e9, -1e9];
    to::<f32, i32>(&be, &fractions, &Layout::contiguous(&[6]));
    to::<f32, i64>(&be, &fractions, &Layout::contiguous(&[6]));
    // And rounding to narrow floats is to nearest.
    let fine: Vec<f64> = random(&mut rng, 256, -10.0, 10.0);
    to::<f64, f16>(&be, &fine, &Layout::contiguous(&[256]));
    to::<f64, bf16>(&be, &fine, &Layout::contiguous(&[256]));
    to::<f64, f32>(&be, &fine, &Layout::contiguous(&[256]));
}

fn reduce_ref(op: ReduceOp, xs: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => xs.iter().sum(),
        ReduceOp::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
        ReduceOp::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            let mut best = 0;
            for (i, &x) in xs.iter().enumerate() {
                let better = if op == ReduceOp::ArgMax {
                    x > xs[best]
                } else {
                    x < xs[best]
                };
                if better {
                    best = i;
                }
            }
            best as f64
        }
    }
}

/// Each lane along `dim` of the elements `l` selects, in output order.
fn lanes<T: DType>(data: &[T], l: &Layout, dim: usize) -> Vec<Vec<f64>> {
    let mut perm: Vec<usize> = (0..l.rank()).filter(|&d| d != dim).collect();
    perm.push(dim);
    let moved = l.permute(&perm);
    let cols = l.dims()[dim];
    let vals: Vec<f64> = moved.offsets().map(|i| data[i].to_f64()).collect();
    if cols == 0 {
        return Vec::new();
    }
    vals.chunks(cols).map(|c| c.to_vec()).collect()
}

/// Sums over a leading dim (bias and norm gradients) run as the
/// `column_sum` kernels (`colsum.rs`): one rounding of an f32 sum, at an
/// offset, with zeros, infinities and NaN passed through, in the 16-byte
/// form (columns a multiple of 16 bytes, aligned) and the one-element form
/// (odd columns, or an offset off the 16-byte grid), over one chunk of
/// rows and many, against f64 and the CPU's sum.
#[test]
fn leading_dim_sums_match_f64() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(
        be: &CudaBackend,
        rng: &mut SplitMix64,
        (rows, cols, at): (usize, usize, usize),
    ) {
        let mut data: Vec<T> = random(rng, at + rows * cols, -4.0, 4.0);
        // Column 0 all -0 (sums to a zero), 1 holds +inf, 2 both
        // infinities (NaN), 3 a NaN.
        let special = cols >= 4 && rows >= 12;
        if special {
            for r in 0..rows {
                data[at + r * cols] = T::from_f64(-0.0);
            }
            data[at + 7 * cols + 1] = T::from_f64(f64::INFINITY);
            data[at + 9 * cols + 2] = T::from_f64(f64::INFINITY);
            data[at + 11 * cols + 2] = T::from_f64(f64::NEG_INFINITY);
            data[at + 3 * cols + 3] = T::from_f64(f64::NAN);
        }
        let l = Layout::new(vec![1, rows, cols], vec![rows * cols, cols, 1], at);
        let s = up(be, &data);
        let got = down(&be.reduce(ReduceOp::Sum, &s, &l, 1).unwrap(), &[cols]);
        let cpu = crate::cpu::CpuBackend
            .reduce(ReduceOp::Sum, &data, &l, 1)
            .unwrap();
        for c in 0..cols {
            let col: Vec<f64> = (0..rows)
                .map(|r| data[at + r * cols + c].to_f64())
                .collect();
            let want = col.iter().sum::<f64>();
            let top = col.iter().map(|x| x.abs()).sum::<f64>();
            let g = got[c].to_f64();
            let what = format!(
                "{:?} {rows}x{cols} at {at} column {c}: {g}, f64 {want}",
                T::KIND
            );
            match c {
                0 if special => assert_eq!(g, 0.0, "{what}"),
                1 if special => assert_eq!(g, f64::INFINITY, "{what}"),
                2 | 3 if special => assert!(g.is_nan(), "{what}"),
                _ => {
                    let bound = eps(T::KIND) * want.abs() + 1e-6 * top;
                    assert!((g - want).abs() <= bound, "{what}");
                    let h = cpu[c].to_f64();
                    assert!((g - h).abs() <= 2.0 * bound, "{what}, cpu {h}");
                }
            }
        }
    }
    // (rows, cols, offset): 16-byte loads over many chunks (GPT-2's bias
    // gradient), one chunk, odd columns, a misaligned offset, one row,
    // columns wider than a block's tile.
    let shapes = [
        (8192, 768, 0),
        (4099, 40, 0),
        (4099, 37, 5),
        (300, 64, 3),
        (1, 24, 0),
        (2, 1, 0),
        (77, 2056, 8),
    ];
    for shape in shapes {
        check::<bf16>(&be, &mut rng, shape);
        check::<f16>(&be, &mut rng, shape);
        check::<f32>(&be, &mut rng, shape);
    }
    // An empty dim: no rows gives zeros, no columns nothing.
    for (rows, cols) in [(0, 5), (5, 0)] {
        let l = Layout::contiguous(&[rows, cols]);
        let s = up(&be, &vec![bf16::ONE; rows * cols]);
        let got = down(&be.reduce(ReduceOp::Sum, &s, &l, 0).unwrap(), &[cols]);
        assert!(
            got.iter().all(|v| v.to_f64() == 0.0),
            "{rows}x{cols}: {got:?}"
        );
    }
}

#[test]
fn reductions_along_every_dim() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType>(
        be: &CudaBackend,
        rng: &mut SplitMix64,
        ops: &[ReduceOp],
        range: (f64, f64),
    ) {
        let e = eps(T::KIND);
        let bases = [
            Layout::contiguous(&[6, 5, 300]),
            Layout::contiguous(&[300, 5, 6]).permute(&[2, 1, 0]),
            Layout::contiguous(&[7, 9, 301])
                .slice(0, 1, 7)
                .slice(1, 2, 7)
                .slice(2, 1, 301),
        ];
        for l in bases {
            let len = l.storage_extent();
            let data: Vec<T> = random(rng, len, range.0, range.1);
            let s = up(be, &data);
            for dim in 0..3 {
                let want_lanes = lanes(&data, &l, dim);
                let out_dims: Vec<usize> =
                    (0..3).filter(|&d| d != dim).map(|d| l.dims()[d]).collect();
                for &op in ops {
                    let what = format!("{} {} dim {dim} of {:?}", op.name(), T::KIND, l);
                    let want: Vec<f64> = want_lanes.iter().map(|xs| reduce_ref(op, xs)).collect();
                    if op.returns_index() {
                        let got = down(&be.arg_reduce(op, &s, &l, dim).unwrap(), &out_dims);
                        assert_close(&what, &got, &want, 0.0, 0.0);
                    } else {
                        let got = down(&be.reduce(op, &s, &l, dim).unwrap(), &out_dims);
                        // Error grows with the sum of magnitudes along the lane.
                        let atol: Vec<f64> = want_lanes
                            .iter()
                            .map(|xs| {
                                4.0 * e * xs.iter().map(|x| x.abs()).sum::<f64>()
                                    / if op == ReduceOp::Mean {
                                        xs.len() as f64
                                    } else {
                                        1.0
                                    }
                            })
                            .collect();
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g.to_f64() - w).abs() <= atol[i] + 4.0 * e * w.abs(),
                                "{what}[{i}]: got {g}, want {w}"
                            );
                        }
                    }
                }
            }
        }
    }
    use ReduceOp::*;
    let all = [Sum, Mean, Max, Min, ArgMax, ArgMin];
    check::<f32>(&be, &mut rng, &all, (-2.0, 2.0));
    check::<f64>(&be, &mut rng, &all, (-2.0, 2.0));
    check::<f16>(&be, &mut rng, &all, (-2.0, 2.0));
    check::<bf16>(&be, &mut rng, &all, (-2.0, 2.0));
    // Integers: ties are common, so argmax/argmin must pick the first.
    check::<i32>(
        &be,
        &mut rng,
        &[Sum, Max, Min, ArgMax, ArgMin],
        (-50.0, 50.0),
    );
    check::<i64>(
        &be,
        &mut rng,
        &[Sum, Max, Min, ArgMax, ArgMin],
        (-50.0, 50.0),
    );
    check::<u8>(&be, &mut rng, &[Max, Min, ArgMax, ArgMin], (0.0, 256.0));
}

#[test]
fn reductions_of_empty_dims() {
    let Some((_serial, be)) = gpu() else { return };
    let s = up(&be, &[0.0f32; 0]);
    let l = Layout::contiguous(&[4, 0]);
    assert_eq!(
        down(&be.reduce(ReduceOp::Sum, &s, &l, 1).unwrap(), &[4]),
        vec![0.0; 4]
    );
    assert!(down(&be.reduce(ReduceOp::Mean, &s, &l, 1).unwrap(), &[4])
        .iter()
        .all(|x| x.is_nan()));
    assert!(matches!(
        be.reduce(ReduceOp::Max, &s, &l, 1),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        be.arg_reduce(ReduceOp::ArgMax, &s, &l, 1),
        Err(Error::Shape { .. })
    ));
    assert_eq!(be.reduce(ReduceOp::Sum, &s, &l, 0).unwrap().len(), 0);
}

#[test]
fn norms_match_the_interpreter_bit_for_bit_and_the_reference() {
    use tensorfn_kernels::interp::{self, HostData};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        // Every entry: a warp per row (1 to 1024), a block per row (to
        // 8192; 4096 for f64), and past it; 16-byte accesses at offset 0,
        // one element at a time at offset 3 (and for lengths that are not
        // a multiple of 16 bytes).
        for cols in [1, 31, 64, 768, 1000, 1025, 4096, 8192, 8200] {
            for offset in [0, 3] {
                for shift in [0.0, 100.0] {
                    let rows = 5;
                    let mut data: Vec<T> = random(rng, offset + rows * cols, -3.0, 3.0);
                    for v in data.iter_mut() {
                        *v = T::from_f64(v.to_f64() + shift);
                    }
                    if cols > 2 {
                        // A NaN in row 1, an infinity in row 2.
                        data[offset + cols + 1] = T::from_f64(f64::NAN);
                        data[offset + 2 * cols + 2] = T::from_f64(f64::INFINITY);
                    }
                    let w: Vec<T> = random(rng, cols, -2.0, 2.0);
                    let b: Vec<T> = random(rng, cols, -1.0, 1.0);
                    let (s, sw, sb) = (up(be, &data), up(be, &w), up(be, &b));
                    let l = Layout::new(vec![rows, cols], vec![cols, 1], offset);
                    let lw = Layout::contiguous(&[cols]);
                    let xs: Vec<f64> = data[offset..].iter().map(|v| v.to_f64()).collect();
                    let wf: Vec<f64> = w.iter().map(|v| v.to_f64()).collect();
                    let bf: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
                    let host = HostData::from_f64(T::KIND, &xs);
                    let (hw, hb) = (
                        HostData::from_f64(T::KIND, &wf),
                        HostData::from_f64(T::KIND, &bf),
                    );
                    for op in NormOp::ALL {
                        let bias = op.has_bias().then_some((&sb, &lw));
                        let eps = 1e-5;
                        let got = down(
                            &be.norm(op, (&s, &l), (&sw, &lw), bias, eps).unwrap(),
                            &[rows, cols],
                        );
                        let hbias = op.has_bias().then_some(&hb);
                        let exact =
                            interp::norm(op, &host, &hw, hbias, rows, cols, eps, offset == 0)
                                .unwrap()
                                .to_f64_vec();
                        let what = format!(
                            "{} {} {rows}x{cols} offset {offset} shift {shift}",
                            op.name(),
                            T::KIND
                        );
                        for (i, (g, e)) in got.iter().zip(&exact).enumerate() {
                            let g = g.to_f64();
                            assert!(
                                g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                                "{what} [{i}]: GPU {g}, interpreter {e}"
                            );
                        }
                        let mut want = Vec::with_capacity(rows * cols);
                        for r in 0..rows {
                            want.extend(op.eval_f64(&xs[r * cols..(r + 1) * cols], &wf, &bf, eps));
                        }
                        // Outputs are O(|w| + |b|): compare on that scale.
                        let tol = 8.0 * eps_of(T::KIND) + 2e-6 * (cols as f64).sqrt();
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            let g = g.to_f64();
                            if w.is_nan() {
                                assert!(g.is_nan(), "{what} [{i}]: got {g}, want NaN");
                                continue;
                            }
                            assert!(
                                (g - w).abs() <= tol * 4.0,
                                "{what} [{i}]: got {g}, want {w}"
                            );
                        }
                    }
                }
            }
        }
    }
    fn eps_of(t: DTypeKind) -> f64 {
        eps(t)
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

#[test]
fn rope_matches_the_interpreter_bit_for_bit_and_the_reference() {
    use tensorfn_core::ops::rope::rope_f64;
    use tensorfn_kernels::interp::{self, HostData};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        // Odd halves and position counts make the carried column and
        // position wrap at every step; the long ones take several steps
        // a thread.
        for (lead, t, d) in [
            (1, 1, 2),
            (3, 7, 6),
            (2, 5, 64),
            (4, 33, 128),
            (700, 9, 10),
            (64, 129, 128),
        ] {
            let n = lead * t * d;
            let x: Vec<T> = random(rng, n, -4.0, 4.0);
            let c: Vec<T> = random(rng, t * d, -1.0, 1.0);
            let s: Vec<T> = random(rng, t * d, -1.0, 1.0);
            let (sx, sc, ss) = (up(be, &x), up(be, &c), up(be, &s));
            let l = Layout::contiguous(&[lead, t, d]);
            let lc = Layout::contiguous(&[t, d]);
            let got = down(&be.rope((&sx, &l), (&sc, &lc), (&ss, &lc)).unwrap(), &[n]);
            let f = |v: &[T]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
            let (xf, cf, sf) = (f(&x), f(&c), f(&s));
            let exact = interp::rope(
                &HostData::from_f64(T::KIND, &xf),
                &HostData::from_f64(T::KIND, &cf),
                &HostData::from_f64(T::KIND, &sf),
                lead * t,
                t,
                d,
            )
            .unwrap()
            .to_f64_vec();
            let what = format!("rope {} [{lead}, {t}, {d}]", T::KIND);
            for (i, (g, e)) in got.iter().zip(&exact).enumerate() {
                let g = g.to_f64();
                assert!(
                    g.to_bits() == e.to_bits(),
                    "{what} [{i}]: GPU {g}, interpreter {e}"
                );
            }
            let mut want = Vec::with_capacity(n);
            for r in 0..lead * t {
                let p = (r % t) * d;
                want.extend(rope_f64(
                    &xf[r * d..(r + 1) * d],
                    &cf[p..p + d],
                    &sf[p..p + d],
                ));
            }
            assert_close(&what, &got, &want, 2.0 * eps(T::KIND), 8.0 * eps(T::KIND));
        }
        // A strided input (positions and heads swapped) is copied first.
        let x: Vec<T> = random(rng, 2 * 3 * 4, -4.0, 4.0);
        let c: Vec<T> = random(rng, 2 * 4, -1.0, 1.0);
        let (sx, sc) = (up(be, &x), up(be, &c));
        let l = Layout::contiguous(&[2, 3, 4]).permute(&[1, 0, 2]);
        let lc = Layout::contiguous(&[2, 4]);
        let got = down(&be.rope((&sx, &l), (&sc, &lc), (&sc, &lc)).unwrap(), &[24]);
        let xs = be.contiguous(&sx, &l).unwrap();
        let direct = down(
            &be.rope(
                (&xs, &Layout::contiguous(&[3, 2, 4])),
                (&sc, &lc),
                (&sc, &lc),
            )
            .unwrap(),
            &[24],
        );
        assert!(got
            .iter()
            .zip(&direct)
            .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits()));
        // An odd last dim is an `Err`.
        let l = Layout::contiguous(&[4, 3]);
        let lc = Layout::contiguous(&[4, 3]);
        assert!(be.rope((&sx, &l), (&sx, &lc), (&sx, &lc)).is_err());
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

#[test]
fn norms_of_empty_inputs_and_strided_weights() {
    let Some((_serial, be)) = gpu() else { return };
    let w = up(&be, &[1.0f32, 0.0, 2.0, 0.0, 3.0, 0.0]);
    let lw = Layout::contiguous(&[3, 2]).select(1, 0);
    let x = up(&be, &[1.0f32, 2.0, 3.0]);
    let y = be
        .norm(
            NormOp::RmsNorm,
            (&x, &Layout::contiguous(&[3])),
            (&w, &lw),
            None,
            0.0,
        )
        .unwrap();
    let want = NormOp::RmsNorm.eval_f64(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], &[], 0.0);
    assert_close(
        "rms_norm, strided weight",
        &down(&y, &[3]),
        &want,
        1e-6,
        0.0,
    );
    let empty = up(&be, &[0.0f32; 1]);
    let l = Layout::contiguous(&[0, 3]);
    let y = be
        .norm(
            NormOp::LayerNorm,
            (&empty, &l),
            (&x, &Layout::contiguous(&[3])),
            Some((&x, &Layout::contiguous(&[3]))),
            1e-5,
        )
        .unwrap();
    assert_eq!(y.len(), 0);
    // A layout past its buffer is an `Err`, not a fault.
    let l = Layout::contiguous(&[2, 3]);
    assert!(be
        .norm(
            NormOp::RmsNorm,
            (&x, &l),
            (&x, &Layout::contiguous(&[3])),
            None,
            0.0
        )
        .is_err());
}

#[test]
fn norm_backward_matches_the_cpu() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        // Rows of one element, of a warp, past a block; fewer rows than
        // blocks and more (the partial sums of several rows per block,
        // 1024 blocks for short rows, 256 for 8200 columns); rows a warp
        // holds (16-byte aligned at offset 0: the warp entry, several
        // rows a warp for 6000, lanes past the row's end for 96); a view
        // at an offset; no rows.
        for (rows, cols) in [
            (3, 1),
            (5, 31),
            (7, 768),
            (300, 1000),
            (2100, 64),
            (6000, 96),
            (2, 8200),
            (600, 8200),
            (0, 5),
        ] {
            for offset in [0, 3] {
                let n = rows * cols;
                let x: Vec<T> = random(rng, offset + n, -3.0, 3.0);
                let w: Vec<T> = random(rng, cols, -2.0, 2.0);
                let g: Vec<T> = random(rng, offset + n, -1.0, 1.0);
                let l = Layout::new(vec![rows, cols], vec![cols, 1], offset);
                let lw = Layout::contiguous(&[cols]);
                for op in NormOp::ALL {
                    let what = format!("{} {} {rows}x{cols} offset {offset}", op.name(), T::KIND);
                    let run = || {
                        let (sx, sw, sg) = (up(be, &x), up(be, &w), up(be, &g));
                        let (dx, dw, db) = be
                            .norm_backward(op, (&sx, &l), (&sw, &lw), (&sg, &l), 1e-5)
                            .unwrap();
                        (
                            down(&dx, &[n]),
                            down(&dw, &[cols]),
                            db.map(|d| down(&d, &[cols])),
                        )
                    };
                    let (dx, dw, db) = run();
                    // The same bits from run to run: no atomics.
                    let again = run();
                    let bits = |v: &[T]| v.iter().map(|v| v.to_f64().to_bits()).collect::<Vec<_>>();
                    assert!(
                        bits(&dx) == bits(&again.0) && bits(&dw) == bits(&again.1),
                        "{what}"
                    );
                    let (ex, ew, eb) = CpuBackend
                        .norm_backward(op, (&x, &l), (&w, &lw), (&g, &l), 1e-5)
                        .unwrap();
                    let f = |v: &[T]| v.iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
                    let scale = |v: &[f64]| v.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                    let (ex, ew) = (f(&ex), f(&ew));
                    assert_close(&format!("{what} dx"), &dx, &ex, 0.0, tol * scale(&ex));
                    // Column sums over `rows` terms, added in another order.
                    let sum_tol = tol * scale(&ew) * (rows.max(1) as f64).sqrt();
                    assert_close(&format!("{what} dweight"), &dw, &ew, 0.0, sum_tol);
                    assert_eq!(db.is_some(), op.has_bias(), "{what}");
                    if let (Some(db), Some(eb)) = (db, eb) {
                        let eb = f(&eb);
                        let sum_tol = tol * scale(&eb) * (rows.max(1) as f64).sqrt();
                        assert_close(&format!("{what} dbias"), &db, &eb, 0.0, sum_tol);
                    }
                }
            }
        }
    }
    check::<f32>(&be, &mut rng, 1e-4);
    check::<f64>(&be, &mut rng, 1e-10);
    check::<f16>(&be, &mut rng, 2e-2);
    check::<bf16>(&be, &mut rng, 1e-1);
}

#[test]
fn batch_norm_matches_the_cpu_in_both_modes_and_layouts() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        // [N, C, S]: N = 1 with S > 1, S = 1 ([N, C]), a wide channel, an
        // empty batch; NCHW and channels-last memory.
        for (n, c, s) in [(1, 3, 17), (9, 4, 1), (4, 2, 3000), (0, 3, 5)] {
            let numel = n * c * s;
            let x: Vec<T> = random(rng, numel, -3.0, 5.0);
            let g: Vec<T> = random(rng, numel, -1.0, 1.0);
            let w: Vec<T> = random(rng, c, -2.0, 2.0);
            let b: Vec<T> = random(rng, c, -2.0, 2.0);
            let rm: Vec<T> = random(rng, c, -1.0, 1.0);
            let rv: Vec<T> = random(rng, c, 0.5, 2.0);
            let lc = Layout::contiguous(&[c]);
            let nchw = Layout::contiguous(&[n, c, s]);
            let nhwc = Layout::contiguous(&[n, s, c]).permute(&[0, 2, 1]);
            for l in [nchw, nhwc] {
                for training in [true, false] {
                    let what = format!(
                        "batch_norm {} {n}x{c}x{s} {:?} training {training}",
                        T::KIND,
                        l.strides()
                    );
                    let (sx, sg, sw, sb, srm, srv) = (
                        up(be, &x),
                        up(be, &g),
                        up(be, &w),
                        up(be, &b),
                        up(be, &rm),
                        up(be, &rv),
                    );
                    let (y, upd) = be
                        .batch_norm(
                            (&sx, &l),
                            Some((&sw, &lc)),
                            Some((&sb, &lc)),
                            Some(((&srm, &lc), (&srv, &lc))),
                            training,
                            0.1,
                            1e-5,
                        )
                        .unwrap();
                    let (ey, eupd) = CpuBackend
                        .batch_norm(
                            (&x, &l),
                            Some((&w, &lc)),
                            Some((&b, &lc)),
                            Some(((&rm, &lc), (&rv, &lc))),
                            training,
                            0.1,
                            1e-5,
                        )
                        .unwrap();
                    let f = |v: &[T]| v.iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
                    assert_close(&what, &down(&y, &[numel]), &f(&ey), tol, tol);
                    assert_eq!(upd.is_some(), eupd.is_some(), "{what}");
                    if let (Some((m, v)), Some((em, ev))) = (upd, eupd) {
                        assert_close(
                            &format!("{what} running_mean"),
                            &down(&m, &[c]),
                            &f(&em),
                            tol,
                            tol,
                        );
                        assert_close(
                            &format!("{what} running_var"),
                            &down(&v, &[c]),
                            &f(&ev),
                            tol,
                            tol,
                        );
                    }
                    let (dx, dw, db) = be
                        .batch_norm_backward(
                            (&sx, &l),
                            Some((&sw, &lc)),
                            Some(((&srm, &lc), (&srv, &lc))),
                            (&sg, &nchw_of(&l)),
                            training,
                            1e-5,
                        )
                        .unwrap();
                    let (ex, ew, eb) = CpuBackend
                        .batch_norm_backward(
                            (&x, &l),
                            Some((&w, &lc)),
                            Some(((&rm, &lc), (&rv, &lc))),
                            (&g, &nchw_of(&l)),
                            training,
                            1e-5,
                        )
                        .unwrap();
                    let sum_tol = tol * ((n * s).max(1) as f64).sqrt();
                    assert_close(
                        &format!("{what} dx"),
                        &down(&dx, &[numel]),
                        &f(&ex),
                        tol,
                        tol,
                    );
                    assert_close(
                        &format!("{what} dweight"),
                        &down(&dw, &[c]),
                        &f(&ew),
                        tol,
                        sum_tol,
                    );
                    assert_close(
                        &format!("{what} dbias"),
                        &down(&db, &[c]),
                        &f(&eb),
                        tol,
                        sum_tol,
                    );
                }
            }
        }
    }
    /// The dense layout of `l`'s dims (the gradient's).
    fn nchw_of(l: &Layout) -> Layout {
        Layout::contiguous(l.dims())
    }
    check::<f32>(&be, &mut rng, 1e-5);
    check::<f64>(&be, &mut rng, 1e-12);
    check::<f16>(&be, &mut rng, 2e-3);
    check::<bf16>(&be, &mut rng, 1e-2);
}

#[test]
fn row_ops_match_the_interpreter_bit_for_bit() {
    use tensorfn_kernels::interp::{row, HostData};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        // Around a 16-byte chunk of 16-bit elements, a warp, the block,
        // and the end of the register path. Nine rows: with an odd length
        // they start at every 2-byte offset within 16 bytes; the input
        // offsets misalign rows of even lengths too (the output is a
        // fresh buffer: its rows are aligned differently).
        let limit = tensorfn_kernels::builtin::SOFTMAX_REGISTER_COLS;
        let mut shapes = Vec::new();
        for cols in [
            1,
            2,
            3,
            7,
            8,
            9,
            31,
            32,
            33,
            255,
            256,
            257,
            1000,
            limit - 8,
            limit - 1,
            limit,
            limit + 1,
            3 * limit + 5,
        ] {
            for offset in [0, 3] {
                shapes.push((9, cols, offset));
            }
        }
        // More rows than a launch has blocks (65 535): the first blocks go
        // through a second row, reusing their shared memory. The
        // interpreter checks those blocks' rows (it is slow per row).
        shapes.push((65_535 + 37, 9, 1));
        shapes.push((65_535 + 3, 64, 0));
        for (rows, cols, offset) in shapes {
            let data: Vec<T> = random(rng, offset + rows * cols, -8.0, 8.0);
            let s = up(be, &data);
            let checked: Vec<usize> = if rows > 100 {
                (0..40).chain(rows - 40..rows).collect()
            } else {
                (0..rows).collect()
            };
            let host = HostData::from_f64(
                T::KIND,
                &checked
                    .iter()
                    .flat_map(|&r| &data[offset + r * cols..offset + (r + 1) * cols])
                    .map(|x| x.to_f64())
                    .collect::<Vec<f64>>(),
            );
            let l = Layout::new(vec![rows, cols], vec![cols, 1], offset);
            for op in RowOp::ALL {
                // Outputs per row: the row's, or one.
                let per_row = if op.shape() == RowShape::Keep {
                    cols
                } else {
                    1
                };
                let got = down(&be.row_op(op, &s, &l, 1).unwrap(), &[rows, per_row]);
                let want = row(op, &host, checked.len(), cols).unwrap().to_f64_vec();
                for (k, &r) in checked.iter().enumerate() {
                    for c in 0..per_row {
                        let g = got[r * per_row + c].to_f64();
                        let w = want[k * per_row + c];
                        assert!(
                            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                            "{} {} {rows}x{cols} at offset {offset} [{r}, {c}]: \
                             GPU {g}, interpreter {w}",
                            op.name(),
                            T::KIND
                        );
                    }
                }
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

#[test]
fn cat_rows_match_the_host_for_every_unit() {
    use crate::backend::{RowBlock, RowBlocks};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    // Widths in bytes that allow 16-, 8-, 4-, 2- and 1-byte units, at
    // aligned and unaligned starts, and more inputs than one launch takes.
    for (inners, starts) in [
        (vec![16, 32], vec![0, 0]),
        (vec![8, 24, 40], vec![0, 8, 0]),
        (vec![4, 12], vec![4, 0]),
        (vec![2, 6, 0, 10], vec![0, 2, 0, 6]),
        (vec![3, 5, 7], vec![1, 0, 3]),
        ((1..=11).collect(), vec![0; 11]),
        ((0..19).map(|i| 16 * (i % 3)).collect(), vec![0; 19]),
    ] {
        let outer = 37;
        let hosts: Vec<Vec<u8>> = inners
            .iter()
            .zip(&starts)
            .map(|(&inner, &start)| random(&mut rng, start + outer * inner, 0.0, 255.0))
            .collect();
        let devs: Vec<CudaStorage<u8>> = hosts.iter().map(|h| up(&be, h)).collect();
        let row: usize = inners.iter().sum();
        let plan = RowBlocks {
            outer,
            row,
            parts: devs
                .iter()
                .zip(inners.iter().zip(&starts))
                .map(|(buf, (&inner, &start))| RowBlock { buf, start, inner })
                .collect(),
        };
        let got = down(&be.cat_rows(&plan).unwrap(), &[outer * row]);
        let mut want = Vec::with_capacity(outer * row);
        for r in 0..outer {
            for (h, (&inner, &start)) in hosts.iter().zip(inners.iter().zip(&starts)) {
                want.extend_from_slice(&h[start + r * inner..start + (r + 1) * inner]);
            }
        }
        assert_eq!(got, want, "cat_rows of widths {inners:?} at {starts:?}");
        // A plan that reads past an input is an error, not a fault.
        let mut bad = plan;
        bad.outer += 1;
        assert!(be.cat_rows(&bad).is_err());
    }
}

#[test]
fn row_ops_along_every_dim() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let e = eps(T::KIND).max(1e-6);
        let l = Layout::contiguous(&[5, 300, 4]).permute(&[1, 0, 2]);
        let data: Vec<T> = random(rng, 6000, -8.0, 8.0);
        let s = up(be, &data);
        // Reference in output (row-major) order of `l`.
        let vals: Vec<f64> = gather(&data, &l).iter().map(|x| x.to_f64()).collect();
        let dims = l.dims();
        let strides = crate::layout::contiguous_strides(dims);
        for dim in 0..3 {
            let pos = |i: usize| (i / strides[dim]) % dims[dim];
            let lane = |base: usize| -> Vec<f64> {
                (0..dims[dim])
                    .map(|j| vals[base + j * strides[dim]])
                    .collect()
            };
            for op in RowOp::ALL {
                let (want, out_dims): (Vec<f64>, Vec<usize>) = match op.shape() {
                    RowShape::Keep => (
                        (0..vals.len())
                            .map(|i| op.eval_f64(&lane(i - pos(i) * strides[dim]))[pos(i)])
                            .collect(),
                        dims.to_vec(),
                    ),
                    // The lanes' first elements come in the order of the
                    // other dims.
                    RowShape::Reduce => (
                        (0..vals.len())
                            .filter(|&i| pos(i) == 0)
                            .map(|i| op.eval_f64(&lane(i))[0])
                            .collect(),
                        (0..dims.len())
                            .filter(|&d| d != dim)
                            .map(|d| dims[d])
                            .collect(),
                    ),
                };
                let got = down(&be.row_op(op, &s, &l, dim).unwrap(), &out_dims);
                let what = format!("{} {} dim {dim}", op.name(), T::KIND);
                assert_close(&what, &got, &want, 8.0 * e, 8.0 * e);
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

/// f64 reference of `alpha * a @ b + beta * bias` and the sum of
/// `|a||b|` per element (the scale of rounding errors).
#[allow(clippy::too_many_arguments)]
fn matmul_ref(
    a: &[f64],
    la: &Layout,
    b: &[f64],
    lb: &Layout,
    bias: Option<(&[f64], &Layout)>,
    alpha: f64,
    beta: f64,
    relu: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (batch, m, k, n) = (la.dims()[0], la.dims()[1], la.dims()[2], lb.dims()[2]);
    let at = |l: &Layout, idx: [usize; 3]| {
        l.offset()
            + idx
                .iter()
                .zip(l.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>()
    };
    let mut out = vec![0.0; batch * m * n];
    let mut mag = vec![0.0; batch * m * n];
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut abs) = (0.0, 0.0);
                for p in 0..k {
                    let x = a[at(la, [bi, i, p])] * b[at(lb, [bi, p, j])];
                    acc += x;
                    abs += x.abs();
                }
                let o = (bi * m + i) * n + j;
                let mut v = alpha * acc;
                if let Some((bv, bl)) = bias {
                    v += beta * bv[at(bl, [bi, i, j])];
                }
                out[o] = if relu { v.max(0.0) } else { v };
                mag[o] = alpha.abs() * abs
                    + bias.map_or(0.0, |(bv, bl)| (beta * bv[at(bl, [bi, i, j])]).abs());
            }
        }
    }
    (out, mag)
}

/// One matmul case: layouts over storages of the given lengths.
struct Case {
    what: &'static str,
    a: (usize, Layout),
    b: (usize, Layout),
    bias: Option<(usize, Layout)>,
    alpha: f64,
    beta: f64,
}

fn matmul_cases() -> Vec<Case> {
    let c = Layout::contiguous;
    let (m, k, n) = (37, 129, 65);
    vec![
        Case {
            what: "plain",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "both transposed views",
            a: (m * k, c(&[1, k, m]).transpose(1, 2)),
            b: (k * n, c(&[1, n, k]).transpose(1, 2)),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "batched, b broadcast over the batch",
            a: (3 * m * k, c(&[3, m, k])),
            b: (k * n, c(&[1, k, n]).broadcast_to(&[3, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "batched, a transposed per batch",
            a: (4 * m * k, c(&[4, k, m]).transpose(1, 2)),
            b: (4 * k * n, c(&[4, k, n])),
            bias: None,
            alpha: 0.5,
            beta: 0.0,
        },
        Case {
            what: "no unit stride (copied first)",
            a: (4 * m * k, Layout::new(vec![1, m, k], vec![0, 4 * k, 2], 1)),
            b: (k * n, c(&[1, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "row slice with a wider leading dimension",
            a: (m * (k + 10), c(&[1, m, k + 10]).slice(2, 3, k + 3)),
            b: (k * n, c(&[1, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "addmm, bias per column, beta 1 (cuBLASLt epilogue)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((n, c(&[n]).broadcast_to(&[1, m, n]))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, transposed weight, bias per column",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, n, k]).transpose(1, 2)),
            bias: Some((n, c(&[n]).broadcast_to(&[1, m, n]))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, full bias, alpha 2, beta 0.5",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((m * n, c(&[1, m, n]))),
            alpha: 2.0,
            beta: 0.5,
        },
        Case {
            what: "addmm, scalar bias, beta -1.5",
            a: (2 * m * k, c(&[2, m, k])),
            b: (2 * k * n, c(&[2, k, n])),
            bias: Some((1, c(&[]).broadcast_to(&[2, m, n]))),
            alpha: 1.0,
            beta: -1.5,
        },
        Case {
            what: "addmm, full bias with a wider leading dimension (cuBLASLt C)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((m * (n + 3), c(&[1, m, n + 3]).slice(2, 2, n + 2))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, full bias at an odd offset, transposed operands",
            a: (m * k, c(&[1, k, m]).transpose(1, 2)),
            b: (k * n, c(&[1, n, k]).transpose(1, 2)),
            bias: Some((m * n + 1, Layout::new(vec![1, m, n], vec![0, n, 1], 1))),
            alpha: -0.5,
            beta: 1.0,
        },
        Case {
            what: "addmm, transposed full bias (copied)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((m * n, c(&[1, n, m]).transpose(1, 2))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, bias per column, beta 0.5 (copied)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((n, c(&[n]).broadcast_to(&[1, m, n]))),
            alpha: 1.0,
            beta: 0.5,
        },
        Case {
            what: "addmm, bias per column at an odd offset (copied)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, n, k]).transpose(1, 2)),
            bias: Some((n + 1, Layout::new(vec![1, m, n], vec![0, 0, 1], 1))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, one row, (1, N) bias (cuBLASLt C), beta 2",
            a: (k, c(&[1, 1, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((n, c(&[1, 1, n]))),
            alpha: 1.0,
            beta: 2.0,
        },
        Case {
            what: "addmm, one column, scalar bias (epilogue)",
            a: (m * k, c(&[1, m, k])),
            b: (k, c(&[1, k, 1])),
            bias: Some((1, c(&[]).broadcast_to(&[1, m, 1]))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "addmm, scalar bias, one matrix (copied)",
            a: (m * k, c(&[1, m, k])),
            b: (k * n, c(&[1, k, n])),
            bias: Some((1, c(&[]).broadcast_to(&[1, m, n]))),
            alpha: 1.0,
            beta: 1.0,
        },
        Case {
            what: "vector times matrix",
            a: (k, c(&[1, 1, k])),
            b: (k * n, c(&[1, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "matrix times vector",
            a: (m * k, c(&[1, m, k])),
            b: (k, c(&[1, k, 1])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
        Case {
            what: "empty k with bias",
            a: (0, c(&[1, m, 0])),
            b: (0, c(&[1, 0, n])),
            bias: Some((n, c(&[n]).broadcast_to(&[1, m, n]))),
            alpha: 1.0,
            beta: 2.0,
        },
        Case {
            what: "empty m",
            a: (0, c(&[2, 0, k])),
            b: (2 * k * n, c(&[2, k, n])),
            bias: None,
            alpha: 1.0,
            beta: 0.0,
        },
    ]
}

fn run_matmul_cases<T: crate::FloatDType>(
    be: &CudaBackend,
    rng: &mut SplitMix64,
    relu: bool,
) -> f64 {
    let e = eps(T::KIND);
    let mut worst: f64 = 0.0;
    for case in matmul_cases() {
        let a: Vec<T> = random(rng, case.a.0, -1.0, 1.0);
        let b: Vec<T> = random(rng, case.b.0, -1.0, 1.0);
        let bias: Option<Vec<T>> = case
            .bias
            .as_ref()
            .map(|(len, _)| random(rng, *len, -1.0, 1.0));
        let f = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
        let (a64, b64) = (f(&a), f(&b));
        let bias64 = bias.as_ref().map(|v| f(v));
        let (want, mag) = matmul_ref(
            &a64,
            &case.a.1,
            &b64,
            &case.b.1,
            bias64.as_deref().zip(case.bias.as_ref().map(|(_, l)| l)),
            case.alpha,
            case.beta,
            relu,
        );
        let (sa, sb) = (up(be, &a), up(be, &b));
        let sbias = bias.as_ref().map(|v| up(be, v));
        let bias_arg = sbias.as_ref().zip(case.bias.as_ref().map(|(_, l)| l));
        let (alpha, beta) = (T::from_f64(case.alpha), T::from_f64(case.beta));
        let out = if relu {
            match bias_arg {
                Some(bias) => be
                    .addmm_relu(bias, &sa, &case.a.1, &sb, &case.b.1, alpha, beta)
                    .unwrap(),
                None => continue,
            }
        } else {
            be.matmul(&sa, &case.a.1, &sb, &case.b.1, bias_arg, alpha, beta)
                .unwrap()
        };
        let dims = [case.a.1.dims()[0], case.a.1.dims()[1], case.b.1.dims()[2]];
        let got = down(&out, &dims);
        for (i, ((g, w), m)) in got.iter().zip(&want).zip(&mag).enumerate() {
            let err = (g.to_f64() - w).abs();
            let bound = 8.0 * e * m + 2.0 * e * w.abs() + 1e-300;
            worst = worst.max(err / (e * m.max(1e-30)));
            assert!(
                err <= bound,
                "{} matmul '{}' relu={relu} [{i}]: got {g}, want {w}, error {err:e} above {bound:e}",
                T::KIND,
                case.what
            );
        }
    }
    worst
}

#[test]
fn matmul_every_float_dtype_and_layout() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    for relu in [false, true] {
        let w32 = run_matmul_cases::<f32>(&be, &mut rng, relu);
        let w64 = run_matmul_cases::<f64>(&be, &mut rng, relu);
        let w16 = run_matmul_cases::<f16>(&be, &mut rng, relu);
        let wbf = run_matmul_cases::<bf16>(&be, &mut rng, relu);
        eprintln!(
            "matmul relu={relu}: worst error / (eps * sum|a||b|): f32 {w32:.3}, f64 {w64:.3}, f16 {w16:.3}, bf16 {wbf:.3}"
        );
    }
}

#[test]
fn f32_matmul_is_exact_unless_tf32_is_allowed() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let (m, k, n) = (256, 1024, 256);
    let a: Vec<f32> = random(&mut rng, m * k, -1.0, 1.0);
    let b: Vec<f32> = random(&mut rng, k * n, -1.0, 1.0);
    let (la, lb) = (
        Layout::contiguous(&[1, m, k]),
        Layout::contiguous(&[1, k, n]),
    );
    let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (want, mag) = matmul_ref(&f(&a), &la, &f(&b), &lb, None, 1.0, 0.0, false);
    let (sa, sb) = (up(&be, &a), up(&be, &b));
    let rel_error = |allow: bool| {
        set_allow_tf32(allow);
        let out = be.matmul(&sa, &la, &sb, &lb, None, 1.0, 0.0);
        set_allow_tf32(false);
        let got = down(&out.unwrap(), &[1, m, n]);
        got.iter()
            .zip(&want)
            .zip(&mag)
            .map(|((&g, w), m)| (g as f64 - w).abs() / m)
            .fold(0.0, f64::max)
    };
    let exact = rel_error(false);
    let tf32 = rel_error(true);
    eprintln!(
        "f32 matmul {m}x{k}x{n}: max error / sum|a||b| = {exact:.2e} exact, {tf32:.2e} with TF32"
    );
    assert!(
        exact < 8.0 * 1.2e-7,
        "f32 products must not use TF32 by default ({exact:e})"
    );
    assert!(tf32 < 8.0 * 9.8e-4, "TF32 error too large ({tf32:e})");
}

/// Random f32 operands of `[1, m, k] @ [1, k, n]` on the device, with an
/// optional bias per column (added with beta 1), and the f64 product.
struct F32Product {
    dims: (usize, usize, usize),
    layouts: (Layout, Layout, Layout),
    a: CudaStorage<f32>,
    b: CudaStorage<f32>,
    bias: Option<CudaStorage<f32>>,
    want: Vec<f64>,
    /// `sum |a||b|` (plus `|bias|`) of each element, the error's scale.
    mag: Vec<f64>,
}

/// Eight f32 roundings of `sum |a||b|`: the most a product may be off.
const F32_PRODUCT_TOL: f64 = 8.0 * 1.2e-7;

impl F32Product {
    fn random(
        be: &CudaBackend,
        rng: &mut SplitMix64,
        (m, k, n): (usize, usize, usize),
        with_bias: bool,
    ) -> F32Product {
        let (la, lb) = (
            Layout::contiguous(&[1, m, k]),
            Layout::contiguous(&[1, k, n]),
        );
        let lbias = Layout::contiguous(&[n]).broadcast_to(&[1, m, n]);
        let a: Vec<f32> = random(rng, m * k, -1.0, 1.0);
        let b: Vec<f32> = random(rng, k * n, -1.0, 1.0);
        let bias: Option<Vec<f32>> = with_bias.then(|| random(rng, n, -1.0, 1.0));
        let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let bias64 = bias.as_deref().map(f);
        let (want, mag) = matmul_ref(
            &f(&a),
            &la,
            &f(&b),
            &lb,
            bias64.as_deref().map(|v| (v, &lbias)),
            1.0,
            1.0,
            false,
        );
        F32Product {
            dims: (m, k, n),
            a: up(be, &a),
            b: up(be, &b),
            bias: bias.map(|v| up(be, &v)),
            layouts: (la, lb, lbias),
            want,
            mag,
        }
    }

    /// `bias + a @ b` through the backend.
    fn run(&self, be: &CudaBackend) -> CudaStorage<f32> {
        let (la, lb, lbias) = &self.layouts;
        let bias = self.bias.as_ref().map(|s| (s, lbias));
        be.matmul(&self.a, la, &self.b, lb, bias, 1.0, 1.0).unwrap()
    }

    /// The largest error of `out` in units of each element's
    /// `sum |a||b|`, and the first element's value.
    fn error(&self, out: &CudaStorage<f32>) -> (f64, f32) {
        let (m, _, n) = self.dims;
        let got = down(out, &[1, m, n]);
        let worst = got
            .iter()
            .zip(&self.want)
            .zip(&self.mag)
            .map(|((&g, w), mg)| (g as f64 - w).abs() / mg.max(1e-30))
            .fold(0.0, f64::max);
        (worst, got[0])
    }

    /// Panics, naming `what`, unless `out` is the product.
    fn check(&self, out: &CudaStorage<f32>, what: &str) {
        let (worst, first) = self.error(out);
        assert!(
            worst <= F32_PRODUCT_TOL,
            "{what} {:?}: error {worst:.2e} of sum|a||b| (element 0: got {first}, want {})",
            self.dims,
            self.want[0]
        );
    }
}

#[test]
fn matmul_plans_are_made_once_per_shape_and_take_each_calls_operands() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let plans = || be.ctx().blas().expect("cuBLAS").plans.len();
    for autotune in [false, true] {
        set_matmul_autotune(autotune);
        // A shape no other test multiplies, so its plan is made here.
        let dims = (45, 77 + usize::from(autotune), 96);
        let before = plans();
        for call in 0..3 {
            // Fresh operands and bias each call: the cached plan must read
            // this call's addresses, the bias's included.
            let p = F32Product::random(&be, &mut rng, dims, true);
            p.check(&p.run(&be), &format!("autotune={autotune} call {call}"));
            assert_eq!(plans(), before + 1, "autotune={autotune} call {call}");
        }
    }
    set_matmul_autotune(true);
}

#[test]
fn every_cublaslt_candidate_gives_the_product() {
    // Autotuning may keep any of cuBLASLt's candidates, so each must be
    // right, for skinny and dot-like shapes (split-K) too.
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let mut bad = Vec::new();
    for dims in [
        (1, 20000, 1),
        (1, 4096, 1),
        (4, 20000, 1),
        (1, 20000, 4),
        (3, 5000, 7),
        (64, 4096, 64),
        (256, 256, 256),
    ] {
        let p = F32Product::random(&be, &mut rng, dims, false);
        let (la, lb, _) = &p.layouts;
        let count =
            super::blas::each_lt_candidate_for_test(&be, (&p.a, la), (&p.b, lb), |what, out| {
                let (worst, first) = p.error(out);
                if worst > F32_PRODUCT_TOL {
                    bad.push(format!(
                        "{dims:?} {what}: error {worst:.2e} (element 0: {first}, want {})",
                        p.want[0]
                    ));
                }
            })
            .unwrap();
        eprintln!("{dims:?}: {count} cuBLASLt candidates");
    }
    assert!(bad.is_empty(), "wrong candidates:\n{}", bad.join("\n"));
}

#[test]
fn autotuned_skinny_and_dot_products_match_the_reference() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    set_matmul_autotune(true);
    // Sizes no other test uses, so each is planned (and timed) here.
    for dims in [(1, 20011, 1), (1, 20011, 5), (7, 20011, 1), (64, 4099, 64)] {
        for call in 0..2 {
            let p = F32Product::random(&be, &mut rng, dims, false);
            p.check(&p.run(&be), &format!("call {call}"));
        }
    }
}

#[test]
fn products_queued_from_several_threads_at_once_stay_right() {
    // Long, thin products run split-K: partial sums in the shared
    // workspace, then a reduction kernel. Queued from four threads at
    // once, each product's kernels must still run back to back.
    let Some((_serial, be)) = gpu() else { return };
    let base = seed().next_u64();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let be = be.clone();
            scope.spawn(move || {
                be.ctx().bind().unwrap();
                let mut rng = SplitMix64::new(base ^ (t + 1));
                let dims = (1 + t as usize, 20000, 1 + 2 * t as usize);
                for call in 0..25 {
                    let p = F32Product::random(&be, &mut rng, dims, false);
                    p.check(&p.run(&be), &format!("thread {t} call {call}"));
                }
            });
        }
    });
}

#[test]
fn cublas_errors_name_the_routine_status_and_shapes() {
    let Some((_serial, be)) = gpu() else { return };
    let e = super::blas::invalid_gemm_for_test(&be).unwrap_err();
    match &e {
        Error::Cublas { op, status, shapes } => {
            assert!(op.contains("Gemm"), "{e}");
            assert!(status.contains("INVALID_VALUE"), "{e}");
            assert!(shapes.contains("lda"), "{e}");
        }
        other => panic!("expected Error::Cublas, got {other:?}"),
    }
    // The handle is still usable afterwards.
    let a = up(&be, &[1.0f32, 2.0, 3.0, 4.0]);
    let l = Layout::contiguous(&[1, 2, 2]);
    let out = be.matmul(&a, &l, &a, &l, None, 1.0, 0.0).unwrap();
    assert_eq!(down(&out, &[4]), vec![7.0, 10.0, 15.0, 22.0]);
}

#[test]
fn out_of_memory_is_an_error_and_the_device_keeps_working() {
    let Some((_serial, be)) = gpu() else { return };
    let ctx = be.ctx().clone();
    // Larger than the device: refused before asking the driver.
    match ctx.storage::<f32>(ctx.total_memory) {
        Err(Error::OutOfMemory {
            requested, total, ..
        }) => {
            assert_eq!(requested, 4 * ctx.total_memory);
            assert_eq!(total, ctx.total_memory);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // Smaller than the device, larger than what is free: the driver
    // refuses, the cache is flushed, the retry fails too.
    let request = ctx.total_memory - (64 << 20);
    match ctx.storage::<u8>(request) {
        Err(e @ Error::OutOfMemory { .. }) => {
            let Error::OutOfMemory {
                requested,
                free,
                total,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(requested, request);
            assert!(free < requested && total == ctx.total_memory);
            eprintln!(
                "out of memory as expected: {}",
                Error::OutOfMemory {
                    requested,
                    free,
                    total
                }
            );
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // Element counts whose byte size overflows are refused too.
    assert!(matches!(
        ctx.storage::<f64>(usize::MAX / 2),
        Err(Error::OutOfMemory { .. })
    ));
    // Then a normal product still works (the seed's THCBlas scenario).
    let mut rng = seed();
    let (m, k, n) = (100, 200, 300);
    let a: Vec<f32> = random(&mut rng, m * k, -1.0, 1.0);
    let b: Vec<f32> = random(&mut rng, k * n, -1.0, 1.0);
    let (la, lb) = (
        Layout::contiguous(&[1, m, k]),
        Layout::contiguous(&[1, k, n]),
    );
    let out = be
        .matmul(&up(&be, &a), &la, &up(&be, &b), &lb, None, 1.0, 0.0)
        .unwrap();
    let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let (want, mag) = matmul_ref(&f(&a), &la, &f(&b), &lb, None, 1.0, 0.0, false);
    for ((g, w), m) in down(&out, &[m * n]).iter().zip(&want).zip(&mag) {
        assert!((*g as f64 - w).abs() <= 8.0 * 1.2e-7 * m);
    }
}

#[test]
fn steady_state_reuses_cached_blocks() {
    let Some((_serial, be)) = gpu() else { return };
    let step = |be: &CudaBackend| {
        let l = Layout::contiguous(&[3001, 7]);
        let x = be.full(3001 * 7, 1.5f64).unwrap();
        let y = be.unary(UnaryOp::Exp, &x, &l).unwrap();
        let z = be.binary(BinaryOp::Add, &x, &l, &y, &l).unwrap();
        be.reduce(ReduceOp::Sum, &z, &l, 1).unwrap()
    };
    drop(step(&be));
    let ctx = be.ctx();
    let before = ctx.memory_stats();
    for _ in 0..10 {
        let s = step(&be);
        let want = 7.0 * (1.5 + 1.5f64.exp());
        assert!(down(&s, &[3001])
            .iter()
            .all(|v| (v - want).abs() < 1e-12 * want));
    }
    let after = ctx.memory_stats();
    assert_eq!(
        after.device_allocations, before.device_allocations,
        "a steady state must not call cuMemAlloc"
    );
    assert!(after.cached_bytes + after.allocated_bytes >= 3001 * 7 * 8);
}

#[test]
fn a_missing_ordinal_is_unavailable() {
    let Some(_serial) = gpu() else { return };
    for ord in [64, 1000] {
        match CudaBackend::for_ordinal(ord) {
            Err(Error::CudaUnavailable { reason }) => {
                assert!(reason.contains(&format!("cuda:{ord}")))
            }
            other => panic!("expected CudaUnavailable, got {other:?}"),
        }
    }
    assert!(context(0).is_ok());
}

/// `out = 2 * x + 1` over f32, written by hand against the launch ABI
/// (`tensorfn_kernels::abi`): `_contig(out, in0, n)` and
/// `_strided(out, in0, n, meta)`.
fn affine_ptx() -> String {
    let head = |name: &str, extra: &str| {
        format!(
            ".visible .entry tf_test_affine_{name}(.param .u64 out, .param .u64 in0, .param .u64 n{extra})\n{{\n\
             .reg .pred %p;\n.reg .b32 %r<4>;\n.reg .b64 %rd<16>;\n.reg .f32 %f<3>;\n\
             ld.param.u64 %rd1, [out];\nld.param.u64 %rd2, [in0];\nld.param.u64 %rd3, [n];\n\
             mov.u32 %r1, %ctaid.x;\nmov.u32 %r2, %ntid.x;\nmov.u32 %r3, %tid.x;\n\
             mul.wide.u32 %rd4, %r1, %r2;\ncvt.u64.u32 %rd5, %r3;\nadd.u64 %rd4, %rd4, %rd5;\n\
             mov.u32 %r0, %nctaid.x;\nmul.wide.u32 %rd15, %r0, %r2;\n\
             LOOP:\nsetp.ge.u64 %p, %rd4, %rd3;\n@%p bra DONE;\n"
        )
    };
    // One element a step over the grid's stride, as the ABI asks.
    let body = "ld.global.f32 %f1, [%rd7];\nfma.rn.f32 %f2, %f1, 0f40000000, 0f3F800000;\n\
                st.global.f32 [%rd8], %f2;\nadd.u64 %rd4, %rd4, %rd15;\nbra.uni LOOP;\n\
                DONE:\nret;\n}\n";
    let mut ptx = String::from(".version 7.0\n.target sm_70\n.address_size 64\n\n");
    ptx += &head("contig", "");
    ptx += "shl.b64 %rd6, %rd4, 2;\nadd.u64 %rd7, %rd2, %rd6;\nadd.u64 %rd8, %rd1, %rd6;\n";
    ptx += body;
    ptx += &head("strided", ", .param .align 8 .b8 meta[144]");
    // Split the linear index over the padded dims, last first, summing
    // output (%rd10) and input (%rd11) offsets.
    ptx += "mov.u64 %rd9, %rd4;\nmov.u64 %rd10, 0;\nmov.u64 %rd11, 0;\n";
    for d in (0..6).rev() {
        ptx += &format!(
            "ld.param.u64 %rd12, [meta+{}];\nrem.u64 %rd13, %rd9, %rd12;\ndiv.u64 %rd9, %rd9, %rd12;\n\
             ld.param.u64 %rd14, [meta+{}];\nmad.lo.u64 %rd10, %rd13, %rd14, %rd10;\n\
             ld.param.u64 %rd14, [meta+{}];\nmad.lo.u64 %rd11, %rd13, %rd14, %rd11;\n",
            8 * d,
            48 + 8 * d,
            96 + 8 * d
        );
    }
    ptx += "shl.b64 %rd10, %rd10, 2;\nshl.b64 %rd11, %rd11, 2;\n\
            add.u64 %rd7, %rd2, %rd11;\nadd.u64 %rd8, %rd1, %rd10;\n";
    ptx += body;
    // The input's offset: its column `i mod cols` where the mask says it
    // repeats every row, else `i` (`i + mask * (col - i)`).
    ptx += &head("cols", ", .param .u64 cols, .param .u64 mask");
    ptx += "ld.param.u64 %rd9, [cols];\nld.param.u64 %rd10, [mask];\nand.b64 %rd10, %rd10, 1;\n\
            rem.u64 %rd11, %rd4, %rd9;\nsub.u64 %rd12, %rd11, %rd4;\nmad.lo.u64 %rd12, %rd12, %rd10, %rd4;\n\
            shl.b64 %rd12, %rd12, 2;\nshl.b64 %rd6, %rd4, 2;\n\
            add.u64 %rd7, %rd2, %rd12;\nadd.u64 %rd8, %rd1, %rd6;\n";
    ptx += body;
    ptx
}

/// Binary ops of a full operand and one row broadcast over every row (a
/// per-channel operand of a channels-last batch: the `_cols` entry), on
/// rows of a multiple of the vector width and not, with offset
/// (misaligned) views on either side, against f64.
#[test]
fn per_column_operands_match_f64() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType>(be: &CudaBackend, rng: &mut SplitMix64, op: BinaryOp) {
        let ((alo, ahi), (blo, bhi)) = binary_inputs(op, T::KIND);
        for (rows, cols, shift) in [
            (301, 64, 0),
            (77, 13, 0),
            (50, 8, 1),
            (3, 1000, 1),
            (0, 8, 0),
        ] {
            let out = [rows, cols];
            let la = Layout::new(out.to_vec(), vec![cols, 1], shift);
            let lb = Layout::new(vec![1, cols], vec![cols, 1], shift).broadcast_to(&out);
            let a: Vec<T> = random(rng, rows * cols + shift, alo, ahi);
            let b: Vec<T> = random(rng, cols + shift, blo, bhi);
            for swap in [false, true] {
                let (x, y) = match swap {
                    false => ((&a[..], &la), (&b[..], &lb)),
                    true => ((&b[..], &lb), (&a[..], &la)),
                };
                let what = format!(
                    "{} {} [{rows}, {cols}] +{shift} swap {swap}",
                    op.name(),
                    T::KIND
                );
                binary_matches_f64(be, op, x, y, &what);
            }
        }
    }
    for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub] {
        check::<f32>(&be, &mut rng, op);
        check::<bf16>(&be, &mut rng, op);
        check::<f16>(&be, &mut rng, op);
        check::<f64>(&be, &mut rng, op);
        check::<i32>(&be, &mut rng, op);
    }
}

#[test]
fn fused_kernels_launch_contiguous_and_strided() {
    let Some((_serial, be)) = gpu() else { return };
    static KERNEL: std::sync::OnceLock<FusedKernel> = std::sync::OnceLock::new();
    let kernel = KERNEL.get_or_init(|| FusedKernel {
        name: "tf_test_affine",
        ptx: Box::leak(affine_ptx().into_boxed_str()),
        ptx_sm80: None,
        inputs: &[DTypeKind::F32],
        output: DTypeKind::F32,
    });
    let mut rng = seed();
    for (what, len, l) in views() {
        let data: Vec<f32> = random(&mut rng, len, -10.0, 10.0);
        let s = up(&be, &data);
        let out = launch_fused::<f32>(kernel, 0, &[(s.device_ptr(), &l)], l.dims()).unwrap();
        let want: Vec<f64> = gather(&data, &l)
            .iter()
            .map(|&x| 2.0 * x as f64 + 1.0)
            .collect();
        assert_close(
            &format!("fused {what}"),
            &down(&out, l.dims()),
            &want,
            1e-6,
            1e-6,
        );
    }
    // Mismatched requests are errors, not launches.
    let s = up(&be, &[1.0f32; 4]);
    let l = Layout::contiguous(&[4]);
    assert!(launch_fused::<f64>(kernel, 0, &[(s.device_ptr(), &l)], &[4]).is_err());
    assert!(launch_fused::<f32>(kernel, 0, &[], &[4]).is_err());
    assert!(launch_fused::<f32>(kernel, 0, &[(s.device_ptr(), &l)], &[5]).is_err());
}

#[test]
fn bad_ptx_reports_the_jit_log() {
    let Some(_serial) = gpu() else { return };
    static BAD: FusedKernel = FusedKernel {
        name: "tf_test_bad",
        ptx: ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry tf_test_bad_contig() { bogus; }\n",
        ptx_sm80: None,
        inputs: &[],
        output: DTypeKind::F32,
    };
    match launch_fused::<f32>(&BAD, 0, &[], &[3]) {
        Err(Error::Driver { op, message }) => {
            assert!(op.contains("tf_test_bad"), "{op}");
            assert!(!message.is_empty());
        }
        other => panic!("expected a driver error, got {other:?}"),
    }
}

/// A large contiguous launch times its grid the first time (the choice is
/// kept per kernel and size class); whichever grid wins, with tuning on or
/// off, the results are the same.
#[test]
fn tuned_elementwise_grids_keep_the_results() {
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    // An f32 output of 128 MiB and a bit: beyond the L2 cache, so timed.
    let n = (32 << 20) + 12_345;
    let l = Layout::contiguous(&[n]);
    let a: Vec<f32> = random(&mut rng, n, -4.0, 4.0);
    let b: Vec<f32> = random(&mut rng, n, -4.0, 4.0);
    let (da, db) = (up(&be, &a), up(&be, &b));
    let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| (x * y) as f64).collect();
    let key = (
        ModuleKey::Builtin(Builtin::Binary(BinaryOp::Mul, DTypeKind::F32)),
        usize::BITS - (n / 4).leading_zeros(),
    );
    lock(&be.ctx().modules).grids.remove(&key);
    for (call, tune) in [true, true, false].into_iter().enumerate() {
        set_elementwise_autotune(tune);
        let out = be.binary(BinaryOp::Mul, &da, &l, &db, &l).unwrap();
        assert_close(&format!("call {call}"), &down(&out, &[n]), &want, 0.0, 0.0);
        let chosen = lock(&be.ctx().modules).grids.get(&key).copied();
        assert!(chosen.is_some(), "call {call}: no grid kept");
    }
    set_elementwise_autotune(true);
}

// ----- index_select, gather, embedding, tril/triu ----------------------

/// A CPU tensor and its copy on cuda:0.
fn pair<T: DType, S: crate::shape::Shape>(
    data: Vec<T>,
    dims: &[usize],
) -> (
    crate::tensor::Tensor<crate::device::Cpu, T, S>,
    crate::tensor::Tensor<crate::device::Cuda, T, S>,
) {
    let c = crate::tensor::Tensor::<crate::device::Cpu, T, S>::from_vec_dims(data, dims)
        .expect("host tensor");
    let g = c.to_device::<crate::device::Cuda>().expect("upload");
    (c, g)
}

/// Gathers of every element size (every dtype), both index dtypes,
/// strided sources and indices, against the CPU bit for bit.
#[test]
fn gathers_match_the_cpu_for_every_dtype() {
    use crate::shape::Dyn;
    let Some((_lock, _be)) = gpu() else { return };
    fn walk<T: DType, I: crate::dtype::IndexDType>(rng: &mut SplitMix64) {
        type S2 = (Dyn, Dyn);
        type S1 = (Dyn,);
        let what = format!("{} by {}", T::KIND.name(), I::KIND.name());
        for (r, c) in [(5, 7), (1, 1), (33, 300), (0, 4)] {
            let (x, gx) = pair::<T, S2>(random(rng, r * c, -50.0, 50.0), &[r, c]);
            let k = 1 + (rng.uniform() * 40.0) as usize;
            let rows: Vec<I> = (0..k)
                .map(|_| I::from_f64((rng.uniform() * r as f64).floor()))
                .collect();
            let cols: Vec<I> = (0..k)
                .map(|_| I::from_f64((rng.uniform() * c as f64).floor()))
                .collect();
            let (ir, gir) = pair::<I, S1>(rows.clone(), &[k]);
            let (ic, gic) = pair::<I, S1>(cols.clone(), &[k]);
            if r > 0 {
                // index_select along both dims, of the matrix and of its transpose.
                let want = x.index_select::<0, S2>(&ir).unwrap().to_vec().unwrap();
                let got = gx.index_select::<0, S2>(&gir).unwrap().to_vec().unwrap();
                assert_eq!(got, want, "index_select dim 0 of [{r}, {c}], {what}");
                let want = x
                    .t()
                    .unwrap()
                    .index_select::<1, S2>(&ir)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                let got = gx
                    .t()
                    .unwrap()
                    .index_select::<1, S2>(&gir)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                assert_eq!(got, want, "index_select of a transpose, {what}");
                // embedding of a [k, 1] and a [k] id tensor.
                let want: Vec<T> = crate::tensor::Tensor::<_, T, S2>::embedding(&ir, &x)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                let got: Vec<T> = crate::tensor::Tensor::<_, T, S2>::embedding(&gir, &gx)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                assert_eq!(got, want, "embedding in [{r}, {c}], {what}");
            }
            if c > 0 {
                let want = x.index_select::<1, S2>(&ic).unwrap().to_vec().unwrap();
                let got = gx.index_select::<1, S2>(&gic).unwrap().to_vec().unwrap();
                assert_eq!(got, want, "index_select dim 1 of [{r}, {c}], {what}");
                // gather along the last dim by a [r, k] index.
                let idx: Vec<I> = (0..r * k)
                    .map(|_| I::from_f64((rng.uniform() * c as f64).floor()))
                    .collect();
                let (ig, gig) = pair::<I, S2>(idx, &[r, k]);
                if k <= c || r == 0 {
                    let want = x.gather::<1, S2>(&ig).unwrap().to_vec().unwrap();
                    let got = gx.gather::<1, S2>(&gig).unwrap().to_vec().unwrap();
                    assert_eq!(got, want, "gather dim 1 of [{r}, {c}], {what}");
                }
            }
        }
    }
    let mut rng = seed();
    walk::<f32, i64>(&mut rng);
    walk::<f64, i32>(&mut rng);
    walk::<f16, i64>(&mut rng);
    walk::<bf16, i32>(&mut rng);
    walk::<i64, i64>(&mut rng);
    walk::<i32, i32>(&mut rng);
    walk::<u8, i64>(&mut rng);
    walk::<bool, i32>(&mut rng);
}

/// An index out of range (past the end, negative, or into an empty
/// table) is an `Err` naming it, the kernel reads nothing through it, and
/// the device keeps working: the next gather is right.
#[test]
fn out_of_range_indices_are_errors_and_the_device_keeps_working() {
    use crate::shape::Dyn;
    let Some((_lock, _be)) = gpu() else { return };
    type S2 = (Dyn, Dyn);
    type S1 = (Dyn,);
    let (x, gx) = pair::<f32, S2>((0..12).map(|i| i as f32).collect(), &[4, 3]);
    for bad in [4i64, -1, i64::MAX, i64::MIN, 1 << 40] {
        let ids = vec![0, 3, bad, 1];
        let (i, gi) = pair::<i64, S1>(ids.clone(), &[4]);
        let e_cpu = x.index_select::<0, S2>(&i).unwrap_err().to_string();
        let e_gpu = gx.index_select::<0, S2>(&gi).unwrap_err().to_string();
        assert_eq!(e_gpu, e_cpu, "index {bad}");
        assert!(
            e_gpu.contains(&format!("index {bad} in `index`")),
            "{e_gpu}"
        );
        let e = crate::tensor::Tensor::<_, f32, S2>::embedding(&gi, &gx)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("embedding") && e.contains("valid indices are 0..=3"),
            "{e}"
        );
        // Large indices spread over many blocks, one bad among them.
        let mut many = vec![2i32; 100_000];
        many[77_777] = -5;
        let (_, gm) = pair::<i32, S1>(many, &[100_000]);
        let e = gx.index_select::<0, S2>(&gm).unwrap_err().to_string();
        assert!(e.contains("index -5"), "{e}");
        // The device still works.
        let (j, gj) = pair::<i32, S1>(vec![3, 0], &[2]);
        assert_eq!(
            gx.index_select::<0, S2>(&gj).unwrap().to_vec().unwrap(),
            x.index_select::<0, S2>(&j).unwrap().to_vec().unwrap()
        );
    }
    // No rows: every id is out of range, no id is fine.
    let (_, empty) = pair::<f32, S2>(vec![], &[0, 3]);
    let (_, none) = pair::<i64, S1>(vec![], &[0]);
    let (_, zero) = pair::<i64, S1>(vec![0], &[1]);
    let y = crate::tensor::Tensor::<_, f32, S2>::embedding(&none, &empty).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
    assert!(crate::tensor::Tensor::<_, f32, S2>::embedding(&zero, &empty).is_err());
    crate::ops::dispatch::synchronize::<crate::device::Cuda>().unwrap();
}

#[test]
fn tril_and_triu_match_the_cpu() {
    use crate::shape::Dyn;
    let Some((_lock, _be)) = gpu() else { return };
    let mut rng = seed();
    for dims in [[2usize, 5, 7], [1, 1, 1], [3, 0, 4], [1, 64, 33]] {
        let n = dims.iter().product();
        let (x, gx) = pair::<f32, (Dyn, Dyn, Dyn)>(random(&mut rng, n, -3.0, 3.0), &dims);
        for k in [-3, -1, 0, 1, 5] {
            assert_eq!(
                gx.tril(k).unwrap().to_vec().unwrap(),
                x.tril(k).unwrap().to_vec().unwrap()
            );
            assert_eq!(
                gx.triu(k).unwrap().to_vec().unwrap(),
                x.triu(k).unwrap().to_vec().unwrap()
            );
        }
        let (b, gb) = pair::<bool, (Dyn, Dyn, Dyn)>(vec![true; n], &dims);
        assert_eq!(
            gb.tril(0).unwrap().to_vec().unwrap(),
            b.tril(0).unwrap().to_vec().unwrap()
        );
    }
}

/// Effective bandwidth of the normalisations beside a copy of the same
/// bytes (`cargo test -- --ignored norm_bandwidth --nocapture` on a GPU).
#[test]
#[ignore = "a measurement, not a check"]
fn norm_bandwidth() {
    let Some((_serial, be)) = gpu() else { return };
    fn time(be: &CudaBackend, f: &mut dyn FnMut()) -> f64 {
        for _ in 0..3 {
            f();
        }
        be.synchronize().unwrap();
        let reps = 20;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            f();
        }
        be.synchronize().unwrap();
        t.elapsed().as_secs_f64() / reps as f64
    }
    fn case<T: crate::FloatDType>(be: &CudaBackend, rows: usize, cols: usize) {
        let mut rng = seed();
        let x = up(be, &random::<T>(&mut rng, rows * cols, -2.0, 2.0));
        let w = up(be, &random::<T>(&mut rng, cols, -2.0, 2.0));
        let b = up(be, &random::<T>(&mut rng, cols, -2.0, 2.0));
        let l = Layout::contiguous(&[rows, cols]);
        let lw = Layout::contiguous(&[cols]);
        let bytes = 2.0 * (rows * cols * T::KIND.size_bytes()) as f64;
        // A strided view's copy reads and writes the same bytes.
        let copy = time(be, &mut || {
            let _ = be.contiguous(&x, &l.permute(&[0, 1])).unwrap();
        });
        let lt = Layout::contiguous(&[rows * cols]);
        let copy_strided = time(be, &mut || {
            let _ = be.cast::<T, T>(&x, &lt).unwrap();
        });
        for op in NormOp::ALL {
            let t = time(be, &mut || {
                let bias = op.has_bias().then_some((&b, &lw));
                let _ = be.norm(op, (&x, &l), (&w, &lw), bias, 1e-5).unwrap();
            });
            // The same norm written as a row kernel, as a user writes it.
            let def = norm_row_kernel(op, T::KIND);
            let mut inputs = vec![(&x, cols), (&w, 0)];
            if op.has_bias() {
                inputs.push((&b, 0));
            }
            let none = |_: &[&[T]], _: &[f64], _: &mut [T]| {};
            let rk = time(be, &mut || {
                let _ = be
                    .row_kernel(def, &inputs, &[1e-5], (rows, cols), &none)
                    .unwrap();
            });
            eprintln!(
                "{} {} [{rows}, {cols}]: {:.1} us, {:.0} GB/s; row kernel {:.1} us ({:.0} GB/s); copy {:.1} us ({:.0} GB/s), cast {:.1} us",
                op.name(),
                T::KIND,
                t * 1e6,
                bytes / t / 1e9,
                rk * 1e6,
                bytes / rk / 1e9,
                copy * 1e6,
                bytes / copy / 1e9,
                copy_strided * 1e6
            );
        }
        // A residual block in one pass: the sum folded into the loads,
        // the gate into the stores.
        let r = up(be, &random::<T>(&mut rng, rows * cols, -2.0, 2.0));
        let g = up(be, &random::<T>(&mut rng, rows * cols, -2.0, 2.0));
        let def = residual_rms_gate(T::KIND);
        let inputs = [(&x, cols), (&r, cols), (&w, 0), (&g, cols)];
        let none = |_: &[&[T]], _: &[f64], _: &mut [T]| {};
        let fused = time(be, &mut || {
            let _ = be
                .row_kernel(def, &inputs, &[1e-5], (rows, cols), &none)
                .unwrap();
        });
        eprintln!(
            "residual_rms_gate {} [{rows}, {cols}]: fused row kernel {:.1} us ({:.0} GB/s over 4 reads and a write)",
            T::KIND,
            fused * 1e6,
            2.5 * bytes / fused / 1e9
        );
    }
    let rope_case = |b: usize, t: usize, d: usize| {
        let mut rng = seed();
        let n = b * t * d;
        let x = up(&be, &random::<bf16>(&mut rng, n, -2.0, 2.0));
        let c = up(&be, &random::<bf16>(&mut rng, t * d, -1.0, 1.0));
        let l = Layout::contiguous(&[b, t, d]);
        let lc = Layout::contiguous(&[t, d]);
        let secs = time(&be, &mut || {
            let _ = be.rope((&x, &l), (&c, &lc), (&c, &lc)).unwrap();
        });
        eprintln!(
            "rope bf16 [{b}, {t}, {d}]: {:.1} us, {:.0} GB/s",
            secs * 1e6,
            (4 * n) as f64 / secs / 1e9
        );
    };
    rope_case(8 * 32, 2048, 128);
    rope_case(32, 4096, 64);
    case::<f32>(&be, 16384, 4096);
    case::<bf16>(&be, 8192, 768);
    case::<f16>(&be, 8192, 768);
    case::<f32>(&be, 8192, 768);
    case::<bf16>(&be, 4096, 8192);
    case::<f32>(&be, 2048, 16384);
}

/// Attention problems on the GPU against the f64 reference: head dims 1
/// to 256 (and one above, through the host), L != S, E != Ev, causal, a
/// `bool` mask broadcast over the batch and a float mask with `-inf`,
/// fully masked rows, NaN in a query, in every float dtype.
#[test]
fn attention_matches_the_reference() {
    use crate::ops::attention_reference::{Case, TestMask};
    let Some((_guard, be)) = gpu() else { return };
    let mut rng = seed();
    let mut cases = Vec::new();
    for (dims, causal) in [
        ([2, 3, 70, 70, 64, 64], true),
        ([1, 2, 33, 130, 128, 128], false),
        ([1, 2, 130, 33, 128, 128], true),
        ([2, 1, 40, 90, 80, 80], false),
        ([1, 1, 17, 23, 1, 3], true),
        ([1, 1, 9, 300, 256, 200], false),
        ([1, 1, 5, 7, 300, 8], false),
        ([1, 2, 6, 0, 16, 16], false),
        ([1, 2, 300, 260, 64, 64], true),
        ([2, 1, 257, 700, 128, 128], false),
        ([1, 1, 200, 450, 128, 128], true),
        // Head dim 128 over several blocks of 128 rows, the last partial.
        ([1, 2, 333, 333, 128, 128], true),
        ([2, 1, 161, 100, 128, 128], false),
        ([1, 1, 300, 129, 128, 128], true),
        // Several tiles of 128 keys (the Hopper entry's), and fewer keys
        // and queries than one tile.
        ([1, 3, 5, 5, 64, 64], false),
        ([1, 2, 512, 512, 128, 128], true),
        ([1, 1, 640, 384, 64, 64], false),
        ([2, 1, 1000, 1000, 64, 64], true),
    ] {
        let mut c = Case::random(&mut rng, dims, 1.0);
        c.causal = causal;
        cases.push(c);
    }
    // A negative and a zero scale on the tensor-core path.
    for (scale, d) in [(-0.3, 64), (0.0, 128)] {
        let mut c = Case::random(&mut rng, [1, 2, 100, 150, d, d], 1.0);
        c.causal = true;
        c.scale = Some(scale);
        cases.push(c);
    }
    {
        let mut c = Case::random(&mut rng, [2, 2, 37, 71, 64, 48], 1.0);
        let mut bits: Vec<bool> = (0..37 * 71).map(|_| rng.uniform() < 0.6).collect();
        bits[5 * 71..6 * 71].iter_mut().for_each(|x| *x = false);
        c.mask = TestMask::Bool(bits, vec![37, 71]);
        cases.push(c.clone());
        let add: Vec<f64> = (0..4 * 37 * 71)
            .map(|j| {
                if j % 7 == 0 {
                    f64::NEG_INFINITY
                } else {
                    rng.normal()
                }
            })
            .collect();
        c.mask = TestMask::Add(add, vec![2, 2, 37, 71]);
        c.scale = Some(0.2);
        c.q[3 * 64 + 5] = f64::NAN;
        cases.push(c);
    }
    for c in &cases {
        attention_case::<f32>(&be, c, 2e-5);
        attention_case::<f64>(&be, c, 1e-12);
        attention_case::<f16>(&be, c, 4e-3);
        attention_case::<bf16>(&be, c, 3e-2);
    }
}

/// One attention problem on the GPU in dtype `T` against the f64
/// reference, to within `tol`.
fn attention_case<T: crate::dtype::FloatDType>(
    be: &CudaBackend,
    c: &crate::ops::attention_reference::Case,
    tol: f64,
) {
    use crate::backend::AttnMask;
    use crate::ops::attention_reference::{check, Case, TestMask};
    let c = c.clone().rounded(|x| T::from_f64(x).to_f64());
    let [b, h, l, s, e, ev] = c.dims;
    let n = b * h;
    let cvt = |x: &[f64]| x.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>();
    let (q, k, v) = (up(be, &cvt(&c.q)), up(be, &cvt(&c.k)), up(be, &cvt(&c.v)));
    let (lq, lk, lv) = (
        Layout::contiguous(&[n, l, e]),
        Layout::contiguous(&[n, s, e]),
        Layout::contiguous(&[n, s, ev]),
    );
    let lo = Layout::contiguous(&[n, l, ev]);
    let ml = |d: &[usize]| {
        if d.len() == 2 {
            Layout::new(vec![n, l, s], vec![0, s, 1], 0)
        } else {
            Layout::contiguous(&[n, l, s])
        }
    };
    let out = match &c.mask {
        TestMask::None => be.attention(
            (&q, &lq),
            (&k, &lk),
            (&v, &lv),
            None,
            c.causal,
            scale(&c),
            &lo,
        ),
        TestMask::Bool(m, d) => {
            let mb = up(be, m);
            let l = ml(d);
            be.attention(
                (&q, &lq),
                (&k, &lk),
                (&v, &lv),
                Some((AttnMask::Bool(&mb), &l)),
                c.causal,
                scale(&c),
                &lo,
            )
        }
        TestMask::Add(m, d) => {
            let mf = up(be, &cvt(m));
            let l = ml(d);
            be.attention(
                (&q, &lq),
                (&k, &lk),
                (&v, &lv),
                Some((AttnMask::Add(&mf), &l)),
                c.causal,
                scale(&c),
                &lo,
            )
        }
    }
    .expect("attention");
    let got: Vec<f64> = down(&out, &[n, l, ev]).iter().map(|x| x.to_f64()).collect();
    check(
        &format!("{} {:?} causal {}", T::KIND, c.dims, c.causal),
        &got,
        &c.expected(),
        tol,
    );
    fn scale(c: &Case) -> f64 {
        let e = c.dims[4];
        c.scale
            .unwrap_or(if e == 0 { 0.0 } else { 1.0 / (e as f64).sqrt() })
    }
}

/// The Hopper forward's forms (the three-warpgroup entry, the
/// warp-specialised one and the latter in its plain block order), each
/// forced at both head dims, against the f64
/// reference: causal and not, rows and keys not a multiple of the tiles,
/// fewer keys than one tile, more keys than rows and fewer, no keys, and
/// a negative and a zero scale, in f16 and bf16. Elsewhere the runtime
/// takes the warp-specialised form; off compute capability 9.0 both runs
/// take the `mma.sync` entry.
#[test]
fn attention_hopper_forms_match_the_reference() {
    use crate::ops::attention_reference::Case;
    use std::sync::atomic::Ordering;
    let Some((_guard, be)) = gpu() else { return };
    let mut rng = seed();
    let mut cases = Vec::new();
    for d in [64, 128] {
        for (dims, causal) in [
            ([2, 3, 70, 70, d, d], true),
            ([1, 2, 333, 333, d, d], true),
            ([2, 1, 257, 700, d, d], false),
            ([1, 2, 700, 257, d, d], true),
            ([1, 1, 130, 33, d, d], false),
            ([1, 2, 512, 512, d, d], true),
            ([1, 2, 384, 640, d, d], false),
            ([1, 2, 6, 0, d, d], false),
            // Nine key tiles: the copier's ring of buffers wraps three
            // times, the last tile partial.
            ([1, 1, 300, 1100, d, d], false),
            ([1, 2, 1100, 1100, d, d], true),
        ] {
            let mut c = Case::random(&mut rng, dims, 1.0);
            c.causal = causal;
            cases.push(c);
        }
        for scale in [-0.3, 0.0] {
            let mut c = Case::random(&mut rng, [1, 2, 200, 150, d, d], 1.0);
            c.causal = true;
            c.scale = Some(scale);
            cases.push(c);
        }
    }
    // More heads than an L2 section of the warp-specialised entry holds
    // (15 at 8200 keys of D64 and at 4100 of D128), the last section
    // partial, several row blocks a head.
    for dims in [[2, 17, 130, 8200, 64, 64], [1, 20, 200, 4100, 128, 128]] {
        let mut c = Case::random(&mut rng, dims, 1.0);
        c.causal = true;
        cases.push(c);
    }
    for form in [1, 2, 3] {
        super::attention::WS_FORM.store(form, Ordering::Relaxed);
        for c in &cases {
            attention_case::<f16>(&be, c, 4e-3);
            attention_case::<bf16>(&be, c, 3e-2);
        }
    }
    super::attention::WS_FORM.store(0, Ordering::Relaxed);
}

/// The typed API on the GPU gives the CPU's result: strided and broadcast
/// operands, a batch above the grid's y limit, and launches with no query
/// (L = 0), no key (S = 0, zeros) and an empty batch.
#[test]
fn attention_reads_heads_split_out_of_a_projection_in_place() {
    use crate::device::{Cpu, Cuda};
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    type D5 = (Dyn, Dyn, Dyn, Dyn, Dyn);
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    // GPT-2's layout: one [B, T, 3, H, D] projection, q, k and v its
    // thirds seen as [B, H, T, D] (batch dims B and H that no one stride
    // walks): the tensor-core entry (bf16, D 64 and 128) and the f32
    // entry (f32, and bf16 with a mask) against the CPU.
    fn run<T: crate::FloatDType>(rng: &mut SplitMix64, [b, t, h, d]: [usize; 4], masked: bool) {
        let n = b * t * 3 * h * d;
        let data: Vec<T> = (0..n).map(|_| T::from_f64(rng.normal())).collect();
        let qkv = Tensor::<Cpu, T, D5>::from_vec_dims(data, &[b, t, 3, h, d]).unwrap();
        let part = |x: &Tensor<Cpu, T, D5>, i: usize| -> Tensor<Cpu, T, D4> {
            x.narrow::<2, D5>(i, 1)
                .unwrap()
                .reshape_dims::<D4>(&[b, t, h, d])
                .unwrap()
                .transpose::<D4>(1, 2)
                .unwrap()
        };
        let mask = Tensor::<Cpu, bool, (Dyn, Dyn)>::from_vec_dims(
            (0..t * t).map(|i| i % 3 != 1).collect(),
            &[t, t],
        )
        .unwrap();
        let gq = qkv.to_device::<Cuda>().unwrap();
        let (q, k, v) = (part(&qkv, 0), part(&qkv, 1), part(&qkv, 2));
        let (qg, kg, vg) = (
            part_gpu(&gq, 0, [b, t, h, d]),
            part_gpu(&gq, 1, [b, t, h, d]),
            part_gpu(&gq, 2, [b, t, h, d]),
        );
        let (cpu, gpu) = if masked {
            let mg = mask.to_device::<Cuda>().unwrap();
            (
                q.scaled_dot_product_attention_dims::<D4>(
                    &k,
                    &v,
                    AttentionArgs::new().attn_mask(&mask),
                )
                .unwrap(),
                qg.scaled_dot_product_attention_dims::<D4>(
                    &kg,
                    &vg,
                    AttentionArgs::new().attn_mask(&mg),
                )
                .unwrap()
                .to_device::<Cpu>()
                .unwrap(),
            )
        } else {
            (
                q.scaled_dot_product_attention_dims::<D4>(
                    &k,
                    &v,
                    AttentionArgs::new().is_causal(true),
                )
                .unwrap(),
                qg.scaled_dot_product_attention_dims::<D4>(
                    &kg,
                    &vg,
                    AttentionArgs::new().is_causal(true),
                )
                .unwrap()
                .to_device::<Cpu>()
                .unwrap(),
            )
        };
        let tol = if T::KIND == DTypeKind::F32 {
            1e-5
        } else {
            2e-2
        };
        let (g, c) = (gpu.to_vec().unwrap(), cpu.to_vec().unwrap());
        assert_eq!(gpu.dims(), cpu.dims());
        for (i, (x, y)) in g.iter().zip(&c).enumerate() {
            let (x, y) = (x.to_f64(), y.to_f64());
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{:?} {:?} masked {masked}: element {i} is {x}, the CPU's {y}",
                T::KIND,
                [b, t, h, d]
            );
        }
    }
    fn part_gpu<T: crate::FloatDType>(
        x: &Tensor<Cuda, T, D5>,
        i: usize,
        [b, t, h, d]: [usize; 4],
    ) -> Tensor<Cuda, T, D4> {
        x.narrow::<2, D5>(i, 1)
            .unwrap()
            .reshape_dims::<D4>(&[b, t, h, d])
            .unwrap()
            .transpose::<D4>(1, 2)
            .unwrap()
    }
    run::<bf16>(&mut rng, [2, 70, 3, 64], false);
    run::<bf16>(&mut rng, [3, 33, 2, 128], false);
    run::<bf16>(&mut rng, [2, 40, 3, 64], true);
    run::<f32>(&mut rng, [2, 37, 3, 16], false);
    run::<f32>(&mut rng, [2, 37, 3, 16], true);
}

#[test]
fn attention_on_the_gpu_matches_the_cpu() {
    use crate::device::{Cpu, Cuda};
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    let mut t = |d: &[usize]| {
        let n: usize = d.iter().product();
        Tensor::<Cpu, f32, D4>::from_vec_dims((0..n).map(|_| rng.normal() as f32).collect(), d)
            .unwrap()
    };
    for (qd, kd, causal) in [
        ([2, 9, 3, 16], [2, 1, 13, 16], true),
        ([1, 70000, 1, 4], [1, 70000, 3, 4], false),
        ([1, 2, 0, 8], [1, 2, 5, 8], false),
        ([1, 2, 4, 8], [1, 2, 0, 8], true),
        ([0, 2, 4, 8], [0, 2, 5, 8], false),
    ] {
        let (q, k) = (t(&qd), t(&kd));
        // q as a transposed view: [B, L, H, E] read as [B, H, L, E].
        let qt = q
            .reshape_dims::<D4>(&[qd[0], qd[2], qd[1], qd[3]])
            .unwrap()
            .transpose::<D4>(1, 2)
            .unwrap();
        let cpu = qt
            .scaled_dot_product_attention_dims::<D4>(&k, &k, AttentionArgs::new().is_causal(causal))
            .unwrap();
        let (qg, kg) = (
            qt.to_device::<Cuda>().unwrap(),
            k.to_device::<Cuda>().unwrap(),
        );
        let gpu = qg
            .scaled_dot_product_attention_dims::<D4>(
                &kg,
                &kg,
                AttentionArgs::new().is_causal(causal),
            )
            .unwrap();
        assert_eq!(gpu.dims(), cpu.dims());
        let (g, c) = (gpu.to_vec().unwrap(), cpu.to_vec().unwrap());
        for (i, (a, b)) in g.iter().zip(&c).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{qd:?}: element {i} is {a}, the CPU's {b}"
            );
        }
    }
}

/// Grouped-query attention (`enable_gqa`, keys and values of fewer heads)
/// on the GPU against the CPU's (itself checked against f64): the
/// tensor-core entry (f16, bf16 at head dims 64 and 128), the f32 entry
/// (f32, a mask, the log-sum-exps, head dim 40), a query read in place as
/// heads split out of `[B, L, H, E]`, and the backward (dK and dV summed
/// over each group).
#[test]
fn attention_grouped_query_on_the_gpu_matches_the_cpu() {
    use crate::device::{Cpu, Cuda};
    use crate::dtype::FloatDType;
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    type D3 = (Dyn, Dyn, Dyn);
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    fn close<T: FloatDType>(what: &str, g: &[T], c: &[T], tol: f64) {
        assert_eq!(g.len(), c.len(), "{what}: length");
        for (i, (a, b)) in g.iter().zip(c).enumerate() {
            let (a, b) = (a.to_f64(), b.to_f64());
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{what}: element {i} is {a}, the CPU's {b}"
            );
        }
    }
    fn run<T: FloatDType>(
        rng: &mut SplitMix64,
        [b, h, hkv, l, s, e]: [usize; 6],
        causal: bool,
        transposed: bool,
        masked: bool,
        tol: f64,
    ) {
        let mut t = |d: &[usize]| {
            let n: usize = d.iter().product();
            Tensor::<Cpu, T, D4>::from_vec_dims(
                (0..n).map(|_| T::from_f64(rng.normal())).collect(),
                d,
            )
            .unwrap()
        };
        let q = if transposed {
            t(&[b, l, h, e]).transpose::<D4>(1, 2).unwrap()
        } else {
            t(&[b, h, l, e])
        };
        let (k, v, g) = (t(&[b, hkv, s, e]), t(&[b, hkv, s, e]), t(&[b, h, l, e]));
        let bits: Vec<bool> = (0..l * s).map(|i| i % 7 != 3).collect();
        let mask = Tensor::<Cpu, bool, (Dyn, Dyn)>::from_vec_dims(bits, &[l, s]).unwrap();
        let maskg = mask.to_device::<Cuda>().unwrap();
        let what = format!(
            "{:?} {:?} causal {causal} transposed {transposed} masked {masked}",
            T::KIND,
            [b, h, hkv, l, s, e]
        );
        let cpu_args = || {
            let a = AttentionArgs::<Cpu, T>::new().enable_gqa(true);
            if masked {
                a.attn_mask(&mask)
            } else {
                a.is_causal(causal)
            }
        };
        let gpu_args = || {
            let a = AttentionArgs::<Cuda, T>::new().enable_gqa(true);
            if masked {
                a.attn_mask(&maskg)
            } else {
                a.is_causal(causal)
            }
        };
        let (qg, kg, vg, gg) = (
            q.to_device::<Cuda>().unwrap(),
            k.to_device::<Cuda>().unwrap(),
            v.to_device::<Cuda>().unwrap(),
            g.to_device::<Cuda>().unwrap(),
        );
        let cpu = q
            .scaled_dot_product_attention_dims::<D4>(&k, &v, cpu_args())
            .unwrap();
        let gpu = qg
            .scaled_dot_product_attention_dims::<D4>(&kg, &vg, gpu_args())
            .unwrap();
        assert_eq!(gpu.dims(), &[b, h, l, e]);
        close(&what, &gpu.to_vec().unwrap(), &cpu.to_vec().unwrap(), tol);
        let (yc, lc) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&k, &v, cpu_args())
            .unwrap();
        let (yg, lg) = qg
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&kg, &vg, gpu_args())
            .unwrap();
        close(
            &format!("{what} (with lse)"),
            &yg.to_vec().unwrap(),
            &yc.to_vec().unwrap(),
            tol,
        );
        close(
            &format!("{what} lse"),
            &lg.to_vec().unwrap(),
            &lc.to_vec().unwrap(),
            1e-4,
        );
        let dc = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &yc, &g, &lc, cpu_args())
            .unwrap();
        let dg = qg
            .scaled_dot_product_attention_backward_dims(&kg, &vg, &yg, &gg, &lg, gpu_args())
            .unwrap();
        assert_eq!(
            (dg.1.dims(), dg.2.dims()),
            (&[b, hkv, s, e][..], &[b, hkv, s, e][..])
        );
        // The gradients sum over the keys or queries and the group: a
        // 16-bit output rounds differently on the two devices.
        let gt = tol * 4.0;
        close(
            &format!("{what} dq"),
            &dg.0.to_vec().unwrap(),
            &dc.0.to_vec().unwrap(),
            gt,
        );
        close(
            &format!("{what} dk"),
            &dg.1.to_vec().unwrap(),
            &dc.1.to_vec().unwrap(),
            gt,
        );
        close(
            &format!("{what} dv"),
            &dg.2.to_vec().unwrap(),
            &dc.2.to_vec().unwrap(),
            gt,
        );
    }
    run::<bf16>(&mut rng, [2, 8, 2, 70, 70, 64], true, false, false, 3e-2);
    run::<bf16>(&mut rng, [1, 6, 3, 33, 90, 128], false, true, false, 3e-2);
    run::<f16>(&mut rng, [2, 4, 2, 129, 129, 128], true, true, false, 4e-3);
    run::<f32>(&mut rng, [2, 6, 2, 37, 41, 40], true, false, false, 1e-5);
    run::<f32>(&mut rng, [1, 4, 2, 37, 41, 64], false, true, true, 1e-5);
    run::<bf16>(&mut rng, [1, 4, 1, 65, 65, 64], true, false, false, 3e-2);
    run::<f16>(&mut rng, [1, 8, 2, 300, 300, 64], false, true, false, 4e-3);
    run::<bf16>(&mut rng, [1, 4, 2, 257, 257, 128], true, true, false, 3e-2);
}

/// The attention backward and the forward's log-sum-exps on the GPU
/// against the CPU's (itself checked against f64 finite differences), in
/// every float dtype, head dims 64 and 128 and a small one, causal and
/// not, lengths that are not multiples of any block size, a mask with a
/// row of no keys, and a key shared by the heads.
#[test]
fn attention_backward_matches_the_cpu() {
    use crate::device::{Cpu, Cuda};
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    type D3 = (Dyn, Dyn, Dyn);
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    fn run<T: crate::FloatDType>(
        rng: &mut SplitMix64,
        qd: [usize; 4],
        kd: [usize; 4],
        ev: usize,
        causal: bool,
        mask: bool,
    ) {
        let mut t = |d: &[usize]| {
            let n: usize = d.iter().product();
            Tensor::<Cpu, T, D4>::from_vec_dims(
                (0..n).map(|_| T::from_f64(rng.normal())).collect(),
                d,
            )
            .unwrap()
        };
        let vd = [kd[0], kd[1], kd[2], ev];
        let od = [qd[0], qd[1], qd[2], ev];
        let (q, k, v, g) = (t(&qd), t(&kd), t(&vd), t(&od));
        let (l, s) = (qd[2], kd[2]);
        let bits: Vec<bool> = (0..l * s).map(|i| i / s != 1 && i % 3 != 0).collect();
        let m = Tensor::<Cpu, bool, (Dyn, Dyn)>::from_vec_dims(bits, &[l, s]).unwrap();
        let mg = m.to_device::<Cuda>().unwrap();
        let args_c = || {
            let a = AttentionArgs::<Cpu, T>::new().is_causal(causal);
            if mask {
                a.attn_mask(&m)
            } else {
                a
            }
        };
        let args_g = || {
            let a = AttentionArgs::<Cuda, T>::new().is_causal(causal);
            if mask {
                a.attn_mask(&mg)
            } else {
                a
            }
        };
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&k, &v, args_c())
            .unwrap();
        let want = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, args_c())
            .unwrap();
        let dev = |x: &Tensor<Cpu, T, D4>| x.to_device::<Cuda>().unwrap();
        let (qg, kg, vg, gg) = (dev(&q), dev(&k), dev(&v), dev(&g));
        let (yg, lg) = qg
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&kg, &vg, args_g())
            .unwrap();
        let what = format!(
            "{:?} q {qd:?} k {kd:?} ev {ev} causal {causal} mask {mask}",
            T::KIND
        );
        let tol = match T::KIND {
            DTypeKind::F64 => 1e-11,
            DTypeKind::F32 => 1e-4,
            DTypeKind::F16 => 1e-2,
            _ => 5e-2,
        };
        let close = |name: &str, a: Vec<f64>, b: Vec<f64>| {
            assert_eq!(a.len(), b.len(), "{what}: {name} length");
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let ok = (x - y).abs() <= tol * (1.0 + y.abs()) || (x.is_infinite() && x == y);
                assert!(ok, "{what}: {name}[{i}] is {x} on the GPU, {y} on the CPU");
            }
        };
        let f = |x: &Tensor<Cpu, T, D4>| -> Vec<f64> {
            x.to_vec()
                .unwrap()
                .into_iter()
                .map(|v| v.to_f64())
                .collect()
        };
        let lv = |x: Vec<f32>| -> Vec<f64> { x.into_iter().map(f64::from).collect() };
        close("lse", lv(lg.to_vec().unwrap()), lv(lse.to_vec().unwrap()));
        // The backward from the GPU's own forward.
        let (dq, dk, dv) = qg
            .scaled_dot_product_attention_backward_dims(&kg, &vg, &yg, &gg, &lg, args_g())
            .unwrap();
        let host = |x: Tensor<Cuda, T, D4>| f(&x.to_device::<Cpu>().unwrap());
        close("out", host(yg), f(&y));
        close("dq", host(dq), f(&want.0));
        close("dk", host(dk), f(&want.1));
        close("dv", host(dv), f(&want.2));
    }
    for causal in [false, true] {
        for d in [64, 128] {
            run::<f16>(&mut rng, [2, 3, 77, d], [2, 3, 77, d], d, causal, false);
            run::<bf16>(&mut rng, [2, 3, 77, d], [2, 3, 77, d], d, causal, false);
            run::<f32>(&mut rng, [1, 2, 45, d], [1, 2, 93, d], d, causal, false);
            run::<f64>(&mut rng, [1, 2, 45, d], [1, 2, 45, d], d, causal, false);
        }
        run::<bf16>(&mut rng, [1, 4, 130, 64], [1, 1, 70, 64], 64, causal, false);
        run::<f32>(&mut rng, [2, 2, 33, 16], [2, 2, 20, 16], 24, causal, false);
    }
    run::<f32>(&mut rng, [1, 2, 37, 64], [1, 2, 50, 64], 64, false, true);
    run::<bf16>(&mut rng, [1, 2, 37, 128], [1, 2, 50, 128], 128, false, true);
}

/// The tensor-core attention backward (f16 and bf16, head dims 64 and
/// 128, sm_80+) against the f64 backward of the same (rounded) inputs:
/// causal and not, lengths that are not multiples of its blocks (128 keys,
/// 32 or 64 queries), more queries than keys and fewer, more heads than
/// the device has SMs, grouped-query heads, and heads read in place from
/// `[B, T, H, D]` tensors (a packed projection's layout), with the output
/// and its gradient in each layout of [`GradOut`]. Within the dtype's
/// roundoff: `P` and `dS` are rounded to it before their products. On a
/// device of compute capability 9.0 both forms: the `mma.sync` one, then
/// the Hopper one (`wgmma`, 64 keys a block, query tiles of 64), which
/// the runtime takes there.
#[test]
fn attention_mma_backward_matches_f64() {
    use crate::device::{Cpu, Cuda};
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    type D3 = (Dyn, Dyn, Dyn);
    let Some((_guard, be)) = gpu() else { return };
    let mut rng = seed();
    // [b, h, l, s, d], the key and value heads `hkv` (h for plain
    // attention) and `causal`; the output and its gradient as `heads`.
    fn run<T: crate::FloatDType>(
        rng: &mut SplitMix64,
        [b, h, l, s, d]: [usize; 5],
        hkv: usize,
        causal: bool,
        heads: GradOut,
    ) {
        let mut random = |dims: [usize; 4]| {
            Tensor::<Cpu, T, D4>::from_vec_dims(
                (0..dims.iter().product())
                    .map(|_| T::from_f64(rng.normal()))
                    .collect(),
                &dims,
            )
            .unwrap()
        };
        // [B, T, H, D] on the device, read as [B, H, T, D].
        let mut t = |n: usize, h: usize| {
            let x = random([b, n, h, d]);
            let g = x
                .to_device::<Cuda>()
                .unwrap()
                .transpose::<D4>(1, 2)
                .unwrap();
            (x.transpose::<D4>(1, 2).unwrap(), g)
        };
        let ((q, qg), (k, kg), (v, vg)) = (t(l, h), t(s, hkv), t(s, hkv));
        // The output's gradient: the heads of a `[B, T, H, D + pad]`
        // tensor, columns `pad..` (rows at a stride of D + pad, starting
        // `pad` elements in).
        let pad = heads.pad();
        let (go, gg) = {
            let x = random([b, l, h, d + pad]);
            let g = x
                .to_device::<Cuda>()
                .unwrap()
                .narrow::<3, D4>(pad, d)
                .unwrap()
                .transpose::<D4>(1, 2)
                .unwrap();
            let c = x.narrow::<3, D4>(pad, d).unwrap();
            (c.transpose::<D4>(1, 2).unwrap(), g)
        };
        let wide = |x: &Tensor<Cpu, T, D4>| x.cast::<f64>().unwrap();
        let gqa = hkv != h;
        let args = || {
            AttentionArgs::<Cpu, f64>::new()
                .is_causal(causal)
                .enable_gqa(gqa)
        };
        let (q64, k64, v64, g64) = (wide(&q), wide(&k), wide(&v), wide(&go));
        let (y64, lse64) = q64
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&k64, &v64, args())
            .unwrap();
        let want = q64
            .scaled_dot_product_attention_backward_dims(&k64, &v64, &y64, &g64, &lse64, args())
            .unwrap();
        let args_g = || {
            AttentionArgs::<Cuda, T>::new()
                .is_causal(causal)
                .enable_gqa(gqa)
        };
        let (yg, lg) = qg
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&kg, &vg, args_g())
            .unwrap();
        let (yg, gg) = match heads {
            GradOut::Dense => (yg.contiguous().unwrap(), gg.contiguous().unwrap()),
            _ => (yg, gg),
        };
        let (dq, dk, dv) = qg
            .scaled_dot_product_attention_backward_dims(&kg, &vg, &yg, &gg, &lg, args_g())
            .unwrap();
        let tol = if T::KIND == DTypeKind::F16 {
            4e-3
        } else {
            3e-2
        };
        let what = format!(
            "{:?} [{b}, {h}/{hkv}, {l}, {s}, {d}] causal {causal} {heads:?}",
            T::KIND
        );
        // The tensor-core forward's log-sum-exps against the f64 forward's
        // (stored as f32): its sums are f32, its 2^x and log2 good to
        // about 2^-22.
        let got = lg.to_device::<Cpu>().unwrap().to_vec().unwrap();
        let want_lse = lse64.to_vec().unwrap();
        assert_eq!(got.len(), want_lse.len(), "{what}: lse");
        for (i, (x, y)) in got.iter().zip(&want_lse).enumerate() {
            assert!(
                (f64::from(*x) - f64::from(*y)).abs() <= 1e-5 * (8.0 + f64::from(y.abs())),
                "{what}: lse[{i}] is {x}, the f64 forward's {y}"
            );
        }
        for (name, got, want) in [
            ("dq", dq, &want.0),
            ("dk", dk, &want.1),
            ("dv", dv, &want.2),
        ] {
            let got: Vec<f64> = got
                .to_device::<Cpu>()
                .unwrap()
                .to_vec()
                .unwrap()
                .into_iter()
                .map(|x| x.to_f64())
                .collect();
            let want = want.to_vec().unwrap();
            assert_eq!(got.len(), want.len(), "{what}: {name}");
            let top = want.iter().fold(0f64, |m, x| m.max(x.abs()));
            let mut worst = 0f64;
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (x - y).abs() <= tol * (top + y.abs()),
                    "{what}: {name}[{i}] is {x}, the f64 backward's {y} (largest {top})"
                );
                worst = worst.max((x - y).abs() / top);
            }
            println!("{what}: {name} worst error {worst:.2e} of the largest");
        }
    }
    let hopper = be.ctx().compute_capability == (9, 0);
    // On compute capability 9.0 the Hopper forms (at head dim 128 the
    // warp-specialised one, two warpgroups a block adding dQ with bulk
    // reductions, with `red.global.add`, one warpgroup a block;
    // `BWD_FORM`), then the `mma.sync` form; elsewhere the runtime's
    // choice.
    for (mma_sync, form) in [(false, 4), (false, 3), (false, 2), (false, 1), (true, 0)] {
        if (mma_sync || form != 3) && !hopper {
            continue;
        }
        super::attention::MMA_SYNC_ONLY.store(mma_sync, std::sync::atomic::Ordering::Relaxed);
        super::attention::BWD_FORM.store(form, std::sync::atomic::Ordering::Relaxed);
        println!("the mma.sync form only: {mma_sync}, the Hopper backward's form {form}");
        for causal in [false, true] {
            for d in [64, 128] {
                let g = GradOut::Heads;
                run::<bf16>(&mut rng, [2, 3, 100, 100, d], 3, causal, g);
                run::<f16>(&mut rng, [2, 3, 100, 100, d], 3, causal, g);
                run::<bf16>(&mut rng, [1, 2, 130, 77, d], 2, causal, g);
                run::<f16>(&mut rng, [1, 2, 45, 150, d], 2, causal, g);
                // Whole tiles, several of them; grouped-query heads.
                run::<bf16>(&mut rng, [1, 2, 256, 192, d], 2, causal, g);
                run::<f16>(&mut rng, [2, 4, 70, 129, d], 2, causal, g);
                // The output and its gradient dense, at padded strides,
                // and unaligned (copied first).
                for g in [GradOut::Dense, GradOut::Padded, GradOut::Unaligned] {
                    run::<bf16>(&mut rng, [2, 3, 100, 77, d], 3, causal, g);
                    run::<f16>(&mut rng, [2, 4, 70, 129, d], 2, causal, g);
                }
            }
            // More heads than SMs.
            run::<bf16>(&mut rng, [3, 50, 65, 65, 64], 50, causal, GradOut::Heads);
            run::<f16>(&mut rng, [2, 80, 33, 33, 128], 80, causal, GradOut::Padded);
            // Keys past the first block of 128 (a second warpgroup's
            // keys in several blocks, the last one partial).
            run::<bf16>(&mut rng, [1, 2, 300, 300, 128], 1, causal, GradOut::Heads);
        }
    }
    super::attention::MMA_SYNC_ONLY.store(false, std::sync::atomic::Ordering::Relaxed);
    super::attention::BWD_FORM.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// How [`attention_mma_backward_matches_f64`] lays out the output and its
/// gradient: the forward's output and the heads of a `[B, T, H, D]`
/// gradient (`Heads`, GPT-2's), both as contiguous `[B, H, T, D]`
/// (`Dense`), the gradient cut from rows of `D + 8` (`Padded`: aligned
/// strides that are not the output's) or of `D + 1` (`Unaligned`: rows the
/// entries cannot read 16 bytes at a time, so the runtime copies them).
#[derive(Clone, Copy, Debug)]
enum GradOut {
    Heads,
    Dense,
    Padded,
    Unaligned,
}

impl GradOut {
    /// The columns in front of the gradient's in each of its rows.
    fn pad(self) -> usize {
        match self {
            GradOut::Heads | GradOut::Dense => 0,
            GradOut::Padded => 8,
            GradOut::Unaligned => 1,
        }
    }
}

/// Times causal bf16 attention at the benchmark's sizes (`cargo test
/// attention_timing -- --ignored --nocapture`); `scripts/torch_attention.py`
/// prints PyTorch's times for the same cases.
#[test]
#[ignore]
fn attention_timing() {
    use crate::device::Cuda;
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    let Some((_guard, be)) = gpu() else { return };
    // On a device of compute capability 9.0, the `mma.sync` form first,
    // then the Hopper forms: the three-warpgroup one and the
    // warp-specialised one in its plain block order and in L2 sections
    // (the runtime's), each at both head dims.
    use std::sync::atomic::Ordering;
    let hopper = be.ctx().compute_capability == (9, 0);
    let forms: &[(bool, u8)] = if hopper {
        &[(true, 0), (false, 1), (false, 3), (false, 2)]
    } else {
        &[(false, 0)]
    };
    for &(mma_sync, ws) in forms {
        super::attention::MMA_SYNC_ONLY.store(mma_sync, Ordering::Relaxed);
        super::attention::WS_FORM.store(ws, Ordering::Relaxed);
        let form = match (hopper && !mma_sync, ws) {
            (false, _) => "mma.sync",
            (true, 1) => "wgmma",
            (true, 3) => "wgmma warp-specialised, blocks by batch",
            (true, _) => "wgmma warp-specialised",
        };
        for [b, h, t, d] in [[8, 12, 1024, 64], [4, 16, 4096, 128], [1, 32, 8192, 128]] {
            let dims = [b, h, t, d];
            let q = Tensor::<Cuda, bf16, D4>::randn_dims(1, &dims).unwrap();
            let k = Tensor::<Cuda, bf16, D4>::randn_dims(2, &dims).unwrap();
            let v = Tensor::<Cuda, bf16, D4>::randn_dims(3, &dims).unwrap();
            let run = || {
                q.scaled_dot_product_attention(&k, &v, AttentionArgs::new().is_causal(true))
                    .unwrap()
            };
            drop(run());
            be.synchronize().unwrap();
            let reps = 10;
            let start = std::time::Instant::now();
            for _ in 0..reps {
                drop(run());
            }
            be.synchronize().unwrap();
            let s = start.elapsed().as_secs_f64() / reps as f64;
            let flops = 4.0 * (b * h) as f64 * (t * t) as f64 * d as f64 / 2.0;
            println!(
                "attention causal bf16 B{b} H{h} T{t} D{d} ({form}): {:.3} ms, {:.2} TFLOP/s",
                s * 1e3,
                flops / s / 1e12
            );
        }
    }
    super::attention::MMA_SYNC_ONLY.store(false, Ordering::Relaxed);
    // Grouped-query attention: 8 key and value heads for 32 query heads,
    // on compute capability 9.0 the warp-specialised form's plain block
    // order first, then the runtime's choice.
    let orders: &[u8] = if hopper { &[3, 0] } else { &[0] };
    for (&ws, [b, h, hkv, t, d]) in orders
        .iter()
        .flat_map(|o| [[1, 32, 8, 8192, 128], [4, 16, 4, 4096, 128]].map(|c| (o, c)))
    {
        super::attention::WS_FORM.store(ws, Ordering::Relaxed);
        let q = Tensor::<Cuda, bf16, D4>::randn_dims(1, &[b, h, t, d]).unwrap();
        let k = Tensor::<Cuda, bf16, D4>::randn_dims(2, &[b, hkv, t, d]).unwrap();
        let v = Tensor::<Cuda, bf16, D4>::randn_dims(3, &[b, hkv, t, d]).unwrap();
        let args = || AttentionArgs::new().is_causal(true).enable_gqa(true);
        let run = || {
            q.scaled_dot_product_attention_dims::<D4>(&k, &v, args())
                .unwrap()
        };
        drop(run());
        be.synchronize().unwrap();
        let reps = 10;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            drop(run());
        }
        be.synchronize().unwrap();
        let s = start.elapsed().as_secs_f64() / reps as f64;
        let flops = 4.0 * (b * h) as f64 * (t * t) as f64 * d as f64 / 2.0;
        println!(
            "attention causal bf16 enable_gqa B{b} H{h} Hkv{hkv} T{t} D{d}{}: {:.3} ms, {:.2} TFLOP/s",
            if ws == 3 { " (blocks by batch)" } else { "" },
            s * 1e3,
            flops / s / 1e12
        );
    }
    super::attention::WS_FORM.store(0, Ordering::Relaxed);
}

/// Times the causal bf16 attention backward at the target's size (`cargo
/// test attention_backward_timing -- --ignored --nocapture`);
/// `scripts/torch_attention.py` prints PyTorch's time for the same case.
#[test]
#[ignore]
fn attention_backward_timing() {
    use crate::device::Cuda;
    use crate::ops::AttentionArgs;
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    type D4 = (Dyn, Dyn, Dyn, Dyn);
    type D3 = (Dyn, Dyn, Dyn);
    let Some((_guard, be)) = gpu() else { return };
    // On a device of compute capability 9.0, the `mma.sync` form first
    // (the Hopper form is what the runtime takes there).
    let hopper = be.ctx().compute_capability == (9, 0);
    // The `mma.sync` form, then the Hopper forms (`BWD_FORM`: one
    // warpgroup a block; at head dim 128 two, adding dQ with
    // `red.global.add`, with bulk reductions, and the warp-specialised
    // form); elsewhere the runtime's choice.
    for ((mma_sync, bwd), [b, h, t, d]) in
        [(true, 0), (false, 1), (false, 2), (false, 3), (false, 4)]
            .into_iter()
            .flat_map(|m| [(m, [8, 12, 1024, 64]), (m, [4, 16, 4096, 128])])
    {
        let skip = if hopper {
            bwd >= 2 && d != 128
        } else {
            mma_sync || bwd != 3
        };
        if skip {
            continue;
        }
        super::attention::MMA_SYNC_ONLY.store(mma_sync, std::sync::atomic::Ordering::Relaxed);
        super::attention::BWD_FORM.store(bwd, std::sync::atomic::Ordering::Relaxed);
        let form = match (hopper, mma_sync, bwd, d) {
            (false, ..) | (_, true, ..) => "mma.sync",
            (_, _, 2, _) => "wgmma, two warpgroups, red.global.add",
            (_, _, 3, 128) => "wgmma, two warpgroups, bulk reductions",
            (_, _, 4, 128) => "wgmma, warp-specialised",
            _ => "wgmma",
        };
        let dims = [b, h, t, d];
        let q = Tensor::<Cuda, bf16, D4>::randn_dims(1, &dims).unwrap();
        let k = Tensor::<Cuda, bf16, D4>::randn_dims(2, &dims).unwrap();
        let v = Tensor::<Cuda, bf16, D4>::randn_dims(3, &dims).unwrap();
        let g = Tensor::<Cuda, bf16, D4>::randn_dims(4, &dims).unwrap();
        let args = || AttentionArgs::new().is_causal(true);
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, D3>(&k, &v, args())
            .unwrap();
        let run = || {
            q.scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, args())
                .unwrap()
        };
        drop(run());
        be.synchronize().unwrap();
        let reps = 10;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            drop(run());
        }
        be.synchronize().unwrap();
        let s = start.elapsed().as_secs_f64() / reps as f64;
        let flops = 2.5 * 4.0 * (b * h) as f64 * (t * t) as f64 * d as f64 / 2.0;
        println!(
            "attention backward causal bf16 B{b} H{h} T{t} D{d} ({form}): {:.3} ms, {:.2} TFLOP/s",
            s * 1e3,
            flops / s / 1e12
        );
    }
    super::attention::MMA_SYNC_ONLY.store(false, std::sync::atomic::Ordering::Relaxed);
    super::attention::BWD_FORM.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// `cross_entropy` and its backward on the GPU against the CPU backend
/// (itself tested against the f64 reference and finite differences), in
/// every float dtype with `i64` and `i32` targets, every reduction, label
/// smoothing and ignored rows, rows up to GPT-2's vocabulary, strided
/// logits, edge values and bad targets.
#[test]
fn cross_entropy_matches_the_cpu() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType, I: crate::dtype::IndexDType>(
        be: &CudaBackend,
        rng: &mut SplitMix64,
        tol: f64,
    ) {
        let cpu = CpuBackend;
        let close = |g: f64, w: f64| {
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0)
        };
        for (n, c) in [
            (1, 1),
            (7, 13),
            (33, 300),
            (5, 1000),
            (3, 50257),
            (0, 5),
            (3, 0),
        ] {
            for (ignore, s) in [(-100i64, 0.0), (2, 0.1)] {
                let mut x: Vec<T> = random(rng, n * c, -6.0, 6.0);
                if n * c > 4 {
                    x[1] = T::from_f64(f64::NEG_INFINITY);
                }
                let t: Vec<I> = (0..n)
                    .map(|r| {
                        if r % 4 == 3 {
                            I::from_i64(ignore)
                        } else {
                            I::from_i64((rng.uniform() * c as f64) as i64 % c.max(1) as i64)
                        }
                    })
                    .map(|k| if c == 0 { I::from_i64(ignore) } else { k })
                    .collect();
                // The logits as the transpose of a [C, N] buffer too.
                let xt: Vec<T> = (0..c * n).map(|i| x[(i % n) * c + i / n]).collect();
                let lx = Layout::contiguous(&[n, c]);
                let lxt = Layout::contiguous(&[c, n]).transpose(0, 1);
                let lt = Layout::contiguous(&[n]);
                let (gx, gxt, gt) = (up(be, &x), up(be, &xt), up(be, &t));
                for reduction in Reduction::ALL {
                    let args = CrossEntropyArgs {
                        reduction,
                        ignore_index: ignore,
                        label_smoothing: s,
                    };
                    let what = format!("{} {} [{n}, {c}] {reduction:?} s={s}", T::KIND, I::KIND);
                    let want = cpu
                        .cross_entropy((&x, &lx), (&t, &lt), args)
                        .unwrap()
                        .unwrap();
                    for (buf, l) in [(&gx, &lx), (&gxt, &lxt)] {
                        let got = be
                            .cross_entropy((buf, l), (&gt, &lt), args)
                            .unwrap()
                            .unwrap();
                        let got = down(&got, &[want.len()]);
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                close(g.to_f64(), w.to_f64()),
                                "{what} [{i}]: GPU {g:?}, CPU {w:?}"
                            );
                        }
                    }
                    let gd: Vec<T> = random(
                        rng,
                        if reduction == Reduction::None { n } else { 1 },
                        -2.0,
                        2.0,
                    );
                    let gdims = if reduction == Reduction::None {
                        vec![n]
                    } else {
                        vec![]
                    };
                    let lg = Layout::contiguous(&gdims);
                    let want = cpu
                        .cross_entropy_backward((&x, &lx), (&t, &lt), (&gd, &lg), args)
                        .unwrap()
                        .unwrap();
                    let ggd = up(be, &gd);
                    let got = be
                        .cross_entropy_backward((&gxt, &lxt), (&gt, &lt), (&ggd, &lg), args)
                        .unwrap()
                        .unwrap();
                    let got = down(&got, &[n * c]);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            close(g.to_f64(), w.to_f64()),
                            "backward {what} [{i}]: GPU {g:?}, CPU {w:?}"
                        );
                    }
                }
            }
        }
        // Edges: +inf, all -inf and NaN rows give NaN; a bad target is an
        // Err, never read through.
        let inf = f64::INFINITY;
        let x: Vec<T> = [inf, 0.0, -inf, -inf, f64::NAN, 1.0, 0.0, -0.0]
            .iter()
            .map(|&v| T::from_f64(v))
            .collect();
        let t: Vec<I> = [1, 0, 1, 0].iter().map(|&k| I::from_i64(k)).collect();
        let (lx, lt) = (Layout::contiguous(&[4, 2]), Layout::contiguous(&[4]));
        let args = CrossEntropyArgs {
            reduction: Reduction::None,
            ..Default::default()
        };
        let want = cpu
            .cross_entropy((&x, &lx), (&t, &lt), args)
            .unwrap()
            .unwrap();
        let got = be
            .cross_entropy((&up(be, &x), &lx), (&up(be, &t), &lt), args)
            .unwrap()
            .unwrap();
        let got = down(&got, &[4]);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                close(g.to_f64(), w.to_f64()),
                "edges: GPU {got:?}, CPU {want:?}"
            );
        }
        for bad in [2i64, -1, 1 << 20] {
            let t: Vec<I> = [0, bad, 0, 0].iter().map(|&k| I::from_i64(k)).collect();
            let bad = I::from_i64(bad).to_i64();
            let gt = up(be, &t);
            let gx = up(be, &x);
            let got = be
                .cross_entropy((&gx, &lx), (&gt, &lt), Default::default())
                .unwrap();
            assert_eq!(got.err(), Some(bad), "{} {}", T::KIND, I::KIND);
            let one = up(be, &[T::from_f64(1.0)]);
            let got = be
                .cross_entropy_backward(
                    (&gx, &lx),
                    (&gt, &lt),
                    (&one, &Layout::contiguous(&[])),
                    Default::default(),
                )
                .unwrap();
            assert_eq!(got.err(), Some(bad), "backward {} {}", T::KIND, I::KIND);
        }
    }
    check::<f32, i64>(&be, &mut rng, 1e-5);
    check::<f64, i32>(&be, &mut rng, 1e-12);
    check::<f16, i64>(&be, &mut rng, 2e-3);
    check::<bf16, i32>(&be, &mut rng, 1e-2);
    check::<f32, i32>(&be, &mut rng, 1e-5);
}

/// The cross-entropy backward that keeps its rows in shared memory
/// (16-byte aligned rows that fit) gives the same bits as the pass that
/// reads the logits from global memory (the same rows at an odd element
/// offset, so the copy does not line up), and both match an f64 reference, for
/// rows up to GPT-2's padded vocabulary, copy loops that end mid-chunk
/// and mid-unroll, and rows with ±inf, NaN and ±0.
#[test]
fn cross_entropy_backward_row_copy_matches_the_global_pass() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        let cpu = CpuBackend;
        let bits = |v: &[T]| v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>();
        // Columns whose bytes are multiples of 16: one chunk, a copy loop
        // that ends inside its unrolled group (of four chunks a thread),
        // and GPT-2's 50304.
        let wide = 16 / T::KIND.size_bytes();
        let block = tensorfn_kernels::builtin::XENT_THREADS as usize;
        for (n, c) in [
            (3, wide),
            (5, wide * (4 * block + 3)),
            (4, 50304),
            (2, wide * 40),
        ] {
            let mut x: Vec<T> = random(rng, n * c, -8.0, 8.0);
            // Edge values in the first rows: +inf, -inf, NaN, ±0.
            x[0] = T::from_f64(f64::NEG_INFINITY);
            x[1] = T::from_f64(-0.0);
            if n * c > 2 * c {
                x[c + 1] = T::from_f64(f64::INFINITY);
                x[2 * c] = T::from_f64(f64::NAN);
            }
            let t: Vec<i64> = (0..n)
                .map(|r| {
                    if r == n - 1 {
                        -100
                    } else {
                        (rng.uniform() * c as f64) as i64 % c as i64
                    }
                })
                .collect();
            let lx = Layout::contiguous(&[n, c]);
            let lt = Layout::contiguous(&[n]);
            // The same logits one element into a buffer.
            let mut shifted = vec![T::from_f64(0.0)];
            shifted.extend_from_slice(&x);
            let ls = Layout::new(vec![n, c], vec![c, 1], 1);
            let (gx, gs, gt) = (up(be, &x), up(be, &shifted), up(be, &t));
            for s in [0.0, 0.1] {
                let args = CrossEntropyArgs {
                    reduction: Reduction::Mean,
                    ignore_index: -100,
                    label_smoothing: s,
                };
                let g = vec![T::from_f64(0.5)];
                let lg = Layout::contiguous(&[]);
                let gg = up(be, &g);
                // The reference in f64 (the CPU kernel on the logits
                // widened): a CPU run in `T` sums a row of 50304 terms in
                // `T` and is no closer to the truth than the GPU.
                let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
                let want = cpu
                    .cross_entropy_backward((&x64, &lx), (&t, &lt), (&vec![0.5f64], &lg), args)
                    .unwrap()
                    .unwrap();
                let mut outs = Vec::new();
                for (buf, l) in [(&gx, &lx), (&gs, &ls)] {
                    let got = be
                        .cross_entropy_backward((buf, l), (&gt, &lt), (&gg, &lg), args)
                        .unwrap()
                        .unwrap();
                    outs.push(down(&got, &[n * c]));
                }
                let what = format!("{} [{n}, {c}] s={s}", T::KIND);
                // Gradients of about 1e-5 are subnormal in f16, whose
                // spacing there (2^-24) is wider than the relative
                // tolerance: one step of it is allowed.
                let tiny = match T::KIND {
                    DTypeKind::F16 => 2f64.powi(-24),
                    _ => 0.0,
                };
                assert_eq!(
                    bits(&outs[0]),
                    bits(&outs[1]),
                    "{what}: cached and global passes"
                );
                for (i, (g, &w)) in outs[0].iter().zip(&want).enumerate() {
                    let g = g.to_f64();
                    assert!(
                        (g.is_nan() && w.is_nan())
                            || g == w
                            || (g - w).abs() <= tol * w.abs().max(1.0 / c as f64) + tiny,
                        "{what} [{i}]: GPU {g}, CPU {w}"
                    );
                }
            }
        }
    }
    check::<bf16>(&be, &mut rng, 1e-2);
    check::<f16>(&be, &mut rng, 2e-3);
    check::<f32>(&be, &mut rng, 1e-5);
    check::<f64>(&be, &mut rng, 1e-12);
}

/// The fused loss-and-gradient pass against the forward and the
/// backward with a gradient of 1, bit for bit: rows kept in shared memory
/// (aligned) and read from global memory (one element into their
/// buffer), every reduction, label smoothing, ignored rows, ±inf, NaN and
/// ±0; the gradient lands in the logits' own buffer, and a bad target is
/// an `Err`.
#[test]
fn cross_entropy_fused_matches_the_two_passes() {
    use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let bits = |v: &[T]| v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>();
        let wide = 16 / T::KIND.size_bytes();
        for (n, c) in [
            (1, 1),
            (3, wide),
            (5, wide * (4 * 256 + 3)),
            (4, 50304),
            (6, 37),
        ] {
            let mut x: Vec<T> = random(rng, n * c, -8.0, 8.0);
            x[0] = T::from_f64(f64::NEG_INFINITY);
            if n * c > 2 * c {
                x[1] = T::from_f64(-0.0);
                x[c + 1] = T::from_f64(f64::INFINITY);
                x[2 * c] = T::from_f64(f64::NAN);
            }
            let t: Vec<i64> = (0..n)
                .map(|r| {
                    if r == n - 1 && n > 1 {
                        -100
                    } else {
                        (rng.uniform() * c as f64) as i64 % c as i64
                    }
                })
                .collect();
            let lt = Layout::contiguous(&[n]);
            let gt = up(be, &t);
            // The same logits one element into a buffer: no shared copy.
            let mut shifted = vec![T::from_f64(0.0)];
            shifted.extend_from_slice(&x);
            for (offset, data) in [(0, &x), (1, &shifted)] {
                let lx = Layout::new(vec![n, c], vec![c, 1], offset);
                for reduction in Reduction::ALL {
                    for s in [0.0, 0.1] {
                        let args = CrossEntropyArgs {
                            reduction,
                            ignore_index: -100,
                            label_smoothing: s,
                        };
                        let per_row = reduction == Reduction::None;
                        let rows = if per_row { vec![n] } else { vec![] };
                        let one = vec![T::from_f64(1.0); rows.iter().product()];
                        let (gx, gg) = (up(be, data), up(be, &one));
                        let lg = Layout::contiguous(&rows);
                        let loss = be.cross_entropy((&gx, &lx), (&gt, &lt), args).unwrap();
                        let grad = be
                            .cross_entropy_backward((&gx, &lx), (&gt, &lt), (&gg, &lg), args)
                            .unwrap()
                            .unwrap();
                        let mut fused = up(be, data);
                        let fused_loss = be
                            .cross_entropy_fused((&mut fused, &lx), (&gt, &lt), args)
                            .unwrap()
                            .unwrap();
                        let what = format!("{} [{n}, {c}] +{offset} {reduction:?} s={s}", T::KIND);
                        let m = if per_row { n } else { 1 };
                        assert_eq!(
                            bits(&down(&fused_loss, &[m])),
                            bits(&down(&loss.unwrap(), &[m])),
                            "{what}: loss"
                        );
                        let inplace = down(&fused, &[offset + n * c]);
                        assert_eq!(
                            bits(&inplace[offset..]),
                            bits(&down(&grad, &[n * c])),
                            "{what}: gradient"
                        );
                        assert_eq!(bits(&inplace[..offset]), bits(&data[..offset]), "{what}");
                    }
                }
            }
            // A target out of range is named, and nothing is read through it.
            let mut bad = t.clone();
            bad[0] = c as i64;
            let gb = up(be, &bad);
            let mut gx = up(be, &x);
            let lx = Layout::contiguous(&[n, c]);
            let got = be
                .cross_entropy_fused((&mut gx, &lx), (&gb, &lt), Default::default())
                .unwrap();
            assert_eq!(got.err(), Some(c as i64), "{} [{n}, {c}]", T::KIND);
        }
    }
    check::<bf16>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
}

/// The fused pass's losses and gradient against an f64 reference (the
/// CPU backend on the logits widened), for fresh random logits and edge
/// rows: -inf but for one logit, all equal, offset by ±1000 (whose
/// `lse` rounds in 32 bits, which the bound allows for: `|max| * 2^-22`
/// relative), and one NaN; prints the largest relative error seen, which
/// is the `ex2.approx` exponential's (`ptx::xent`).
#[test]
fn cross_entropy_fused_matches_f64() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        let cpu = CpuBackend;
        for c in [257, 50304] {
            let n = 8;
            let mut x: Vec<T> = random(rng, n * c, -8.0, 8.0);
            let row = |r: usize| r * c..(r + 1) * c;
            x[row(1)].fill(T::from_f64(f64::NEG_INFINITY));
            x[c + 3] = T::from_f64(0.5);
            x[row(2)].fill(T::from_f64(2.5));
            for (r, offset) in [(3, 1000.0), (4, -1000.0)] {
                for v in &mut x[row(r)] {
                    *v = T::from_f64(v.to_f64() + offset);
                }
            }
            x[5 * c + 7] = T::from_f64(f64::NAN);
            let t: Vec<i64> = (0..n)
                .map(|r| match r {
                    1 => 3,
                    _ => (rng.uniform() * c as f64) as i64 % c as i64,
                })
                .collect();
            let x64: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
            let (lx, lt) = (Layout::contiguous(&[n, c]), Layout::contiguous(&[n]));
            let ones = vec![1.0f64; n];
            for s in [0.0, 0.1] {
                let args = CrossEntropyArgs {
                    reduction: Reduction::None,
                    ignore_index: -100,
                    label_smoothing: s,
                };
                let want_loss = cpu
                    .cross_entropy((&x64, &lx), (&t, &lt), args)
                    .unwrap()
                    .unwrap();
                let want = cpu
                    .cross_entropy_backward((&x64, &lx), (&t, &lt), (&ones, &lt), args)
                    .unwrap()
                    .unwrap();
                let mut gx = up(be, &x);
                let loss = be
                    .cross_entropy_fused((&mut gx, &lx), (&up(be, &t), &lt), args)
                    .unwrap()
                    .unwrap();
                let (loss, grad) = (down(&loss, &[n]), down(&gx, &[n * c]));
                let what = format!("{} [{n}, {c}] s={s}", T::KIND);
                let (mut worst_loss, mut worst_grad) = (0f64, 0f64);
                for r in 0..n {
                    let m = x64[row(r)].iter().fold(0f64, |a, v| a.max(v.abs()));
                    let slack = m * 2f64.powi(-22);
                    let (g, w) = (loss[r].to_f64(), want_loss[r]);
                    let err = (g - w).abs() / w.abs().max(1.0);
                    assert!(
                        (g.is_nan() && w.is_nan()) || g == w || err <= tol + slack,
                        "{what} loss of row {r}: GPU {g}, f64 {w}"
                    );
                    if r != 3 && r != 4 && w.is_finite() {
                        worst_loss = worst_loss.max(err);
                    }
                    for i in row(r) {
                        let (g, w) = (grad[i].to_f64(), want[i]);
                        let err = (g - w).abs() / w.abs().max(1.0 / c as f64);
                        assert!(
                            (g.is_nan() && w.is_nan()) || g == w || err <= tol + slack,
                            "{what} gradient [{r}, {}]: GPU {g}, f64 {w}",
                            i - r * c
                        );
                        if r != 3 && r != 4 && w.is_finite() {
                            worst_grad = worst_grad.max(err);
                        }
                    }
                }
                println!(
                    "{what}: largest relative error, loss {worst_loss:.2e}, gradient {worst_grad:.2e}"
                );
            }
        }
    }
    check::<f32>(&be, &mut rng, 1e-5);
    check::<bf16>(&be, &mut rng, 1e-2);
    check::<f16>(&be, &mut rng, 2e-3);
    check::<f64>(&be, &mut rng, 1e-12);
}

/// The cross-entropy backward over GPT-2's training logits (8192 x 50304
/// bf16): rows kept in shared memory (aligned) against the global passes
/// (the same rows one element into their buffer). Each call includes the
/// read-back of its bad-target flag. Prints the mean ms of each.
#[test]
#[ignore = "timing on the GPU machine"]
fn cross_entropy_backward_timing() {
    use tensorfn_core::ops::xent::{CrossEntropyArgs, Reduction};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    let (n, c) = (8192, 50304);
    let mut x: Vec<bf16> = random(&mut rng, n * c + 1, -4.0, 4.0);
    x[0] = bf16::from_f64(0.0);
    let t: Vec<i64> = (0..n).map(|r| (r * 7919 % c) as i64).collect();
    let (gx, gt) = (up(&be, &x), up(&be, &t));
    let g = up(&be, &[bf16::from_f64(1.0)]);
    let args = CrossEntropyArgs {
        reduction: Reduction::Sum,
        ..Default::default()
    };
    let (lt, lg) = (Layout::contiguous(&[n]), Layout::contiguous(&[]));
    for (what, offset) in [("row in shared memory", 0), ("global passes", 1)] {
        let lx = Layout::new(vec![n, c], vec![c, 1], offset);
        let run = || {
            be.cross_entropy_backward((&gx, &lx), (&gt, &lt), (&g, &lg), args)
                .unwrap()
                .unwrap();
        };
        for _ in 0..3 {
            run();
        }
        be.synchronize().unwrap();
        let reps = 20;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            run();
        }
        be.synchronize().unwrap();
        let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!("cross_entropy_backward bf16 [{n}, {c}], {what}: {ms:.3} ms");
    }
    // The training step's pair: the forward and the backward, against the
    // fused pass writing over the logits (both on aligned rows; the fused
    // pass's logits are its last gradient after the first call, which
    // costs the same).
    let lx = Layout::new(vec![n, c], vec![c, 1], 0);
    let mut fused = up(&be, &x[1..]);
    let lf = Layout::contiguous(&[n, c]);
    let pair = || {
        be.cross_entropy((&gx, &lx), (&gt, &lt), args)
            .unwrap()
            .unwrap();
        be.cross_entropy_backward((&gx, &lx), (&gt, &lt), (&g, &lg), args)
            .unwrap()
            .unwrap();
    };
    let reps = 20;
    for (what, fused_pass) in [("forward + backward", false), ("fused, in place", true)] {
        let mut run = || {
            if fused_pass {
                be.cross_entropy_fused((&mut fused, &lf), (&gt, &lt), args)
                    .unwrap()
                    .unwrap();
            } else {
                pair();
            }
        };
        for _ in 0..3 {
            run();
        }
        be.synchronize().unwrap();
        let start = std::time::Instant::now();
        for _ in 0..reps {
            run();
        }
        be.synchronize().unwrap();
        let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!("cross_entropy bf16 [{n}, {c}], {what}: {ms:.3} ms");
    }
}

/// `topk` on the GPU against the CPU backend, the largest and the
/// smallest: every numeric dtype, rows of few distinct values (ties),
/// NaNs (picked first for the largest, last for the smallest) and ±inf,
/// GPT-2's vocabulary with a sampling `k`, strided rows, `k` of 0 and of
/// the whole row.
#[test]
fn topk_matches_the_cpu() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType>(be: &CudaBackend, rng: &mut SplitMix64, specials: bool) {
        for (rows, cols, k) in [
            (1, 1, 1),
            (3, 7, 3),
            (5, 300, 300),
            (4, 1000, 17),
            (2, 50257, 50),
            (2, 5, 5),
            (0, 5, 2),
            (3, 4, 0),
        ] {
            let mut x: Vec<T> = (0..rows * cols)
                .map(|_| T::from_f64((rng.uniform() * 9.0).floor() - 4.0))
                .collect();
            if specials && rows * cols > 8 {
                x[2] = T::from_f64(f64::NAN);
                x[3] = T::from_f64(f64::NAN);
                x[5] = T::from_f64(f64::INFINITY);
                x[7] = T::from_f64(f64::NEG_INFINITY);
            }
            // The rows also as the columns of a [cols, rows] buffer.
            let xt: Vec<T> = (0..cols * rows)
                .map(|i| x[(i % rows) * cols + i / rows])
                .collect();
            let l = Layout::contiguous(&[rows, cols]);
            let lt = Layout::contiguous(&[cols, rows]).transpose(0, 1);
            for largest in [true, false] {
                let (wv, wi) = CpuBackend.topk(&x, &l, k, largest).unwrap();
                for (buf, lay) in [(up(be, &x), &l), (up(be, &xt), &lt)] {
                    let (v, i) = be.topk(&buf, lay, k, largest).unwrap();
                    let what = format!("topk {} [{rows}, {cols}] k={k} largest={largest}", T::KIND);
                    assert_eq!(down(&i, &[rows * k]), wi, "{what}");
                    let v = down(&v, &[rows * k]);
                    for (g, w) in v.iter().zip(&wv) {
                        let (g, w) = (g.to_f64(), w.to_f64());
                        assert!(
                            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                            "{what}: {g} against {w}"
                        );
                    }
                }
            }
        }
    }
    check::<f32>(&be, &mut rng, true);
    check::<f64>(&be, &mut rng, true);
    check::<f16>(&be, &mut rng, true);
    check::<bf16>(&be, &mut rng, true);
    check::<i64>(&be, &mut rng, false);
    check::<i32>(&be, &mut rng, false);
}

/// `cumsum` on the GPU against the CPU backend along every dim of a 3-D
/// tensor (and a strided view), floats bit for bit (both add in order in
/// f32 or f64), integers into `i64`.
#[test]
fn cumsum_matches_the_cpu() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::NumDType, U: crate::NumDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        for dims in [
            [3usize, 4, 5],
            [1, 1, 1],
            [2, 0, 3],
            [700, 3, 2],
            [2, 3, 3000],
        ] {
            let n: usize = dims.iter().product();
            let x: Vec<T> = random(rng, n, -8.0, 8.0);
            let l = Layout::contiguous(&dims);
            let gx = up(be, &x);
            for (lay, what) in [(l.clone(), "contiguous"), (l.transpose(0, 2), "transposed")] {
                for dim in 0..3 {
                    let want: Vec<U> = CpuBackend.cumsum(&x, &lay, dim).unwrap();
                    let got = be.cumsum::<T, U>(&gx, &lay, dim).unwrap();
                    let got = down(&got, &[n]);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g.to_f64().to_bits() == w.to_f64().to_bits(),
                            "cumsum {} {what} {dims:?} dim {dim} [{i}]: GPU {}, CPU {}",
                            T::KIND,
                            g.to_f64(),
                            w.to_f64()
                        );
                    }
                }
            }
        }
    }
    check::<f32, f32>(&be, &mut rng);
    check::<f64, f64>(&be, &mut rng);
    check::<f16, f16>(&be, &mut rng);
    check::<bf16, bf16>(&be, &mut rng);
    check::<i32, i64>(&be, &mut rng);
    check::<i64, i64>(&be, &mut rng);
    check::<u8, i64>(&be, &mut rng);
}

#[test]
fn params_accumulate_on_the_gpu() {
    use crate::device::{Cpu, Cuda};
    use crate::shape::Dyn;
    use crate::tensor::Tensor;
    use crate::Params;
    let Some((_guard, _be)) = gpu() else { return };
    let mut rng = seed();
    // Gradient structs summed on the GPU (tied weights), every float
    // dtype, against the host's sum of the same values.
    fn run<T: crate::FloatDType>(rng: &mut SplitMix64) {
        let n = 1000;
        let a: Vec<T> = random(rng, n, -4.0, 4.0);
        let b: Vec<T> = random(rng, n, -4.0, 4.0);
        let up = |v: &Vec<T>| {
            vec![Tensor::<Cpu, T, (Dyn,)>::from_vec_dims(v.clone(), &[n])
                .unwrap()
                .to_device::<Cuda>()
                .unwrap()]
        };
        let mut ga = up(&a);
        ga.accumulate(&up(&b)).unwrap();
        let got = ga[0].to_vec().unwrap();
        let mut want = vec![Tensor::<Cpu, T, (Dyn,)>::from_vec_dims(a.clone(), &[n]).unwrap()];
        want.accumulate(&vec![
            Tensor::<Cpu, T, (Dyn,)>::from_vec_dims(b, &[n]).unwrap()
        ])
        .unwrap();
        assert_eq!(got, want[0].to_vec().unwrap(), "{}", T::KIND);
        // Dims that differ: an `Err`, the GPU tensor unchanged.
        let short = vec![Tensor::<Cpu, T, (Dyn,)>::zeros_dims(&[2])
            .unwrap()
            .to_device::<Cuda>()
            .unwrap()];
        assert!(ga.accumulate(&short).is_err());
        assert_eq!(ga[0].to_vec().unwrap(), got);
    }
    run::<f32>(&mut rng);
    run::<f64>(&mut rng);
    run::<f16>(&mut rng);
    run::<bf16>(&mut rng);
}

/// Pooling, its gradient and `dropout` on the GPU against the CPU backend,
/// bit for bit, on contiguous inputs and channels-last views, in every
/// float dtype (the dropout masks must be the same).
#[test]
fn pools_and_dropout_match_the_cpu() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::pool::Pool2d;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let same = |what: &str, got: &[T], want: &[T]| {
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    g.to_f64().to_bits() == w.to_f64().to_bits(),
                    "{what} {} [{i}]: GPU {}, CPU {}",
                    T::KIND,
                    g.to_f64(),
                    w.to_f64()
                );
            }
        };
        for dims in [[2usize, 3, 9, 8], [0, 3, 5, 5], [1, 1, 7, 7]] {
            let n: usize = dims.iter().product();
            let x: Vec<T> = random(rng, n, -8.0, 8.0);
            let gx = up(be, &x);
            // A channels-last buffer viewed as [N, C, H, W].
            let nhwc =
                Layout::contiguous(&[dims[0], dims[2], dims[3], dims[1]]).permute(&[0, 3, 1, 2]);
            for lay in [Layout::contiguous(&dims), nhwc] {
                for p in [
                    Pool2d::max(2),
                    Pool2d::max(3).stride(2).padding(1).ceil_mode(true),
                    Pool2d::avg(3).stride(2).padding(1).count_include_pad(false),
                    Pool2d::adaptive_avg([3, 2]),
                ] {
                    let out = p.output_dims([dims[2], dims[3]]).unwrap();
                    let want = CpuBackend.pool2d(&x, &lay, &p, out).unwrap();
                    let got = be.pool2d::<T>(&gx, &lay, &p, out).unwrap();
                    same(
                        &format!("{p:?} {dims:?}"),
                        &down(&got, &[want.len()]),
                        &want,
                    );
                    let g: Vec<T> = random(rng, want.len(), -1.0, 1.0);
                    let gl = Layout::contiguous(&[dims[0], dims[1], out[0], out[1]]);
                    let gg = up(be, &g);
                    let want = CpuBackend
                        .pool2d_backward((&x, &lay), (&g, &gl), &p)
                        .unwrap();
                    let got = be
                        .pool2d_backward::<T>((&gx, &lay), (&gg, &gl), &p)
                        .unwrap();
                    same(
                        &format!("backward {p:?} {dims:?}"),
                        &down(&got, &[n]),
                        &want,
                    );
                }
                for (p, s) in [(0.1, 3u64), (0.5, 4), (1.0, 5)] {
                    let want = CpuBackend.dropout(&x, &lay, p, s).unwrap();
                    let got = be.dropout::<T>(&gx, &lay, p, s).unwrap();
                    same(&format!("dropout {p} {dims:?}"), &down(&got, &[n]), &want);
                }
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

/// `multinomial` on the GPU against the CPU backend: the same indices
/// from the same seed, with and without replacement, on zero weights,
/// a transposed view and every float dtype; and the same faults.
#[test]
fn multinomial_matches_the_cpu() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        for (rows, cols, n) in [(1, 1, 1), (7, 5, 3), (300, 129, 16), (2, 50_257, 1)] {
            // Weights in [0, 4), about a quarter of them exactly 0.
            let x: Vec<T> = random::<f64>(rng, rows * cols, -1.0, 3.0)
                .into_iter()
                .map(|v| T::from_f64(v.max(0.0)))
                .collect();
            let gx = up(be, &x);
            let views = [
                Layout::contiguous(&[rows, cols]),
                Layout::contiguous(&[cols, rows]).permute(&[1, 0]),
            ];
            for l in views {
                for (replacement, s) in [(true, 3u64), (false, 4)] {
                    let want = CpuBackend.multinomial(&x, &l, n, replacement, s);
                    let got = be.multinomial::<T>(&gx, &l, n, replacement, s);
                    let what = format!("{} [{rows}, {cols}] n={n} {replacement}", T::KIND);
                    match (got, want) {
                        (Ok(g), Ok(w)) => assert_eq!(down(&g, &[rows * n]), w, "{what}"),
                        (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string(), "{what}"),
                        (g, w) => {
                            panic!("{what}: GPU {:?}, CPU {:?}", g.map(|_| ()), w.map(|_| ()))
                        }
                    }
                }
            }
        }
        for bad in [-1.0, f64::NAN, f64::INFINITY, 0.0] {
            let x = vec![
                T::from_f64(1.0),
                T::from_f64(2.0),
                T::from_f64(bad),
                T::from_f64(0.0),
            ];
            let x = if bad == 0.0 {
                vec![T::from_f64(0.0); 4]
            } else {
                x
            };
            let l = Layout::contiguous(&[2, 2]);
            let want = CpuBackend.multinomial(&x, &l, 1, true, 1).unwrap_err();
            let got = be
                .multinomial::<T>(&up(be, &x), &l, 1, true, 1)
                .unwrap_err();
            assert_eq!(got.to_string(), want.to_string());
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

/// Bit-for-bit equality, any NaN matching any NaN.
fn same_bits<T: DType>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what} {} [{i}]: GPU {g}, CPU {w}",
            T::KIND
        );
    }
}

/// A uniform draw from `lo..=hi`.
fn pick(rng: &mut SplitMix64, lo: usize, hi: usize) -> usize {
    lo + (rng.uniform() * (hi - lo + 1) as f64) as usize % (hi - lo + 1)
}

/// Replaces about 5 in `one_in` values of `x` by NaN, infinities and
/// signed zeros (one of each kind per `one_in` on average).
fn sprinkle_edges<T: crate::FloatDType>(rng: &mut SplitMix64, x: &mut [T], one_in: usize) {
    for v in x.iter_mut() {
        let e = match pick(rng, 0, one_in - 1) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => 0.0,
            _ => continue,
        };
        *v = T::from_f64(e);
    }
}

/// The pooling kernels against the CPU reference on random shapes and
/// options (padding, dilation, `ceil_mode`, `count_include_pad`,
/// `divisor_override`, adaptive sizes above and below the input's), on
/// contiguous, channels-last and offset/sliced views (both thread orders
/// of the kernels), with NaN, ±inf and ±0 among the values, empty
/// batches, in every float dtype; the gradients through a channels-last
/// or contiguous `grad_output` too.
/// Asserts the GPU's pooling `p` of `x` (uploaded as `gx`) through `lay`
/// to `out` has the CPU's bits, in the memory order both backends write
/// (channels-last for a channels-last view); returns the CPU's result.
fn pool_matches_the_cpu<T: crate::FloatDType>(
    be: &CudaBackend,
    (x, gx): (&Vec<T>, &CudaStorage<T>),
    lay: &Layout,
    p: &tensorfn_core::ops::pool::Pool2d,
    out: [usize; 2],
    what: &str,
) -> Vec<T> {
    let want = crate::cpu::CpuBackend.pool2d(x, lay, p, out).unwrap();
    let got = be.pool2d::<T>(gx, lay, p, out).unwrap();
    same_bits(what, &down(&got, &[want.len()]), &want);
    want
}

#[test]
fn pools_match_the_cpu_on_random_options_views_and_edge_values() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::pool::Pool2d;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let mut cases = 0;
        while cases < 24 {
            let dims = [
                pick(rng, 0, 3),
                pick(rng, 1, 4),
                pick(rng, 1, 11),
                pick(rng, 1, 11),
            ];
            let k = [pick(rng, 1, 4), pick(rng, 1, 4)];
            let p = match pick(rng, 0, 2) {
                0 => Pool2d::max(k)
                    .stride([pick(rng, 1, 3), pick(rng, 1, 3)])
                    .padding([pick(rng, 0, k[0] / 2), pick(rng, 0, k[1] / 2)])
                    .dilation([pick(rng, 1, 2), pick(rng, 1, 2)])
                    .ceil_mode(pick(rng, 0, 1) == 1),
                1 => {
                    let p = Pool2d::avg(k)
                        .stride([pick(rng, 1, 3), pick(rng, 1, 3)])
                        .padding([pick(rng, 0, k[0] / 2), pick(rng, 0, k[1] / 2)])
                        .ceil_mode(pick(rng, 0, 1) == 1)
                        .count_include_pad(pick(rng, 0, 1) == 1);
                    if pick(rng, 0, 3) == 0 {
                        p.divisor_override(pick(rng, 1, 7))
                    } else {
                        p
                    }
                }
                _ => Pool2d::adaptive_avg([pick(rng, 1, 13), pick(rng, 1, 13)]),
            };
            let Ok(out) = p.output_dims([dims[2], dims[3]]) else {
                continue;
            };
            cases += 1;
            let [n, c, h, w] = dims;
            // A buffer of [n, c, h + 1, w + 2] with room for an offset view.
            let big = [n, c, h + 1, w + 2];
            let len: usize = big.iter().product::<usize>() + 3;
            let mut x: Vec<T> = random(rng, len, -4.0, 4.0);
            sprinkle_edges(rng, &mut x, 31);
            let gx = up(be, &x);
            let bs = crate::layout::contiguous_strides(&big);
            let sliced = Layout::new(dims.to_vec(), bs.clone(), 3 + bs[2] + 1);
            let nhwc = Layout::contiguous(&[n, h, w, c]).permute(&[0, 3, 1, 2]);
            for (j, lay) in [Layout::contiguous(&dims), nhwc, sliced]
                .into_iter()
                .enumerate()
            {
                let what = format!("{p:?} {dims:?} {:?}+{}", lay.strides(), lay.offset());
                let want = pool_matches_the_cpu(be, (&x, &gx), &lay, &p, out, &what);
                // grad_output stored channels-last, or contiguous beside the
                // channels-last input: both thread orders of the gradient.
                let g: Vec<T> = random(rng, want.len(), -1.0, 1.0);
                let gl = if j == 1 {
                    Layout::contiguous(&[n, c, out[0], out[1]])
                } else {
                    Layout::contiguous(&[n, out[0], out[1], c]).permute(&[0, 3, 1, 2])
                };
                let gg = up(be, &g);
                let want = CpuBackend
                    .pool2d_backward((&x, &lay), (&g, &gl), &p)
                    .unwrap();
                let got = be
                    .pool2d_backward::<T>((&gx, &lay), (&gg, &gl), &p)
                    .unwrap();
                same_bits(
                    &format!("backward {what}"),
                    &down(&got, &[want.len()]),
                    &want,
                );
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

/// `max_pool2d` of channels-last inputs with channels in multiples of 16
/// bytes (the vectorised entry, one 16-byte load per tap and thread)
/// against the CPU: random windows with padding and dilation, NaN,
/// infinities and signed zeros, an empty batch, and views the entry must
/// leave to the one-channel kernel (a misaligned offset, a channel count
/// not a multiple of the width).
#[test]
fn vectorised_max_pool_matches_the_cpu_on_channels_last_inputs() {
    use tensorfn_core::ops::pool::Pool2d;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let w = tensorfn_kernels::ptx::max_vec_width(T::KIND).expect("a vector width");
        for case in 0..12 {
            let c = match case {
                10 => w + 1,
                _ => w * pick(rng, 1, 9),
            };
            let n = if case == 3 { 0 } else { pick(rng, 1, 3) };
            let (h, wd) = (pick(rng, 1, 13), pick(rng, 1, 13));
            let k = [pick(rng, 1, 4), pick(rng, 1, 4)];
            let p = Pool2d::max(k)
                .stride([pick(rng, 1, 3), pick(rng, 1, 3)])
                .padding([pick(rng, 0, k[0] / 2), pick(rng, 0, k[1] / 2)])
                .dilation([pick(rng, 1, 2), pick(rng, 1, 2)])
                .ceil_mode(pick(rng, 0, 1) == 1);
            let Ok(out) = p.output_dims([h, wd]) else {
                continue;
            };
            // Room for an offset of one vector (aligned) or one element.
            let offset = if case == 11 { 1 } else { w * (case % 2) };
            let len = n * h * wd * c + offset;
            let mut x: Vec<T> = random(rng, len, -4.0, 4.0);
            sprinkle_edges(rng, &mut x, 21);
            let gx = up(be, &x);
            let nhwc = Layout::contiguous(&[n, h, wd, c]).permute(&[0, 3, 1, 2]);
            let lay = Layout::new(nhwc.dims().to_vec(), nhwc.strides().to_vec(), offset);
            let what = format!("{p:?} [{n}, {c}, {h}, {wd}] channels-last +{offset}");
            pool_matches_the_cpu(be, (&x, &gx), &lay, &p, out, &what);
        }
    }
    check::<bf16>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<f32>(&be, &mut rng);
}

/// The GPU's dropout mask is the CPU's bit for bit (a large transposed
/// view, so every index's hash is drawn), and its values too.
#[test]
fn dropout_masks_equal_the_cpu_on_large_views() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::dropout::keep;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        let (r, c) = (301, 257);
        let x: Vec<T> = random(rng, r * c, 0.5, 4.0);
        let gx = up(be, &x);
        let lay = Layout::contiguous(&[r, c]).permute(&[1, 0]);
        for p in [0.0, 0.3, 0.9] {
            let seed = (rng.uniform() * 1e12) as u64;
            let want = CpuBackend.dropout(&x, &lay, p, seed).unwrap();
            let got = down(&be.dropout::<T>(&gx, &lay, p, seed).unwrap(), &[r * c]);
            same_bits(&format!("dropout {p} seed {seed}"), &got, &want);
            for (i, v) in got.iter().enumerate() {
                assert_eq!(v.to_f64() != 0.0, keep(seed, i as u64, p), "mask [{i}]");
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

/// `batch_norm` on the GPU keeps the variance of channels far from zero
/// (two passes, no cancellation), gives a NaN channel NaN statistics, and
/// handles rank 2 and rank 5 inputs and an empty channel dim, with each
/// channel in one block or split over several (the same bits every run).
#[test]
fn batch_norm_keeps_large_offsets_and_odd_ranks() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    for dims in [
        vec![16, 3, 40],
        vec![64, 5],
        vec![2, 3, 4, 5, 6],
        vec![3, 0, 4],
        vec![8, 2, 60, 50],
    ] {
        let numel: usize = dims.iter().product();
        let c = dims[1];
        let mut x: Vec<f32> = random(&mut rng, numel, 1e4, 1e4 + 3.0);
        if numel > 0 {
            x[numel / 2] = f32::NAN;
        }
        let rm: Vec<f32> = random(&mut rng, c, -1.0, 1.0);
        let rv: Vec<f32> = random(&mut rng, c, 0.5, 2.0);
        let (l, lc) = (Layout::contiguous(&dims), Layout::contiguous(&[c]));
        let (sx, srm, srv) = (up(&be, &x), up(&be, &rm), up(&be, &rv));
        let (y, upd) = be
            .batch_norm(
                (&sx, &l),
                None,
                None,
                Some(((&srm, &lc), (&srv, &lc))),
                true,
                0.1,
                1e-5,
            )
            .unwrap();
        let (ey, eupd) = CpuBackend
            .batch_norm(
                (&x, &l),
                None,
                None,
                Some(((&rm, &lc), (&rv, &lc))),
                true,
                0.1,
                1e-5,
            )
            .unwrap();
        let f = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        let what = format!("batch_norm {dims:?}");
        assert_close(&what, &down(&y, &[numel]), &f(&ey), 1e-3, 1e-3);
        // The same bits on a second run (channels split over blocks add
        // their partial sums in a fixed order).
        let (again, _) = be
            .batch_norm((&sx, &l), None, None, None, true, 0.1, 1e-5)
            .unwrap();
        same_bits(&what, &down(&again, &[numel]), &down(&y, &[numel]));
        let ((m, v), (em, ev)) = (upd.unwrap(), eupd.unwrap());
        assert_close(&what, &down(&m, &[c]), &f(&em), 1e-5, 1e-5);
        assert_close(&what, &down(&v, &[c]), &f(&ev), 1e-3, 1e-3);
        let g: Vec<f32> = random(&mut rng, numel, -1.0, 1.0);
        let sg = up(&be, &g);
        let (dx, dw, db) = be
            .batch_norm_backward((&sx, &l), None, None, (&sg, &l), true, 1e-5)
            .unwrap();
        let (ex, ew, eb) = CpuBackend
            .batch_norm_backward((&x, &l), None, None, (&g, &l), true, 1e-5)
            .unwrap();
        assert_close(&what, &down(&dx, &[numel]), &f(&ex), 1e-3, 1e-3);
        // `dweight = sum(g * (x - mean)) * invstd` moves by `sum(g) * invstd`
        // per unit of the mean, and the mean of values near 1e4 is an f32
        // whose last bit may round either way on either device: allow one
        // unit in the last place of the mean beside the sums' rounding.
        let s = if c == 0 { 0 } else { numel / (dims[0] * c) };
        let dw_got = down(&dw, &[c]);
        for ch in 0..c {
            let at = |ni: usize, si: usize| (ni * c + ch) * s + si;
            let idx: Vec<usize> = (0..dims[0])
                .flat_map(|ni| (0..s).map(move |si| at(ni, si)))
                .collect();
            let m = idx.len() as f64;
            let mean = idx.iter().map(|&i| x[i] as f64).sum::<f64>() / m;
            let var = idx
                .iter()
                .map(|&i| (x[i] as f64 - mean).powi(2))
                .sum::<f64>()
                / m;
            let sum_g: f64 = idx.iter().map(|&i| g[i] as f64).sum();
            let ulp = f64::from(f32::EPSILON) * (mean.abs() as f32).max(1.0) as f64;
            let slack = ulp * sum_g.abs() / (var + 1e-5).sqrt();
            let (got, want) = (dw_got[ch] as f64, ew[ch] as f64);
            if want.is_nan() {
                assert!(got.is_nan(), "{what} dweight[{ch}]: got {got}, want NaN");
                continue;
            }
            assert!(
                (got - want).abs() <= 1e-2 + 1e-3 * want.abs() + slack,
                "{what} dweight[{ch}]: got {got}, want {want} (allowed {slack} for the mean's last bit)"
            );
        }
        assert_close(&what, &down(&db, &[c]), &f(&eb), 1e-3, 1e-2);
    }
}

/// Times ResNet-18's pools (bf16, batch 64, channels-last as cuDNN gives
/// them, so the kernels run channel-fastest, and NCHW), their gradients,
/// training-mode `batch_norm` forward and backward with 64 channels (each
/// split over several blocks) and 512, and `dropout`; prints one line per
/// case.
#[test]
#[ignore = "a measurement, not a check"]
fn pool_and_batch_norm_timing() {
    use tensorfn_core::ops::pool::Pool2d;
    let Some((_serial, be)) = gpu() else { return };
    fn time(be: &CudaBackend, f: &mut dyn FnMut()) -> f64 {
        for _ in 0..3 {
            f();
        }
        be.synchronize().unwrap();
        let reps = 20;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            f();
        }
        be.synchronize().unwrap();
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    }
    let mut rng = seed();
    for (what, [n, c, h, w], p) in [
        (
            "max_pool2d 3/2/1",
            [64, 64, 112, 112],
            Pool2d::max(3).stride(2).padding(1),
        ),
        (
            "adaptive_avg_pool2d 1",
            [64, 512, 7, 7],
            Pool2d::adaptive_avg(1),
        ),
    ] {
        let x = up(&be, &random::<bf16>(&mut rng, n * c * h * w, -2.0, 2.0));
        let out = p.output_dims([h, w]).unwrap();
        let g = up(
            &be,
            &random::<bf16>(&mut rng, n * c * out[0] * out[1], -1.0, 1.0),
        );
        for (layout, l, lg) in [
            (
                "channels-last",
                Layout::contiguous(&[n, h, w, c]).permute(&[0, 3, 1, 2]),
                Layout::contiguous(&[n, out[0], out[1], c]).permute(&[0, 3, 1, 2]),
            ),
            (
                "NCHW",
                Layout::contiguous(&[n, c, h, w]),
                Layout::contiguous(&[n, c, out[0], out[1]]),
            ),
        ] {
            let ms = time(&be, &mut || {
                be.pool2d::<bf16>(&x, &l, &p, out).unwrap();
            });
            let bms = time(&be, &mut || {
                be.pool2d_backward::<bf16>((&x, &l), (&g, &lg), &p).unwrap();
            });
            println!(
                "{what} bf16 {:?} {layout}: forward {ms:.4} ms, backward {bms:.4} ms",
                [n, c, h, w]
            );
        }
    }
    for [n, c, h, w] in [[64, 64, 56, 56], [64, 512, 7, 7]] {
        let x = up(&be, &random::<bf16>(&mut rng, n * c * h * w, -2.0, 2.0));
        let l = Layout::contiguous(&[n, h, w, c]).permute(&[0, 3, 1, 2]);
        let ms = time(&be, &mut || {
            be.batch_norm::<bf16>((&x, &l), None, None, None, true, 0.1, 1e-5)
                .unwrap();
        });
        let bms = time(&be, &mut || {
            be.batch_norm_backward::<bf16>((&x, &l), None, None, (&x, &l), true, 1e-5)
                .unwrap();
        });
        println!(
            "batch_norm training bf16 {:?} channels-last: forward {ms:.4} ms, backward {bms:.4} ms",
            [n, c, h, w]
        );
    }
    let [n, c, h, w] = [64, 64, 56, 56];
    let x = up(&be, &random::<bf16>(&mut rng, n * c * h * w, -2.0, 2.0));
    let ms = time(&be, &mut || {
        be.dropout::<bf16>(&x, &Layout::contiguous(&[n * c * h * w]), 0.1, 7)
            .unwrap();
    });
    println!("dropout bf16 {} elements: {ms:.4} ms", n * c * h * w);
}

/// `conv2d` and both its gradients on the GPU (cuDNN, or the built-in kernels
/// where cuDNN does not run a problem) against the CPU's im2col and
/// `gemm`: NCHW and channels-last inputs and filters, a bias, stride,
/// padding, dilation, groups and depthwise, an empty batch, in every float
/// dtype (16-bit within a few roundings of the sums' size).
#[test]
fn conv2d_and_its_gradients_match_the_cpu() {
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::conv::ConvArgs;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        let close = |what: &str, got: &[T], want: &[T], terms: usize| {
            assert_eq!(got.len(), want.len(), "{what}");
            let bound = tol * (terms as f64).sqrt();
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let (g, w) = (g.to_f64(), w.to_f64());
                assert!(
                    (g - w).abs() <= bound * (1.0 + w.abs()),
                    "{what} {} [{i}]: GPU {g}, CPU {w}",
                    T::KIND
                );
            }
        };
        let cases: [([usize; 4], [usize; 4], ConvArgs); 5] = [
            (
                [2, 4, 9, 8],
                [6, 4, 3, 3],
                ConvArgs {
                    padding: [1, 1],
                    ..Default::default()
                },
            ),
            (
                [1, 3, 11, 13],
                [4, 3, 3, 2],
                ConvArgs {
                    stride: [2, 1],
                    padding: [1, 0],
                    dilation: [1, 2],
                    groups: 1,
                },
            ),
            (
                [2, 6, 8, 8],
                [9, 2, 3, 3],
                ConvArgs {
                    padding: [1, 1],
                    groups: 3,
                    ..Default::default()
                },
            ),
            (
                [2, 8, 10, 9],
                [8, 1, 3, 3],
                ConvArgs {
                    padding: [1, 1],
                    groups: 8,
                    ..Default::default()
                },
            ),
            ([0, 3, 5, 5], [4, 3, 1, 1], ConvArgs::default()),
        ];
        for (xd, wd, args) in cases {
            let x: Vec<T> = random(rng, xd.iter().product(), -1.0, 1.0);
            let w: Vec<T> = random(rng, wd.iter().product(), -1.0, 1.0);
            let b: Vec<T> = random(rng, wd[0], -1.0, 1.0);
            let (gx, gw, gb) = (up(be, &x), up(be, &w), up(be, &b));
            let nhwc = |d: [usize; 4]| {
                Layout::contiguous(&[d[0], d[2], d[3], d[1]]).permute(&[0, 3, 1, 2])
            };
            let lb = Layout::contiguous(&[wd[0]]);
            let terms = wd[1] * wd[2] * wd[3];
            for (lx, lw) in [
                (Layout::contiguous(&xd), Layout::contiguous(&wd)),
                (nhwc(xd), nhwc(wd)),
            ] {
                let what = format!("{xd:?} * {wd:?} {args:?} strides {:?}", lx.strides());
                let want = CpuBackend
                    .conv2d((&x, &lx), (&w, &lw), Some((&b, &lb)), &args)
                    .unwrap();
                let got = be
                    .conv2d::<T>((&gx, &lx), (&gw, &lw), Some((&gb, &lb)), &args)
                    .unwrap();
                close(
                    &format!("conv2d {what}"),
                    &down(&got, &[want.len()]),
                    &want,
                    terms,
                );
                let yd = [xd[0], wd[0], 0, 0];
                let oh = |i: usize| {
                    (xd[2 + i] + 2 * args.padding[i] - args.dilation[i] * (wd[2 + i] - 1) - 1)
                        / args.stride[i]
                        + 1
                };
                let yd = [yd[0], yd[1], oh(0), oh(1)];
                let gl = Layout::contiguous(&yd);
                let g: Vec<T> = random(rng, gl.numel(), -1.0, 1.0);
                let gg = up(be, &g);
                for input in [true, false] {
                    let want = CpuBackend
                        .conv2d_backward((&x, &lx), (&w, &lw), (&g, &gl), &args, input)
                        .unwrap();
                    let got = be
                        .conv2d_backward::<T>((&gx, &lx), (&gw, &lw), (&gg, &gl), &args, input)
                        .unwrap();
                    let terms = if input {
                        wd[0] * wd[2] * wd[3]
                    } else {
                        yd[0] * yd[2] * yd[3]
                    };
                    close(
                        &format!("conv2d_backward (input {input}) {what}"),
                        &down(&got, &[want.len()]),
                        &want,
                        terms.max(1),
                    );
                }
            }
        }
    }
    check::<f32>(&be, &mut rng, 4e-7);
    check::<f64>(&be, &mut rng, 1e-15);
    check::<f16>(&be, &mut rng, 2e-3);
    check::<bf16>(&be, &mut rng, 1.6e-2);
}

/// The built-in convolution (`im2col`, cuBLAS, `col2im`; cuDNN turned off
/// on this thread) and both its gradients against the CPU for random
/// shapes: stride, padding, dilation, groups and depthwise, NCHW and
/// channels-last inputs, filters and output gradients, an empty batch,
/// one image per chunk of columns as well as the whole batch, NaN and
/// infinities in the input, in every float dtype.
#[test]
fn builtin_conv2d_matches_the_cpu() {
    use super::im2col::COLUMN_LIMIT;
    use crate::cpu::CpuBackend;
    use tensorfn_core::ops::conv::{out_size, ConvArgs};
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn pick(rng: &mut SplitMix64, lo: usize, hi: usize) -> usize {
        lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize
    }
    /// A NaN where the CPU has one, the same infinity, else within
    /// `tol * sqrt(terms)` relative to `1 + |want|`.
    fn close<T: crate::FloatDType>(what: &str, got: &[T], want: &[T], tol: f64, terms: usize) {
        assert_eq!(got.len(), want.len(), "{what}");
        let bound = tol * (terms.max(1) as f64).sqrt();
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let (g, w) = (g.to_f64(), w.to_f64());
            let ok = if w.is_nan() || w.is_infinite() {
                g.is_nan() == w.is_nan() && (w.is_nan() || g == w)
            } else {
                (g - w).abs() <= bound * (1.0 + w.abs())
            };
            assert!(ok, "{what} {} [{i}]: GPU {g}, CPU {w}", T::KIND);
        }
    }
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64, tol: f64) {
        for case in 0..12 {
            let groups = match case % 4 {
                0 => 1,
                1 => pick(rng, 2, 3),
                _ => pick(rng, 1, 4),
            };
            let depthwise = case % 4 == 3;
            let cg = if depthwise { 1 } else { pick(rng, 1, 3) };
            let kg = if depthwise { 1 } else { pick(rng, 1, 3) };
            let args = ConvArgs {
                stride: [pick(rng, 1, 3), pick(rng, 1, 2)],
                padding: [pick(rng, 0, 2), pick(rng, 0, 1)],
                dilation: [pick(rng, 1, 2), pick(rng, 1, 2)],
                groups,
            };
            let n = if case == 5 { 0 } else { pick(rng, 1, 3) };
            let wd = [groups * kg, cg, pick(rng, 1, 3), pick(rng, 1, 3)];
            // Large enough for one window: (k - 1) * d + 1 - 2 * pad.
            let reach = |i: usize| (wd[2 + i] - 1) * args.dilation[i] + 1;
            let xd = [
                n,
                groups * cg,
                reach(0) + pick(rng, 0, 6),
                reach(1) + pick(rng, 0, 6),
            ];
            let axis = |i: usize| {
                out_size(
                    xd[2 + i],
                    wd[2 + i],
                    args.padding[i],
                    args.stride[i],
                    args.dilation[i],
                )
                .unwrap()
            };
            let yd = [n, wd[0], axis(0), axis(1)];
            let mut x: Vec<T> = random(rng, xd.iter().product(), -1.0, 1.0);
            let len = x.len();
            if case == 7 && len > 3 {
                x[0] = T::from_f64(f64::NAN);
                x[len / 2] = T::from_f64(f64::INFINITY);
                x[len - 1] = T::from_f64(f64::NEG_INFINITY);
            }
            let w: Vec<T> = random(rng, wd.iter().product(), -1.0, 1.0);
            let b: Vec<T> = random(rng, wd[0], -1.0, 1.0);
            let g: Vec<T> = random(rng, yd.iter().product(), -1.0, 1.0);
            let (gx, gw, gb, gg) = (up(be, &x), up(be, &w), up(be, &b), up(be, &g));
            let nhwc = |d: [usize; 4]| {
                Layout::contiguous(&[d[0], d[2], d[3], d[1]]).permute(&[0, 3, 1, 2])
            };
            let lb = Layout::contiguous(&[wd[0]]);
            for (lx, lw, lg) in [
                (
                    Layout::contiguous(&xd),
                    Layout::contiguous(&wd),
                    Layout::contiguous(&yd),
                ),
                (nhwc(xd), nhwc(wd), nhwc(yd)),
            ] {
                // The CPU reads the same elements through the same views.
                let want_y = CpuBackend
                    .conv2d((&x, &lx), (&w, &lw), Some((&b, &lb)), &args)
                    .unwrap();
                let want_nb = CpuBackend
                    .conv2d((&x, &lx), (&w, &lw), None, &args)
                    .unwrap();
                let want_dx = CpuBackend
                    .conv2d_backward((&x, &lx), (&w, &lw), (&g, &lg), &args, true)
                    .unwrap();
                let want_dw = CpuBackend
                    .conv2d_backward((&x, &lx), (&w, &lw), (&g, &lg), &args, false)
                    .unwrap();
                for limit in [usize::MAX, 1] {
                    COLUMN_LIMIT.with(|c| c.set(limit));
                    let what = format!(
                        "{xd:?} * {wd:?} {args:?} x strides {:?} chunk limit {limit}",
                        lx.strides()
                    );
                    let (y, ynb, dx, dw) = super::cudnn::without_cudnn(|| {
                        (
                            be.conv2d::<T>((&gx, &lx), (&gw, &lw), Some((&gb, &lb)), &args)
                                .unwrap(),
                            be.conv2d::<T>((&gx, &lx), (&gw, &lw), None, &args).unwrap(),
                            be.conv2d_backward::<T>(
                                (&gx, &lx),
                                (&gw, &lw),
                                (&gg, &lg),
                                &args,
                                true,
                            )
                            .unwrap(),
                            be.conv2d_backward::<T>(
                                (&gx, &lx),
                                (&gw, &lw),
                                (&gg, &lg),
                                &args,
                                false,
                            )
                            .unwrap(),
                        )
                    });
                    let taps = wd[1] * wd[2] * wd[3];
                    close(
                        &format!("conv2d {what}"),
                        &down(&y, &[want_y.len()]),
                        &want_y,
                        tol,
                        taps,
                    );
                    close(
                        &format!("conv2d (no bias) {what}"),
                        &down(&ynb, &[want_nb.len()]),
                        &want_nb,
                        tol,
                        taps,
                    );
                    let terms = wd[0] / groups * wd[2] * wd[3];
                    close(
                        &format!("dx {what}"),
                        &down(&dx, &[want_dx.len()]),
                        &want_dx,
                        tol,
                        terms,
                    );
                    let terms = n * yd[2] * yd[3];
                    close(
                        &format!("dw {what}"),
                        &down(&dw, &[want_dw.len()]),
                        &want_dw,
                        tol,
                        terms,
                    );
                }
                COLUMN_LIMIT.with(|c| c.set(super::im2col::COLUMN_BYTES));
            }
        }
    }
    check::<f32>(&be, &mut rng, 4e-7);
    check::<f64>(&be, &mut rng, 1e-15);
    check::<f16>(&be, &mut rng, 2e-3);
    check::<bf16>(&be, &mut rng, 1.6e-2);
}

/// Times the built-in convolution against cuDNN on ResNet's `N32 64->64
/// 56x56 3x3` (padding 1) in bf16, NCHW and channels-last: forward, `dx`
/// and `dw`; prints one line per case.
#[test]
#[ignore = "a measurement, not a check"]
fn builtin_conv2d_timing() {
    use tensorfn_core::ops::conv::ConvArgs;
    let Some((_serial, be)) = gpu() else { return };
    fn time(be: &CudaBackend, f: &mut dyn FnMut()) -> f64 {
        for _ in 0..3 {
            f();
        }
        be.synchronize().unwrap();
        let reps = 20;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            f();
        }
        be.synchronize().unwrap();
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    }
    let mut rng = seed();
    let (xd, wd) = ([32, 64, 56, 56], [64, 64, 3, 3]);
    let args = ConvArgs {
        padding: [1, 1],
        ..Default::default()
    };
    let x = up(
        &be,
        &random::<bf16>(&mut rng, xd.iter().product(), -1.0, 1.0),
    );
    let w = up(
        &be,
        &random::<bf16>(&mut rng, wd.iter().product(), -0.1, 0.1),
    );
    let g = up(
        &be,
        &random::<bf16>(&mut rng, xd.iter().product(), -1.0, 1.0),
    );
    let nhwc = |d: [usize; 4]| Layout::contiguous(&[d[0], d[2], d[3], d[1]]).permute(&[0, 3, 1, 2]);
    for (layout, lx, lw) in [
        ("NCHW", Layout::contiguous(&xd), Layout::contiguous(&wd)),
        ("channels-last", nhwc(xd), nhwc(wd)),
    ] {
        let lg = lx.clone();
        for builtin in [false, true] {
            let run = |f: &mut dyn FnMut()| {
                if builtin {
                    super::cudnn::without_cudnn(|| time(&be, f))
                } else {
                    time(&be, f)
                }
            };
            let fwd = run(&mut || {
                be.conv2d::<bf16>((&x, &lx), (&w, &lw), None, &args)
                    .unwrap();
            });
            let dx = run(&mut || {
                be.conv2d_backward::<bf16>((&x, &lx), (&w, &lw), (&g, &lg), &args, true)
                    .unwrap();
            });
            let dw = run(&mut || {
                be.conv2d_backward::<bf16>((&x, &lx), (&w, &lw), (&g, &lg), &args, false)
                    .unwrap();
            });
            let path = if builtin { "built-in" } else { "cuDNN" };
            println!(
                "conv2d bf16 {xd:?} * {wd:?} {layout} {path}: forward {fwd:.4} ms, dx {dx:.4} ms, dw {dw:.4} ms"
            );
        }
    }
}

/// Normalisation `op` over rows of `dtype` as a row kernel
/// ([`norm_program`](tensorfn_kernels::rowkernel::norm_program)), as
/// `tensor_fn!` emits a user's.
fn norm_row_kernel(
    op: NormOp,
    dtype: tensorfn_core::DTypeKind,
) -> &'static tensorfn_kernels::rowkernel::RowKernelDef {
    let prog = tensorfn_kernels::rowkernel::norm_program(op, dtype);
    row_kernel_def(&prog, format!("tf_rows_test_{}_{dtype}", op.name()))
}

/// `rms_norm(x + r, w, eps) * g` as one row kernel over the rows of `x`,
/// `r`, `w` and `g` (in that order), as `tensor_fn!` folds the sum into
/// the loads and the product into the stores.
fn residual_rms_gate(
    dtype: tensorfn_core::DTypeKind,
) -> &'static tensorfn_kernels::rowkernel::RowKernelDef {
    use tensorfn_kernels::ir::ElementwiseBuilder;
    use tensorfn_kernels::rowkernel::{norm_program, RowParam};
    use tensorfn_kernels::BinaryOp;
    let binary = |op| {
        let mut b = ElementwiseBuilder::new();
        let (x, y) = (b.input(dtype), b.input(dtype));
        let z = b.binary(op, x, y);
        b.output(z).unwrap()
    };
    let prog = norm_program(NormOp::RmsNorm, dtype)
        .fuse_producer(0, &binary(BinaryOp::Add), &[RowParam::Row, RowParam::Row])
        .unwrap()
        .fuse_consumer(&binary(BinaryOp::Mul), 0, &[RowParam::Row])
        .unwrap();
    row_kernel_def(&prog, format!("tf_rows_test_residual_{dtype}"))
}

/// `prog`'s module as `tensor_fn!` emits it, named `name`.
fn row_kernel_def(
    prog: &tensorfn_kernels::rowkernel::RowProgram,
    name: String,
) -> &'static tensorfn_kernels::rowkernel::RowKernelDef {
    let ptx = tensorfn_kernels::ptx::row_kernel(prog, &name).unwrap();
    Box::leak(Box::new(tensorfn_kernels::rowkernel::RowKernelDef {
        name: Box::leak(name.into_boxed_str()),
        ptx: Box::leak(ptx.into_boxed_str()),
        per_row: false,
    }))
}

/// Row kernels written in `tensor_fn!` (here the catalogue's norms written
/// as row programs, as a user writes them): the GPU entry against the
/// built-in norm on the CPU, a broadcast weight (step 0) and a per-row
/// weight, NaN and infinite rows, one-element and empty rows, and rows
/// for every entry (a warp's and a block's from registers, with 16-byte
/// and one-element accesses, and the long one).
#[test]
fn row_kernels_match_the_builtin_norms() {
    use crate::cpu::CpuBackend;
    let Some((_serial, be)) = gpu() else { return };
    let mut rng = seed();
    fn check<T: crate::FloatDType>(be: &CudaBackend, rng: &mut SplitMix64) {
        for op in NormOp::ALL {
            let def = norm_row_kernel(op, T::KIND);
            for cols in [0, 1, 33, 768, 2048, 4100, 9000] {
                let rows = 6;
                let mut x: Vec<T> = random(rng, rows * cols, -3.0, 3.0);
                if cols > 2 {
                    x[cols + 1] = T::from_f64(f64::NAN);
                    x[2 * cols] = T::from_f64(f64::INFINITY);
                    x[3 * cols + 2] = T::from_f64(f64::NEG_INFINITY);
                }
                let w: Vec<T> = random(rng, cols, -2.0, 2.0);
                let b: Vec<T> = random(rng, cols, -1.0, 1.0);
                let epsilon = 1e-5;
                let (sx, sw, sb) = (up(be, &x), up(be, &w), up(be, &b));
                let mut inputs = vec![(&sx, cols), (&sw, 0)];
                if op.has_bias() {
                    inputs.push((&sb, 0));
                }
                let none = |_: &[&[T]], _: &[f64], _: &mut [T]| {};
                let got = be
                    .row_kernel(def, &inputs, &[epsilon], (rows, cols), &none)
                    .unwrap();
                let got = down(&got, &[rows, cols]);
                let l = Layout::contiguous(&[rows, cols]);
                let lw = Layout::contiguous(&[cols]);
                let want = CpuBackend
                    .norm(
                        op,
                        (&x, &l),
                        (&w, &lw),
                        op.has_bias().then_some((&b, &lw)),
                        epsilon,
                    )
                    .unwrap();
                let what = format!("{} {} {rows}x{cols}", op.name(), T::KIND);
                let tol = 4.0 * eps(T::KIND) + 1e-6;
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let (g, w) = (g.to_f64(), w.to_f64());
                    assert!(
                        (g.is_nan() && w.is_nan())
                            || g == w
                            || (g - w).abs() <= tol * (1.0 + w.abs()),
                        "{what} [{i}]: row kernel {g}, built-in {w}"
                    );
                }
                // A weight per row (step `cols`) equals the broadcast one.
                let wr: Vec<T> = (0..rows).flat_map(|_| w.iter().copied()).collect();
                let swr = up(be, &wr);
                inputs[1] = (&swr, cols);
                let again = be
                    .row_kernel(def, &inputs, &[epsilon], (rows, cols), &none)
                    .unwrap();
                let again = down(&again, &[rows, cols]);
                for (g, a) in got.iter().zip(&again) {
                    assert!(g.to_f64().to_bits() == a.to_f64().to_bits() || g.to_f64().is_nan());
                }
                if op != NormOp::RmsNorm {
                    continue;
                }
                // With a residual sum folded into the loads and a gate
                // into the stores: the three steps on the CPU.
                let r: Vec<T> = random(rng, rows * cols, -3.0, 3.0);
                let gate: Vec<T> = random(rng, rows * cols, -2.0, 2.0);
                let (sr, sg) = (up(be, &r), up(be, &gate));
                let inputs = [(&sx, cols), (&sr, cols), (&sw, 0), (&sg, cols)];
                let fused = be
                    .row_kernel(
                        residual_rms_gate(T::KIND),
                        &inputs,
                        &[epsilon],
                        (rows, cols),
                        &none,
                    )
                    .unwrap();
                let fused = down(&fused, &[rows, cols]);
                let h: Vec<T> = x
                    .iter()
                    .zip(&r)
                    .map(|(a, b)| T::from_f64(a.to_f64() + b.to_f64()))
                    .collect();
                let y = CpuBackend
                    .norm(op, (&h, &l), (&w, &lw), None, epsilon)
                    .unwrap();
                for (i, (f, (y, g))) in fused.iter().zip(y.iter().zip(&gate)).enumerate() {
                    let (f, w) = (f.to_f64(), T::from_f64(y.to_f64() * g.to_f64()).to_f64());
                    assert!(
                        (f.is_nan() && w.is_nan())
                            || f == w
                            || (f - w).abs() <= 2.0 * tol * (1.0 + w.abs()),
                        "{what} [{i}]: residual block {f}, steps {w}"
                    );
                }
            }
        }
    }
    check::<f32>(&be, &mut rng);
    check::<f64>(&be, &mut rng);
    check::<f16>(&be, &mut rng);
    check::<bf16>(&be, &mut rng);
}

#[test]
fn gradients_and_batch_norm_of_channels_last_inputs_are_channels_last() {
    use crate::device::{Cpu, Cuda};
    use crate::tensor::Tensor;
    use crate::{shape, BatchNormArgs, ConvArgs, Pool2d};
    let Some((_serial, _be)) = gpu() else { return };
    let mut rng = seed();
    type X = shape![2, 8, 9, 10];
    type W = shape![16, 8, 3, 3];
    type Y = shape![2, 16, 5, 5];
    /// Whether a result is channels-last and not also row-major.
    fn nhwc<S: crate::shape::Shape, T: DType>(t: &Tensor<Cuda, T, S>) -> bool {
        t.layout().is_channels_last() && !t.is_contiguous()
    }
    fn check<T: crate::FloatDType>(rng: &mut SplitMix64, tol: f64) {
        let a = ConvArgs {
            stride: [2, 2],
            padding: [1, 1],
            ..Default::default()
        };
        let cpu = |v: &[f64], dims: &[usize]| {
            Tensor::<Cpu, f64, (crate::Dyn, crate::Dyn, crate::Dyn, crate::Dyn)>::from_vec_dims(
                v.to_vec(),
                dims,
            )
            .unwrap()
        };
        let (xv, wv, gv): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            random::<T>(rng, 1440, -1.0, 1.0)
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            random::<T>(rng, 1152, -1.0, 1.0)
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            random::<T>(rng, 800, -1.0, 1.0)
                .iter()
                .map(|v| v.to_f64())
                .collect(),
        );
        // The f64 references on the CPU, NCHW (checked against the
        // definitions in `ops::channels_last_tests`).
        let (x64, w64, g64) = (
            cpu(&xv, &[2, 8, 9, 10]),
            cpu(&wv, &[16, 8, 3, 3]),
            cpu(&gv, &[2, 16, 5, 5]),
        );
        let (rdx, rdw, _) = x64.conv2d_backward(&w64, &g64, a).unwrap();
        let gpu = |v: &[f64]| -> Vec<T> { v.iter().map(|&v| T::from_f64(v)).collect() };
        let x = Tensor::<Cpu, T, X>::from_vec(gpu(&xv))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let w = Tensor::<Cpu, T, W>::from_vec(gpu(&wv))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let g = Tensor::<Cpu, T, Y>::from_vec(gpu(&gv))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let (xc, wc, gc) = (
            x.contiguous_channels_last().unwrap(),
            w.contiguous_channels_last().unwrap(),
            g.contiguous_channels_last().unwrap(),
        );
        let kind = T::KIND;
        // cuDNN, then the built-in kernels.
        for builtin in [false, true] {
            let run = || xc.conv2d_backward(&wc, &gc, a).unwrap();
            let (dx, dw, _) = match builtin {
                true => super::cudnn::without_cudnn(run),
                false => run(),
            };
            let what = format!("conv2d {kind} built-in {builtin}");
            assert!(
                nhwc(&dx) && nhwc(&dw),
                "{what}: {:?} {:?}",
                dx.layout(),
                dw.layout()
            );
            let got = dx.to_vec().unwrap();
            assert_close(
                &format!("{what} dx"),
                &got,
                &rdx.to_vec().unwrap(),
                tol,
                tol,
            );
            let got = dw.to_vec().unwrap();
            assert_close(
                &format!("{what} dw"),
                &got,
                &rdw.to_vec().unwrap(),
                tol,
                tol,
            );
            // An NCHW input and a KCRS filter keep theirs.
            let (dx, dw, _) = match builtin {
                true => super::cudnn::without_cudnn(|| x.conv2d_backward(&w, &gc, a).unwrap()),
                false => x.conv2d_backward(&w, &gc, a).unwrap(),
            };
            assert!(dx.is_contiguous() && dw.is_contiguous(), "{what}");
            assert_close(
                &format!("{what} NCHW dx"),
                &dx.to_vec().unwrap(),
                &rdx.to_vec().unwrap(),
                tol,
                tol,
            );
        }
        // Pools: max 3x3 stride 2 padding 1 and avg 2x2 to [2, 8, 5, 5],
        // adaptive to 1x1.
        let pg = cpu(&gv[..400], &[2, 8, 5, 5]);
        let pgt = Tensor::<Cpu, T, shape![2, 8, 5, 5]>::from_vec(gpu(&gv[..400]))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        for pool in [
            Pool2d::max(3).stride(2).padding(1),
            Pool2d::avg(2).stride(2).padding([1, 0]),
        ] {
            let want = x64.pool2d_backward(&pg, pool).unwrap().to_vec().unwrap();
            for (input, cl) in [(&x, false), (&xc, true)] {
                let dx = input.pool2d_backward(&pgt, pool).unwrap();
                let what = format!("{} {kind} channels-last {cl}", pool.kind.name());
                assert_eq!(nhwc(&dx), cl, "{what}");
                assert_close(&what, &dx.to_vec().unwrap(), &want, tol, tol);
            }
        }
        let ag = cpu(&gv[..16], &[2, 8, 1, 1]);
        let agt = Tensor::<Cpu, T, shape![2, 8, 1, 1]>::from_vec(gpu(&gv[..16]))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap();
        let want = x64
            .pool2d_backward(&ag, Pool2d::adaptive_avg(1))
            .unwrap()
            .to_vec()
            .unwrap();
        let dx = xc.pool2d_backward(&agt, Pool2d::adaptive_avg(1)).unwrap();
        assert!(nhwc(&dx), "adaptive_avg_pool2d {kind}");
        assert_close(
            "adaptive_avg_pool2d",
            &dx.to_vec().unwrap(),
            &want,
            tol,
            tol,
        );
        // batch_norm in training, forward and backward.
        let wb: Vec<f64> = random::<T>(rng, 16, -2.0, 2.0)
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let c64 =
            |v: &[f64]| Tensor::<Cpu, f64, (crate::Dyn,)>::from_vec_dims(v.to_vec(), &[8]).unwrap();
        let (bw, bb) = (c64(&wb[..8]), c64(&wb[8..]));
        let train = BatchNormArgs::train();
        let ry = x64
            .batch_norm(None, None, Some(&bw), Some(&bb), train)
            .unwrap();
        let bg = cpu(
            &xv.iter().rev().copied().collect::<Vec<_>>(),
            &[2, 8, 9, 10],
        );
        let (rdx, _, _) = x64
            .batch_norm_backward(None, None, Some(&bw), &bg, train)
            .unwrap();
        let ct = |v: &[f64]| {
            Tensor::<Cpu, T, shape![8]>::from_vec(gpu(v))
                .unwrap()
                .to_device::<Cuda>()
                .unwrap()
        };
        let (tw, tb) = (ct(&wb[..8]), ct(&wb[8..]));
        let tg = Tensor::<Cpu, T, X>::from_vec(gpu(&bg.to_vec().unwrap()))
            .unwrap()
            .to_device::<Cuda>()
            .unwrap()
            .contiguous_channels_last()
            .unwrap();
        for (input, cl) in [(&x, false), (&xc, true)] {
            let what = format!("batch_norm {kind} channels-last {cl}");
            let y = input
                .batch_norm(None, None, Some(&tw), Some(&tb), train)
                .unwrap();
            assert_eq!(nhwc(&y), cl, "{what}");
            assert_close(&what, &y.to_vec().unwrap(), &ry.to_vec().unwrap(), tol, tol);
            let (dx, _, _) = input
                .batch_norm_backward(None, None, Some(&tw), &tg, train)
                .unwrap();
            assert_eq!(nhwc(&dx), cl, "{what} dx");
            assert_close(
                &format!("{what} dx"),
                &dx.to_vec().unwrap(),
                &rdx.to_vec().unwrap(),
                tol,
                tol,
            );
        }
    }
    check::<f32>(&mut rng, 1e-4);
    check::<f64>(&mut rng, 1e-10);
}

#[test]
fn gelu_epilogues_match_f64() {
    // cuBLASLt's GELU_AUX_BIAS, DGELU and DGELU_BGRAD where it takes the
    // product, the parts elsewhere: the same checks as the CPU's, and the
    // epilogue's GELU against the tanh form's f64 values.
    let Some((_guard, be)) = gpu() else { return };
    use crate::ops::matmul::gelu::tests as gelu;
    gelu::check_all::<crate::device::Cuda>(&mut seed());
    gelu::check_formula::<crate::device::Cuda>();
    gelu::check_non_finite::<crate::device::Cuda>();
    // Which of the three the GPT-2 MLP's products take (the others run as
    // parts): the forward [8192, 768] x [768, 3072] with its bias, and
    // the backward's g [8192, 768] x w2ᵀ (w2 [3072, 768] stored).
    fn taken<T: crate::FloatDType>(be: &CudaBackend) -> [bool; 3] {
        let (m, k, n) = (8192, 768, 3072);
        let x = be.full::<T>(m * k, T::one()).unwrap();
        let w = be.full::<T>(k * n, T::one()).unwrap();
        let bias = be.full::<T>(n, T::one()).unwrap();
        let pre = be.full::<T>(m * n, T::one()).unwrap();
        let xl = Layout::contiguous(&[1, m, k]);
        let wl = Layout::contiguous(&[1, k, n]);
        let wt = Layout::new(vec![1, k, n], vec![0, 1, k], 0);
        let (bl, pl) = (Layout::contiguous(&[n]), Layout::contiguous(&[m, n]));
        let run = |l: &Layout, extra| {
            be.gemm_epilogue((&x, &xl), (&w, l), extra)
                .unwrap()
                .is_some()
        };
        [
            run(&wl, ProductExtra::GeluAux { bias: (&bias, &bl) }),
            run(
                &wt,
                ProductExtra::DGelu {
                    pre: (&pre, &pl),
                    sums: false,
                },
            ),
            run(
                &wt,
                ProductExtra::DGelu {
                    pre: (&pre, &pl),
                    sums: true,
                },
            ),
        ]
    }
    for (t, [f, d, s]) in [
        ("f32", taken::<f32>(&be)),
        ("f16", taken::<f16>(&be)),
        ("bf16", taken::<bf16>(&be)),
    ] {
        eprintln!("{t}: GELU_AUX_BIAS {f}, DGELU {d}, DGELU_BGRAD {s}");
    }
    // bf16 is the training step's dtype: its products must take them.
    assert_eq!(taken::<bf16>(&be), [true; 3]);
}

#[test]
fn weight_and_bias_gradients_of_one_product_match_f64_on_the_gpu() {
    // cuBLASLt's BGRADA/BGRADB epilogues where it takes the product, the
    // product and the column sum elsewhere: the same checks as the CPU's.
    let Some((_guard, be)) = gpu() else { return };
    crate::ops::sum_k_tests::check_all::<crate::device::Cuda>(&mut seed());
    // Which forms cuBLASLt takes (the others run as two calls): a weight
    // gradient `xᵀ g` ([k, m] x stored, transposed) with g's sums, and
    // `gᵀ x` with the sums of its transposed left operand.
    fn taken<T: crate::FloatDType>(be: &CudaBackend) -> [bool; 2] {
        let (m, k, n) = (768, 512, 3072);
        let x = be.full::<T>(k * m, T::one()).unwrap();
        let g = be.full::<T>(k * n, T::one()).unwrap();
        let xt = Layout::new(vec![1, m, k], vec![0, 1, m], 0);
        let gd = Layout::contiguous(&[1, k, n]);
        let gt = Layout::new(vec![1, n, k], vec![0, 1, n], 0);
        let xd = Layout::contiguous(&[1, k, m]);
        [
            be.gemm_epilogue((&x, &xt), (&g, &gd), ProductExtra::SumK { of_b: true })
                .unwrap()
                .is_some(),
            be.gemm_epilogue((&g, &gt), (&x, &xd), ProductExtra::SumK { of_b: false })
                .unwrap()
                .is_some(),
        ]
    }
    for (t, [b, a]) in [
        ("f32", taken::<f32>(&be)),
        ("f16", taken::<f16>(&be)),
        ("bf16", taken::<bf16>(&be)),
    ] {
        eprintln!("{t}: xᵀ g with BGRADA {b}, gᵀ x with BGRADB {a}");
    }
}

#[test]
fn scatters_into_zeros_match_f64_on_the_gpu() {
    use crate::device::Cuda;
    use crate::ops::scatter::checks::scatters_into_zeros_match_f64;
    let Some((_serial, _be)) = gpu() else { return };
    let mut rng = seed();
    scatters_into_zeros_match_f64::<Cuda, f64>(&mut rng, 1e-12);
    scatters_into_zeros_match_f64::<Cuda, f32>(&mut rng, 1e-5);
    scatters_into_zeros_match_f64::<Cuda, f16>(&mut rng, 2e-3);
    scatters_into_zeros_match_f64::<Cuda, bf16>(&mut rng, 1.6e-2);
}
