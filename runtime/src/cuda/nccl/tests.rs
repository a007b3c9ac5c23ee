//! Single-rank communicators on cuda:0 against the host: every collective
//! and dtype, the multi-process path with a world of one, run-time shape
//! errors, and a timeout. Each test skips with a one-line notice without
//! a GPU or without NCCL. Copies between two GPUs run where there are two.

use crate::collective::{Comm, NcclId, Ranks, ReduceOp};
use crate::cuda::tests::{gpu, seed};
use crate::device::Cuda;
use crate::dtype::DType;
use crate::error::Error;
use crate::random::SplitMix64;
use crate::tensor::Tensor;
use crate::{shape, Cpu};
use half::{bf16, f16};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

type One = (Cuda<0>,);

/// A single-rank communicator on cuda:0, or `None` after printing why the
/// test skips.
fn comm() -> Option<(MutexGuard<'static, ()>, Comm<One>)> {
    let (serial, _) = gpu()?;
    match Comm::<One>::new() {
        Ok(c) => Some((serial, c)),
        Err(Error::NcclUnavailable { reason }) => {
            eprintln!("skipping: no NCCL ({reason})");
            None
        }
        Err(e) => panic!("a single-rank communicator on cuda:0: {e}"),
    }
}

/// Random values with the floats' edge values in front.
fn values<T: DType>(rng: &mut SplitMix64, n: usize) -> Vec<T> {
    let mut v: Vec<T> = (0..n)
        .map(|_| T::from_f64(-100.0 + 200.0 * rng.uniform()))
        .collect();
    if T::KIND.is_float() {
        let edges = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e-30];
        for (x, e) in v.iter_mut().zip(edges) {
            *x = T::from_f64(e);
        }
    }
    v
}

/// Equal as values, NaN equal to NaN and the sign of zero kept.
fn same<T: DType>(a: &[T], b: &[T], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let (x, y) = (x.to_f64(), y.to_f64());
        let ok =
            (x.is_nan() && y.is_nan()) || (x == y && x.is_sign_negative() == y.is_sign_negative());
        assert!(ok, "{what}: element {i}: {x} vs {y}");
    }
}

/// With one rank, every reduction of a tensor is the tensor (the mean
/// divides by 1), a gather or scatter is the tensor, and so is a
/// broadcast: the host values are the reference.
fn every_collective<T: DType>(comm: &Comm<One>, rng: &mut SplitMix64) {
    let name = T::KIND.name();
    for n in [0usize, 1, 7, 4099] {
        let host = values::<T>(rng, n * 3);
        let cpu = Tensor::<Cpu, T, shape![_, 3]>::from_vec_dims(host.clone(), &[n, 3]).unwrap();
        let x = cpu.to_device::<Cuda<0>>().unwrap();
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            let (y,) = comm.all_reduce(&(x.clone(),), op).unwrap();
            assert_eq!(y.shape(), &[n, 3]);
            same(
                &y.to_vec().unwrap(),
                &host,
                &format!("all_reduce {op:?} {name} n={n}"),
            );
            let mut z = (
                Tensor::<Cuda<0>, T, shape![_, 3]>::from_vec_dims(host.clone(), &[n, 3]).unwrap(),
            );
            comm.all_reduce_(&mut z, op).unwrap();
            same(
                &z.0.to_vec().unwrap(),
                &host,
                &format!("all_reduce_ {op:?} {name} n={n}"),
            );
            let (s,) = comm
                .reduce_scatter::<shape![_, 3], _>(&(x.clone(),), op)
                .unwrap();
            same(
                &s.to_vec().unwrap(),
                &host,
                &format!("reduce_scatter {op:?} {name} n={n}"),
            );
        }
        let (g,) = comm.all_gather::<shape![_, 3], _>(&(x.clone(),)).unwrap();
        same(
            &g.to_vec().unwrap(),
            &host,
            &format!("all_gather {name} n={n}"),
        );
        let (b,) = comm.broadcast(&(x.clone(),), 0).unwrap();
        same(
            &b.to_vec().unwrap(),
            &host,
            &format!("broadcast {name} n={n}"),
        );
        // The input is untouched by the out-of-place calls.
        same(&x.to_vec().unwrap(), &host, &format!("input {name} n={n}"));
    }
}

#[test]
fn single_rank_collectives_of_every_dtype_equal_the_host() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let mut rng = seed();
    every_collective::<f32>(&comm, &mut rng);
    every_collective::<f64>(&comm, &mut rng);
    every_collective::<f16>(&comm, &mut rng);
    every_collective::<bf16>(&comm, &mut rng);
    every_collective::<i32>(&comm, &mut rng);
    every_collective::<i64>(&comm, &mut rng);
    every_collective::<u8>(&comm, &mut rng);
}

#[test]
fn strided_views_are_made_contiguous() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let x = Tensor::<Cuda<0>, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let t = x.t().unwrap();
    assert!(!t.is_contiguous());
    let (y,) = comm.all_reduce(&(t.clone(),), ReduceOp::Sum).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    let (g,) = comm.all_gather::<shape![3, 2], _>(&(t.clone(),)).unwrap();
    assert_eq!(g.to_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    // In place on a view (or a shared buffer) writes a new buffer, not the
    // one the other tensor sees.
    let mut v = (t,);
    comm.all_reduce_(&mut v, ReduceOp::Max).unwrap();
    assert_eq!(v.0.to_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    assert_eq!(x.to_vec().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
}

#[test]
fn run_time_shape_mismatches_are_errors() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let x = Tensor::<Cuda<0>, f32, shape![_, 2]>::from_vec_dims(vec![0.0; 6], &[3, 2]).unwrap();
    let e = comm
        .all_gather::<shape![4, 2], _>(&(x.clone(),))
        .unwrap_err();
    assert!(
        matches!(e, Error::Shape { .. }) && e.to_string().contains("output type"),
        "{e}"
    );
    let y = Tensor::<Cuda<0>, f32, shape![_, _]>::from_vec_dims(vec![0.0; 6], &[3, 2]).unwrap();
    let e = comm
        .reduce_scatter::<shape![_, 3], _>(&(y,), ReduceOp::Sum)
        .unwrap_err();
    assert!(e.to_string().contains("reduce_scatter"), "{e}");
    let e = comm.broadcast(&(x.clone(),), 1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let b = Tensor::<Cuda<0>, bool, shape![2]>::from_vec(vec![true, false]).unwrap();
    assert!(matches!(
        comm.all_reduce(&(b.clone(),), ReduceOp::Sum),
        Err(Error::DType { .. })
    ));
    let (any,) = comm.all_reduce(&(b,), ReduceOp::Max).unwrap();
    assert_eq!(any.to_vec().unwrap(), vec![true, false]);
    // The communicator is still usable after the errors.
    let (y,) = comm.all_reduce(&(x,), ReduceOp::Sum).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
}

#[test]
fn a_world_of_one_from_an_id() {
    let Some((_serial, _)) = comm() else { return };
    let id = NcclId::new().unwrap();
    let again = NcclId::from_bytes(&id.to_bytes()).unwrap();
    let comm = Comm::<One, Ranks>::from_rank(&again, 0, 1).unwrap();
    assert_eq!((comm.rank(), comm.world()), (0, 1));
    let x = Tensor::<Cuda<0>, f64, shape![4]>::from_vec(vec![1.0, -2.5, 3.0, 0.0]).unwrap();
    let (y,) = comm.all_reduce(&(x,), ReduceOp::Mean).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![1.0, -2.5, 3.0, 0.0]);
    // A rank past the world is refused before NCCL sees it.
    assert!(Comm::<One, Ranks>::from_rank(&id, 1, 1).is_err());
    assert!(Comm::<One, Ranks>::from_rank(&id, 0, 0).is_err());
}

#[test]
fn a_peer_that_never_joins_times_out_instead_of_hanging() {
    let Some((_serial, _)) = comm() else { return };
    let id = NcclId::new().unwrap();
    let start = Instant::now();
    // Rank 0 of a world of two whose rank 1 never comes.
    let made = super::Comms::new(&[0], id.to_bytes(), 0, 2, Duration::from_secs(3));
    let e = match made {
        Err(e) => e,
        Ok(_) => panic!("a world of two with one rank was made"),
    };
    assert!(
        matches!(&e, Error::Nccl { status, .. } if status == "timeout" || status.starts_with("nccl")),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn counts_that_differ_between_ranks_end_in_an_error_not_a_hang() {
    let Some((_serial, _)) = comm() else { return };
    if crate::cuda_device_count().unwrap_or(0) < 2 {
        eprintln!("skipping: one GPU (a world of two ranks needs two)");
        return;
    }
    // Two processes' ranks, here two threads: rank 0 reduces 4 elements
    // where rank 1 reduces 2^20. NCCL does not compare the counts; rank
    // 1 waits for data that never comes, so its timeout must end it.
    let id = NcclId::new().unwrap();
    let start = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| -> crate::Result<()> {
            let comm = Comm::<(Cuda<0>,), Ranks>::from_rank(&id, 0, 2)?;
            comm.set_timeout(Duration::from_secs(5));
            let x = Tensor::<Cuda<0>, f32, shape![_]>::zeros_dims(&[4])?;
            comm.all_reduce(&(x,), ReduceOp::Sum).map(|_| ())
        });
        let b = s.spawn(|| -> crate::Result<()> {
            let comm = Comm::<(Cuda<1>,), Ranks>::from_rank(&id, 1, 2)?;
            comm.set_timeout(Duration::from_secs(5));
            let x = Tensor::<Cuda<1>, f32, shape![_]>::zeros_dims(&[1 << 20])?;
            comm.all_reduce(&(x,), ReduceOp::Sum).map(|_| ())
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    let e = b.expect_err("rank 1 reduced 2^20 elements against rank 0's 4");
    assert!(matches!(e, Error::Nccl { .. }), "{e}");
    // Rank 0 may finish with wrong values or time out too; either way it
    // returns.
    if let Err(e) = a {
        assert!(matches!(e, Error::Nccl { .. }), "{e}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn copies_between_two_gpus_use_peer_access() {
    let Some((_serial, _)) = gpu() else { return };
    if crate::cuda_device_count().unwrap_or(0) < 2 {
        eprintln!("skipping: one GPU (peer copies need two)");
        return;
    }
    let x = Tensor::<Cuda<0>, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let y = x.t().unwrap().to_device::<Cuda<1>>().unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    let back = y.to_device::<Cuda<0>>().unwrap();
    assert_eq!(back.to_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
}

#[test]
fn collectives_in_flight_overlap_compute_and_are_waited_on_later() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let mut rng = seed();
    let host: Vec<Vec<f32>> = (0..6).map(|i| values(&mut rng, 1000 + 37 * i)).collect();
    let tensors: Vec<Tensor<Cuda<0>, f32, shape![_]>> = host
        .iter()
        .map(|h| Tensor::from_vec_dims(h.clone(), &[h.len()]).unwrap())
        .collect();
    // Shared tensors (a clone kept here) are reduced out of place; the
    // others in place. Compute queued after the starts runs meanwhile.
    let kept = tensors[0].clone();
    let mut pending = Vec::new();
    for (i, t) in tensors.into_iter().enumerate() {
        let op = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max][i % 3];
        pending.push(comm.all_reduce_async((t,), op).unwrap());
    }
    let busy = Tensor::<Cuda<0>, f32, shape![_]>::ones_dims(&[1 << 20]).unwrap();
    let busy = (busy.clone() + busy).unwrap();
    // A start whose tensor is dropped by the caller keeps it alive.
    let gather = {
        let x = Tensor::<Cuda<0>, f32, shape![_]>::from_vec_dims(host[1].clone(), &[host[1].len()])
            .unwrap();
        comm.all_gather_async::<shape![_], _>(&(x,)).unwrap()
    };
    let bcast = comm.broadcast_async(&(kept.clone(),), 0).unwrap();
    // One dropped without waiting: the drop waits.
    drop(
        comm.all_reduce_async((kept.clone(),), ReduceOp::Sum)
            .unwrap(),
    );
    for (i, p) in pending.into_iter().enumerate().rev() {
        let (y,) = p.wait().unwrap();
        same(
            &y.to_vec().unwrap(),
            &host[i],
            &format!("async all_reduce {i}"),
        );
    }
    let (g,) = gather.wait().unwrap();
    same(&g.to_vec().unwrap(), &host[1], "async all_gather");
    let (b,) = bcast.wait().unwrap();
    same(&b.to_vec().unwrap(), &host[0], "async broadcast");
    same(&kept.to_vec().unwrap(), &host[0], "the shared input");
    assert_eq!(busy.to_vec().unwrap()[0], 2.0);
    // Empty tensors queue nothing and are done at once.
    let e = Tensor::<Cuda<0>, f32, shape![_]>::zeros_dims(&[0]).unwrap();
    let p = comm.all_reduce_async((e,), ReduceOp::Sum).unwrap();
    assert!(p.is_done().unwrap());
    assert_eq!(p.wait().unwrap().0.dims(), &[0]);
    // Errors are returned before anything is queued.
    let b = Tensor::<Cuda<0>, bool, shape![1]>::from_vec(vec![true]).unwrap();
    assert!(comm.all_reduce_async((b,), ReduceOp::Mean).is_err());
}

#[test]
fn gradient_buckets_of_one_rank_give_back_the_gradients() {
    use crate::collective::GradBuckets;
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let mut rng = seed();
    for bytes in [64usize, 1000, 1 << 16, 25 << 20] {
        let mut buckets = GradBuckets::new(&comm, bytes);
        // Per-block gradients of three dtypes and random sizes, pushed as
        // a per-layer backward would give them; one a strided view.
        let mut expect32 = Vec::new();
        let mut tickets32 = Vec::new();
        let mut expect16 = Vec::new();
        let mut tickets16 = Vec::new();
        for block in 0..5 {
            let n = (rng.next_u64() % 700) as usize;
            let h: Vec<f32> = values(&mut rng, n * 2);
            let w =
                Tensor::<Cuda<0>, f32, shape![_, 2]>::from_vec_dims(h.clone(), &[n, 2]).unwrap();
            let b: Vec<f32> = values(&mut rng, 3);
            let bias = Tensor::<Cuda<0>, f32, shape![3]>::from_vec(b.clone()).unwrap();
            let t = if block == 2 {
                // A strided view of the same values.
                let wt = w.t().unwrap().contiguous().unwrap().t().unwrap();
                assert!(!wt.is_contiguous() || n < 2);
                [wt, w]
            } else {
                [w.clone(), w]
            };
            tickets32.push((buckets.push((t,)).unwrap(), buckets.push((bias,)).unwrap()));
            expect32.push((h, b));
            let m = (rng.next_u64() % 300) as usize;
            let hb: Vec<bf16> = values(&mut rng, m);
            let g = Tensor::<Cuda<0>, bf16, shape![_]>::from_vec_dims(hb.clone(), &[m]).unwrap();
            tickets16.push(buckets.push((g,)).unwrap());
            expect16.push(hb);
        }
        let d = Tensor::<Cuda<0>, f64, shape![4]>::from_vec(vec![0.25, -0.0, 1e300, -3.0]).unwrap();
        let t64 = buckets.push(([d],)).unwrap();
        let mut reduced = buckets.finish().unwrap();
        // Taken back in another order than pushed.
        let ([d],) = reduced.take(t64).unwrap();
        same(&d.to_vec().unwrap(), &[0.25, -0.0, 1e300, -3.0], "f64");
        for (t, h) in tickets16.into_iter().zip(&expect16).rev() {
            let (g,) = reduced.take(t).unwrap();
            same(&g.to_vec().unwrap(), h, &format!("bf16 bytes={bytes}"));
        }
        for ((t, tb), (h, b)) in tickets32.into_iter().zip(&expect32) {
            let (ws,) = reduced.take(t).unwrap();
            let (bias,) = reduced.take(tb).unwrap();
            for w in &ws {
                same(
                    &w.to_vec().unwrap(),
                    h,
                    &format!("f32 weight bytes={bytes}"),
                );
            }
            same(
                &bias.to_vec().unwrap(),
                b,
                &format!("f32 bias bytes={bytes}"),
            );
        }
    }
    // Integer and host tensors are refused, naming the tensor.
    let mut buckets = comm.grad_buckets();
    let i = Tensor::<Cuda<0>, i32, shape![2]>::ones().unwrap();
    assert!(matches!(buckets.push((vec![i],)), Err(Error::DType { .. })));
    let c = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    let e = buckets.push((vec![c],)).unwrap_err();
    assert!(e.to_string().contains("`0`"), "{e}");
    // Dropped without finishing: the reductions in flight are waited on.
    let mut buckets = GradBuckets::new(&comm, 8);
    let _ = buckets
        .push((Tensor::<Cuda<0>, f32, shape![16]>::ones().unwrap(),))
        .unwrap();
    drop(buckets);
}

#[test]
fn parameters_are_broadcast_in_place_from_rank_0() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let mut rng = seed();
    let h: Vec<f32> = values(&mut rng, 12);
    let hb: Vec<bf16> = values(&mut rng, 5);
    let w = Tensor::<Cuda<0>, f32, shape![3, 4]>::from_vec(h.clone()).unwrap();
    let shared = w.clone();
    let b = Tensor::<Cuda<0>, bf16, shape![_]>::from_vec_dims(hb.clone(), &[5]).unwrap();
    let e = Tensor::<Cuda<0>, f32, shape![_]>::zeros_dims(&[0]).unwrap();
    let mut replicas = (w,);
    comm.broadcast_params(&mut replicas).unwrap();
    let (w,) = replicas;
    let mut replicas = (vec![b],);
    comm.broadcast_params(&mut replicas).unwrap();
    let (b,) = replicas;
    let mut replicas = ([e],);
    comm.broadcast_params(&mut replicas).unwrap();
    let ([e],) = replicas;
    same(&w.to_vec().unwrap(), &h, "weight");
    same(&b[0].to_vec().unwrap(), &hb, "bias");
    assert_eq!(e.dims(), &[0]);
    same(&shared.to_vec().unwrap(), &h, "the shared tensor");
    let mut host = (vec![Tensor::<Cpu, f32, shape![2]>::ones().unwrap()],);
    let e = comm.broadcast_params(&mut host).unwrap_err();
    assert!(e.to_string().contains("cuda:0"), "{e}");
}

#[test]
fn tickets_belong_to_their_buckets() {
    let Some((_serial, comm)) = comm() else {
        return;
    };
    let mut a = comm.grad_buckets();
    let mut b = comm.grad_buckets();
    let one = || (Tensor::<Cuda<0>, f32, shape![2]>::ones().unwrap(),);
    let ta = a.push(one()).unwrap();
    let tb = b.push(one()).unwrap();
    let mut ra = a.finish().unwrap();
    let mut rb = b.finish().unwrap();
    assert!(ra.take(tb).is_err());
    assert_eq!(ra.take(ta).unwrap().0.to_vec().unwrap(), vec![1.0; 2]);
    let _ = &mut rb;
}
