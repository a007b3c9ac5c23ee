//! Every `let`-bound tensor used twice, in every kind of op: fused
//! elementwise chains, `cat`, products, reductions, softmax, views,
//! selections, device moves and the result itself. The generated code
//! borrows bindings, so none of these may fail with "use of moved value".
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn twice(x: &Tensor<Cpu, f32, [2, 3]>, w: &Tensor<Cpu, f32, [3, 3]>) -> (Tensor<Cpu, f32, [4, 3]>, Tensor<Cpu, f32, [2, 3]>, Tensor<Cpu, f32, [2, 3]>, Tensor<Cpu, f32, [2, 3]>) {
        let y = x * 2.0;
        let joined = cat([y, y], 0);
        let p = matmul(y, w) + matmul(y, w);
        let s = y.softmax(1) + y.softmax(1);
        let m = y.sum(1).unsqueeze(1) + y.max(1).unsqueeze(1) + y;
        let v = y.transpose(0, 1).transpose(0, 1) * y.reshape([6]).reshape([2, 3]);
        let c = where_(y > 0.0, y, -y) + y.clamp(-1.0, 1.0) + y.masked_fill(y < 0.0, 0.0);
        (joined, p + s, m + v, c + m)
    }

    pub fn same_twice(x: &Tensor<Cpu, f64, [4]>) -> (Tensor<Cpu, f64, [4]>, Tensor<Cpu, f64, [4]>, Tensor<Cpu, f64, [8]>) {
        let y = exp(x) - 1.0;
        let z = cat([y, y], 0);
        (y, y, z)
    }

    pub fn gpu_twice(x: &Tensor<Cpu, f32, [2, 3]>) -> (Tensor<Cuda, f32, [2, 3]>, Tensor<Cuda, f32, [4, 3]>) {
        let g = x.to_device::<Cuda>();
        let h = g * g;
        (h + g, cat([h, h], 0))
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::randn(91)?;
    let w = Tensor::<Cpu, f32, shape![3, 3]>::randn(92)?;
    let xv = f64s(&x);
    let wv = f64s(&w);
    let y: Vec<f64> = xv.iter().map(|v| v * 2.0).collect();
    let (joined, ps, mv, c) = twice(&x, &w)?;

    let mut want = y.clone();
    want.extend(&y);
    assert_close("cat([y, y])", &f64s(&joined), &want, 0.0);

    let prod = matmul_ref(&y, &wv, 2, 3, 3);
    let mut soft = Vec::new();
    for r in y.chunks(3) {
        let mx = r.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = r.iter().map(|v| (v - mx).exp()).collect();
        let t: f64 = e.iter().sum();
        soft.extend(e.iter().map(|v| v / t));
    }
    let want: Vec<f64> = (0..6).map(|i| 2.0 * prod[i] + 2.0 * soft[i]).collect();
    assert_close("matmul + softmax", &f64s(&ps), &want, 1e-5);

    let m: Vec<f64> = (0..6)
        .map(|i| {
            let r = &y[i / 3 * 3..i / 3 * 3 + 3];
            r.iter().sum::<f64>() + r.iter().cloned().fold(f64::MIN, f64::max) + y[i]
        })
        .collect();
    let want: Vec<f64> = (0..6).map(|i| m[i] + y[i] * y[i]).collect();
    assert_close("reductions + views", &f64s(&mv), &want, 1e-5);

    let want: Vec<f64> = (0..6)
        .map(|i| {
            let v = y[i];
            v.abs() + v.clamp(-1.0, 1.0) + v.max(0.0) + m[i]
        })
        .collect();
    assert_close("selections", &f64s(&c), &want, 1e-5);

    let d = Tensor::<Cpu, f64, shape![4]>::from_vec(vec![0.0, -0.0, 1.0, -2.0])?;
    let (a, b, z) = same_twice(&d)?;
    let e: Vec<f64> = f64s(&d).iter().map(|v| v.exp() - 1.0).collect();
    assert_close("first", &f64s(&a), &e, 1e-15);
    assert_close("second", &f64s(&b), &e, 1e-15);
    let mut want = e.clone();
    want.extend(&e);
    assert_close("cat", &f64s(&z), &want, 1e-15);

    if on_gpu(&x).is_some() {
        let (s, j) = gpu_twice(&x)?;
        let want: Vec<f64> = xv.iter().map(|v| v * v + v).collect();
        assert_close("gpu h + g", &f64s(&s.to_cpu()?), &want, 1e-6);
        let h: Vec<f64> = xv.iter().map(|v| v * v).collect();
        let mut want = h.clone();
        want.extend(&h);
        assert_close("gpu cat", &f64s(&j.to_cpu()?), &want, 1e-6);
    }
    Ok(())
}
