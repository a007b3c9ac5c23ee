//! `--gpus N`: data-parallel training over cuda:0 to cuda:N-1 of this
//! process, as PyTorch's `DistributedDataParallel`. Every GPU holds a
//! replica of the model and its own AdamW (made once: `to_device`, then
//! [`Comm::broadcast_params`] from rank 0) and takes a slice of the global
//! batch; the backward goes block by block, last block first, queuing
//! each block's `vjp` on every GPU and pushing that block's gradients
//! into [`GradBuckets`], which all-reduces a bucket (the mean over the
//! ranks) as soon as it is full while the earlier blocks' backward runs.
//! After [`GradBuckets::finish`] every replica steps with the same mean
//! gradients (clipped by their norm, the same on every rank), so the
//! replicas stay equal and the step is the one a single GPU takes on the
//! whole batch.
//!
//! The number of GPUs is a run-time value and the groups are types:
//! [`main`] maps `--gpus N` to `(Cuda<0>,)`, `(Cuda<0>, Cuda<1>)`, ...,
//! and [`Group`] (implemented for each by `group!`) maps the per-GPU
//! calls over the group's tuples.

use super::*;
use tensorfn::collective::{Comm, DeviceGroup, ParamReplicas};

/// The group sizes `--gpus` takes.
pub const SIZES: [usize; 4] = [1, 2, 4, 8];

/// Checks a `--gpus N` request before any GPU work: `N` one of [`SIZES`],
/// at most the GPUs `visible` (the result of `cuda_device_count`), the
/// global batch of a training run divisible by `N`, and no option that
/// runs on one device only. The error says what to change.
pub fn check_request(o: &Options, gpus: usize, visible: Result<usize>) -> AnyResult {
    if !SIZES.contains(&gpus) {
        return Err(format!("--gpus {gpus}: pass 1, 2, 4 or 8").into());
    }
    if o.device.as_deref() == Some("cpu") {
        return Err("--gpus runs on GPUs; leave out --device cpu".into());
    }
    if o.grads_out.is_some() {
        return Err("--grads-out runs on one GPU; leave out --gpus".into());
    }
    let visible = visible.map_err(|e| format!("--gpus {gpus} needs {gpus} GPU(s): {e}"))?;
    if visible < gpus {
        let fits = SIZES.iter().rev().find(|&&n| n <= visible).copied();
        return Err(format!(
            "--gpus {gpus} needs {gpus} GPUs but this machine has {visible}{}",
            match fits {
                Some(n) => format!("; pass --gpus {n} or less"),
                None => String::new(),
            }
        )
        .into());
    }
    if !o.bench && o.batch % gpus != 0 {
        return Err(format!(
            "--batch {} (the global batch) does not split among {gpus} GPUs; pass a multiple of {gpus}",
            o.batch
        )
        .into());
    }
    Ok(())
}

/// `--gpus N`: checks the request, then trains (or, with `--bench`, times
/// steps) on the group of `N` GPUs in `--dtype` (bf16 unless given).
pub fn main(o: &Options, gpus: usize) -> AnyResult {
    check_request(o, gpus, tensorfn::cuda_device_count())?;
    match o.dtype.as_deref().unwrap_or("bf16") {
        "bf16" => on_gpus::<bf16>(o, gpus),
        "f32" => on_gpus::<f32>(o, gpus),
        other => Err(format!("--dtype {other}: f32 or bf16").into()),
    }
}

/// Dispatches the run-time `gpus` to its group type.
fn on_gpus<T: Float>(o: &Options, gpus: usize) -> AnyResult {
    match gpus {
        1 => on::<(Cuda<0>,), T>(o),
        2 => on::<(Cuda<0>, Cuda<1>), T>(o),
        #[cfg(feature = "many-gpus")]
        4 => on::<(Cuda<0>, Cuda<1>, Cuda<2>, Cuda<3>), T>(o),
        #[cfg(feature = "many-gpus")]
        8 => on::<
            (
                Cuda<0>,
                Cuda<1>,
                Cuda<2>,
                Cuda<3>,
                Cuda<4>,
                Cuda<5>,
                Cuda<6>,
                Cuda<7>,
            ),
            T,
        >(o),
        // Every group size is the whole model compiled once more per
        // device type (`Cuda<2>` to `Cuda<7>`): the larger groups are
        // opt-in, so the default build stays as fast as one of two GPUs.
        #[cfg(not(feature = "many-gpus"))]
        4 | 8 => Err(format!(
            "--gpus {gpus}: this build has groups of 1 and 2 GPUs; build the example with `--features many-gpus` for 4 and 8"
        )
        .into()),
        n => Err(format!("--gpus {n}: pass 1, 2, 4 or 8").into()),
    }
}

fn on<G: Group<T>, T: Float>(o: &Options) -> AnyResult {
    if o.bench {
        bench::<G, T>(o)?;
    } else {
        let data = Data::shakespeare()?;
        let r = train::<G, T>(o, &data)?;
        fell(&r)?;
    }
    Ok(())
}

/// One rank: its replica of the model, its optimizer and its step
/// inputs (positions, the head's padding).
pub struct Rank<D: Device, T: Float> {
    pub model: Gpt2<D, T>,
    pub opt: AdamW<Gpt2<D, T>>,
    inputs: Inputs<D, T>,
}

/// A rank's backward under way: what the forward kept for the blocks
/// not yet gone back through, and the gradient reached so far.
pub struct Pass<D: Device, T: Float> {
    ids: Ids<D>,
    loss: Loss<D, T>,
    kept: Kept<D, T>,
    g: Hidden<D, T>,
    /// The head's part of `wte`'s gradient, until the embedding's joins.
    wte: Tensor<D, T, shape![_, _]>,
}

impl<D: Device, T: Float> Rank<D, T> {
    /// The rank of replica `model` (rank 0's weights already broadcast
    /// into it), with a fresh optimizer or one read from `resume`.
    fn new(model: Gpt2<D, T>, o: &Options, c: &Config, resume: Option<&Path>) -> Result<Self> {
        // The optimizer copies its f32 master weights from the replica,
        // so it is made after the broadcast.
        let opt = optimizer(&model, o, resume)?;
        let inputs = Inputs::new(c.ctx, c, true)?.recompute_blocks(o.recompute_blocks);
        Ok(Rank { model, opt, inputs })
    }

    /// Rows `rank · b ..` of the global batch `(x, y)` (`b` = its rows ÷
    /// `ranks`) on this rank's GPU, then the forward and the head's
    /// backward; `ln_f`'s gradients come back apart, to push at once.
    fn forward(
        &self,
        (x, y): (&Ids<Cpu>, &Ids<Cpu>),
        rank: usize,
        ranks: usize,
        heads: usize,
    ) -> Result<(Pass<D, T>, LayerNorm<D, T>)> {
        let ids = micro_batch::<D>(x, rank, ranks)?;
        let targets = micro_batch::<D>(y, rank, ranks)?;
        let (h, kept) = forward(
            &self.model,
            heads,
            &ids,
            &self.inputs.positions,
            self.inputs.keep,
        )?;
        let (loss, g, ln_f, wte) = head_backward(&self.model, &h, &targets, &self.inputs)?;
        let pass = Pass {
            ids,
            loss,
            kept,
            g,
            wte,
        };
        Ok((pass, ln_f))
    }

    /// Block `l`'s backward (the last block not yet gone back through):
    /// its parameters' gradients; what the forward kept for it is freed.
    fn block(&self, pass: &mut Pass<D, T>, l: usize, heads: usize) -> Result<Block<D, T>> {
        debug_assert_eq!(l + 1, pass.kept.len());
        let (gx, grads) = pass
            .kept
            .block_backward(l, &self.model.h[l], heads, &pass.g)?;
        pass.g = gx;
        Ok(grads)
    }

    /// The embedding's backward, which ends the pass: the loss and the
    /// gradients of `wte` (the head's and the embedding's parts) and
    /// `wpe`.
    fn embed(&self, pass: Pass<D, T>) -> Result<(Loss<D, T>, EmbeddingGrads<D, T>)> {
        let m = &self.model;
        let (_, (wte_in, wpe)) = embed::vjp(
            &pass.ids,
            &self.inputs.positions,
            &m.wte.weight,
            &m.wpe.weight,
            &pass.g,
        )?;
        let mut wte = pass.wte;
        wte.accumulate(&wte_in)?;
        Ok((
            pass.loss,
            [Embedding { weight: wte }, Embedding { weight: wpe }],
        ))
    }

    /// AdamW at `lr` with the mean gradients, clipped to a global norm of
    /// `clip` (the norm of the means: the same on every rank). `blocks`
    /// come last block first, as the backward pushed them.
    fn step(
        &mut self,
        ln_f: LayerNorm<D, T>,
        mut blocks: Vec<Block<D, T>>,
        [wte, wpe]: EmbeddingGrads<D, T>,
        lr: f64,
        clip: f64,
    ) -> Result<()> {
        blocks.reverse();
        let grads = Gpt2 {
            wte,
            wpe,
            h: blocks,
            ln_f,
        };
        self.opt.set_lr(lr);
        self.opt.step_clipped(&mut self.model, &grads, clip)?;
        Ok(())
    }
}

/// `wte`'s and `wpe`'s gradients.
type EmbeddingGrads<D, T> = [Embedding<D, T>; 2];

/// Rank `rank`'s rows of the global batch `ids` on `D`: the `rank`-th of
/// `ranks` equal slices along dim 0.
pub fn micro_batch<D: Device>(ids: &Ids<Cpu>, rank: usize, ranks: usize) -> Result<Ids<D>> {
    let rows = ids.dims()[0];
    if ranks == 0 || rows % ranks != 0 || rank >= ranks {
        return Err(Error::InvalidArgument {
            op: "micro_batch".into(),
            message: format!(
                "a batch of {rows} rows has no slice {rank} of {ranks}; the batch must divide by \
                 the GPUs"
            ),
        });
    }
    let b = rows / ranks;
    ids.narrow::<0, shape![_, _]>(rank * b, b)?
        .contiguous()?
        .to_device::<D>()
}

/// A group of GPUs trained data-parallel: the tuples of per-rank values
/// (in the group's order) and the per-rank calls mapped over them. The
/// value pushed into the buckets for each stage of the backward is one
/// `Params` value per GPU (a [`ParamReplicas`] of the group).
pub trait Group<T: Float>: DeviceGroup {
    /// One model per GPU.
    type Models: ParamReplicas<Self>;
    /// One [`Rank`] per GPU.
    type Ranks;
    /// One [`Pass`] per GPU.
    type Passes;
    /// `ln_f`'s gradients, per GPU.
    type Norms: ParamReplicas<Self>;
    /// One block's gradients, per GPU.
    type Blocks: ParamReplicas<Self>;
    /// `wte`'s and `wpe`'s gradients, per GPU.
    type Embeddings: ParamReplicas<Self>;
    /// Each GPU's loss on its micro-batch.
    type Losses;

    /// `host` copied to every GPU.
    fn models(host: &Gpt2<Cpu, T>) -> Result<Self::Models>;
    /// The ranks of the replicas.
    fn ranks(
        m: Self::Models,
        o: &Options,
        c: &Config,
        resume: Option<&Path>,
    ) -> Result<Self::Ranks>;
    /// Rank 0, the one evaluated, saved and sampled.
    fn first(r: &Self::Ranks) -> &Rank<Cuda<0>, T>;
    /// Every rank's forward on its slice of the global batch.
    fn forward(
        r: &Self::Ranks,
        batch: (&Ids<Cpu>, &Ids<Cpu>),
        heads: usize,
    ) -> Result<(Self::Passes, Self::Norms)>;
    /// Block `l`'s backward on every rank.
    fn block(r: &Self::Ranks, p: &mut Self::Passes, l: usize, heads: usize)
        -> Result<Self::Blocks>;
    /// The embedding's backward on every rank.
    fn embed(r: &Self::Ranks, p: Self::Passes) -> Result<(Self::Losses, Self::Embeddings)>;
    /// Every rank's optimizer step with the mean gradients.
    fn step(
        r: &mut Self::Ranks,
        ln_f: Self::Norms,
        blocks: Vec<Self::Blocks>,
        emb: Self::Embeddings,
        lr: f64,
        clip: f64,
    ) -> Result<()>;
    /// The mean of the ranks' losses: the loss of the global batch (the
    /// slices are of equal size).
    fn loss(l: &Self::Losses) -> Result<f64>;
    /// Waits for every GPU of the group.
    fn synchronize() -> Result<()>;
}

macro_rules! group {
    ($($o:literal $i:tt),+) => {
        impl<T: Float> Group<T> for ($(Cuda<$o>,)+) {
            type Models = ($(Gpt2<Cuda<$o>, T>,)+);
            type Ranks = ($(Rank<Cuda<$o>, T>,)+);
            type Passes = ($(Pass<Cuda<$o>, T>,)+);
            type Norms = ($(LayerNorm<Cuda<$o>, T>,)+);
            type Blocks = ($(Block<Cuda<$o>, T>,)+);
            type Embeddings = ($(EmbeddingGrads<Cuda<$o>, T>,)+);
            type Losses = ($(Loss<Cuda<$o>, T>,)+);

            fn models(host: &Gpt2<Cpu, T>) -> Result<Self::Models> {
                Ok(($(host.to_device::<Cuda<$o>>()?,)+))
            }
            fn ranks(
                m: Self::Models,
                o: &Options,
                c: &Config,
                resume: Option<&Path>,
            ) -> Result<Self::Ranks> {
                Ok(($(Rank::new(m.$i, o, c, resume)?,)+))
            }
            fn first(r: &Self::Ranks) -> &Rank<Cuda<0>, T> {
                &r.0
            }
            fn forward(
                r: &Self::Ranks,
                batch: (&Ids<Cpu>, &Ids<Cpu>),
                heads: usize,
            ) -> Result<(Self::Passes, Self::Norms)> {
                let each = ($(r.$i.forward(batch, $i, Self::N, heads)?,)+);
                Ok((($(each.$i.0,)+), ($(each.$i.1,)+)))
            }
            fn block(
                r: &Self::Ranks,
                p: &mut Self::Passes,
                l: usize,
                heads: usize,
            ) -> Result<Self::Blocks> {
                Ok(($(r.$i.block(&mut p.$i, l, heads)?,)+))
            }
            fn embed(r: &Self::Ranks, p: Self::Passes) -> Result<(Self::Losses, Self::Embeddings)> {
                let each = ($(r.$i.embed(p.$i)?,)+);
                Ok((($(each.$i.0,)+), ($(each.$i.1,)+)))
            }
            fn step(
                r: &mut Self::Ranks,
                ln_f: Self::Norms,
                blocks: Vec<Self::Blocks>,
                emb: Self::Embeddings,
                lr: f64,
                clip: f64,
            ) -> Result<()> {
                let mut per_rank = ($(Vec::<Block<Cuda<$o>, T>>::with_capacity(blocks.len()),)+);
                for b in blocks {
                    $(per_rank.$i.push(b.$i);)+
                }
                $(r.$i.step(ln_f.$i, per_rank.$i, emb.$i, lr, clip)?;)+
                Ok(())
            }
            fn loss(l: &Self::Losses) -> Result<f64> {
                let sum = 0.0 $(+ l.$i.to_vec()?[0].to_f64())+;
                Ok(sum / Self::N as f64)
            }
            fn synchronize() -> Result<()> {
                $(tensorfn::synchronize::<Cuda<$o>>()?;)+
                Ok(())
            }
        }
    };
}

group!(0 0);
group!(0 0, 1 1);
group!(0 0, 1 1, 2 2, 3 3);
group!(0 0, 1 1, 2 2, 3 3, 4 4, 5 5, 6 6, 7 7);

/// The replicas of `host` on the group's GPUs, rank 0's weights
/// broadcast to every one, and their optimizers (fresh, or read from
/// `resume`).
fn replicas<G: Group<T>, T: Float>(
    comm: &Comm<G>,
    host: &Gpt2<Cpu, T>,
    o: &Options,
    c: &Config,
    resume: Option<&Path>,
) -> Result<G::Ranks> {
    let mut models = G::models(host)?;
    comm.broadcast_params(&mut models)?;
    G::ranks(models, o, c, resume)
}

/// One data-parallel step on the global batch `(x, y)` (on the host): the
/// forward on every rank, the backward block by block with each block's
/// gradients pushed into the buckets (their all-reduce overlaps the
/// blocks below), then the optimizer step on every rank with the means.
/// Gives the loss of the global batch.
pub fn step<G: Group<T>, T: Float>(
    comm: &Comm<G>,
    ranks: &mut G::Ranks,
    batch: (&Ids<Cpu>, &Ids<Cpu>),
    c: &Config,
    lr: f64,
    clip: f64,
) -> Result<f64> {
    let (mut passes, norms) = G::forward(ranks, batch, c.heads)?;
    let mut buckets = comm.grad_buckets();
    let norms = buckets.push(norms)?;
    let mut blocks = Vec::with_capacity(c.layers);
    for l in (0..c.layers).rev() {
        // Queued on every GPU before the push: the copies into the
        // bucket and its all-reduce follow this block's backward on each
        // GPU's streams, and the host goes on to queue the next block.
        let grads = G::block(ranks, &mut passes, l, c.heads)?;
        blocks.push(buckets.push(grads)?);
    }
    let (losses, emb) = G::embed(ranks, passes)?;
    let emb = buckets.push(emb)?;
    let mut reduced = buckets.finish()?;
    let norms = reduced.take(norms)?;
    let blocks = blocks
        .into_iter()
        .map(|t| reduced.take(t))
        .collect::<Result<Vec<_>>>()?;
    let emb = reduced.take(emb)?;
    G::step(ranks, norms, blocks, emb, lr, clip)?;
    G::loss(&losses)
}

/// [`super::train`] over the group `G`: the same options, batches,
/// schedule, evaluations, checkpoints, curve and sample, with `--batch`
/// the global batch split among the GPUs. Rank 0's replica is evaluated,
/// saved and sampled (every replica holds the same weights).
pub fn train<G: Group<T>, T: Float>(o: &Options, data: &Data) -> AnyResult<Report> {
    let mut o = o.clone();
    o.model.vocab = data.vocab();
    let (host, resume) = match &o.resume {
        Some(dir) => {
            let m = Gpt2::<Cpu, T>::load_safetensors(dir.join("model.safetensors"))?;
            let found = Config::of(&m, o.model.heads);
            if found != o.model {
                println!("resuming a model of {found:?}");
                o.model = found;
            }
            (m, Some(dir.join("optim.safetensors")))
        }
        None => {
            o.model.check()?;
            (init(&o.model, o.seed)?.cast::<T>()?, None)
        }
    };
    o.model.check()?;
    let c = o.model;
    if c.ctx + 1 >= data.val.len() {
        return Err(format!("--ctx {} is longer than the held-out text", c.ctx).into());
    }
    let comm = Comm::<G>::new()?;
    let mut ranks = replicas::<G, T>(&comm, &host, &o, &c, resume.as_deref())?;
    drop(host);
    let start = G::first(&ranks).opt.steps() as usize;
    let stop = o.stop_after.unwrap_or(o.steps).min(o.steps);
    println!(
        "GPT-2 of {} layers, width {}, {} heads, context {}, vocabulary {}: {} parameters; {} on {} GPUs, global batch {} ({} per GPU), steps {start}..{stop} of {}",
        c.layers,
        c.width,
        c.heads,
        c.ctx,
        c.vocab,
        G::first(&ranks).model.num_params(),
        T::KIND.name(),
        G::N,
        o.batch,
        o.batch / G::N,
        o.steps
    );
    let schedule = CosineWithWarmup {
        warmup_steps: o.warmup() as u64,
        total_steps: o.steps as u64,
        min_lr: o.lr / 10.0,
    };
    let mut report = match &o.resume {
        Some(dir) => saved_losses(dir, start),
        None => Report::default(),
    };
    let started = Instant::now();
    for step_at in start..stop {
        // The batch of the single-GPU run of the same seed.
        let (x, y) = Data::batch::<Cpu>(
            &data.train,
            o.batch,
            c.ctx,
            o.seed.wrapping_add(step_at as u64 * 7919),
        )?;
        let lr = schedule.lr_at(o.lr, step_at as u64);
        let l = step::<G, T>(&comm, &mut ranks, (&x, &y), &c, lr, o.clip)?;
        report.train.push((step_at, l));
        if (step_at + 1) % o.eval_every == 0 || step_at + 1 == stop {
            let r0 = G::first(&ranks);
            let v = evaluate(&r0.model, &o, data, &r0.inputs)?;
            report.val.push((step_at + 1, v));
            if o.verbose {
                println!(
                    "step {:>5}/{}  loss {l:.4}  validation loss {v:.4}",
                    step_at + 1,
                    o.steps
                );
            }
            if let Some(dir) = &o.save {
                save(dir, &r0.model, &r0.opt, &report)?;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {secs:.1} s ({:.0} tokens/s on {} GPUs)",
        stop - start,
        ((stop - start) * o.batch * c.ctx) as f64 / secs.max(1e-9),
        G::N
    );
    let r0 = G::first(&ranks);
    if let Some(dir) = &o.save {
        save(dir, &r0.model, &r0.opt, &report)?;
        println!("checkpoint in {}", dir.display());
    }
    if let Some(path) = &o.plot {
        std::fs::write(path, loss_svg(&report.train, &report.val))?;
    }
    if o.sample > 0 {
        report.sample = sample(&r0.model, &o, data)?;
        println!("--- sample ---\n{}\n---", report.sample);
    }
    Ok(report)
}

/// `--bench --gpus N`: [`super::bench`]'s step (GPT-2 124M unless sizes
/// are given, random tokens) with `--batch` per GPU, so the global batch
/// is N times it: warm-up steps, then the median of `o.steps` steps, each
/// timed between synchronisations of every GPU, and the tokens per second
/// of the whole group.
pub fn bench<G: Group<T>, T: Float>(o: &Options) -> AnyResult<f64> {
    let (host, c) = model_for::<Cpu, T>(o)?;
    let (b, s) = (o.batch * G::N, o.model.ctx.min(c.ctx));
    let c = Config { ctx: s, ..c };
    println!(
        "bench --gpus {}: GPT-2 of {} layers, width {}, {} heads, vocabulary {} (projection padded to {}): {} parameters; B {} per GPU ({b} in all), T {s}, {}, AdamW, gradients all-reduced in {} MiB buckets",
        G::N,
        c.layers,
        c.width,
        c.heads,
        c.vocab,
        c.vocab.next_multiple_of(64),
        host.num_params(),
        o.batch,
        T::KIND.name(),
        tensorfn::collective::DEFAULT_BUCKET_BYTES >> 20,
    );
    let comm = Comm::<G>::new()?;
    let mut ranks = replicas::<G, T>(&comm, &host, o, &c, None)?;
    let mut rng = Lcg::new(o.seed);
    let mut tokens = || -> Result<Ids<Cpu>> {
        let v = (0..b * s).map(|_| rng.below(c.vocab) as i64).collect();
        Tensor::<Cpu, i64, shape![_, _]>::from_vec_dims(v, &[b, s])
    };
    let (x, y) = (tokens()?, tokens()?);
    let mut times = Vec::new();
    for i in 0..o.steps + 2 {
        G::synchronize()?;
        let t0 = Instant::now();
        let l = step::<G, T>(&comm, &mut ranks, (&x, &y), &c, o.lr, o.clip)?;
        G::synchronize()?;
        let secs = t0.elapsed().as_secs_f64();
        if i >= 2 {
            times.push(secs);
        }
        println!(
            "step {i:2}{}: {:8.2} ms, loss {l:.4}",
            if i < 2 { " (warm-up)" } else { "" },
            1e3 * secs
        );
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "median of {} steps on {} GPUs: {:.2} ms, {:.0} tokens/s",
        times.len(),
        G::N,
        1e3 * median,
        (b * s) as f64 / median
    );
    for &ordinal in G::ORDINALS {
        if let Ok(stats) = tensorfn::cuda_memory_stats(ordinal) {
            println!(
                "cuda:{ordinal}: peak allocated {:.1} MiB",
                stats.peak_allocated_bytes as f64 / (1 << 20) as f64
            );
        }
    }
    Ok(median)
}
