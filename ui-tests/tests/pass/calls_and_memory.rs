//! Calls between tensor functions (generics inferred, tuples, run-time dims
//! from static callers), a call to a function outside the invocation, and
//! the static memory plan.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn normalize(x: &Tensor<Cpu, f32, [R, C]>) -> Tensor<Cpu, f32, [R, C]> {
        x / x.sum(1).reshape([R, 1])
    }
}

/// A plain Rust function, called from a `tensor_fn!` below.
fn normalize_2x4(x: &Tensor<Cpu, f32, shape![2, 4]>) -> Result<Tensor<Cpu, f32, shape![_, _]>> {
    normalize(&x.clone().into_shape()?)
}

tensor_fn! {
    pub fn layer<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, w: &Tensor<Cpu, f32, [8, 4]>) -> (Tensor<Cpu, f32, [B, 4]>, Tensor<Cpu, i64, [B]>) {
        let h = exp(matmul(x, w));
        (h, h.argmax(1))
    }

    pub fn model(x: &Tensor<Cpu, f32, [2, 8]>, w: &Tensor<Cpu, f32, [8, 4]>) -> (Tensor<Cpu, f32, [2, 4]>, Tensor<Cpu, i64, [2]>) {
        let (h, best) = layer(x, w);
        let p: Tensor<Cpu, f32, [2, 4]> = normalize_2x4(h);
        (p, best)
    }

    pub fn twice(x: &Tensor<Cpu, f32, [16]>) -> Tensor<Cpu, f32, [16]> {
        let a = x * 2.0;
        let b = a.reshape([4, 4]).t();
        exp(b).reshape([16])
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 8]>::randn(61)?;
    let w = Tensor::<Cpu, f32, shape![8, 4]>::randn(62)?;
    let (p, best) = model(&x, &w)?;
    let z: Vec<f64> = matmul_ref(&f64s(&x), &f64s(&w), 2, 8, 4)
        .iter()
        .map(|v| v.exp())
        .collect();
    let mut want = vec![0.0; 8];
    let mut arg = vec![0i64; 2];
    for i in 0..2 {
        let row = &z[i * 4..i * 4 + 4];
        let s: f64 = row.iter().sum();
        for j in 0..4 {
            want[i * 4 + j] = row[j] / s;
        }
        arg[i] = (0..4)
            .max_by(|&a, &b| row[a].partial_cmp(&row[b]).unwrap())
            .unwrap() as i64;
    }
    assert_close("model", &f64s(&p), &want, 1e-5);
    assert_eq!(best.to_vec()?, arg);

    let v = Tensor::<Cpu, f32, shape![16]>::randn(63)?;
    let vv = f64s(&v);
    let want: Vec<f64> = (0..16)
        .map(|k| (2.0 * vv[(k % 4) * 4 + k / 4]).exp())
        .collect();
    assert_close("twice", &f64s(&twice(&v)?), &want, 1e-5);

    // a = x * 2 (64 bytes) is reshaped and transposed as views; exp writes
    // a new buffer (64) while `a` is still read; the final reshape of that
    // contiguous buffer is a view.
    assert_eq!(twice::PEAK_BYTES, 128);
    const _: () = assert!(layer::peak_bytes::<32>() > 0);
    Ok(())
}
