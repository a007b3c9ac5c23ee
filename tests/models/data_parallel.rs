//! `train_gpt2 --gpus N`, the example's data-parallel training: the
//! request checks and the micro-batches on any machine; on one GPU, one
//! rank against the plain single-GPU training, step for step; on two, two
//! ranks against one GPU on the combined batch. The GPU parts skip with a
//! one-line notice where the GPUs (or NCCL) are missing.

// The example as `examples` compiled it: one build of it for both.
use crate::examples::train_gpt2;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tensorfn::prelude::*;
use train_gpt2::{dp, Config, Data, Gpt2, Options, Report};

type AnyResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The GPU runs one at a time: each trains on every GPU it names.
static GPUS: Mutex<()> = Mutex::new(());

/// A tiny model trained for a few steps, checkpointed into `dir`.
fn options(batch: usize, dir: &Path) -> Options {
    let seed = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1337);
    Options {
        model: Config {
            layers: 2,
            width: 32,
            heads: 2,
            ctx: 32,
            vocab: 0,
        },
        batch,
        steps: 6,
        eval_every: 6,
        eval_batches: 1,
        seed,
        save: Some(dir.to_path_buf()),
        plot: None,
        sample: 0,
        verbose: false,
        ..Options::default()
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tensorfn-dp-{}-{name}", std::process::id()))
}

/// The weights a run saved, by name, as f32.
fn weights(dir: &Path) -> AnyResult<Vec<(String, Vec<f32>)>> {
    let m = Gpt2::<Cpu, f32>::load_safetensors(dir.join("model.safetensors"))?;
    m.tensors()
        .into_iter()
        .map(|(name, t)| {
            let bytes = tensorfn::AnyTensor::to_le_bytes(t)?;
            let v = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Ok((name, v))
        })
        .collect()
}

/// Losses step for step within `rtol`, and every saved tensor within a
/// relative L2 distance of `rtol` of the reference's.
fn same_training(
    what: &str,
    got: (&Report, &Path),
    want: (&Report, &Path),
    rtol: f64,
) -> AnyResult {
    let (a, b) = (&got.0.train, &want.0.train);
    if a.len() != b.len() {
        return Err(format!("{what}: {} steps, the reference {}", a.len(), b.len()).into());
    }
    for (&(s, x), &(t, y)) in a.iter().zip(b) {
        let close = (x - y).abs() <= rtol * y.abs();
        if s != t || !close {
            return Err(
                format!("{what}: step {s} loss {x}, the reference's step {t} loss {y}").into(),
            );
        }
    }
    let (wa, wb) = (weights(got.1)?, weights(want.1)?);
    for ((name, x), (_, y)) in wa.iter().zip(&wb) {
        let diff: f64 = x
            .iter()
            .zip(y)
            .map(|(p, q)| (*p as f64 - *q as f64).powi(2))
            .sum();
        let norm: f64 = y.iter().map(|q| (*q as f64).powi(2)).sum();
        let close = diff.sqrt() <= rtol * norm.sqrt().max(1e-12);
        if !close {
            return Err(format!(
                "{what}: `{name}` is {:.3e} away from the reference's (norm {:.3e})",
                diff.sqrt(),
                norm.sqrt()
            )
            .into());
        }
    }
    println!("{what}: {} losses and {} tensors match", a.len(), wa.len());
    Ok(())
}

/// The GPUs present, or `None` after a one-line notice when there are
/// fewer than `need`.
fn gpus(need: usize) -> Option<usize> {
    match tensorfn::cuda_device_count() {
        Ok(n) if n >= need => Some(n),
        Ok(n) => {
            eprintln!("skipping: {n} GPU(s), the test needs {need}");
            None
        }
        Err(e) => {
            eprintln!("skipping: no GPU ({e})");
            None
        }
    }
}

/// `true` (after a notice) when `e` is NCCL's absence.
fn no_nccl(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    match e.downcast_ref::<Error>() {
        Some(Error::NcclUnavailable { reason }) => {
            eprintln!("skipping: no NCCL ({reason})");
            true
        }
        _ => false,
    }
}

/// Trains on one GPU with `batch`, then data-parallel on the group `G`
/// with the same global batch, and compares.
fn against_one_gpu<G: dp::Group<f32>>(name: &str, batch: usize, rtol: f64) {
    let _serial = GPUS.lock().unwrap_or_else(|e| e.into_inner());
    let data = Data::shakespeare().unwrap();
    let (one, many) = (temp(&format!("{name}-one")), temp(&format!("{name}-dp")));
    let plain = train_gpt2::train::<Cuda, f32>(&options(batch, &one), &data).unwrap();
    let parallel = match dp::train::<G, f32>(&options(batch, &many), &data) {
        Ok(r) => r,
        Err(e) if no_nccl(&*e) => return,
        Err(e) => panic!("{name}: {e}"),
    };
    let checked = same_training(name, (&parallel, &many), (&plain, &one), rtol);
    let _ = std::fs::remove_dir_all(&one);
    let _ = std::fs::remove_dir_all(&many);
    checked.unwrap();
}

#[test]
fn requests_are_checked_before_any_gpu_work() {
    let o = Options {
        batch: 6,
        ..Options::default()
    };
    let e = |o: &Options, gpus, visible| {
        dp::check_request(o, gpus, visible)
            .expect_err("an impossible request was accepted")
            .to_string()
    };
    for n in [0, 3, 16] {
        assert!(e(&o, n, Ok(8)).contains("pass 1, 2, 4 or 8"), "{n}");
    }
    let t = e(&o, 4, Ok(3));
    assert!(
        t.contains("needs 4 GPUs but this machine has 3") && t.contains("--gpus 2"),
        "{t}"
    );
    let none = Err(Error::CudaUnavailable {
        reason: "no driver".into(),
    });
    let t = e(&o, 2, none);
    assert!(
        t.contains("--gpus 2 needs 2 GPU(s)") && t.contains("no driver"),
        "{t}"
    );
    let t = e(&o, 4, Ok(8));
    assert!(
        t.contains("--batch 6") && t.contains("multiple of 4"),
        "{t}"
    );
    let cpu = Options {
        device: Some("cpu".into()),
        ..o.clone()
    };
    assert!(e(&cpu, 2, Ok(2)).contains("--device cpu"));
    assert!(dp::check_request(&o, 2, Ok(2)).is_ok());
    // A bench's `--batch` is per GPU: any batch splits.
    let bench = Options {
        bench: true,
        ..o.clone()
    };
    assert!(dp::check_request(&bench, 4, Ok(4)).is_ok());
}

#[test]
fn each_rank_takes_its_rows_of_the_batch() {
    let ids = Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims((0..12).collect(), &[4, 3]).unwrap();
    let second = dp::micro_batch::<Cpu>(&ids, 1, 2).unwrap();
    assert_eq!(second.dims(), &[2, 3]);
    assert_eq!(second.to_vec().unwrap(), vec![6, 7, 8, 9, 10, 11]);
    let last = dp::micro_batch::<Cpu>(&ids, 3, 4).unwrap();
    assert_eq!(last.to_vec().unwrap(), vec![9, 10, 11]);
    assert_eq!(
        dp::micro_batch::<Cpu>(&ids, 0, 1)
            .unwrap()
            .to_vec()
            .unwrap(),
        (0..12).collect::<Vec<_>>()
    );
    for (rank, ranks) in [(0, 3), (2, 2), (0, 0)] {
        let e = dp::micro_batch::<Cpu>(&ids, rank, ranks).unwrap_err();
        assert!(e.to_string().contains("must divide"), "{e}");
    }
}

#[test]
fn one_rank_trains_as_one_gpu() {
    if gpus(1).is_none() {
        return;
    }
    // One rank's mean is its own gradient; the GPU's embedding gradient
    // is summed with atomic adds in no fixed order, hence a tolerance.
    against_one_gpu::<(Cuda<0>,)>("one rank", 8, 1e-4);
}

#[test]
fn two_ranks_train_as_one_gpu_on_the_combined_batch() {
    if gpus(2).is_none() {
        return;
    }
    // Each rank's loss is the mean over its half; the mean of the two
    // halves' gradients is the whole batch's, summed in another order.
    against_one_gpu::<(Cuda<0>, Cuda<1>)>("two ranks", 8, 1e-3);
}
