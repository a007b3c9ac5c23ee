//! Batched `matmul` over several leading dims inside `tensor_fn!`: the
//! attention scores `q @ k^T` of `[B, heads, T, d]` tensors, per-head
//! weights broadcast over the batch, a batch of 1 broadcast against B, and
//! `[1, 64, 1] @ [B, 1, T]` (an outer product per batch element, as rotary
//! embeddings build), each against an f64 reference.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    /// Scaled attention scores, softmax over the keys.
    pub fn scores<const B: usize, const T: usize>(
        q: &Tensor<Cpu, f64, [B, 4, T, 8]>,
        k: &Tensor<Cpu, f64, [B, 4, T, 8]>,
    ) -> Tensor<Cpu, f64, [B, 4, T, T]> {
        (matmul(q, k.transpose(2, 3)) * 0.25).softmax(3)
    }

    /// Per-head weights `[4, 8, 5]` shared by every batch element, and a
    /// batch-1 `[1, 4, 8, 5]` that broadcasts the same way.
    pub fn per_head<const B: usize>(
        x: &Tensor<Cpu, f64, [B, 4, 3, 8]>,
        w: &Tensor<Cpu, f64, [4, 8, 5]>,
        w1: &Tensor<Cpu, f64, [1, 4, 8, 5]>,
    ) -> (Tensor<Cpu, f64, [B, 4, 3, 5]>, Tensor<Cpu, f64, [B, 4, 3, 5]>) {
        (x.matmul(w), matmul(x, w1))
    }

    /// A batch of 1 against B with a size-1 inner dim: `[B, 64, T]`.
    pub fn outer<const B: usize, const T: usize>(
        freq: &Tensor<Cpu, f64, [1, 64, 1]>,
        pos: &Tensor<Cpu, f64, [B, 1, T]>,
    ) -> Tensor<Cpu, f64, [B, 64, T]> {
        matmul(freq, pos)
    }
}

#[test]
fn runs() -> Result<()> {
    let q = Tensor::<Cpu, f64, shape![2, 4, 3, 8]>::randn(5)?;
    let k = Tensor::<Cpu, f64, shape![2, 4, 3, 8]>::randn(6)?;
    let (qv, kv) = (f64s(&q), f64s(&k));
    let s = scores(&q, &k)?;
    let mut want = vec![];
    for bh in 0..8 {
        for i in 0..3 {
            let row: Vec<f64> = (0..3)
                .map(|j| {
                    (0..8)
                        .map(|p| qv[bh * 24 + i * 8 + p] * kv[bh * 24 + j * 8 + p])
                        .sum::<f64>()
                        * 0.25
                })
                .collect();
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = row.iter().map(|r| (r - max).exp()).sum();
            want.extend(row.iter().map(|r| (r - max).exp() / z));
        }
    }
    assert_close("softmax(q @ k^T)", &f64s(&s), &want, 1e-12);

    let w = Tensor::<Cpu, f64, shape![4, 8, 5]>::randn(7)?;
    let w1 = w.reshape::<shape![1, 4, 8, 5]>()?;
    let (a, b) = per_head(&q, &w, &w1)?;
    let wv = f64s(&w);
    let want: Vec<f64> = (0..8)
        .flat_map(|bh| matmul_ref(&qv[bh * 24..][..24], &wv[(bh % 4) * 40..][..40], 3, 8, 5))
        .collect();
    assert_close("x @ w, w per head", &f64s(&a), &want, 1e-12);
    assert_close("x @ w1, batch 1", &f64s(&b), &want, 1e-12);

    let freq = Tensor::<Cpu, f64, shape![1, 64, 1]>::randn(8)?;
    let pos = Tensor::<Cpu, f64, shape![2, 1, 3]>::randn(9)?;
    let (fv, pv) = (f64s(&freq), f64s(&pos));
    let want: Vec<f64> = (0..2 * 64 * 3)
        .map(|i| fv[i / 3 % 64] * pv[i / (64 * 3) * 3 + i % 3])
        .collect();
    assert_close(
        "[1, 64, 1] @ [B, 1, T]",
        &f64s(&outer(&freq, &pos)?),
        &want,
        0.0,
    );
    Ok(())
}
