//! `const` items as compile-time dims: SCREAMING_CASE names of two letters
//! or more (`SEQ_LEN`), single names marked `{M}`, and paths (`dims::HEADS`)
//! are the items in scope, `Const<..>` in the generated types, so tensors
//! typed with the same items pass without conversion and results keep
//! their static shapes; single letters (`B`) stay run-time dims.
use super::common::*;
use tensorfn::prelude::*;

const SEQ_LEN: usize = 4;
const D_MODEL: usize = 6;
const M: usize = 5;
const HEAD_DIM: usize = 3;

mod dims {
    pub const HEADS: usize = 2;
}

tensor_fn! {
    /// Static in both dims: the memory plan is a constant.
    pub fn scale(x: &Tensor<Cpu, f32, [SEQ_LEN, D_MODEL]>) -> Tensor<Cpu, f32, [SEQ_LEN, D_MODEL]> {
        let y: Tensor<Cpu, f32, [SEQ_LEN, D_MODEL]> = x * 2.0;
        y + 1.0
    }

    /// `scale` with literals, for its memory plan.
    fn scale_lit(x: &Tensor<Cpu, f32, [4, 6]>) -> Tensor<Cpu, f32, [4, 6]> {
        let y: Tensor<Cpu, f32, [4, 6]> = x * 2.0;
        y + 1.0
    }

    /// Heads split with a path, a run-time batch `B`. Items are opaque to
    /// the checker (it does not know `D_MODEL` is `HEADS * HEAD_DIM`), so
    /// the input says how its last dim is made.
    pub fn heads(
        x: &Tensor<Cpu, f32, [B, SEQ_LEN, dims::HEADS * HEAD_DIM]>,
    ) -> Tensor<Cpu, f32, [B, dims::HEADS, SEQ_LEN, HEAD_DIM]> {
        x.view([B, SEQ_LEN, dims::HEADS, HEAD_DIM]).transpose(1, 2)
    }

    /// A single-letter item, marked once, written plainly after.
    pub fn rows(x: &Tensor<Cpu, f32, [{M}, D_MODEL]>) -> Tensor<Cpu, f32, [M]> {
        scale_sum(x)
    }

    fn scale_sum(x: &Tensor<Cpu, f32, [{M}, D_MODEL]>) -> Tensor<Cpu, f32, [M]> {
        (x * 3.0).sum(1)
    }

    /// Items and const generics together.
    pub fn tile<const K: usize>(x: &Tensor<Cpu, f32, [K, D_MODEL]>) -> Tensor<Cpu, f32, [K, 4 * D_MODEL]> {
        cat([x, x, x, x], 1)
    }
}

#[test]
fn runs() -> Result<()> {
    // Typed with the same items: passed as they are, results static.
    let x = Tensor::<Cpu, f32, shape![SEQ_LEN, D_MODEL]>::randn(1)?;
    let y: Tensor<Cpu, f32, shape![SEQ_LEN, D_MODEL]> = scale(&x)?;
    let (xv, yv) = (x.to_vec()?, y.to_vec()?);
    for (a, b) in xv.iter().zip(&yv) {
        assert_eq!(*b, *a * 2.0 + 1.0);
    }
    // One fused kernel: only the f32 result lives, as with literals.
    assert_eq!(scale::PEAK_BYTES, SEQ_LEN * D_MODEL * 4);
    assert_eq!(scale::PEAK_BYTES, scale_lit::PEAK_BYTES);
    assert_eq!(scale_lit(&x)?.to_vec()?, yv);

    let x3 = Tensor::<Cpu, f32, shape![_, SEQ_LEN, _]>::from_vec_dims(
        (0..3 * SEQ_LEN * D_MODEL).map(|i| i as f32).collect(),
        &[3, SEQ_LEN, D_MODEL],
    )?;
    let h: Tensor<Cpu, f32, shape![_, { dims::HEADS }, SEQ_LEN, HEAD_DIM]> = heads(&x3)?;
    assert_eq!(h.dims(), [3, dims::HEADS, SEQ_LEN, HEAD_DIM]);
    let hv = h.to_vec()?;
    let xv = x3.to_vec()?;
    for b in 0..3 {
        for hh in 0..dims::HEADS {
            for t in 0..SEQ_LEN {
                for d in 0..HEAD_DIM {
                    let got = hv[((b * dims::HEADS + hh) * SEQ_LEN + t) * HEAD_DIM + d];
                    let want = xv[(b * SEQ_LEN + t) * D_MODEL + hh * HEAD_DIM + d];
                    assert_eq!(got, want);
                }
            }
        }
    }

    let xm = Tensor::<Cpu, f32, shape![M, D_MODEL]>::randn(2)?;
    let r: Tensor<Cpu, f32, shape![M]> = rows(&xm)?;
    let xv = f64s(&xm);
    let want: Vec<f64> = (0..M)
        .map(|i| {
            xv[i * D_MODEL..(i + 1) * D_MODEL]
                .iter()
                .map(|v| v * 3.0)
                .sum()
        })
        .collect();
    assert_close("rows", &f64s(&r), &want, 1e-5);

    // `4 * D_MODEL` is not a lone item: a run-time dim in the type.
    let t: Tensor<Cpu, f32, shape![2, _]> = tile::<2>(&Tensor::randn(3)?)?;
    assert_eq!(t.dims(), [2, SEQ_LEN * D_MODEL]);
    assert_eq!(tile::peak_bytes::<2>(), 2 * SEQ_LEN * D_MODEL * 4);
    Ok(())
}
