//! Views and copies that change shape: reshape, view, flatten, t,
//! transpose, permute, contiguous, broadcast_to, cat, index, at, narrow;
//! every dtype, views of views, and the run-time errors.

use crate::common;

use common::*;
use tensorfn_runtime::{shape, Cpu, Dyn, Error, Tensor};

type D2 = (Dyn, Dyn);
type D3 = (Dyn, Dyn, Dyn);

fn check_views<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 5);
        let (x, xv) = view::<T, D3>(rng, &dims, kind, -20.0, 20.0);
        let what = format!("{} {kind:?} {dims:?} seed {}", name::<T>(), rng.seed);
        let n = numel(&dims);
        // reshape keeps row-major order: a view where the dims regroup
        // without moving elements (as PyTorch's), a copy otherwise.
        let r = x.reshape_dims::<D2>(&[dims[0] * dims[1], dims[2]]).unwrap();
        assert_close(&r.to_vec().unwrap(), &xv, 0.0, &format!("reshape {what}"));
        let f = x.flatten().unwrap();
        assert_eq!(f.shape(), &[n]);
        assert_close(&f.to_vec().unwrap(), &xv, 0.0, &format!("flatten {what}"));
        // view works when the input is contiguous, and wherever it
        // succeeds it reads the elements in order.
        let v = x.view_dims::<(Dyn,)>(&[n]);
        if x.is_contiguous() {
            assert!(v.is_ok(), "view {what}");
        }
        if let Ok(v) = v {
            assert_close(&v.to_vec().unwrap(), &xv, 0.0, &format!("view {what}"));
        }
        let c = x.contiguous().unwrap();
        assert!(c.is_contiguous());
        assert_close(
            &c.to_vec().unwrap(),
            &xv,
            0.0,
            &format!("contiguous {what}"),
        );
        // permute / transpose by index arithmetic.
        let p = x.permute::<D3>(&[2, 0, 1]).unwrap();
        let pd = [dims[2], dims[0], dims[1]];
        let want: Vec<f64> = indices(&pd)
            .iter()
            .map(|i| xv[ravel(&[i[1], i[2], i[0]], &dims)])
            .collect();
        assert_close(&p.to_vec().unwrap(), &want, 0.0, &format!("permute {what}"));
        let t = x.transpose::<D3>(0, 2).unwrap();
        let td = [dims[2], dims[1], dims[0]];
        let want: Vec<f64> = indices(&td)
            .iter()
            .map(|i| xv[ravel(&[i[2], i[1], i[0]], &dims)])
            .collect();
        assert_close(
            &t.to_vec().unwrap(),
            &want,
            0.0,
            &format!("transpose {what}"),
        );
        // index / narrow along each dim.
        let i0 = rng.int(0, dims[0] as i64 - 1) as usize;
        let s = x.index::<0>(i0).unwrap();
        let want: Vec<f64> = indices(&dims[1..])
            .iter()
            .map(|i| xv[ravel(&[i0, i[0], i[1]], &dims)])
            .collect();
        assert_close(
            &s.to_vec().unwrap(),
            &want,
            0.0,
            &format!("index::<0> {what}"),
        );
        let i2 = rng.int(0, dims[2] as i64 - 1) as usize;
        let s = x.index::<2>(i2).unwrap();
        let want: Vec<f64> = indices(&dims[..2])
            .iter()
            .map(|i| xv[ravel(&[i[0], i[1], i2], &dims)])
            .collect();
        assert_close(
            &s.to_vec().unwrap(),
            &want,
            0.0,
            &format!("index::<2> {what}"),
        );
        let start = rng.int(0, dims[1] as i64 - 1) as usize;
        let len = rng.int(0, (dims[1] - start) as i64) as usize;
        let s = x.narrow::<1, D3>(start, len).unwrap();
        let sd = [dims[0], len, dims[2]];
        let want: Vec<f64> = indices(&sd)
            .iter()
            .map(|i| xv[ravel(&[i[0], start + i[1], i[2]], &dims)])
            .collect();
        assert_close(
            &s.to_vec().unwrap(),
            &want,
            0.0,
            &format!("narrow::<1> {what}"),
        );
        // broadcast_to over a new leading dim.
        let b = x
            .broadcast_to_dims::<(Dyn, Dyn, Dyn, Dyn)>(&[2, dims[0], dims[1], dims[2]])
            .unwrap();
        let want: Vec<f64> = xv.iter().chain(xv.iter()).copied().collect();
        assert_close(
            &b.to_vec().unwrap(),
            &want,
            0.0,
            &format!("broadcast_to {what}"),
        );
    }
}

#[test]
fn views_every_dtype_and_layout() {
    let mut rng = Rng::new("views_every_dtype_and_layout");
    for_num_dtypes!(T => { check_views::<T>(&mut rng); });
    let b = Tensor::<Cpu, bool, shape![2, 2]>::from_vec(vec![true, false, false, true]).unwrap();
    assert_eq!(
        b.t().unwrap().to_vec().unwrap(),
        vec![true, false, false, true]
    );
    assert_eq!(
        b.index::<1>(1).unwrap().to_vec().unwrap(),
        vec![false, true]
    );
}

fn check_cat<T: TestDType>(rng: &mut Rng) {
    for kind in KINDS {
        let dims = rng.dims(3, 1, 4);
        let axis = rng.int(0, 2) as usize;
        let mut bd = dims.clone();
        bd[axis] = rng.int(0, 4) as usize;
        let (a, av) = view::<T, D3>(rng, &dims, kind, -9.0, 9.0);
        let bk = if bd[0] == 0 {
            Kind::Contiguous
        } else {
            *rng.pick(&KINDS)
        };
        let (b, bv) = view::<T, D3>(rng, &bd, bk, -9.0, 9.0);
        let mut od = dims.clone();
        od[axis] += bd[axis];
        let want: Vec<f64> = indices(&od)
            .iter()
            .map(|i| {
                if i[axis] < dims[axis] {
                    av[ravel(i, &dims)]
                } else {
                    let mut j = i.clone();
                    j[axis] -= dims[axis];
                    bv[ravel(&j, &bd)]
                }
            })
            .collect();
        let got: Tensor<Cpu, T, D3> = match axis {
            0 => a.cat::<0, _>(&b),
            1 => a.cat::<1, _>(&b),
            _ => a.cat::<2, _>(&b),
        }
        .unwrap();
        assert_eq!(got.shape(), &od[..]);
        let what = format!(
            "cat axis {axis} {} {kind:?}x{bk:?} {dims:?}+{bd:?} seed {}",
            name::<T>(),
            rng.seed
        );
        assert_close(&got.to_vec().unwrap(), &want, 0.0, &what);
        if bd == dims {
            let three = match axis {
                0 => Tensor::cat_slice::<0, D3>(&[&a, &b, &a]),
                1 => Tensor::cat_slice::<1, D3>(&[&a, &b, &a]),
                _ => Tensor::cat_slice::<2, D3>(&[&a, &b, &a]),
            }
            .unwrap();
            let mut td = dims.clone();
            td[axis] *= 3;
            assert_eq!(three.shape(), &td[..]);
            let want: Vec<f64> = indices(&td)
                .iter()
                .map(|i| {
                    let mut j = i.clone();
                    let part = j[axis] / dims[axis];
                    j[axis] %= dims[axis];
                    if part == 1 {
                        bv[ravel(&j, &dims)]
                    } else {
                        av[ravel(&j, &dims)]
                    }
                })
                .collect();
            assert_close(
                &three.to_vec().unwrap(),
                &want,
                0.0,
                &format!("cat_slice {what}"),
            );
        }
    }
}

#[test]
fn cat_every_dtype_axis_and_layout() {
    let mut rng = Rng::new("cat_every_dtype_axis_and_layout");
    for _ in 0..3 {
        for_num_dtypes!(T => { check_cat::<T>(&mut rng); });
    }
}

fn check_cat_many<T: TestDType>(rng: &mut Rng) {
    // Eleven inputs (more than one GPU launch takes), of different widths
    // along the axis, some empty, contiguous or sliced (an offset view, still
    // contiguous) or transposed (the strided path).
    for axis in 0..3 {
        let base = rng.dims(3, 1, 4);
        let mut parts = Vec::new();
        for i in 0..11 {
            let mut d = base.clone();
            d[axis] = rng.int(0, 4) as usize;
            let kind = match (i % 4, d[0]) {
                (3, n) if n > 0 => Kind::Transposed,
                (1 | 2, n) if n > 0 => Kind::Sliced,
                _ => Kind::Contiguous,
            };
            let (t, v) = view::<T, D3>(rng, &d, kind, -9.0, 9.0);
            parts.push((t, v, d));
        }
        let mut od = base.clone();
        od[axis] = parts.iter().map(|(_, _, d)| d[axis]).sum();
        let want: Vec<f64> = indices(&od)
            .iter()
            .map(|i| {
                let mut j = i.clone();
                for (_, v, d) in &parts {
                    if j[axis] < d[axis] {
                        return v[ravel(&j, d)];
                    }
                    j[axis] -= d[axis];
                }
                unreachable!("index inside the result")
            })
            .collect();
        let refs: Vec<&Tensor<Cpu, T, D3>> = parts.iter().map(|(t, _, _)| t).collect();
        let got = match axis {
            0 => Tensor::cat_slice::<0, D3>(&refs),
            1 => Tensor::cat_slice::<1, D3>(&refs),
            _ => Tensor::cat_slice::<2, D3>(&refs),
        }
        .unwrap();
        assert_eq!(got.shape(), &od[..]);
        let what = format!("cat of 11 along {axis} {} seed {}", name::<T>(), rng.seed);
        assert_close(&got.to_vec().unwrap(), &want, 0.0, &what);
        // All contiguous: the row-block path alone.
        let dense: Vec<Tensor<Cpu, T, D3>> = refs.iter().map(|t| t.contiguous().unwrap()).collect();
        let dense: Vec<&Tensor<Cpu, T, D3>> = dense.iter().collect();
        let again = match axis {
            0 => Tensor::cat_slice::<0, D3>(&dense),
            1 => Tensor::cat_slice::<1, D3>(&dense),
            _ => Tensor::cat_slice::<2, D3>(&dense),
        }
        .unwrap();
        assert_close(
            &again.to_vec().unwrap(),
            &want,
            0.0,
            &format!("{what}, contiguous"),
        );
    }
}

#[test]
fn cat_many_inputs_every_dtype_and_axis() {
    let mut rng = Rng::new("cat_many_inputs_every_dtype_and_axis");
    for _ in 0..3 {
        for_num_dtypes!(T => { check_cat_many::<T>(&mut rng); });
    }
}

#[test]
fn cat_follows_pytorch_semantics() {
    // The seed's example: [2, 3, 4] and [2, 5, 4] along dim 1 is valid.
    let a = Tensor::<Cpu, f32, shape![2, 3, 4]>::ones().unwrap();
    let b = Tensor::<Cpu, f32, shape![2, 5, 4]>::zeros().unwrap();
    let c: Tensor<Cpu, f32, shape![2, 8, 4]> = a.cat::<1, _>(&b).unwrap();
    assert_eq!(c.shape(), &[2, 8, 4]);
    assert_eq!(c.sum_all().unwrap().item().unwrap(), 24.0);
    // Along dim 0 the other dims differ: an Err naming both operands.
    let x = Tensor::<Cpu, f32, D3>::ones_dims(&[2, 3, 4]).unwrap();
    let y = Tensor::<Cpu, f32, D3>::ones_dims(&[2, 5, 4]).unwrap();
    let e = x.cat::<0, D3>(&y).unwrap_err().to_string();
    assert!(
        e.contains("`self`") && e.contains("`other`") && e.contains("dim 1"),
        "{e}"
    );
    // A result type that does not fit.
    let e = x.cat::<1, shape![2, 9, 4]>(&y).unwrap_err().to_string();
    assert!(e.contains("[2, 8, 4]"), "{e}");
    let e = Tensor::cat_slice::<0, D3>(&[&x, &y])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensors[1]"), "{e}");
    let e = Tensor::<Cpu, f32, D3>::cat_slice::<0, D3>(&[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one"), "{e}");
}

#[test]
fn reshape_view_errors() {
    let x = Tensor::<Cpu, f32, shape![1000, 1000]>::zeros().unwrap();
    assert!(x.view::<shape![1000000]>().is_ok());
    let d = Tensor::<Cpu, f32, D2>::zeros_dims(&[1000, 1000]).unwrap();
    let e = d.view_dims::<(Dyn,)>(&[1000001]).unwrap_err().to_string();
    assert!(
        e.contains("1000000 elements") && e.contains("1000001 elements"),
        "{e}"
    );
    let e = d.reshape::<shape![10, 10]>().unwrap_err().to_string();
    assert!(e.contains("element counts"), "{e}");
    let t = x.t().unwrap();
    let e = t.view::<shape![1000000]>().unwrap_err().to_string();
    assert!(e.contains("contiguous"), "{e}");
    assert_eq!(t.reshape::<shape![1000000]>().unwrap().shape(), &[1000000]);
    let e = d.reshape::<(Dyn,)>().unwrap_err().to_string();
    assert!(e.contains("reshape_dims"), "{e}");
    let e = d
        .reshape_dims::<shape![_, 7]>(&[100, 10000])
        .unwrap_err()
        .to_string();
    assert!(e.contains("[100, 10000]"), "{e}");
    // A reshape of a contiguous tensor is a view: both see the same data.
    let a = Tensor::<Cpu, i32, shape![2, 3]>::arange(0, 1).unwrap();
    let r = a.reshape::<shape![3, 2]>().unwrap();
    assert_eq!(r.to_vec().unwrap(), a.to_vec().unwrap());
}

#[test]
fn index_errors_never_read_out_of_bounds() {
    let x = Tensor::<Cpu, f32, shape![10, 10]>::zeros().unwrap();
    let e = x.index::<0>(10).unwrap_err();
    assert!(matches!(e, Error::Index(_)), "{e:?}");
    assert!(e.to_string().contains("valid indices are 0..=9"), "{e}");
    assert!(x.index::<1>(usize::MAX).is_err());
    assert!(x.narrow::<0, D2>(8, 3).is_err());
    assert!(x.narrow::<0, D2>(usize::MAX, 2).is_err());
    assert_eq!(x.narrow::<0, D2>(10, 0).unwrap().shape(), &[0, 10]);
    assert_eq!(x.at::<1, 9>().unwrap().shape(), &[10]);
    let e = Tensor::<Cpu, f32, (Dyn,)>::zeros_dims(&[0]).unwrap();
    assert!(e.index::<0>(0).unwrap_err().to_string().contains("empty"));
    let s = Tensor::<Cpu, i64, shape![3]>::arange(5, 1).unwrap();
    let item = s.index::<0>(2).unwrap();
    assert_eq!(item.shape(), &[] as &[usize]);
    assert_eq!(item.item().unwrap(), 7);
    assert!(x.transpose::<D2>(0, 2).is_err());
    assert!(x.permute::<D2>(&[0]).is_err());
    assert!(x.permute::<shape![10, 10]>(&[1, 1]).is_err());
    let v = Tensor::<Cpu, f32, shape![3]>::zeros().unwrap();
    assert!(v
        .broadcast_to::<shape![2, 4]>()
        .unwrap_err()
        .to_string()
        .contains("[2, 4]"));
}

#[test]
fn t_of_small_ranks() {
    let v = Tensor::<Cpu, f32, shape![3]>::arange(0.0, 1.0).unwrap();
    assert_eq!(v.t().unwrap().to_vec().unwrap(), vec![0., 1., 2.]);
    let s = Tensor::<Cpu, f32, shape![]>::full(4.0).unwrap();
    assert_eq!(s.t().unwrap().item().unwrap(), 4.0);
    let m = Tensor::<Cpu, f32, shape![2, 3]>::arange(0.0, 1.0).unwrap();
    let tt = m.t().unwrap().t().unwrap();
    assert_eq!(tt.to_vec().unwrap(), m.to_vec().unwrap());
    assert!(tt.is_contiguous());
}

#[test]
fn empty_views_of_empty_buffers() {
    // Narrowing or indexing a tensor with a 0 elsewhere: nothing to read,
    // whatever the position.
    let x = Tensor::<Cpu, f32, D2>::zeros_dims(&[4, 0]).unwrap();
    let n = x.narrow::<0, D2>(2, 1).unwrap();
    assert_eq!(n.shape(), &[1, 0]);
    assert!(n.to_vec().unwrap().is_empty());
    assert!(n.contiguous().unwrap().to_vec().unwrap().is_empty());
    assert_eq!(n.sum::<1>().unwrap().to_vec().unwrap(), vec![0.0]);
    assert_eq!(n.sum_all().unwrap().item().unwrap(), 0.0);
    let i = x.index::<0>(3).unwrap();
    assert!(i.to_vec().unwrap().is_empty());
    let mut m = n.clone();
    m.add_scalar_(1.0).unwrap();
    let mut out = Tensor::<Cpu, f32, D2>::zeros_dims(&[1, 0]).unwrap();
    n.add_into(&m, &mut out).unwrap();
    assert!(n.exp().unwrap().to_vec().unwrap().is_empty());
    assert_eq!(
        n.t().unwrap().reshape_dims::<(Dyn,)>(&[0]).unwrap().shape(),
        &[0]
    );
}
