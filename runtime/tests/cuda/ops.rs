//! The whole op set on the GPU against the CPU backend, with fresh random
//! inputs per run and dtype: views (transposed, permuted, narrowed,
//! broadcast), empty tensors, and every float dtype for products. Skips
//! with a one-line notice when no GPU is present.

use crate::gpu;
use gpu::{has_gpu, seed};

use tensorfn_kernels::UnaryOp;
use tensorfn_runtime::{
    bf16, f16, shape, Cpu, Cuda, DType, Device, Error, FloatDType, NumDType, Shape, Tensor,
};

type D2 = shape![_, _];
type D3 = shape![_, _, _];

/// A fresh random CPU tensor of `dims`, uniform in `[lo, hi)` (integers
/// truncated), and its copy on the device under test `G` (cuda:0; `Cpu`
/// when the test logic itself is checked).
fn pair<G: Device, T: DType, S: Shape>(
    dims: &[usize],
    lo: f64,
    hi: f64,
) -> (Tensor<Cpu, T, S>, Tensor<G, T, S>) {
    let u = Tensor::<Cpu, f64, S>::rand_dims(seed(), dims).unwrap();
    let data: Vec<T> = u
        .to_vec()
        .unwrap()
        .iter()
        .map(|&v| T::from_f64(lo + (hi - lo) * v))
        .collect();
    let c = Tensor::<Cpu, T, S>::from_vec_dims(data, dims).unwrap();
    let g = c.to_device::<G>().unwrap();
    (c, g)
}

/// Relative precision of `T` (0 for integers: exact).
fn eps<T: DType>() -> f64 {
    match T::KIND.name() {
        "f64" => 1e-14,
        "f32" => 2e-6,
        "f16" => 2e-3,
        "bf16" => 1.6e-2,
        _ => 0.0,
    }
}

/// GPU and CPU results agree within `k * eps * (1 + |cpu|)`, NaN with NaN.
fn same<G: Device, T: DType, S: Shape>(
    what: &str,
    gpu: Result<Tensor<G, T, S>, Error>,
    cpu: Result<Tensor<Cpu, T, S>, Error>,
    k: f64,
) {
    let cpu = cpu.unwrap_or_else(|e| panic!("{what}: CPU failed: {e}"));
    let gpu = gpu.unwrap_or_else(|e| panic!("{what}: GPU failed: {e}"));
    assert_eq!(gpu.shape(), cpu.shape(), "{what}: shape");
    let (g, c) = (gpu.to_vec().unwrap(), cpu.to_vec().unwrap());
    let tol = k * eps::<T>();
    for (i, (x, y)) in g.iter().zip(&c).enumerate() {
        let (x, y) = (x.to_f64(), y.to_f64());
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "{what} {} [{i}]: GPU {x}, CPU {y}", T::KIND);
    }
}

fn unary_range(op: UnaryOp) -> (f64, f64) {
    op.test_domain()
}

fn elementwise<G: Device, T: NumDType>() {
    let float = T::KIND.is_float();
    for op in UnaryOp::ALL {
        if op.needs_float() && !float {
            continue;
        }
        let (lo, hi) = unary_range(op);
        let (c, g) = pair::<G, T, D2>(&[33, 70], lo, hi);
        same(
            &format!("{} of a transpose", op.name()),
            g.t().and_then(|t| t.unary(op)),
            c.t().and_then(|t| t.unary(op)),
            4.0,
        );
        same(op.name(), g.unary(op), c.unary(op), 4.0);
    }
    let (lo, hi) = if float { (-50.0, 50.0) } else { (1.0, 60.0) };
    let (ca, ga) = pair::<G, T, D2>(&[40, 30], lo, hi);
    let (cb, gb) = pair::<G, T, D2>(&[40, 30], lo, hi);
    same("add", ga.add(&gb), ca.add(&cb), 2.0);
    same("sub", ga.sub(&gb), ca.sub(&cb), 2.0);
    same("mul", ga.mul(&gb), ca.mul(&cb), 2.0);
    same("div", ga.div(&gb), ca.div(&cb), 2.0);
    same("maximum", ga.maximum(&gb), ca.maximum(&cb), 0.0);
    same("minimum", ga.minimum(&gb), ca.minimum(&cb), 0.0);
    // Broadcasting a row and a column, and a transposed operand.
    let (cr, gr) = pair::<G, T, shape![_]>(&[30], lo, hi);
    let (cc, gc) = pair::<G, T, D2>(&[40, 1], lo, hi);
    same(
        "add row",
        ga.add_broadcast::<D2>(&gr),
        ca.add_broadcast::<D2>(&cr),
        2.0,
    );
    same(
        "mul column",
        ga.mul_broadcast::<D2>(&gc),
        ca.mul_broadcast::<D2>(&cc),
        2.0,
    );
    same(
        "div column",
        gc.div_broadcast::<D2>(&ga),
        cc.div_broadcast::<D2>(&ca),
        2.0,
    );
    let (ct, gt) = pair::<G, T, D2>(&[30, 40], lo, hi);
    same(
        "sub transposed",
        ga.sub(&gt.t().unwrap()),
        ca.sub(&ct.t().unwrap()),
        2.0,
    );
    // Scalars on either side.
    let s = T::from_f64(7.0);
    same("add_scalar", ga.add_scalar(s), ca.add_scalar(s), 2.0);
    same("rsub_scalar", ga.rsub_scalar(s), ca.rsub_scalar(s), 2.0);
    same("mul_scalar", ga.mul_scalar(s), ca.mul_scalar(s), 2.0);
    same("div_scalar", ga.div_scalar(s), ca.div_scalar(s), 2.0);
    same("rdiv_scalar", ga.rdiv_scalar(s), ca.rdiv_scalar(s), 2.0);
    same(
        "maximum_scalar",
        ga.maximum_scalar(s),
        ca.maximum_scalar(s),
        0.0,
    );
    same(
        "addcmul",
        ga.addcmul(&gb, &ga, T::from_f64(0.5)),
        ca.addcmul(&cb, &ca, T::from_f64(0.5)),
        4.0,
    );
    // Empty tensors.
    let (ce, ge) = pair::<G, T, D2>(&[0, 5], lo, hi);
    same("add of empty", ge.add(&ge), ce.add(&ce), 0.0);
    // In place, on a view shared with another tensor (copy-on-write).
    let (mut cm, mut gm) = (ca.clone(), ga.clone());
    gm.add_(&gb).unwrap();
    cm.add_(&cb).unwrap();
    same("add_", Ok(gm.clone()), Ok(cm.clone()), 2.0);
    same(
        "add_ left the source alone",
        Ok(ga.clone()),
        Ok(ca.clone()),
        0.0,
    );
    gm.mul_scalar_(s).unwrap();
    cm.mul_scalar_(s).unwrap();
    same("mul_scalar_", Ok(gm), Ok(cm), 2.0);
}

#[test]
fn elementwise_ops_match_the_cpu() {
    if has_gpu() {
        elementwise_ops_match_the_cpu_on::<Cuda>();
    }
}

fn elementwise_ops_match_the_cpu_on<G: Device>() {
    elementwise::<G, f32>();
    elementwise::<G, f64>();
    elementwise::<G, f16>();
    elementwise::<G, bf16>();
    elementwise::<G, i32>();
    elementwise::<G, i64>();
}

#[test]
fn integer_division_by_zero_is_an_error_on_the_gpu_too() {
    if !has_gpu() {
        return;
    }
    let a = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![4, 5, 6])
        .unwrap()
        .to_device::<Cuda>()
        .unwrap();
    let b = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![1, 0, 2])
        .unwrap()
        .to_device::<Cuda>()
        .unwrap();
    for r in [
        a.div(&b).map(|_| ()),
        a.div_scalar(0).map(|_| ()),
        b.rdiv_scalar(3).map(|_| ()),
    ] {
        match r {
            Err(Error::Arithmetic { message, .. }) => assert!(message.contains("division by zero")),
            other => panic!("expected Err(Arithmetic), got {other:?}"),
        }
    }
    assert_eq!(b.div(&a).unwrap().to_vec().unwrap(), vec![0, 0, 0]);
}

fn casts_from<G: Device, T: DType>() {
    let (c, g) = pair::<G, T, D2>(&[17, 9], -100.0, 100.0);
    let (c, g) = (c.t().unwrap(), g.t().unwrap());
    same("cast f32", g.cast::<f32>(), c.cast::<f32>(), 1.0);
    same("cast f64", g.cast::<f64>(), c.cast::<f64>(), 1.0);
    same("cast f16", g.cast::<f16>(), c.cast::<f16>(), 1.0);
    same("cast bf16", g.cast::<bf16>(), c.cast::<bf16>(), 1.0);
    same("cast i32", g.cast::<i32>(), c.cast::<i32>(), 0.0);
    same("cast i64", g.cast::<i64>(), c.cast::<i64>(), 0.0);
    same("cast bool", g.cast::<bool>(), c.cast::<bool>(), 0.0);
    let (c, g) = pair::<G, T, D2>(&[17, 9], 0.0, 120.0);
    same("cast u8", g.cast::<u8>(), c.cast::<u8>(), 0.0);
}

#[test]
fn casts_match_the_cpu() {
    if has_gpu() {
        casts_match_the_cpu_on::<Cuda>();
    }
}

fn casts_match_the_cpu_on<G: Device>() {
    casts_from::<G, f32>();
    casts_from::<G, f64>();
    casts_from::<G, f16>();
    casts_from::<G, bf16>();
    casts_from::<G, i32>();
    casts_from::<G, i64>();
    casts_from::<G, u8>();
}

fn reductions<G: Device, T: NumDType>(lo: f64, hi: f64) {
    let (c, g) = pair::<G, T, D3>(&[7, 130, 9], lo, hi);
    let k = 4.0 * 130.0;
    // A permuted view, so some reductions run over a non-contiguous dim.
    let (cp, gp) = (
        c.permute::<D3>(&[2, 0, 1]).unwrap(),
        g.permute::<D3>(&[2, 0, 1]).unwrap(),
    );
    for (what, c, g) in [("contiguous", &c, &g), ("permuted", &cp, &gp)] {
        same(&format!("sum 0 {what}"), g.sum::<0>(), c.sum::<0>(), k);
        same(&format!("sum 1 {what}"), g.sum::<1>(), c.sum::<1>(), k);
        same(&format!("sum 2 {what}"), g.sum::<2>(), c.sum::<2>(), k);
        same(&format!("max 1 {what}"), g.max::<1>(), c.max::<1>(), 0.0);
        same(&format!("min 2 {what}"), g.min::<2>(), c.min::<2>(), 0.0);
        same(
            &format!("argmax 1 {what}"),
            g.argmax::<1>(),
            c.argmax::<1>(),
            0.0,
        );
        same(
            &format!("argmin 0 {what}"),
            g.argmin::<0>(),
            c.argmin::<0>(),
            0.0,
        );
    }
    if T::KIND.name() != "u8" {
        // (u8 sums of this many elements overflow.)
        same("sum_all", g.sum_all(), c.sum_all(), k * 70.0);
    }
    same("max_all", g.max_all(), c.max_all(), 0.0);
    let (ce, ge) = pair::<G, T, D2>(&[3, 0], lo, hi);
    same("sum over an empty dim", ge.sum::<1>(), ce.sum::<1>(), 0.0);
    assert!(ge.max::<1>().is_err() && ce.max::<1>().is_err());
}

fn float_reductions<G: Device, T: FloatDType>() {
    reductions::<G, T>(-2.0, 2.0);
    let (c, g) = pair::<G, T, D3>(&[7, 130, 9], -8.0, 8.0);
    same("mean 1", g.mean::<1>(), c.mean::<1>(), 8.0);
    same("mean_all", g.mean_all(), c.mean_all(), 64.0);
    for (what, gs, cs) in [
        ("softmax 2", g.softmax::<2>(), c.softmax::<2>()),
        ("softmax 1", g.softmax::<1>(), c.softmax::<1>()),
        ("softmax 0", g.softmax::<0>(), c.softmax::<0>()),
        ("log_softmax 2", g.log_softmax::<2>(), c.log_softmax::<2>()),
        ("log_softmax 1", g.log_softmax::<1>(), c.log_softmax::<1>()),
    ] {
        same(what, gs, cs, 16.0);
    }
    let t = |x: &Tensor<G, T, D3>| x.permute::<D3>(&[1, 2, 0]).unwrap();
    let tc = |x: &Tensor<Cpu, T, D3>| x.permute::<D3>(&[1, 2, 0]).unwrap();
    same(
        "softmax of a permuted view",
        t(&g).softmax::<1>(),
        tc(&c).softmax::<1>(),
        16.0,
    );
}

#[test]
fn reductions_and_softmax_match_the_cpu() {
    if has_gpu() {
        reductions_and_softmax_match_the_cpu_on::<Cuda>();
    }
}

fn reductions_and_softmax_match_the_cpu_on<G: Device>() {
    float_reductions::<G, f32>();
    float_reductions::<G, f64>();
    float_reductions::<G, f16>();
    float_reductions::<G, bf16>();
    reductions::<G, i32>(-1000.0, 1000.0);
    reductions::<G, i64>(-1000.0, 1000.0);
    reductions::<G, u8>(0.0, 1.9);
}

fn products<G: Device, T: FloatDType>() {
    // Errors grow with k; compare against the CPU with k * eps slack.
    let k = 64.0;
    let (ca, ga) = pair::<G, T, D2>(&[37, 129], -1.0, 1.0);
    let (cb, gb) = pair::<G, T, D2>(&[129, 65], -1.0, 1.0);
    same("matmul", ga.matmul(&gb), ca.matmul(&cb), k);
    let (cbt, gbt) = pair::<G, T, D2>(&[65, 129], -1.0, 1.0);
    same(
        "matmul by a transpose",
        ga.matmul(&gbt.t().unwrap()),
        ca.matmul(&cbt.t().unwrap()),
        k,
    );
    let (cat, gat) = pair::<G, T, D2>(&[129, 37], -1.0, 1.0);
    same(
        "transpose times transpose",
        gat.t().unwrap().matmul(&gbt.t().unwrap()),
        cat.t().unwrap().matmul(&cbt.t().unwrap()),
        k,
    );
    // Batched, and a batch against one matrix.
    let (c3, g3) = pair::<G, T, D3>(&[4, 37, 129], -1.0, 1.0);
    let (c3b, g3b) = pair::<G, T, D3>(&[4, 129, 65], -1.0, 1.0);
    same("bmm", g3.bmm(&g3b), c3.bmm(&c3b), k);
    same("batch times matrix", g3.matmul(&gb), c3.matmul(&cb), k);
    let g3p = g3.permute::<D3>(&[0, 2, 1]).unwrap();
    let c3p = c3.permute::<D3>(&[0, 2, 1]).unwrap();
    let (cq, gq) = pair::<G, T, D2>(&[37, 11], -1.0, 1.0);
    same(
        "permuted batch times matrix",
        g3p.matmul(&gq),
        c3p.matmul(&cq),
        k,
    );
    // Attention-shaped 4-D products, batch dims broadcast (a `1` and a
    // missing dim), and a transposed key.
    type D4 = shape![_, _, _, _];
    let (cq4, gq4) = pair::<G, T, D4>(&[2, 3, 17, 40], -1.0, 1.0);
    let (ck4, gk4) = pair::<G, T, D4>(&[2, 3, 17, 40], -1.0, 1.0);
    same(
        "q @ k^T, 4-D",
        gq4.matmul(&gk4.transpose::<D4>(2, 3).unwrap()),
        cq4.matmul(&ck4.transpose::<D4>(2, 3).unwrap()),
        k,
    );
    let (cw1, gw1) = pair::<G, T, D4>(&[1, 3, 40, 9], -1.0, 1.0);
    same(
        "4-D times a batch-1 4-D",
        gq4.matmul_broadcast::<D4>(&gw1),
        cq4.matmul_broadcast::<D4>(&cw1),
        k,
    );
    let (cw3, gw3) = pair::<G, T, D3>(&[3, 40, 9], -1.0, 1.0);
    same(
        "4-D times 3-D",
        gq4.matmul_broadcast::<D4>(&gw3),
        cq4.matmul_broadcast::<D4>(&cw3),
        k,
    );
    // Swapped batch dims cannot be walked with one stride: copied first.
    let gp = gq4.permute::<D4>(&[1, 0, 2, 3]).unwrap();
    let cp = cq4.permute::<D4>(&[1, 0, 2, 3]).unwrap();
    let (cw2, gw2) = pair::<G, T, D3>(&[2, 40, 9], -1.0, 1.0);
    same(
        "permuted batch dims times 3-D",
        gp.matmul_broadcast::<D4>(&gw2),
        cp.matmul_broadcast::<D4>(&cw2),
        k,
    );
    // Vectors.
    let (cv, gv) = pair::<G, T, shape![_]>(&[129], -1.0, 1.0);
    same("matrix times vector", ga.matmul(&gv), ca.matmul(&cv), k);
    same("vector times matrix", gv.matmul(&gb), cv.matmul(&cb), k);
    same("dot", gv.dot(&gv), cv.dot(&cv), k);
    // addmm with each bias shape, and scaled.
    let (cn, gn) = pair::<G, T, shape![_]>(&[65], -1.0, 1.0);
    let (cmn, gmn) = pair::<G, T, D2>(&[37, 65], -1.0, 1.0);
    let (c0, g0) = pair::<G, T, shape![]>(&[], -1.0, 1.0);
    same(
        "addmm (N,) bias",
        Tensor::addmm(&gn, &ga, &gb),
        Tensor::addmm(&cn, &ca, &cb),
        k,
    );
    same(
        "addmm (M, N) bias",
        Tensor::addmm(&gmn, &ga, &gb),
        Tensor::addmm(&cmn, &ca, &cb),
        k,
    );
    same(
        "addmm scalar bias",
        Tensor::addmm(&g0, &ga, &gb),
        Tensor::addmm(&c0, &ca, &cb),
        k,
    );
    let (beta, alpha) = (T::from_f64(0.5), T::from_f64(-2.0));
    same(
        "addmm_scaled",
        Tensor::addmm_scaled(&gn, &ga, &gb, beta, alpha),
        Tensor::addmm_scaled(&cn, &ca, &cb, beta, alpha),
        k,
    );
    same(
        "addmm with a transposed weight",
        Tensor::addmm(&gn, &ga, &gbt.t().unwrap()),
        Tensor::addmm(&cn, &ca, &cbt.t().unwrap()),
        k,
    );
    // A full bias as cuBLASLt's C: a (1, N) row, a view with a wider
    // leading dimension, transposed operands, a scaled product; and a
    // transposed bias, which is copied first.
    let (c1n, g1n) = pair::<G, T, D2>(&[1, 65], -1.0, 1.0);
    same(
        "addmm (1, N) bias",
        Tensor::addmm(&g1n, &ga, &gb),
        Tensor::addmm(&c1n, &ca, &cb),
        k,
    );
    let (cv1, gv1) = pair::<G, T, D2>(&[1, 129], -1.0, 1.0);
    same(
        "addmm of one row with a (1, N) bias",
        Tensor::addmm(&g1n, &gv1, &gb),
        Tensor::addmm(&c1n, &cv1, &cb),
        k,
    );
    let (cwide, gwide) = pair::<G, T, D2>(&[37, 70], -1.0, 1.0);
    same(
        "addmm (M, N) bias narrowed from a wider matrix",
        Tensor::addmm(&gwide.narrow::<1, D2>(3, 65).unwrap(), &ga, &gb),
        Tensor::addmm(&cwide.narrow::<1, D2>(3, 65).unwrap(), &ca, &cb),
        k,
    );
    same(
        "addmm (M, N) bias, transposed operands",
        Tensor::addmm(&gmn, &gat.t().unwrap(), &gbt.t().unwrap()),
        Tensor::addmm(&cmn, &cat.t().unwrap(), &cbt.t().unwrap()),
        k,
    );
    same(
        "addmm_scaled (M, N) bias",
        Tensor::addmm_scaled(&gmn, &ga, &gb, beta, alpha),
        Tensor::addmm_scaled(&cmn, &ca, &cb, beta, alpha),
        k,
    );
    let (cnm, gnm) = pair::<G, T, D2>(&[65, 37], -1.0, 1.0);
    same(
        "addmm transposed (M, N) bias",
        Tensor::addmm(&gnm.t().unwrap(), &ga, &gb),
        Tensor::addmm(&cnm.t().unwrap(), &ca, &cb),
        k,
    );
    same(
        "addmm_scaled scalar bias",
        Tensor::addmm_scaled(&g0, &ga, &gb, beta, alpha),
        Tensor::addmm_scaled(&c0, &ca, &cb, beta, alpha),
        k,
    );
    // The fused linear layer (cuBLASLt epilogue for a (N,) bias).
    let relu = |r: Result<Tensor<Cpu, T, D2>, Error>| r.and_then(|t| t.relu());
    same(
        "addmm_relu (N,) bias",
        Tensor::addmm_relu(&gn, &ga, &gb),
        relu(Tensor::addmm(&cn, &ca, &cb)),
        k,
    );
    same(
        "addmm_relu (M, N) bias",
        Tensor::addmm_relu(&gmn, &ga, &gb),
        relu(Tensor::addmm(&cmn, &ca, &cb)),
        k,
    );
    same(
        "addmm_relu transposed weight",
        Tensor::addmm_relu(&gn, &ga, &gbt.t().unwrap()),
        relu(Tensor::addmm(&cn, &ca, &cbt.t().unwrap())),
        k,
    );
    // Empty inner dim: the bias alone.
    let (cz, gz) = pair::<G, T, D2>(&[37, 0], -1.0, 1.0);
    let (czb, gzb) = pair::<G, T, D2>(&[0, 65], -1.0, 1.0);
    same(
        "addmm with k = 0",
        Tensor::addmm(&gn, &gz, &gzb),
        Tensor::addmm(&cn, &cz, &czb),
        1.0,
    );
}

#[test]
fn matrix_products_match_the_cpu() {
    if has_gpu() {
        matrix_products_match_the_cpu_on::<Cuda>();
    }
}

fn matrix_products_match_the_cpu_on<G: Device>() {
    products::<G, f32>();
    products::<G, f64>();
    products::<G, f16>();
    products::<G, bf16>();
}

/// `cat` of contiguous inputs (one row-block kernel per eight inputs),
/// offset views, widths for every copy unit, and a strided input.
fn cats<G: Device, T: DType>() {
    for widths in [
        vec![2048, 2048],
        vec![3, 5, 7],
        vec![4, 0, 12, 1],
        (1..=11).collect::<Vec<usize>>(),
    ] {
        let parts: Vec<_> = widths
            .iter()
            .map(|&w| pair::<G, T, D2>(&[19, w], 0.0, 100.0))
            .collect();
        let c: Vec<&Tensor<Cpu, T, D2>> = parts.iter().map(|p| &p.0).collect();
        let g: Vec<&Tensor<G, T, D2>> = parts.iter().map(|p| &p.1).collect();
        same(
            &format!("cat of widths {widths:?} along 1"),
            Tensor::cat_slice::<1, D2>(&g),
            Tensor::cat_slice::<1, D2>(&c),
            0.0,
        );
        let ct: Vec<Tensor<Cpu, T, D2>> = c.iter().map(|x| x.t().unwrap()).collect();
        let gt: Vec<Tensor<G, T, D2>> = g.iter().map(|x| x.t().unwrap()).collect();
        same(
            &format!("cat of transposed widths {widths:?} along 0"),
            Tensor::cat_slice::<0, D2>(&gt.iter().collect::<Vec<_>>()),
            Tensor::cat_slice::<0, D2>(&ct.iter().collect::<Vec<_>>()),
            0.0,
        );
    }
    // Offset views (rows 1.. of a matrix are contiguous but start late).
    let (ca, ga) = pair::<G, T, D2>(&[20, 9], 0.0, 100.0);
    let (cb, gb) = pair::<G, T, D2>(&[19, 4], 0.0, 100.0);
    same(
        "cat of an offset view",
        ga.narrow::<0, D2>(1, 19).unwrap().cat::<1, D2>(&gb),
        ca.narrow::<0, D2>(1, 19).unwrap().cat::<1, D2>(&cb),
        0.0,
    );
    same(
        "cat along 0 of offset views",
        ga.narrow::<0, D2>(3, 5)
            .unwrap()
            .cat::<0, D2>(&ga.narrow::<0, D2>(1, 2).unwrap()),
        ca.narrow::<0, D2>(3, 5)
            .unwrap()
            .cat::<0, D2>(&ca.narrow::<0, D2>(1, 2).unwrap()),
        0.0,
    );
}

#[test]
fn cat_matches_the_cpu() {
    if has_gpu() {
        cat_matches_the_cpu_on::<Cuda>();
    }
}

fn cat_matches_the_cpu_on<G: Device>() {
    cats::<G, f32>();
    cats::<G, f64>();
    cats::<G, f16>();
    cats::<G, bf16>();
    cats::<G, i64>();
    cats::<G, u8>();
}

#[test]
fn views_and_copies_match_the_cpu() {
    if has_gpu() {
        views_and_copies_match_the_cpu_on::<Cuda>();
    }
}

fn views_and_copies_match_the_cpu_on<G: Device>() {
    let (c, g) = pair::<G, f32, D3>(&[5, 6, 7], -10.0, 10.0);
    same(
        "contiguous of a permute",
        g.permute::<D3>(&[2, 0, 1]).and_then(|x| x.contiguous()),
        c.permute::<D3>(&[2, 0, 1]).and_then(|x| x.contiguous()),
        0.0,
    );
    same(
        "narrow",
        g.narrow::<1, D3>(2, 3).and_then(|x| x.contiguous()),
        c.narrow::<1, D3>(2, 3).and_then(|x| x.contiguous()),
        0.0,
    );
    same("index", g.index::<2>(4), c.index::<2>(4), 0.0);
    same(
        "reshape of a transpose",
        g.transpose::<D3>(0, 2)
            .and_then(|x| x.reshape_dims::<D2>(&[35, 6])),
        c.transpose::<D3>(0, 2)
            .and_then(|x| x.reshape_dims::<D2>(&[35, 6])),
        0.0,
    );
    let (c2, g2) = pair::<G, f32, D3>(&[5, 2, 7], -10.0, 10.0);
    same("cat along 1", g.cat::<1, D3>(&g2), c.cat::<1, D3>(&c2), 0.0);
    same(
        "cat of views",
        g.narrow::<2, D3>(1, 4)
            .unwrap()
            .cat::<0, D3>(&g.narrow::<2, D3>(3, 4).unwrap()),
        c.narrow::<2, D3>(1, 4)
            .unwrap()
            .cat::<0, D3>(&c.narrow::<2, D3>(3, 4).unwrap()),
        0.0,
    );
    // Moving a view to the host gathers it on the device first.
    let gv = g.permute::<D3>(&[1, 2, 0]).unwrap();
    let cv = c.permute::<D3>(&[1, 2, 0]).unwrap();
    assert_eq!(gv.to_vec().unwrap(), cv.to_vec().unwrap());
    assert_eq!(gv.to_cpu().unwrap().to_vec().unwrap(), cv.to_vec().unwrap());
    // copy_from into a strided destination.
    let (mut cd, mut gd) = (c.clone(), g.clone());
    let (cs, gs) = pair::<G, f32, D3>(&[5, 6, 7], -1.0, 1.0);
    gd.copy_from(&gs).unwrap();
    cd.copy_from(&cs).unwrap();
    same("copy_from", Ok(gd), Ok(cd), 0.0);
}

#[test]
fn bool_tensors_travel_as_bytes() {
    if has_gpu() {
        bool_tensors_travel_as_bytes_on::<Cuda>();
    }
}

fn bool_tensors_travel_as_bytes_on<G: Device>() {
    let (c, g) = pair::<G, f32, D2>(&[9, 11], -1.0, 1.0);
    let (cb, gb) = (c.cast::<bool>().unwrap(), g.cast::<bool>().unwrap());
    assert_eq!(gb.to_vec().unwrap(), cb.to_vec().unwrap());
    same("bool to f32", gb.cast::<f32>(), cb.cast::<f32>(), 0.0);
    same(
        "bool transposed to i64",
        gb.t().and_then(|x| x.cast::<i64>()),
        cb.t().and_then(|x| x.cast::<i64>()),
        0.0,
    );
}

/// Indices in `0..below` on both devices (`i64` or `i32`), with repeats.
fn index_pair<G: Device, I: DType, S: Shape>(
    dims: &[usize],
    below: usize,
) -> (Tensor<Cpu, I, S>, Tensor<G, I, S>) {
    let (u, _) = pair::<Cpu, f64, S>(dims, 0.0, below as f64);
    let ids: Vec<I> = u
        .to_vec()
        .unwrap()
        .iter()
        .map(|&v| I::from_f64((v.floor()).min(below as f64 - 1.0)))
        .collect();
    let c = Tensor::<Cpu, I, S>::from_vec_dims(ids, dims).unwrap();
    let g = c.to_device::<G>().unwrap();
    (c, g)
}

/// `index_add` and `scatter_add`: the GPU's atomic adds sum repeats in
/// another order than the CPU, so f32 and f64 agree within a few
/// roundings per repeat; f16 and bf16 accumulate in f32 on both and round
/// once, so they agree within a rounding.
fn scatters<G: Device, T: FloatDType>() {
    let k = if T::KIND.size_bytes() == 2 { 1.0 } else { 64.0 };
    // An embedding's gradient: 1000 ids into 37 rows of 70.
    let (v, c, n) = (37, 70, 1000);
    let (cx, gx) = pair::<G, T, D2>(&[v, c], -1.0, 1.0);
    let (cs, gs) = pair::<G, T, D2>(&[n, c], -1.0, 1.0);
    let (ci, gi) = index_pair::<G, i64, shape![_]>(&[n], v);
    same(
        "index_add along dim 0",
        gx.index_add::<0>(&gi, &gs, 1.0),
        cx.index_add::<0>(&ci, &cs, 1.0),
        k,
    );
    let zc = Tensor::<Cpu, T, D2>::zeros_dims(&[v, c]).unwrap();
    let zg = zc.to_device::<G>().unwrap();
    same(
        "index_add into zeros",
        zg.index_add::<0>(&gi, &gs, 1.0),
        zc.index_add::<0>(&ci, &cs, 1.0),
        k,
    );
    // Along dim 1 by i32 indices, a transposed (strided) source, alpha.
    let (ci, gi) = index_pair::<G, i32, shape![_]>(&[90], c);
    let (cst, gst) = pair::<G, T, D2>(&[90, v], -2.0, 2.0);
    same(
        "index_add along dim 1 of a transposed source",
        gx.index_add::<1>(&gi, &gst.t().unwrap(), -0.5),
        cx.index_add::<1>(&ci, &cst.t().unwrap(), -0.5),
        k,
    );
    // scatter_add along each dim, an index smaller than `src`.
    let (ci, gi) = index_pair::<G, i64, D2>(&[300, 50], v);
    same(
        "scatter_add along dim 0",
        gx.scatter_add::<0>(&gi, &gs),
        cx.scatter_add::<0>(&ci, &cs),
        k,
    );
    let (ci, gi) = index_pair::<G, i32, D2>(&[20, 200], c);
    same(
        "scatter_add along dim 1",
        gx.scatter_add::<1>(&gi, &gs.t().unwrap()),
        cx.scatter_add::<1>(&ci, &cs.t().unwrap()),
        k,
    );
    // No indices: a copy.
    let (ci, gi) = index_pair::<G, i64, shape![_]>(&[0], v);
    let (ce, ge) = pair::<G, T, D2>(&[0, c], -1.0, 1.0);
    same(
        "index_add of nothing",
        gx.index_add::<0>(&gi, &ge, 1.0),
        cx.index_add::<0>(&ci, &ce, 1.0),
        0.0,
    );
    // An index out of range is an Err naming it, never an access.
    let bad = Tensor::<Cpu, i64, shape![_]>::from_vec_dims(vec![0, v as i64, 1], &[3])
        .unwrap()
        .to_device::<G>()
        .unwrap();
    let (_, g3) = pair::<G, T, D2>(&[3, c], -1.0, 1.0);
    let e = gx.index_add::<0>(&bad, &g3, 1.0).unwrap_err().to_string();
    assert!(
        e.contains(&format!("index {v} in `index` is out of range")),
        "{e}"
    );
    let neg = Tensor::<Cpu, i32, D2>::from_vec_dims(vec![-1], &[1, 1])
        .unwrap()
        .to_device::<G>()
        .unwrap();
    let e = gx.scatter_add::<1>(&neg, &g3).unwrap_err().to_string();
    assert!(e.contains("index -1 in `index`"), "{e}");
}

#[test]
fn index_add_and_scatter_add_match_the_cpu() {
    if has_gpu() {
        index_add_and_scatter_add_match_the_cpu_on::<Cuda>();
    }
}

fn index_add_and_scatter_add_match_the_cpu_on<G: Device>() {
    scatters::<G, f32>();
    scatters::<G, f64>();
    scatters::<G, f16>();
    scatters::<G, bf16>();
}

/// The comparisons above, run with the CPU standing in for the GPU: checks
/// the tests' own logic on machines without one (every difference is 0).
#[test]
fn test_logic_holds_with_the_cpu_as_the_device() {
    elementwise_ops_match_the_cpu_on::<Cpu>();
    casts_match_the_cpu_on::<Cpu>();
    reductions_and_softmax_match_the_cpu_on::<Cpu>();
    matrix_products_match_the_cpu_on::<Cpu>();
    views_and_copies_match_the_cpu_on::<Cpu>();
    cat_matches_the_cpu_on::<Cpu>();
    index_add_and_scatter_add_match_the_cpu_on::<Cpu>();
    bool_tensors_travel_as_bytes_on::<Cpu>();
}
