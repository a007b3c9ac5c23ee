//! A stride above 1 over an image size known only at run time (or a const
//! generic): the output size `(H + 2p - d(k-1) - 1) / s + 1` rounds down
//! and is computed when the function is entered; an input too small for
//! the window is the convolution's `Err`, naming the operand and the dim.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    /// A ResNet-like stem (7×7 stride-2 convolution, 3×3 stride-2 max pool)
    /// and a classifier head, over any image size.
    pub fn stem(
        x: &Tensor<Cpu, f32, [B, 3, H, W]>,
        w: &Tensor<Cpu, f32, [4, 3, 7, 7]>,
        b: &Tensor<Cpu, f32, [4]>,
        fc: &Tensor<Cpu, f32, [4, 5]>,
        fc_b: &Tensor<Cpu, f32, [5]>,
    ) -> Tensor<Cpu, f32, [B, 5]> {
        let y = relu(conv2d(x, w, b, stride = 2, padding = 3));
        let y = max_pool2d(y, 3, stride = 2, padding = 1);
        addmm(fc_b, adaptive_avg_pool2d(y, 1).flatten(1), fc)
    }

    /// The same over const generic sizes, the pooled map kept: its size
    /// only adds to the sum.
    pub fn stem_generic<const H: usize, const W: usize>(
        x: &Tensor<Cpu, f32, [2, 3, H, W]>,
        w: &Tensor<Cpu, f32, [4, 3, 7, 7]>,
    ) -> Tensor<Cpu, f32, [2, 4]> {
        let y = max_pool2d(conv2d(x, w, stride = 2, padding = 3), 3, stride = 2, padding = 1);
        (y * y).flatten(2).sum(-1)
    }

    /// No padding: an image smaller than the window has no output.
    pub fn valid(
        x: &Tensor<Cpu, f32, [B, 3, H, W]>,
        w: &Tensor<Cpu, f32, [4, 3, 7, 7]>,
    ) -> Tensor<Cpu, f32, [B, 4]> {
        conv2d(x, w, stride = 2).flatten(2).sum(-1)
    }
}

/// `x` `[n, c, h, w]` convolved with `w` `[o, c, k, k]` (stride `s`,
/// padding `p`) in f64.
fn conv_ref(
    x: &[f64],
    dims: [usize; 4],
    w: &[f64],
    o: usize,
    k: usize,
    s: usize,
    p: usize,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wd] = dims;
    let (oh, ow) = ((h + 2 * p - k) / s + 1, (wd + 2 * p - k) / s + 1);
    let mut out = vec![0.0; n * o * oh * ow];
    for (i, v) in out.iter_mut().enumerate() {
        let (b, f, y, z) = (i / (o * oh * ow), i / (oh * ow) % o, i / ow % oh, i % ow);
        for ci in 0..c {
            for (dy, dz) in (0..k).flat_map(|dy| (0..k).map(move |dz| (dy, dz))) {
                let (iy, iz) = (
                    (y * s + dy) as isize - p as isize,
                    (z * s + dz) as isize - p as isize,
                );
                if (0..h as isize).contains(&iy) && (0..wd as isize).contains(&iz) {
                    let xi = ((b * c + ci) * h + iy as usize) * wd + iz as usize;
                    *v += x[xi] * w[((f * c + ci) * k + dy) * k + dz];
                }
            }
        }
    }
    (out, [n, o, oh, ow])
}

/// A 3×3 stride-2 max pool with padding 1 in f64.
fn pool_ref(x: &[f64], [n, c, h, w]: [usize; 4]) -> (Vec<f64>, [usize; 4]) {
    let (oh, ow) = ((h + 2 - 3) / 2 + 1, (w + 2 - 3) / 2 + 1);
    let out = (0..n * c * oh * ow)
        .map(|i| {
            let (nc, y, z) = (i / (oh * ow), i / ow % oh, i % ow);
            let rows = (2 * y).saturating_sub(1)..(2 * y + 2).min(h);
            rows.flat_map(|r| {
                ((2 * z).saturating_sub(1)..(2 * z + 2).min(w))
                    .map(move |q| x[(nc * h + r) * w + q])
            })
            .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    (out, [n, c, oh, ow])
}

#[test]
fn runs() -> Result<()> {
    let w = Tensor::<Cpu, f32, shape![4, 3, 7, 7]>::randn(51)?;
    let b = Tensor::<Cpu, f32, shape![4]>::randn(52)?;
    let fc = Tensor::<Cpu, f32, shape![4, 5]>::randn(53)?;
    let fc_b = Tensor::<Cpu, f32, shape![5]>::randn(54)?;
    let (wv, bv, fcv, fbv) = (f64s(&w), f64s(&b), f64s(&fc), f64s(&fc_b));
    // Odd and even sizes, one whose stride does not divide, the smallest
    // the 7×7 window fits with its padding (1).
    for (n, h, wd) in [(2, 13, 10), (1, 1, 1), (3, 8, 17)] {
        let x = Tensor::<Cpu, f32, shape![_, 3, _, _]>::randn_dims(55, &[n, 3, h, wd])?;
        let got = stem(&x, &w, &b, &fc, &fc_b)?;
        assert_eq!(got.shape(), &[n, 5]);
        let (mut y, d) = conv_ref(&f64s(&x), [n, 3, h, wd], &wv, 4, 7, 2, 3);
        let plane = d[2] * d[3];
        for (i, v) in y.iter_mut().enumerate() {
            *v = (*v + bv[i / plane % 4]).max(0.0);
        }
        let (y, d) = pool_ref(&y, d);
        let plane = d[2] * d[3];
        let mean: Vec<f64> = y
            .chunks(plane)
            .map(|c| c.iter().sum::<f64>() / plane as f64)
            .collect();
        let mut want = matmul_ref(&mean, &fcv, n, 4, 5);
        for (i, v) in want.iter_mut().enumerate() {
            *v += fbv[i % 5];
        }
        assert_close(&format!("stem {h}x{wd}"), &f64s(&got), &want, 1e-4);
    }

    let x = Tensor::<Cpu, f32, shape![2, 3, 9, 6]>::randn(56)?;
    let got = stem_generic(&x, &w)?;
    let (y, d) = conv_ref(&f64s(&x), [2, 3, 9, 6], &wv, 4, 7, 2, 3);
    let (y, d) = pool_ref(&y, d);
    assert_eq!(d, [2, 4, 3, 2]);
    let want: Vec<f64> = y.chunks(6).map(|c| c.iter().map(|v| v * v).sum()).collect();
    assert_close("stem_generic", &f64s(&got), &want, 1e-3);

    // 7 rows fit the window once; 6 do not.
    let x = Tensor::<Cpu, f32, shape![_, 3, _, _]>::randn_dims(57, &[1, 3, 7, 8])?;
    assert_eq!(valid(&x, &w)?.shape(), &[1, 4]);
    let x = Tensor::<Cpu, f32, shape![_, 3, _, _]>::randn_dims(58, &[1, 3, 6, 8])?;
    let e = valid(&x, &w).unwrap_err().to_string();
    assert!(
        e.contains("output height of `input` is (6 + 2·0 - 1·(7-1) - 1)/2 + 1 = 0"),
        "{e}"
    );
    Ok(())
}
