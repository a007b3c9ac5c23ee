//! In-place and preallocated-output ops (with copy-on-write), casts
//! between every pair of dtypes, the fused-kernel entry points, and
//! printing.

use crate::common;

use common::*;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::FusedKernel;
use tensorfn_runtime::__private::{fused1, fused3, fused8, vmath, Lanes};
use tensorfn_runtime::{bf16, f16, shape, Cpu, DType, Dyn, Tensor};

type D2 = (Dyn, Dyn);

fn check_inplace<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims_maybe_empty(2, 1, 6);
        let (x, xv) = view::<T, D2>(rng, &dims, kind, 1.0, 12.0);
        let (y, yv) = view::<T, D2>(rng, &dims, Kind::Transposed, 1.0, 4.0);
        let what = format!("{} {kind:?} {dims:?} seed {}", name::<T>(), rng.seed);
        let exact = |f: fn(f64, f64) -> f64, a: &[f64], b: &[f64]| -> Vec<f64> {
            a.iter()
                .zip(b)
                .map(|(&p, &q)| {
                    if T::INT {
                        T::wrap(f(p, q).trunc() as i128)
                    } else {
                        round::<T>(f(p, q))
                    }
                })
                .collect()
        };
        // Copy-on-write: the original `x` (and any view of its storage)
        // keeps its values.
        let mut z = x.clone();
        z.add_(&y).unwrap();
        let added = exact(|a, b| a + b, &xv, &yv);
        assert_close(
            &z.to_vec().unwrap(),
            &added,
            T::TOL,
            &format!("add_ {what}"),
        );
        assert_close(
            &x.to_vec().unwrap(),
            &xv,
            0.0,
            &format!("x unchanged {what}"),
        );
        z.mul_(&y).unwrap();
        let mulled = exact(|a, b| a * b, &added, &yv);
        assert_close(
            &z.to_vec().unwrap(),
            &mulled,
            T::TOL * 2.0,
            &format!("mul_ {what}"),
        );
        z.sub_(&y).unwrap();
        let subbed = exact(|a, b| a - b, &mulled, &yv);
        assert_close(
            &z.to_vec().unwrap(),
            &subbed,
            T::TOL * 4.0,
            &format!("sub_ {what}"),
        );
        z.div_(&y).unwrap();
        let divided = exact(|a, b| a / b, &subbed, &yv);
        assert_close(
            &z.to_vec().unwrap(),
            &divided,
            T::TOL * 8.0,
            &format!("div_ {what}"),
        );
        let mut w = x.clone();
        w.add_scalar_(T::from_f64(3.0)).unwrap();
        w.mul_scalar_(T::from_f64(2.0)).unwrap();
        w.sub_scalar_(T::from_f64(1.0)).unwrap();
        let want: Vec<f64> = xv
            .iter()
            .map(|v| round::<T>((v + 3.0) * 2.0 - 1.0))
            .collect();
        assert_close(
            &w.to_vec().unwrap(),
            &want,
            T::TOL * 4.0,
            &format!("scalar_ {what}"),
        );
        // *_into writes the result; a shared `out` is replaced, never
        // written through.
        let mut out = Tensor::<Cpu, T, D2>::zeros_dims(&dims).unwrap();
        let alias = out.clone();
        x.add_into(&y, &mut out).unwrap();
        assert_close(
            &out.to_vec().unwrap(),
            &added,
            T::TOL,
            &format!("add_into {what}"),
        );
        assert!(alias.to_vec().unwrap().iter().all(|v| v.to_f64() == 0.0));
        x.sub_into(&y, &mut out).unwrap();
        assert_close(
            &out.to_vec().unwrap(),
            &exact(|a, b| a - b, &xv, &yv),
            T::TOL,
            &format!("sub_into {what}"),
        );
        x.mul_into(&y, &mut out).unwrap();
        assert_close(
            &out.to_vec().unwrap(),
            &exact(|a, b| a * b, &xv, &yv),
            T::TOL,
            &format!("mul_into {what}"),
        );
        x.div_into(&y, &mut out).unwrap();
        assert_close(
            &out.to_vec().unwrap(),
            &exact(|a, b| a / b, &xv, &yv),
            T::TOL,
            &format!("div_into {what}"),
        );
        // copy_from a transposed view.
        let mut c = Tensor::<Cpu, T, D2>::zeros_dims(&dims).unwrap();
        c.copy_from(&y).unwrap();
        assert_close(&c.to_vec().unwrap(), &yv, 0.0, &format!("copy_from {what}"));
    }
}

#[test]
fn in_place_and_into_every_dtype_and_layout() {
    let mut rng = Rng::new("in_place_and_into_every_dtype_and_layout");
    for_num_dtypes!(T => { check_inplace::<T>(&mut rng); });
}

#[test]
fn writes_through_views_stay_private() {
    // Writing into a narrowed view of a shared buffer copies first.
    let base = Tensor::<Cpu, f32, shape![4, 3]>::arange(0.0, 1.0).unwrap();
    let mut part = base.narrow::<0, shape![2, 3]>(1, 2).unwrap();
    part.add_scalar_(100.0).unwrap();
    assert_eq!(
        part.to_vec().unwrap(),
        vec![103., 104., 105., 106., 107., 108.]
    );
    assert_eq!(
        base.to_vec().unwrap(),
        (0..12).map(|v| v as f32).collect::<Vec<_>>()
    );
    // A unique strided view is written in place through its layout.
    let mut t = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0)
        .unwrap()
        .t()
        .unwrap();
    t.mul_scalar_(2.0).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![0., 6., 2., 8., 4., 10.]);
    // A broadcast view is materialised before it is written.
    let row = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1., 2., 3.]).unwrap();
    let mut b = row.broadcast_to::<shape![2, 3]>().unwrap();
    drop(row);
    let other = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 10.0).unwrap();
    b.add_(&other).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![1., 12., 23., 31., 42., 53.]);
    // Broadcasting the right-hand side of an in-place op.
    let mut m = Tensor::<Cpu, i32, D2>::zeros_dims(&[2, 3]).unwrap();
    let r = Tensor::<Cpu, i32, D2>::from_vec_dims(vec![1, 2, 3], &[1, 3]).unwrap();
    m.add_(&r).unwrap();
    assert_eq!(m.to_vec().unwrap(), vec![1, 2, 3, 1, 2, 3]);
    let bad = Tensor::<Cpu, i32, D2>::zeros_dims(&[3, 3]).unwrap();
    assert!(m.add_(&bad).unwrap_err().to_string().contains("`other`"));
    let mut small = Tensor::<Cpu, i32, D2>::zeros_dims(&[1, 3]).unwrap();
    assert!(small.add_(&m).is_err());
    let mut out = Tensor::<Cpu, i32, D2>::zeros_dims(&[3, 2]).unwrap();
    assert!(m
        .add_into(&m, &mut out)
        .unwrap_err()
        .to_string()
        .contains("`out`"));
    // An integer division by zero leaves the tensor as it was.
    let mut d = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![6, 8]).unwrap();
    let z = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![2, 0]).unwrap();
    assert!(d.div_(&z).is_err());
    assert!(d.div_scalar_(0).is_err());
    assert_eq!(d.to_vec().unwrap(), vec![6, 8]);
}

#[test]
fn compound_assignment_operators() {
    let mut x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    let y = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![4., 3., 2., 1.]).unwrap();
    x += &y;
    assert_eq!(x.to_vec().unwrap(), vec![5.; 4]);
    x -= y.clone();
    assert_eq!(x.to_vec().unwrap(), vec![1., 2., 3., 4.]);
    x *= &y;
    assert_eq!(x.to_vec().unwrap(), vec![4., 6., 6., 4.]);
    x /= &y;
    assert_eq!(x.to_vec().unwrap(), vec![1., 2., 3., 4.]);
    x += 1.0;
    x *= 2.0;
    x -= 0.5;
    x /= 0.5;
    assert_eq!(x.to_vec().unwrap(), vec![7., 11., 15., 19.]);
    let mut d = Tensor::<Cpu, i64, (Dyn,)>::zeros_dims(&[3]).unwrap();
    d += 5;
    d *= 3;
    assert_eq!(d.to_vec().unwrap(), vec![15; 3]);
}

fn cast_ref<U: DType>(v: f64, from: DTypeKind) -> U {
    if !from.is_float() && !U::KIND.is_float() {
        // Integer to integer wraps, like PyTorch (-1 as u8 is 255).
        U::from_i64(v as i64)
    } else {
        // Through f64 (exact for every dtype here), then Rust's `as`
        // rules for integers: truncate, saturate, NaN -> 0.
        U::from_f64(v)
    }
}

fn check_cast_from<T: TestDType>(rng: &mut Rng) {
    let (lo, hi) = if T::INT {
        (-300.0, 300.0)
    } else {
        (-400.0, 400.0)
    };
    let (x, xv) = view::<T, D2>(rng, &[4, 5], Kind::Transposed, lo, hi);
    macro_rules! to {
        ($U:ty) => {{
            let got = x.cast::<$U>().unwrap().to_vec().unwrap();
            let want: Vec<$U> = xv.iter().map(|&v| cast_ref::<$U>(v, T::KIND)).collect();
            assert_eq!(
                got,
                want,
                "cast {} -> {} seed {}",
                name::<T>(),
                name::<$U>(),
                rng.seed
            );
        }};
    }
    to!(f32);
    to!(f64);
    to!(f16);
    to!(bf16);
    to!(i32);
    to!(i64);
    to!(u8);
    to!(bool);
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    let mut rng = Rng::new("casts_between_every_pair_of_dtypes");
    for_num_dtypes!(T => { check_cast_from::<T>(&mut rng); });
    let b = Tensor::<Cpu, bool, shape![3]>::from_vec(vec![true, false, true]).unwrap();
    assert_eq!(b.cast::<f32>().unwrap().to_vec().unwrap(), vec![1., 0., 1.]);
    assert_eq!(b.cast::<u8>().unwrap().to_vec().unwrap(), vec![1, 0, 1]);
    assert_eq!(
        b.cast::<bool>().unwrap().to_vec().unwrap(),
        vec![true, false, true]
    );
    let f = Tensor::<Cpu, f32, shape![4]>::from_vec(vec![f32::NAN, -1.5, 1e10, 0.0]).unwrap();
    assert_eq!(
        f.cast::<i32>().unwrap().to_vec().unwrap(),
        vec![0, -1, i32::MAX, 0]
    );
    assert_eq!(
        f.cast::<bool>().unwrap().to_vec().unwrap(),
        vec![true, true, true, false]
    );
    let big = Tensor::<Cpu, i64, shape![1]>::full(i64::MAX).unwrap();
    assert_eq!(big.cast::<i64>().unwrap().item().unwrap(), i64::MAX);
    assert_eq!(big.cast::<i32>().unwrap().item().unwrap(), -1);
}

static K1: FusedKernel = FusedKernel {
    name: "test_affine",
    ptx: "",
    ptx_sm80: None,
    inputs: &[DTypeKind::F32],
    output: DTypeKind::F32,
};
static K3: FusedKernel = FusedKernel {
    name: "test_mixed",
    ptx: "",
    ptx_sm80: None,
    inputs: &[DTypeKind::F16, DTypeKind::I32, DTypeKind::Bool],
    output: DTypeKind::F64,
};
static K8: FusedKernel = FusedKernel {
    name: "test_sum8",
    ptx: "",
    ptx_sm80: None,
    inputs: &[DTypeKind::F32; 8],
    output: DTypeKind::F32,
};

#[test]
fn fused_kernels_broadcast_mixed_dtypes() {
    let mut rng = Rng::new("fused_kernels_broadcast_mixed_dtypes");
    for kind in KINDS {
        let dims = rng.dims(2, 1, 8);
        let (x, xv) = view::<f32, D2>(&mut rng, &dims, kind, -3.0, 3.0);
        let y: Tensor<Cpu, f32, D2> = fused1(&x, &dims, &K1, |lanes: &mut Lanes, a: f32| {
            lanes.sin(a) * 2.0 + 5.0
        })
        .unwrap();
        let want: Vec<f64> = xv
            .iter()
            .map(|&v| (vmath::sin(v as f32) * 2.0 + 5.0) as f64)
            .collect();
        assert_close(
            &y.to_vec().unwrap(),
            &want,
            0.0,
            &format!("fused1 {kind:?} seed {}", rng.seed),
        );
    }
    // Three inputs of three dtypes, broadcast to [4, 3].
    let (hv, h) = values::<f16>(&mut rng, 3, -2.0, 2.0);
    let h = Tensor::<Cpu, f16, shape![3]>::from_vec(h).unwrap();
    let i = Tensor::<Cpu, i32, shape![4, 1]>::from_vec(vec![1, -2, 3, 40]).unwrap();
    let m = Tensor::<Cpu, bool, shape![]>::full(true).unwrap();
    let out: Tensor<Cpu, f64, shape![4, 3]> = fused3(
        &h,
        &i,
        &m,
        &[4, 3],
        &K3,
        |_: &mut Lanes, a: f16, b: i32, c: bool| {
            if c {
                a.to_f64() * b as f64
            } else {
                0.0
            }
        },
    )
    .unwrap();
    let want: Vec<f64> = (0..12)
        .map(|k| hv[k % 3] * [1.0, -2.0, 3.0, 40.0][k / 3])
        .collect();
    assert_close(&out.to_vec().unwrap(), &want, 0.0, "fused3");
    // Eight inputs, large enough for the parallel path, mixed layouts.
    let dims = [200, 300];
    let ins: Vec<(Tensor<Cpu, f32, D2>, Vec<f64>)> = KINDS
        .iter()
        .cycle()
        .take(8)
        .map(|&k| view::<f32, D2>(&mut rng, &dims, k, -1.0, 1.0))
        .collect();
    let out: Tensor<Cpu, f32, D2> = fused8(
        &ins[0].0,
        &ins[1].0,
        &ins[2].0,
        &ins[3].0,
        &ins[4].0,
        &ins[5].0,
        &ins[6].0,
        &ins[7].0,
        &dims,
        &K8,
        |_: &mut Lanes, a, b, c, d, e, f, g, h| {
            a + 2.0 * b + 3.0 * c + 4.0 * d + 5.0 * e + 6.0 * f + 7.0 * g + 8.0 * h
        },
    )
    .unwrap();
    let want: Vec<f64> = (0..numel(&dims))
        .map(|p| {
            let v: Vec<f32> = ins.iter().map(|(_, vals)| vals[p] as f32).collect();
            (v[0]
                + 2.0 * v[1]
                + 3.0 * v[2]
                + 4.0 * v[3]
                + 5.0 * v[4]
                + 6.0 * v[5]
                + 7.0 * v[6]
                + 8.0 * v[7]) as f64
        })
        .collect();
    assert_close(
        &out.to_vec().unwrap(),
        &want,
        0.0,
        &format!("fused8 seed {}", rng.seed),
    );
    // Inputs that do not broadcast to the output, and a wrong result type.
    let e = fused1::<Cpu, f32, f32, D2>(&ins[0].0, &[3, 3], &K1, |_: &mut Lanes, a| a).unwrap_err();
    assert!(e.to_string().contains("input 0"), "{e}");
    let e = fused1::<Cpu, f32, f32, shape![2, 2]>(&ins[0].0, &dims, &K1, |_: &mut Lanes, a| a)
        .unwrap_err();
    assert!(e.to_string().contains("[200, 300]"), "{e}");
    // Empty output.
    let z = Tensor::<Cpu, f32, D2>::zeros_dims(&[0, 3]).unwrap();
    let r: Tensor<Cpu, f32, D2> = fused1(&z, &[0, 3], &K1, |_: &mut Lanes, a| a + 1.0).unwrap();
    assert_eq!(r.shape(), &[0, 3]);
}

#[test]
fn display_matches_pytorch() {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1.0, -2.5, 3.25, 0.0, 10.0, -0.125])
        .unwrap();
    assert_eq!(
        x.to_string(),
        "tensor([[ 1.0000, -2.5000,  3.2500],\n        [ 0.0000, 10.0000, -0.1250]])"
    );
    let t = x.t().unwrap();
    assert_eq!(
        t.to_string(),
        "tensor([[ 1.0000,  0.0000],\n        [-2.5000, 10.0000],\n        [ 3.2500, -0.1250]])"
    );
    let b =
        Tensor::<Cpu, bf16, shape![2]>::from_vec(vec![bf16::from_f32(0.5), bf16::from_f32(1.5)])
            .unwrap();
    assert_eq!(b.to_string(), "tensor([0.5000, 1.5000], dtype=bf16)");
    let i = Tensor::<Cpu, i64, shape![3]>::arange(-1, 1).unwrap();
    assert_eq!(i.to_string(), "tensor([-1,  0,  1])");
    let s = Tensor::<Cpu, f64, shape![]>::full(3.5).unwrap();
    assert_eq!(s.to_string(), "tensor(3.5000, dtype=f64)");
    let big = Tensor::<Cpu, f32, (Dyn, Dyn, Dyn)>::ones_dims(&[10, 10, 20]).unwrap();
    let text = big.to_string();
    assert!(text.contains("..."), "{text}");
    assert!(text.lines().count() < 60, "{text}");
    let h = Tensor::<Cpu, f16, shape![2]>::from_vec(vec![f16::from_f32(1e-5), f16::from_f32(1.0)])
        .unwrap();
    assert!(h.to_string().contains("e-05"), "{h}");
}
