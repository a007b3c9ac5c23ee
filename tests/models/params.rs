//! `#[derive(Params)]` on a GPT-2-shaped struct (nested structs, an array,
//! a `Vec` of blocks, a renamed field, integer and bool tensors): names,
//! round trips through safetensors in every dtype, conversions, and each
//! way a file can disagree with the types, each an `Err` naming the key.

use safetensors::{tensor::TensorView, Dtype};
use std::path::{Path, PathBuf};
use tensorfn::prelude::*;

#[derive(Params)]
struct Linear<D: Device, T: Float> {
    weight: Tensor<D, T, shape![4, 3]>,
    bias: Tensor<D, T, shape![4]>,
}

#[derive(Params)]
struct Block<D: Device, T: Float> {
    #[params(rename = "c_attn")]
    attn: Linear<D, T>,
    ln: [Tensor<D, T, shape![3]>; 2],
}

#[derive(Params)]
struct Model<D: Device, T: Float> {
    wte: Tensor<D, T, shape![_, 3]>,
    h: Vec<Block<D, T>>,
}

#[derive(Params)]
struct Extras<D: Device> {
    ids: Tensor<D, i64, shape![3]>,
    mask: Tensor<D, bool, shape![2, 2]>,
    count: Tensor<D, u8, shape![1]>,
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorfn_params_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn randn<S: tensorfn::Shape>(seed: u64, dims: &[usize]) -> Tensor<Cpu, f32, S> {
    Tensor::randn_dims(seed, dims).unwrap()
}

fn model(blocks: usize) -> Model<Cpu, f32> {
    Model {
        wte: randn(1, &[5, 3]),
        h: (0..blocks as u64)
            .map(|b| Block {
                attn: Linear {
                    weight: randn(10 + b, &[4, 3]),
                    bias: randn(20 + b, &[4]),
                },
                ln: [randn(30 + b, &[3]), randn(40 + b, &[3])],
            })
            .collect(),
    }
}

/// Every (name, dims, values as f64) of some parameters.
fn contents<P: Params>(p: &P) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let mut out = Vec::new();
    p.visit(&mut |name, t| {
        out.push((name.to_string(), t.dims(), t.to_le_bytes()?));
        Ok(())
    })
    .unwrap();
    out
}

/// A file of `(name, dtype, dims, bytes)` written directly.
fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

#[test]
fn names_follow_the_fields_with_dots_and_indices() {
    let m = model(2);
    let names: Vec<String> = contents(&m).into_iter().map(|c| c.0).collect();
    assert_eq!(
        names,
        [
            "wte",
            "h.0.c_attn.weight",
            "h.0.c_attn.bias",
            "h.0.ln.0",
            "h.0.ln.1",
            "h.1.c_attn.weight",
            "h.1.c_attn.bias",
            "h.1.ln.0",
            "h.1.ln.1",
        ]
    );
    assert_eq!(m.num_params(), 15 + 2 * (12 + 4 + 3 + 3));
}

#[test]
fn a_saved_model_loads_back_bit_for_bit() {
    let m = model(3);
    let path = scratch("roundtrip.safetensors");
    m.save_safetensors(&path).unwrap();
    let back = Model::<Cpu, f32>::load_safetensors(&path).unwrap();
    assert_eq!(
        back.h.len(),
        3,
        "a Vec takes as many blocks as the file has"
    );
    assert_eq!(contents(&back), contents(&m));

    // Every dtype the conversions reach, and back.
    for bytes_per in [2usize, 8] {
        let path = scratch(&format!("roundtrip_{bytes_per}.safetensors"));
        let names = match bytes_per {
            2 => {
                let h = m.cast::<bf16>().unwrap();
                h.save_safetensors(&path).unwrap();
                let back = Model::<Cpu, bf16>::load_safetensors(&path).unwrap();
                assert_eq!(contents(&back), contents(&h));
                contents(&back)
            }
            _ => {
                let d = m.cast::<f64>().unwrap();
                d.save_safetensors(&path).unwrap();
                let back = Model::<Cpu, f64>::load_safetensors(&path).unwrap();
                assert_eq!(contents(&back), contents(&d));
                // f32 -> f64 -> f32 is exact.
                assert_eq!(contents(&back.cast::<f32>().unwrap()), contents(&m));
                contents(&back)
            }
        };
        for (_, dims, bytes) in names {
            assert_eq!(bytes.len(), dims.iter().product::<usize>() * bytes_per);
        }
    }

    let e = Extras::<Cpu> {
        ids: Tensor::from_vec(vec![i64::MIN, -1, i64::MAX]).unwrap(),
        mask: Tensor::from_vec(vec![true, false, false, true]).unwrap(),
        count: Tensor::from_vec(vec![255]).unwrap(),
    };
    let path = scratch("extras.safetensors");
    e.save_safetensors(&path).unwrap();
    let back = Extras::<Cpu>::load_safetensors(&path).unwrap();
    assert_eq!(back.ids.to_vec().unwrap(), vec![i64::MIN, -1, i64::MAX]);
    assert_eq!(back.mask.to_vec().unwrap(), vec![true, false, false, true]);
    assert_eq!(back.count.to_vec().unwrap(), vec![255]);
}

#[test]
fn parameters_move_to_a_gpu_and_back() {
    let m = model(2);
    let same = m.to_device::<Cpu>().unwrap();
    assert_eq!(contents(&same), contents(&m));
    match m.to_device::<Cuda>() {
        Ok(g) => {
            let path = scratch("from_gpu.safetensors");
            g.save_safetensors(&path).unwrap();
            let loaded = Model::<Cuda, f32>::load_safetensors(&path).unwrap();
            assert_eq!(contents(&loaded.to_device::<Cpu>().unwrap()), contents(&m));
        }
        Err(e) => println!("no GPU, skipped the device half: {e}"),
    }
}

/// The bytes of `n` f32 values.
fn f32s(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// A valid one-block file, with `change` applied to its tensor list.
fn one_block_with(
    name: &str,
    change: impl FnOnce(&mut Vec<(&'static str, Dtype, Vec<usize>, Vec<u8>)>),
) -> Result<Model<Cpu, f32>> {
    let mut t = vec![
        ("wte", Dtype::F32, vec![5, 3], f32s(15)),
        ("h.0.c_attn.weight", Dtype::F32, vec![4, 3], f32s(12)),
        ("h.0.c_attn.bias", Dtype::F32, vec![4], f32s(4)),
        ("h.0.ln.0", Dtype::F32, vec![3], f32s(3)),
        ("h.0.ln.1", Dtype::F32, vec![3], f32s(3)),
    ];
    change(&mut t);
    let path = scratch(name);
    write(&path, &t);
    Model::<Cpu, f32>::load_safetensors(&path)
}

#[test]
fn every_disagreement_with_the_file_is_an_error_naming_the_key() {
    assert!(one_block_with("valid.safetensors", |_| {}).is_ok());

    let e = one_block_with("shape.safetensors", |t| {
        t[1] = ("h.0.c_attn.weight", Dtype::F32, vec![4, 5], f32s(20));
    })
    .err()
    .expect("an error")
    .to_string();
    assert!(e.contains("`h.0.c_attn.weight`"), "{e}");
    assert!(e.contains("expected [4, 3], found [4, 5]"), "{e}");

    let e = one_block_with("missing.safetensors", |t| {
        t.remove(2);
    })
    .err()
    .expect("an error")
    .to_string();
    assert!(
        e.contains("missing key `h.0.c_attn.bias` (a f32 [4] tensor)"),
        "{e}"
    );

    let e = one_block_with("extra.safetensors", |t| {
        t.push(("lm_head.weight", Dtype::F32, vec![2], f32s(2)));
    })
    .err()
    .expect("an error")
    .to_string();
    assert!(e.contains("unexpected key `lm_head.weight`"), "{e}");

    let e = one_block_with("dtype.safetensors", |t| {
        t[3] = ("h.0.ln.0", Dtype::F16, vec![3], vec![0; 6]);
    })
    .err()
    .expect("an error")
    .to_string();
    assert!(
        e.contains("`h.0.ln.0`") && e.contains("expected F32, found F16"),
        "{e}"
    );

    // A run-time dim takes what the file has; the rank still counts.
    let e = one_block_with("rank.safetensors", |t| {
        t[0] = ("wte", Dtype::F32, vec![15], f32s(15));
    })
    .err()
    .expect("an error")
    .to_string();
    assert!(
        e.contains("`wte`") && e.contains("expected [_, 3], found [15]"),
        "{e}"
    );

    // Truncated, empty, not there: errors naming the file, no panic.
    let path = scratch("truncated.safetensors");
    model(1).save_safetensors(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for keep in [bytes.len() - 1, bytes.len() / 2, 9, 3, 0] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let e = Model::<Cpu, f32>::load_safetensors(&path)
            .err()
            .expect("an error")
            .to_string();
        assert!(e.contains("not a safetensors file"), "{keep} bytes: {e}");
    }
    let e = Model::<Cpu, f32>::load_safetensors(scratch("absent.safetensors"))
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("absent.safetensors"), "{e}");

    // A BOOL tensor must hold 0 or 1.
    let path = scratch("bad_bool.safetensors");
    write(
        &path,
        &[
            ("ids", Dtype::I64, vec![3], vec![0; 24]),
            ("mask", Dtype::BOOL, vec![2, 2], vec![0, 1, 2, 0]),
            ("count", Dtype::U8, vec![1], vec![7]),
        ],
    );
    let e = Extras::<Cpu>::load_safetensors(&path)
        .err()
        .expect("an error")
        .to_string();
    assert!(e.contains("`mask`") && e.contains("byte 2"), "{e}");
}

/// A struct generic over its dtype with a part kept in f32 (as mixed
/// precision keeps norms): `cast` converts the rest and keeps that part.
#[derive(Params)]
struct Mixed<D: Device, T: Float> {
    w: Tensor<D, T, shape![2, 3]>,
    norm: Tensor<D, f32, shape![3]>,
    layers: Vec<Tensor<D, T, shape![3]>>,
}

#[test]
fn a_cast_keeps_the_fields_of_a_fixed_dtype() {
    let m = Mixed::<Cpu, f32> {
        w: randn(1, &[2, 3]),
        norm: randn(2, &[3]),
        layers: vec![randn(3, &[3]), randn(4, &[3])],
    };
    let h = m.cast::<bf16>().unwrap();
    let round =
        |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| bf16::from_f32(x).to_f32()).collect() };
    let back: Vec<f32> =
        h.w.to_vec()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f32())
            .collect();
    assert_eq!(back, round(m.w.to_vec().unwrap()));
    assert_eq!(h.norm.to_vec().unwrap(), m.norm.to_vec().unwrap());
    assert_eq!(h.layers.len(), 2);
    let moved = h.to_device::<Cpu>().unwrap();
    assert_eq!(moved.norm.to_vec().unwrap(), m.norm.to_vec().unwrap());
}

#[test]
fn zeros_like_keeps_every_name_shape_and_dtype() {
    let m = model(2);
    let z = m.zeros_like().unwrap();
    let (a, b) = (contents(&m), contents(&z));
    assert_eq!(a.len(), b.len());
    for ((na, da, _), (nb, db, bytes)) in a.iter().zip(&b) {
        assert_eq!((na, da), (nb, db));
        assert!(bytes.iter().all(|&x| x == 0), "{nb} is not zero");
    }
    assert_eq!(z.num_params(), m.num_params());
}

/// An optimizer pairs the tensors of a derived struct with its gradients
/// by name; its state is saved under `{buffer}.{name}`, and gradients
/// whose `Dyn` dims or `Vec` length differ are errors naming the tensor.
#[test]
fn optimizers_step_derived_structs_by_name() {
    let mut p = model(2);
    let before = contents(&p);
    let grads = p.zeros_like().unwrap();
    let mut opt = AdamW::new(
        &p,
        AdamWConfig {
            lr: 0.1,
            weight_decay: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step(&mut p, &grads).unwrap();
    // Zero gradients: only the decoupled decay, 0.95 of every element.
    let (w0, w1) = (before[1].2.clone(), p.h[0].attn.weight.to_vec().unwrap());
    let w0: Vec<f32> = w0
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    for (a, b) in w0.iter().zip(&w1) {
        assert_eq!((*a as f64 * 0.95) as f32, *b);
    }
    let path = scratch("adamw_state.safetensors");
    opt.save_safetensors(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut keys: Vec<String> = file.names().into_iter().map(String::from).collect();
    keys.sort();
    assert!(
        keys.contains(&"exp_avg.h.0.c_attn.weight".to_string()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"exp_avg_sq.h.1.ln.1".to_string()),
        "{keys:?}"
    );
    assert!(keys.contains(&"step".to_string()), "{keys:?}");
    assert_eq!(keys.len(), 1 + 2 * before.len());

    let short = model(1).zeros_like().unwrap();
    let e = opt.step(&mut p, &short).unwrap_err();
    assert!(e.to_string().contains("no `h.1.c_attn.weight`"), "{e}");
    let mut g = grads.zeros_like().unwrap();
    g.wte = Tensor::zeros_dims(&[6, 3]).unwrap();
    let e = opt.step(&mut p, &g).unwrap_err();
    assert!(e.to_string().contains("gradient `wte`"), "{e}");
    let mut sgd = Sgd::new(&p, SgdConfig::default()).unwrap();
    sgd.step(&mut p, &grads).unwrap();
    assert!(tensorfn::clip_grad_norm(&mut g, 1.0).unwrap() == 0.0);
}

/// A torchvision-style block: a `BatchNorm` field is saved and loaded under
/// PyTorch's buffer names, converted with the struct, and left out of
/// the tensors gradients and optimizers walk.
#[derive(Params)]
struct ConvBlock<D: Device, T: Float> {
    conv1: Tensor<D, T, shape![4, 2]>,
    bn1: tensorfn::params::BatchNorm<D, T, Const<4>>,
}

#[test]
fn batch_norm_fields_use_torchvisions_buffer_names() {
    let p = ConvBlock::<Cpu, f32> {
        conv1: Tensor::ones().unwrap(),
        bn1: tensorfn::params::BatchNorm::new().unwrap(),
    };
    let x = Tensor::<Cpu, f32, shape![3, 4, 2, 2]>::from_vec((0..48).map(|v| v as f32).collect())
        .unwrap();
    p.bn1.forward(&x, true).unwrap();
    let layers = vec![p];
    let mut names = Vec::new();
    layers
        .visit(&mut |n, _| {
            names.push(n.to_string());
            Ok(())
        })
        .unwrap();
    assert_eq!(
        names,
        [
            "0.conv1",
            "0.bn1.weight",
            "0.bn1.bias",
            "0.bn1.running_mean",
            "0.bn1.running_var",
            "0.bn1.num_batches_tracked"
        ]
    );
    let trained: Vec<String> = layers.tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(trained, ["0.conv1", "0.bn1.weight", "0.bn1.bias"]);
    let path = scratch("bn_block.safetensors");
    layers.save_safetensors(&path).unwrap();
    let back = Vec::<ConvBlock<Cpu, f32>>::load_safetensors(&path).unwrap();
    let (s, t) = (back[0].bn1.stats(), layers[0].bn1.stats());
    assert_eq!(s.num_batches_tracked, 1);
    assert_eq!(
        s.running_mean.to_vec().unwrap(),
        t.running_mean.to_vec().unwrap()
    );
    let as_f64 = back[0].cast::<f64>().unwrap();
    assert_eq!(as_f64.bn1.stats().num_batches_tracked, 1);
}
