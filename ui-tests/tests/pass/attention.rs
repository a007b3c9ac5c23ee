//! `scaled_dot_product_attention` inside `tensor_fn!`: causal self-attention
//! of `[B, heads, T, d]` tensors, a `bool` and a float mask, a key and value
//! shared by every head, grouped-query attention (`enable_gqa = true`) and
//! `scale =`, each against an f64 reference.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    /// Causal self-attention: query `i` sees keys `0..=i`.
    pub fn causal<const B: usize, const T: usize>(
        q: &Tensor<Cpu, f64, [B, 2, T, 8]>,
        k: &Tensor<Cpu, f64, [B, 2, T, 8]>,
        v: &Tensor<Cpu, f64, [B, 2, T, 4]>,
    ) -> Tensor<Cpu, f64, [B, 2, T, 4]> {
        scaled_dot_product_attention(q, k, v, is_causal = true)
    }

    /// A `bool` mask (true = takes part), broadcast over batch and heads,
    /// and a float mask added to the scores, with `scale`.
    pub fn masked<const B: usize, const L: usize, const S: usize>(
        q: &Tensor<Cpu, f64, [B, 2, L, 8]>,
        k: &Tensor<Cpu, f64, [B, 2, S, 8]>,
        v: &Tensor<Cpu, f64, [B, 2, S, 4]>,
        keep: &Tensor<Cpu, bool, [L, S]>,
        bias: &Tensor<Cpu, f64, [B, 1, L, S]>,
    ) -> (Tensor<Cpu, f64, [B, 2, L, 4]>, Tensor<Cpu, f64, [B, 2, L, 4]>) {
        let a = scaled_dot_product_attention(q, k, v, attn_mask = keep);
        let b = scaled_dot_product_attention(q, k, v, bias, scale = 0.125);
        (a, b)
    }

    /// Generic over device and float dtype, with a float mask of `T`.
    pub fn generic<D: Device, T: Float, const L: usize>(
        q: &Tensor<D, T, [2, L, 8]>,
        bias: &Tensor<D, T, [L, L]>,
    ) -> Tensor<D, T, [2, L, 8]> {
        scaled_dot_product_attention(q, q, q, attn_mask = bias)
    }

    /// One key and value for every head (their head dim of 1 broadcasts).
    pub fn shared_kv<const B: usize>(
        q: &Tensor<Cpu, f64, [B, 4, 3, 8]>,
        kv: &Tensor<Cpu, f64, [B, 1, 5, 8]>,
    ) -> Tensor<Cpu, f64, [B, 4, 3, 8]> {
        scaled_dot_product_attention(q, kv, kv * 2.0, attn_mask = None, is_causal = false)
    }

    /// Grouped-query attention: 6 query heads, 2 key and value heads, each
    /// serving 3 of them.
    pub fn grouped<const B: usize, const T: usize>(
        q: &Tensor<Cpu, f64, [B, 6, T, 8]>,
        k: &Tensor<Cpu, f64, [B, 2, T, 8]>,
        v: &Tensor<Cpu, f64, [B, 2, T, 4]>,
    ) -> Tensor<Cpu, f64, [B, 6, T, 4]> {
        scaled_dot_product_attention(q, k, v, is_causal = true, enable_gqa = true)
    }
}

/// Plain-loop attention of one `[L, E]` query block against `[S, E]`
/// keys and `[S, Ev]` values; `add(i, j)` is `None` for a left-out key.
fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (l, s, e, ev): (usize, usize, usize, usize),
    scale: f64,
    add: impl Fn(usize, usize) -> Option<f64>,
) -> Vec<f64> {
    let mut out = vec![0.0; l * ev];
    for i in 0..l {
        let sc: Vec<(usize, f64)> = (0..s)
            .filter_map(|j| {
                let a = add(i, j)?;
                Some((
                    j,
                    (0..e).map(|t| q[i * e + t] * k[j * e + t]).sum::<f64>() * scale + a,
                ))
            })
            .collect();
        let m = sc.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = sc.iter().map(|x| (x.1 - m).exp()).sum();
        for &(j, x) in &sc {
            for c in 0..ev {
                out[i * ev + c] += (x - m).exp() / z * v[j * ev + c];
            }
        }
    }
    out
}

#[test]
fn runs() -> Result<()> {
    let q = Tensor::<Cpu, f64, shape![2, 2, 6, 8]>::randn(1)?;
    let k = Tensor::<Cpu, f64, shape![2, 2, 6, 8]>::randn(2)?;
    let v = Tensor::<Cpu, f64, shape![2, 2, 6, 4]>::randn(3)?;
    let (qv, kv, vv) = (f64s(&q), f64s(&k), f64s(&v));
    let scale = 1.0 / 8f64.sqrt();
    let want: Vec<f64> = (0..4)
        .flat_map(|bh| {
            reference(
                &qv[bh * 48..][..48],
                &kv[bh * 48..][..48],
                &vv[bh * 24..][..24],
                (6, 6, 8, 4),
                scale,
                |i, j| (j <= i).then_some(0.0),
            )
        })
        .collect();
    assert_close("causal", &f64s(&causal(&q, &k, &v)?), &want, 1e-12);

    let k = Tensor::<Cpu, f64, shape![2, 2, 7, 8]>::randn(4)?;
    let v = Tensor::<Cpu, f64, shape![2, 2, 7, 4]>::randn(5)?;
    let keep_v: Vec<bool> = (0..42).map(|x| x % 3 != 1).collect();
    let keep = Tensor::<Cpu, bool, shape![6, 7]>::from_vec(keep_v.clone())?;
    let bias = Tensor::<Cpu, f64, shape![2, 1, 6, 7]>::randn(6)?;
    let (a, b) = masked(&q, &k, &v, &keep, &bias)?;
    let (kv, vv, bv) = (f64s(&k), f64s(&v), f64s(&bias));
    let (mut wa, mut wb) = (vec![], vec![]);
    for bh in 0..4 {
        let (qs, ks, vs) = (
            &qv[bh * 48..][..48],
            &kv[bh * 56..][..56],
            &vv[bh * 28..][..28],
        );
        wa.extend(reference(qs, ks, vs, (6, 7, 8, 4), scale, |i, j| {
            keep_v[i * 7 + j].then_some(0.0)
        }));
        let bb = &bv[(bh / 2) * 42..][..42];
        wb.extend(reference(qs, ks, vs, (6, 7, 8, 4), 0.125, |i, j| {
            Some(bb[i * 7 + j])
        }));
    }
    assert_close("bool mask", &f64s(&a), &wa, 1e-12);
    assert_close("float mask", &f64s(&b), &wb, 1e-12);

    let q = Tensor::<Cpu, f64, shape![2, 4, 3, 8]>::randn(7)?;
    let kv = Tensor::<Cpu, f64, shape![2, 1, 5, 8]>::randn(8)?;
    let (qv, kvv) = (f64s(&q), f64s(&kv));
    let want: Vec<f64> = (0..8)
        .flat_map(|bh| {
            let kb = &kvv[(bh / 4) * 40..][..40];
            let vb: Vec<f64> = kb.iter().map(|x| x * 2.0).collect();
            reference(
                &qv[bh * 24..][..24],
                kb,
                &vb,
                (3, 5, 8, 8),
                scale,
                |_, _| Some(0.0),
            )
        })
        .collect();
    assert_close(
        "shared key and value",
        &f64s(&shared_kv(&q, &kv)?),
        &want,
        1e-12,
    );

    let q = Tensor::<Cpu, f64, shape![2, 6, 5, 8]>::randn(11)?;
    let k = Tensor::<Cpu, f64, shape![2, 2, 5, 8]>::randn(12)?;
    let v = Tensor::<Cpu, f64, shape![2, 2, 5, 4]>::randn(13)?;
    let (qv, kv, vv) = (f64s(&q), f64s(&k), f64s(&v));
    let want: Vec<f64> = (0..12)
        .flat_map(|bh| {
            // batch bh / 6, query head bh % 6, key and value head (bh % 6) / 3
            let kh = (bh / 6) * 2 + (bh % 6) / 3;
            reference(
                &qv[bh * 40..][..40],
                &kv[kh * 40..][..40],
                &vv[kh * 20..][..20],
                (5, 5, 8, 4),
                scale,
                |i, j| (j <= i).then_some(0.0),
            )
        })
        .collect();
    assert_close("grouped-query", &f64s(&grouped(&q, &k, &v)?), &want, 1e-12);

    let q = Tensor::<Cpu, f32, shape![2, 3, 8]>::randn(9)?;
    let bias = Tensor::<Cpu, f32, shape![3, 3]>::randn(10)?;
    let (qv, bv) = (f64s(&q), f64s(&bias));
    let want: Vec<f64> = (0..2)
        .flat_map(|b| {
            let qs = &qv[b * 24..][..24];
            reference(qs, qs, qs, (3, 3, 8, 8), scale, |i, j| Some(bv[i * 3 + j]))
        })
        .collect();
    assert_close("generic, f32", &f64s(&generic(&q, &bias)?), &want, 1e-5);
    let (qh, bh) = (q.cast::<bf16>()?, bias.cast::<bf16>()?);
    assert_eq!(generic(&qh, &bh)?.shape(), &[2, 3, 8]);
    Ok(())
}
