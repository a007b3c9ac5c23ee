//! ResNet-18 inference with weights named as torchvision's `resnet18`
//! names them (`conv1.weight`, `layer1.0.bn1.running_mean`,
//! `layer2.0.downsample.0.weight`, `fc.bias`, ...). Every convolution,
//! pooling and batch norm is checked at compile time: the spatial sizes
//! 224 → 112 → 56 → 28 → 14 → 7 → 1 are computed by `tensor_fn!` from the
//! strides, paddings and kernels, and a layer whose channels or sizes do
//! not follow from the one before does not compile. Written once for
//! every device and float dtype.
//!
//! ```sh
//! cargo run --release --example resnet18                   # random weights, checked
//! cargo run --release --example resnet18 -- --weights model.safetensors --batch 8 --dtype bf16
//! ```
//!
//! Without `--weights` it writes random weights to a temporary file and
//! loads them through the same loader. `scripts/resnet_reference.py write
//! DIR` writes a random-init torchvision checkpoint; `--dump FILE` writes
//! the input images and the logits (`input`, `logits`), which
//! `resnet_reference.py compare DIR FILE` checks against torchvision.
//! Options: `--batch N` (2), `--dtype f32|bf16`, `--cpu`, `--seed S`,
//! `--no-check` (skip the f64 check on the host), `--bench N` (time N
//! forwards after a warm-up; also prints the host's time to queue one),
//! `--layout nchw|nhwc` (the memory order of the images and the
//! convolution weights: `nhwc` is PyTorch's `channels_last`, the default
//! for bf16 on the GPU, where cuDNN's convolution engines run it fastest;
//! every layer then keeps it; `nchw` is the default on the CPU and for
//! f32, whose exact engines run NHWC slower).
//!
//! Asking for channels-last is one call per tensor; the shapes stay
//! `[N, C, H, W]`, only the strides change:
//!
//! ```ignore
//! let x = x.contiguous_channels_last()?; // NHWC memory
//! let y = conv2d(x, w, ..);              // channels-last too
//! ```

mod common;

use common::{check_close, gpu_available, seed, to_f64, AnyResult, TempFile};
use std::path::PathBuf;
use std::time::Instant;
use tensorfn::prelude::*;
use tensorfn::{DeviceKind, Float, Shape};

/// Image classes (ImageNet's).
pub const CLASSES: usize = 1000;

/// `nn.Conv2d(I, O, K, bias=False)`: key `weight`, `[O, I, K, K]`.
#[derive(Params)]
pub struct Conv<D: Device, T: Float, const O: usize, const I: usize, const K: usize> {
    pub weight: Tensor<D, T, shape![O, I, K, K]>,
}

/// `nn.BatchNorm2d(C)` in inference: the affine weight and bias and the
/// running statistics (`num_batches_tracked` is kept for the file).
#[derive(Params)]
pub struct Bn<D: Device, T: Float, const C: usize> {
    pub weight: Tensor<D, T, shape![C]>,
    pub bias: Tensor<D, T, shape![C]>,
    pub running_mean: Tensor<D, T, shape![C]>,
    pub running_var: Tensor<D, T, shape![C]>,
    pub num_batches_tracked: Tensor<D, i64, shape![]>,
}

/// A `BasicBlock` that keeps its channels and size.
#[derive(Params)]
pub struct Basic<D: Device, T: Float, const C: usize> {
    pub conv1: Conv<D, T, C, C, 3>,
    pub bn1: Bn<D, T, C>,
    pub conv2: Conv<D, T, C, C, 3>,
    pub bn2: Bn<D, T, C>,
}

/// The 1×1, stride-2 projection of the shortcut: keys `0` (conv), `1` (bn).
#[derive(Params)]
pub struct Downsample<D: Device, T: Float, const I: usize, const O: usize> {
    #[params(rename = "0")]
    pub conv: Conv<D, T, O, I, 1>,
    #[params(rename = "1")]
    pub bn: Bn<D, T, O>,
}

/// The first `BasicBlock` of layers 2 to 4: stride 2, `I` to `O` channels.
#[derive(Params)]
pub struct Down<D: Device, T: Float, const I: usize, const O: usize> {
    pub conv1: Conv<D, T, O, I, 3>,
    pub bn1: Bn<D, T, O>,
    pub conv2: Conv<D, T, O, O, 3>,
    pub bn2: Bn<D, T, O>,
    pub downsample: Downsample<D, T, I, O>,
}

/// `layer1`: two blocks of 64 channels.
#[derive(Params)]
pub struct Layer1<D: Device, T: Float> {
    #[params(rename = "0")]
    pub b0: Basic<D, T, 64>,
    #[params(rename = "1")]
    pub b1: Basic<D, T, 64>,
}

/// `layer2` to `layer4`: a down block, then one of `O` channels.
#[derive(Params)]
pub struct Layer<D: Device, T: Float, const I: usize, const O: usize> {
    #[params(rename = "0")]
    pub b0: Down<D, T, I, O>,
    #[params(rename = "1")]
    pub b1: Basic<D, T, O>,
}

/// `nn.Linear(512, CLASSES)`: keys `weight` (`[CLASSES, 512]`), `bias`.
#[derive(Params)]
pub struct Fc<D: Device, T: Float> {
    pub weight: Tensor<D, T, shape![CLASSES, 512]>,
    pub bias: Tensor<D, T, shape![CLASSES]>,
}

/// torchvision's `resnet18`.
#[derive(Params)]
pub struct ResNet18<D: Device, T: Float> {
    pub conv1: Conv<D, T, 64, 3, 7>,
    pub bn1: Bn<D, T, 64>,
    pub layer1: Layer1<D, T>,
    pub layer2: Layer<D, T, 64, 128>,
    pub layer3: Layer<D, T, 128, 256>,
    pub layer4: Layer<D, T, 256, 512>,
    pub fc: Fc<D, T>,
}

tensor_fn! {
    /// The stem: a 7×7 stride-2 convolution, batch norm, ReLU and a 3×3
    /// stride-2 max pool: 224 → 112 → 56.
    pub fn stem<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 3, 224, 224]>,
        p: &ResNet18<D, T>,
    ) -> Tensor<D, T, [N, 64, 56, 56]> {
        let h = conv2d(x, p.conv1.weight, stride = 2, padding = 3);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        max_pool2d(h, 3, stride = 2, padding = 1)
    }

    /// A block of `layer1`.
    pub fn block64<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 64, 56, 56]>,
        p: &Basic<D, T, 64>,
    ) -> Tensor<D, T, [N, 64, 56, 56]> {
        let h = conv2d(x, p.conv1.weight, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + x)
    }

    /// The second block of `layer2`.
    pub fn block128<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 128, 28, 28]>,
        p: &Basic<D, T, 128>,
    ) -> Tensor<D, T, [N, 128, 28, 28]> {
        let h = conv2d(x, p.conv1.weight, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + x)
    }

    /// The second block of `layer3`.
    pub fn block256<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 256, 14, 14]>,
        p: &Basic<D, T, 256>,
    ) -> Tensor<D, T, [N, 256, 14, 14]> {
        let h = conv2d(x, p.conv1.weight, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + x)
    }

    /// The second block of `layer4`.
    pub fn block512<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 512, 7, 7]>,
        p: &Basic<D, T, 512>,
    ) -> Tensor<D, T, [N, 512, 7, 7]> {
        let h = conv2d(x, p.conv1.weight, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + x)
    }

    /// The first block of `layer2`: stride 2 and a projected shortcut.
    pub fn down128<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 64, 56, 56]>,
        p: &Down<D, T, 64, 128>,
    ) -> Tensor<D, T, [N, 128, 28, 28]> {
        let h = conv2d(x, p.conv1.weight, stride = 2, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        let s = conv2d(x, p.downsample.conv.weight, stride = 2);
        let s = batch_norm(s, p.downsample.bn.running_mean, p.downsample.bn.running_var, p.downsample.bn.weight, p.downsample.bn.bias);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + s)
    }

    /// The first block of `layer3`.
    pub fn down256<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 128, 28, 28]>,
        p: &Down<D, T, 128, 256>,
    ) -> Tensor<D, T, [N, 256, 14, 14]> {
        let h = conv2d(x, p.conv1.weight, stride = 2, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        let s = conv2d(x, p.downsample.conv.weight, stride = 2);
        let s = batch_norm(s, p.downsample.bn.running_mean, p.downsample.bn.running_var, p.downsample.bn.weight, p.downsample.bn.bias);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + s)
    }

    /// The first block of `layer4`.
    pub fn down512<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 256, 14, 14]>,
        p: &Down<D, T, 256, 512>,
    ) -> Tensor<D, T, [N, 512, 7, 7]> {
        let h = conv2d(x, p.conv1.weight, stride = 2, padding = 1);
        let h = relu(batch_norm(h, p.bn1.running_mean, p.bn1.running_var, p.bn1.weight, p.bn1.bias));
        let h = conv2d(h, p.conv2.weight, padding = 1);
        let s = conv2d(x, p.downsample.conv.weight, stride = 2);
        let s = batch_norm(s, p.downsample.bn.running_mean, p.downsample.bn.running_var, p.downsample.bn.weight, p.downsample.bn.bias);
        relu(batch_norm(h, p.bn2.running_mean, p.bn2.running_var, p.bn2.weight, p.bn2.bias) + s)
    }

    /// The head: global average pool, flatten, the classifier.
    pub fn head<D: Device, T: Float>(
        x: &Tensor<D, T, [N, 512, 7, 7]>,
        p: &Fc<D, T>,
    ) -> Tensor<D, T, [N, CLASSES]> {
        let h = flatten(adaptive_avg_pool2d(x, 1), 1);
        addmm(p.bias, h, p.weight.t())
    }
}

/// A batch of images.
pub type Images<D, T> = Tensor<D, T, shape![_, 3, 224, 224]>;

/// The logits of `x`.
pub fn forward<D: Device, T: Float>(
    x: &Images<D, T>,
    p: &ResNet18<D, T>,
) -> Result<Tensor<D, T, shape![_, CLASSES]>> {
    let h = stem(x, p)?;
    let h = block64(&block64(&h, &p.layer1.b0)?, &p.layer1.b1)?;
    let h = block128(&down128(&h, &p.layer2.b0)?, &p.layer2.b1)?;
    let h = block256(&down256(&h, &p.layer3.b0)?, &p.layer3.b1)?;
    let h = block512(&down512(&h, &p.layer4.b0)?, &p.layer4.b1)?;
    head(&h, &p.fc)
}

/// Random weights, torchvision's initialisation (Kaiming normal for the
/// convolutions, fan-in uniform for the classifier), batch-norm weights,
/// biases and running statistics drawn too so that a check sees them.
pub fn random(seed: u64) -> Result<ResNet18<Cpu, f32>> {
    let mut s = seed;
    let mut next = move || {
        s += 1;
        s
    };
    fn normal<S: Shape>(seed: u64, mean: f32, std: f32) -> Result<Tensor<Cpu, f32, S>> {
        Tensor::<Cpu, f32, S>::randn(seed)?
            .mul_scalar(std)?
            .add_scalar(mean)
    }
    fn conv<const O: usize, const I: usize, const K: usize>(
        seed: u64,
    ) -> Result<Conv<Cpu, f32, O, I, K>> {
        let std = (2.0 / (O * K * K) as f32).sqrt();
        Ok(Conv {
            weight: normal(seed, 0.0, std)?,
        })
    }
    fn bn<const C: usize>(seed: u64) -> Result<Bn<Cpu, f32, C>> {
        Ok(Bn {
            weight: normal(seed, 1.0, 0.1)?,
            bias: normal(seed + 1_000_000, 0.0, 0.1)?,
            running_mean: normal(seed + 2_000_000, 0.0, 0.1)?,
            running_var: Tensor::<Cpu, f32, shape![C]>::rand(seed + 3_000_000)?.add_scalar(0.5)?,
            num_batches_tracked: Tensor::zeros()?,
        })
    }
    fn basic<const C: usize>(next: &mut impl FnMut() -> u64) -> Result<Basic<Cpu, f32, C>> {
        Ok(Basic {
            conv1: conv(next())?,
            bn1: bn(next())?,
            conv2: conv(next())?,
            bn2: bn(next())?,
        })
    }
    fn down<const I: usize, const O: usize>(
        next: &mut impl FnMut() -> u64,
    ) -> Result<Down<Cpu, f32, I, O>> {
        Ok(Down {
            conv1: conv(next())?,
            bn1: bn(next())?,
            conv2: conv(next())?,
            bn2: bn(next())?,
            downsample: Downsample {
                conv: conv(next())?,
                bn: bn(next())?,
            },
        })
    }
    let bound = 1.0 / (512f32).sqrt();
    Ok(ResNet18 {
        conv1: conv(next())?,
        bn1: bn(next())?,
        layer1: Layer1 {
            b0: basic(&mut next)?,
            b1: basic(&mut next)?,
        },
        layer2: Layer {
            b0: down(&mut next)?,
            b1: basic(&mut next)?,
        },
        layer3: Layer {
            b0: down(&mut next)?,
            b1: basic(&mut next)?,
        },
        layer4: Layer {
            b0: down(&mut next)?,
            b1: basic(&mut next)?,
        },
        fc: Fc {
            weight: Tensor::<Cpu, f32, shape![CLASSES, 512]>::rand(next())?
                .mul_scalar(2.0 * bound)?
                .add_scalar(-bound)?,
            bias: Tensor::<Cpu, f32, shape![CLASSES]>::rand(next())?
                .mul_scalar(2.0 * bound)?
                .add_scalar(-bound)?,
        },
    })
}

/// The images and the logits, for `--dump`.
#[derive(Params)]
struct Dump<D: Device, T: Float> {
    input: Tensor<D, T, shape![_, 3, 224, 224]>,
    logits: Tensor<D, T, shape![_, CLASSES]>,
}

/// Every convolution weight of `m` stored channels-last (`[O, I, K, K]`
/// as `[O, K, K, I]` memory), as PyTorch's `model.to(memory_format=
/// torch.channels_last)`: the filter order cuDNN takes with NHWC images.
fn weights_channels_last<D: Device, T: Float>(m: &mut ResNet18<D, T>) -> Result<()> {
    fn conv<D: Device, T: Float, const O: usize, const I: usize, const K: usize>(
        c: &mut Conv<D, T, O, I, K>,
    ) -> Result<()> {
        c.weight = c.weight.contiguous_channels_last()?;
        Ok(())
    }
    fn basic<D: Device, T: Float, const C: usize>(b: &mut Basic<D, T, C>) -> Result<()> {
        conv(&mut b.conv1)?;
        conv(&mut b.conv2)
    }
    fn down<D: Device, T: Float, const I: usize, const O: usize>(
        b: &mut Down<D, T, I, O>,
    ) -> Result<()> {
        conv(&mut b.conv1)?;
        conv(&mut b.conv2)?;
        conv(&mut b.downsample.conv)
    }
    conv(&mut m.conv1)?;
    basic(&mut m.layer1.b0)?;
    basic(&mut m.layer1.b1)?;
    down(&mut m.layer2.b0)?;
    basic(&mut m.layer2.b1)?;
    down(&mut m.layer3.b0)?;
    basic(&mut m.layer3.b1)?;
    down(&mut m.layer4.b0)?;
    basic(&mut m.layer4.b1)
}

/// Command-line options.
struct Options {
    weights: Option<PathBuf>,
    batch: usize,
    dtype: String,
    cpu: bool,
    seed: u64,
    check: bool,
    bench: usize,
    dump: Option<PathBuf>,
    /// `Some(true)`: channels-last images and weights; `None`: the
    /// device's default (channels-last for bf16 on the GPU).
    nhwc: Option<bool>,
}

impl Options {
    fn from_args() -> AnyResult<Options> {
        let mut o = Options {
            weights: None,
            batch: 2,
            dtype: "f32".into(),
            cpu: false,
            seed: seed(),
            check: true,
            bench: 0,
            dump: None,
            nhwc: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--weights" => o.weights = Some(value()?.into()),
                "--batch" => o.batch = value()?.parse()?,
                "--dtype" => o.dtype = value()?,
                "--seed" => o.seed = value()?.parse()?,
                "--bench" => o.bench = value()?.parse()?,
                "--dump" => o.dump = Some(value()?.into()),
                "--cpu" => o.cpu = true,
                "--no-check" => o.check = false,
                "--layout" => {
                    o.nhwc = match value()?.as_str() {
                        "nchw" => Some(false),
                        "nhwc" => Some(true),
                        v => return Err(format!("--layout is nchw or nhwc, not {v}").into()),
                    }
                }
                _ => {
                    return Err(format!("unknown option {a}; see the example's doc comment").into())
                }
            }
        }
        if !matches!(o.dtype.as_str(), "f32" | "bf16") {
            return Err(format!("--dtype is f32 or bf16, not {}", o.dtype).into());
        }
        Ok(o)
    }
}

/// The weights: the file given, or random ones written to a temporary
/// file and read back through the loader.
fn load(o: &Options) -> AnyResult<(ResNet18<Cpu, f32>, Option<TempFile>)> {
    if let Some(path) = &o.weights {
        return Ok((ResNet18::load_safetensors(path)?, None));
    }
    let file = TempFile::new(&format!("tensorfn-resnet18-{}.safetensors", o.seed));
    random(o.seed)?.save_safetensors(&file.0)?;
    Ok((ResNet18::load_safetensors(&file.0)?, Some(file)))
}

/// Logits on device `D` in dtype `T`, checked against the same model in
/// f64 on the host; timed when asked.
fn run_on<D: Device, T: Float>(
    o: &Options,
    model: &ResNet18<Cpu, f32>,
    x: &Images<Cpu, f32>,
) -> AnyResult {
    let mut m = model.cast::<T>()?.to_device::<D>()?;
    let mut xd = x.cast::<T>()?.to_device::<D>()?;
    // Channels-last by default for bf16 on the GPU only: cuDNN's exact f32
    // engines (TF32 off) run these shapes slower on NHWC than on NCHW
    // (PyTorch's too; see BENCHMARKS.md).
    let nhwc = o
        .nhwc
        .unwrap_or(D::KIND != DeviceKind::Cpu && o.dtype == "bf16");
    if nhwc {
        xd = xd.contiguous_channels_last()?;
        weights_channels_last(&mut m)?;
    }
    let logits = forward(&xd, &m)?;
    let got = to_f64(&logits)?;
    println!(
        "logits [{}, {CLASSES}] on {} in {} ({}): first {:?}",
        o.batch,
        D::KIND,
        o.dtype,
        if nhwc { "nhwc" } else { "nchw" },
        &got[..4.min(got.len())]
    );
    if o.check {
        let want = to_f64(&forward(&x.cast::<f64>()?, &model.cast::<f64>()?)?)?;
        let tol = if o.dtype == "bf16" { 1e-1 } else { 2e-3 };
        check_close("resnet18 logits", &got, &want, tol, tol)?;
        println!("logits match the f64 forward on the host (tolerance {tol})");
    }
    if let Some(path) = &o.dump {
        Dump {
            input: x.clone(),
            logits: logits.cast::<f32>()?.to_device::<Cpu>()?,
        }
        .save_safetensors(path)?;
        println!("wrote {}", path.display());
    }
    if o.bench > 0 {
        forward(&xd, &m)?;
        tensorfn::synchronize::<D>()?;
        let start = Instant::now();
        for _ in 0..o.bench {
            forward(&xd, &m)?;
        }
        // The host's time to queue the passes, apart from the device's: a
        // pass whose enqueue time is near its wall time is bound by the host.
        let enqueue = start.elapsed().as_secs_f64() * 1e3 / o.bench as f64;
        tensorfn::synchronize::<D>()?;
        let ms = start.elapsed().as_secs_f64() * 1e3 / o.bench as f64;
        println!(
            "forward batch {} {} {}: {ms:.3} ms ({:.0} images/s), enqueue {enqueue:.3} ms",
            o.batch,
            o.dtype,
            if nhwc { "nhwc" } else { "nchw" },
            o.batch as f64 * 1e3 / ms
        );
    }
    Ok(())
}

/// The test's run: random weights, one image, checked against f64.
pub fn run<D: Device>() -> AnyResult {
    let o = Options {
        weights: None,
        batch: 1,
        dtype: "f32".into(),
        cpu: false,
        seed: seed(),
        check: true,
        bench: 0,
        dump: None,
        nhwc: None,
    };
    let (model, _file) = load(&o)?;
    let x = Images::<Cpu, f32>::randn_dims(o.seed, &[1, 3, 224, 224])?;
    run_on::<D, f32>(&o, &model, &x)
}

pub fn main() -> AnyResult {
    let o = Options::from_args()?;
    let (model, _file) = load(&o)?;
    println!("ResNet-18: {} parameters", model.num_params());
    let x = Images::<Cpu, f32>::randn_dims(o.seed, &[o.batch, 3, 224, 224])?;
    let gpu = !o.cpu && gpu_available()?;
    match (gpu, o.dtype.as_str()) {
        (true, "bf16") => run_on::<Cuda, bf16>(&o, &model, &x),
        (true, _) => run_on::<Cuda, f32>(&o, &model, &x),
        (false, "bf16") => run_on::<Cpu, bf16>(&o, &model, &x),
        (false, _) => run_on::<Cpu, f32>(&o, &model, &x),
    }
}
