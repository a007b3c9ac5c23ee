//! `tensor_fn!` functions taking `#[derive(Params)]` structs: fields used
//! in the body (`p.w1`), generic structs instantiated in the parameter
//! type, nested structs, array and `Vec` fields indexed with literals, and
//! structs of another module reached by path, each against an `f64`
//! reference on fresh random inputs.

use tensorfn::prelude::*;
use tensorfn::Shape;

#[derive(Params)]
pub struct Mlp {
    pub w1: Tensor<Cpu, f32, shape![784, 128]>,
    pub b1: Tensor<Cpu, f32, shape![128]>,
    pub w2: Tensor<Cpu, f32, shape![128, 10]>,
    pub b2: Tensor<Cpu, f32, shape![10]>,
}

tensor_fn! {
    pub fn mlp<const B: usize>(x: &Tensor<Cpu, f32, [B, 784]>, p: &Mlp) -> Tensor<Cpu, f32, [B, 10]> {
        addmm(p.b2, relu(addmm(p.b1, x, p.w1)), p.w2).softmax(1)
    }
}

#[derive(Params)]
pub struct GenericMlp<D: Device, T: Float> {
    pub w1: Tensor<D, T, shape![784, 128]>,
    pub b1: Tensor<D, T, shape![128]>,
    pub w2: Tensor<D, T, shape![128, 10]>,
    pub b2: Tensor<D, T, shape![10]>,
}

tensor_fn! {
    pub fn generic_mlp<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 784]>,
        p: &GenericMlp<Cpu, f32>,
    ) -> Tensor<Cpu, f32, [B, 10]> {
        addmm(p.b2, relu(addmm(p.b1, x, p.w1)), p.w2).softmax(1)
    }
}

#[derive(Params)]
struct Linear<D: Device, T: Float> {
    weight: Tensor<D, T, shape![8, 8]>,
    bias: Tensor<D, T, shape![8]>,
}

#[derive(Params)]
struct Block<D: Device, T: Float> {
    fc: Linear<D, T>,
    ln: [Tensor<D, T, shape![8]>; 2],
}

#[derive(Params)]
struct Net<D: Device, T: Float> {
    h: [Block<D, T>; 3],
    extra: Vec<Linear<D, T>>,
    head: Tensor<D, T, shape![8, 4]>,
}

tensor_fn! {
    fn net<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, p: &Net<Cpu, f32>) -> Tensor<Cpu, f32, [B, 4]> {
        let h0 = relu(addmm(p.h[0].fc.bias, x, p.h[0].fc.weight)) * p.h[0].ln[1];
        let h1 = relu(addmm(p.h[2].fc.bias, h0, p.h[2].fc.weight)) + p.h[2].ln[0];
        let h2 = addmm(p.extra[1].bias, h1, p.extra[1].weight);
        matmul(h2, p.head) + p.head[0]
    }
}

tensor_fn! {
    /// A linear layer taking its struct.
    fn g_linear<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 8]>,
        p: &Linear<D, T>,
    ) -> Tensor<D, T, [B, 8]> {
        addmm(p.bias, x, p.weight)
    }

    /// A block passing its `fc` on, and using a field of its own.
    fn g_block<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 8]>,
        p: &Block<D, T>,
    ) -> Tensor<D, T, [B, 8]> {
        relu(g_linear(x, p.fc)) * p.ln[1]
    }

    /// The whole struct passed on as it is.
    fn g_block_twice<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 8]>,
        p: &Block<D, T>,
    ) -> Tensor<D, T, [B, 8]> {
        g_block(g_block(x, p), p)
    }

    /// Array elements, a `Vec` element and a field of the net itself.
    fn g_net<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 8]>,
        p: &Net<D, T>,
    ) -> Tensor<D, T, [B, 4]> {
        let h = g_block(g_block_twice(x, p.h[0]), p.h[2]);
        matmul(g_linear(h, p.extra[1]), p.head)
    }
}

/// Structs of another module, reached by path; the nested struct is
/// found beside the outer one.
mod nn {
    use tensorfn::prelude::*;

    #[derive(Params)]
    pub struct Proj {
        pub w: Tensor<Cpu, f32, shape![8, 4]>,
    }

    #[derive(Params)]
    pub struct Head {
        pub proj: Proj,
        pub bias: Tensor<Cpu, f32, shape![4]>,
    }
}

tensor_fn! {
    fn head<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, p: &nn::Head) -> Tensor<Cpu, f32, [B, 4]> {
        addmm(p.bias, x, p.proj.w)
    }
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(11)
}

fn randn<D: Shape>(seed: u64, dims: &[usize]) -> Tensor<Cpu, f32, D> {
    Tensor::randn_dims(seed, dims).unwrap()
}

fn f64s<S: Shape>(t: &Tensor<Cpu, f32, S>) -> Vec<f64> {
    t.to_vec().unwrap().into_iter().map(f64::from).collect()
}

/// `bias + x @ w` for row-major `x: [b, k]`, `w: [k, n]`.
fn addmm_ref(bias: &[f64], x: &[f64], w: &[f64], b: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; b * n];
    for i in 0..b {
        for j in 0..n {
            let mut s = bias[j];
            for l in 0..k {
                s += x[i * k + l] * w[l * n + j];
            }
            out[i * n + j] = s;
        }
    }
    out
}

fn softmax_rows(x: &mut [f64], n: usize) {
    for row in x.chunks_mut(n) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        row.iter_mut().for_each(|v| *v = (*v - m).exp() / s);
    }
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

fn mlp_ref(x: &[f64], w1: &[f64], b1: &[f64], w2: &[f64], b2: &[f64], b: usize) -> Vec<f64> {
    let mut h = addmm_ref(b1, x, w1, b, 784, 128);
    h.iter_mut().for_each(|v| *v = v.max(0.0));
    let mut y = addmm_ref(b2, &h, w2, b, 128, 10);
    softmax_rows(&mut y, 10);
    y
}

#[test]
fn an_mlp_through_a_struct_parameter() {
    let s = seed();
    let p = Mlp {
        w1: randn(s, &[784, 128]),
        b1: randn(s + 1, &[128]),
        w2: randn(s + 2, &[128, 10]),
        b2: randn(s + 3, &[10]),
    };
    let x: Tensor<Cpu, f32, shape![5, 784]> = randn(s + 4, &[5, 784]);
    let y = mlp(&x, &p).unwrap();
    let want = mlp_ref(
        &f64s(&x),
        &f64s(&p.w1),
        &f64s(&p.b1),
        &f64s(&p.w2),
        &f64s(&p.b2),
        5,
    );
    assert_close(
        &y.to_vec().unwrap(),
        &want,
        1e-4,
        &format!("mlp (seed {s})"),
    );

    // The same weights in the generic struct, instantiated as written.
    let g = GenericMlp::<Cpu, f32> {
        w1: p.w1.clone(),
        b1: p.b1.clone(),
        w2: p.w2.clone(),
        b2: p.b2.clone(),
    };
    let y2 = generic_mlp(&x, &g).unwrap();
    assert_eq!(y2.to_vec().unwrap(), y.to_vec().unwrap());
}

fn linear(seed: u64) -> Linear<Cpu, f32> {
    Linear {
        weight: randn(seed, &[8, 8]),
        bias: randn(seed + 1, &[8]),
    }
}

fn block(seed: u64) -> Block<Cpu, f32> {
    Block {
        fc: linear(seed),
        ln: [randn(seed + 2, &[8]), randn(seed + 3, &[8])],
    }
}

/// An input of `net`: 3 rows of 8.
type NetInput = Tensor<Cpu, f32, shape![3, 8]>;

/// Fresh random parameters of `Net` and an input for it.
fn net_and_input(s: u64) -> (Net<Cpu, f32>, NetInput) {
    let p = Net {
        h: [block(s), block(s + 10), block(s + 20)],
        extra: vec![linear(s + 30), linear(s + 40)],
        head: randn(s + 50, &[8, 4]),
    };
    (p, randn(s + 60, &[3, 8]))
}

#[test]
fn nested_structs_arrays_and_vecs() {
    let s = seed();
    let (p, x) = net_and_input(s);
    let y = net(&x, &p).unwrap();

    let lin =
        |l: &Linear<Cpu, f32>, x: &[f64]| addmm_ref(&f64s(&l.bias), x, &f64s(&l.weight), 3, 8, 8);
    let mut h0 = lin(&p.h[0].fc, &f64s(&x));
    let ln01 = f64s(&p.h[0].ln[1]);
    h0.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = v.max(0.0) * ln01[i % 8]);
    let mut h1 = lin(&p.h[2].fc, &h0);
    let ln20 = f64s(&p.h[2].ln[0]);
    h1.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = v.max(0.0) + ln20[i % 8]);
    let h2 = lin(&p.extra[1], &h1);
    let head = f64s(&p.head);
    // `matmul(h2, p.head) + p.head[0]`: row 0 of the head broadcast.
    let want = addmm_ref(&head[..4], &h2, &head, 3, 8, 4);
    assert_close(
        &y.to_vec().unwrap(),
        &want,
        1e-4,
        &format!("net (seed {s})"),
    );
}

#[test]
fn a_vec_index_past_the_end_is_an_err_naming_the_field() {
    let s = seed();
    let p = Net {
        h: [block(s), block(s + 10), block(s + 20)],
        extra: vec![linear(s + 30)],
        head: randn(s + 50, &[8, 4]),
    };
    let x: Tensor<Cpu, f32, shape![3, 8]> = randn(s + 60, &[3, 8]);
    let Err(e) = net(&x, &p) else {
        panic!("`extra` has one element: index 1 must be an Err");
    };
    let msg = e.to_string();
    assert!(msg.contains("`p.extra`"), "{msg}");
    assert!(msg.contains("index 1"), "{msg}");
    assert!(msg.contains("1 elements"), "{msg}");
}

#[test]
fn structs_of_another_module_by_path() {
    let s = seed();
    let p = nn::Head {
        proj: nn::Proj {
            w: randn(s, &[8, 4]),
        },
        bias: randn(s + 1, &[4]),
    };
    let x: Tensor<Cpu, f32, shape![2, 8]> = randn(s + 2, &[2, 8]);
    let y = head(&x, &p).unwrap();
    let want = addmm_ref(&f64s(&p.bias), &f64s(&x), &f64s(&p.proj.w), 2, 8, 4);
    assert_close(
        &y.to_vec().unwrap(),
        &want,
        1e-5,
        &format!("head (seed {s})"),
    );
}

/// `g_net` of the reference: every layer in `f64`.
fn g_net_ref(p: &Net<Cpu, f32>, x: &[f64]) -> Vec<f64> {
    let lin =
        |l: &Linear<Cpu, f32>, x: &[f64]| addmm_ref(&f64s(&l.bias), x, &f64s(&l.weight), 3, 8, 8);
    let block = |b: &Block<Cpu, f32>, x: &[f64]| {
        let ln = f64s(&b.ln[1]);
        let mut h = lin(&b.fc, x);
        h.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = v.max(0.0) * ln[i % 8]);
        h
    };
    let h = block(&p.h[0], x);
    let h = block(&p.h[0], &h);
    let h = block(&p.h[2], &h);
    let h = lin(&p.extra[1], &h);
    addmm_ref(&[0.0; 4], &h, &f64s(&p.head), 3, 8, 4)
}

#[test]
fn generic_functions_pass_structs_and_their_parts_on() {
    let s = seed();
    let (p, x) = net_and_input(s);
    let want = g_net_ref(&p, &f64s(&x));
    let y = g_net(&x, &p).unwrap();
    assert_close(
        &y.to_vec().unwrap(),
        &want,
        1e-4,
        &format!("g_net f32 (seed {s})"),
    );
    // The f64 body: the struct and the input cast, the same reference.
    let p64 = p.cast::<f64>().unwrap();
    let y = g_net(&x.cast::<f64>().unwrap(), &p64).unwrap();
    let got: Vec<f32> = y.to_vec().unwrap().into_iter().map(|v| v as f32).collect();
    assert_close(&got, &want, 1e-5, &format!("g_net f64 (seed {s})"));
    // A `Vec` element past the end is an Err naming the field.
    let short = Net {
        h: [block(s), block(s + 10), block(s + 20)],
        extra: vec![linear(s + 30)],
        head: randn(s + 50, &[8, 4]),
    };
    let Err(e) = g_net(&x, &short) else {
        panic!("`extra` has one element: index 1 must be an Err");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("`p.extra`") && msg.contains("index 1"),
        "{msg}"
    );
}
