//! CPU-side checks of the collectives: ids, shapes, the compile-time
//! shard rule, and NCCL's absence. The GPU runs are in
//! `cuda/nccl/tests.rs`.

use super::*;
use crate::shape::{Const, Dyn};

#[test]
fn ids_round_trip_through_bytes_and_hex() {
    let mut bytes = [0u8; 128];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 37 % 256) as u8;
    }
    let id = NcclId::from_bytes(&bytes).unwrap();
    assert_eq!(id.to_bytes(), bytes);
    assert_eq!(NcclId::from_hex(&id.to_hex()).unwrap(), id);
    assert_eq!(NcclId::from_hex(&id.to_hex().to_uppercase()).unwrap(), id);
    for n in [0, 127, 129] {
        let e = NcclId::from_bytes(&vec![0; n]).unwrap_err();
        assert!(e.to_string().contains(&format!("{n} bytes")), "{e}");
    }
    assert!(NcclId::from_hex(&"0".repeat(255)).is_err());
    assert!(NcclId::from_hex(&"g".repeat(256)).is_err());
    assert!(NcclId::from_hex(&"é".repeat(128)).is_err());
    assert!(format!("{id:?}").starts_with("NcclId("));
}

#[test]
fn groups_know_their_ordinals() {
    type G = (Cuda<2>, Cuda<0>, Cuda<5>);
    assert_eq!(G::N, 3);
    assert_eq!(G::ORDINALS, &[2, 0, 5]);
    assert!(distinct(G::ORDINALS));
    assert!(!distinct(&[0, 1, 2, 3, 4, 5, 6, 0]));
    assert!(distinct(&[]));
    type Eight = (
        Cuda<0>,
        Cuda<1>,
        Cuda<2>,
        Cuda<3>,
        Cuda<4>,
        Cuda<5>,
        Cuda<6>,
        Cuda<7>,
    );
    assert_eq!(Eight::N, 8);
}

#[test]
fn tensors_of_a_tuple_must_share_their_run_time_dims() {
    assert_eq!(
        check_same_dims("all_reduce", &[vec![4, 2], vec![4, 2]]).unwrap(),
        vec![4, 2]
    );
    let e = check_same_dims("all_reduce", &[vec![4, 2], vec![4, 2], vec![3, 2]]).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Shape { .. }));
    assert!(
        text.contains("all_reduce") && text.contains("tensor 2") && text.contains("[3, 2]"),
        "{text}"
    );
}

#[test]
fn shard_dims_are_checked_against_the_output_type() {
    type Out = (Dyn, Const<3>);
    assert_eq!(
        shard_dims::<Out>("all_gather", &[2, 3], 4, true).unwrap(),
        vec![8, 3]
    );
    assert_eq!(
        shard_dims::<Out>("reduce_scatter", &[8, 3], 4, false).unwrap(),
        vec![2, 3]
    );
    // Not divisible: the input is named, with the fix.
    let e = shard_dims::<Out>("reduce_scatter", &[6, 3], 4, false).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("divide by the 4 ranks") && text.contains("[6, 3]"),
        "{text}"
    );
    // The output type disagrees: the output is named.
    let e = shard_dims::<(Const<5>, Const<3>)>("all_gather", &[2, 3], 2, true).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("output type") && text.contains("[4, 3]"),
        "{text}"
    );
    let e = shard_dims::<(Dyn, Const<4>)>("all_gather", &[2, 3], 2, true).unwrap_err();
    assert!(e.to_string().contains("output type"), "{e}");
    // A 0-d input has no dim 0.
    assert!(shard_dims::<()>("all_gather", &[], 2, true).is_err());
    // Empty dims are fine.
    assert_eq!(
        shard_dims::<(Dyn,)>("all_gather", &[0], 2, true).unwrap(),
        vec![0]
    );
}

#[test]
fn the_static_shard_rule() {
    fn dims(d: &[Option<usize>]) -> [Option<usize>; MAX_RANK] {
        let mut out = [None; MAX_RANK];
        out[..d.len()].copy_from_slice(d);
        out
    }
    let check = |i: &[Option<usize>], o: &[Option<usize>], gather, one, n| {
        static_shard_dims(i.len(), &dims(i), o.len(), &dims(o), gather, one, n)
    };
    let (s, d) = (Some, None::<usize>);
    assert_eq!(check(&[s(2), s(3)], &[s(4), s(3)], true, true, 2), OK);
    assert_eq!(check(&[s(2), s(3)], &[s(5), s(3)], true, true, 2), BAD_DIM0);
    assert_eq!(check(&[s(2), s(3)], &[s(4), s(4)], true, true, 2), BAD_TAIL);
    assert_eq!(check(&[s(2), s(3)], &[s(4)], true, true, 2), BAD_RANK);
    assert_eq!(check(&[], &[], true, true, 2), BAD_RANK);
    assert_eq!(
        check(&[s(5), s(3)], &[s(2), s(3)], false, true, 2),
        NOT_DIVISIBLE
    );
    assert_eq!(
        check(&[s(6), s(3)], &[s(2), s(3)], false, true, 2),
        BAD_DIM0
    );
    assert_eq!(check(&[s(6), s(3)], &[s(3), s(3)], false, true, 2), OK);
    // `Dyn` dims and worlds known only at run time are left to run time.
    assert_eq!(check(&[d, s(3)], &[s(3), s(3)], false, true, 2), OK);
    assert_eq!(check(&[s(5), s(3)], &[s(2), s(3)], false, false, 2), OK);
    assert_eq!(
        check(&[s(5), s(3)], &[s(2), s(4)], false, false, 2),
        BAD_TAIL
    );
}

#[test]
fn a_missing_library_is_an_error_with_the_fix() {
    let e = match nccl::load(&["libnccl-not-installed.so.2"]) {
        Err(e) => e,
        Ok(_) => panic!("a library that does not exist opened"),
    };
    let text = e.to_string();
    assert!(matches!(e, Error::NcclUnavailable { .. }));
    assert!(
        text.contains("nvidia-nccl-cu12") && text.contains("LD_LIBRARY_PATH"),
        "{text}"
    );
    // A library without NCCL's symbols (libc) is refused by name too.
    match nccl::load(&["libc.so.6"]) {
        Err(Error::NcclUnavailable { reason }) => {
            assert!(reason.contains("ncclGetVersion"), "{reason}")
        }
        Err(other) => panic!("expected NcclUnavailable, got {other}"),
        Ok(_) => panic!("libc is not NCCL"),
    }
}

#[test]
fn statuses_and_versions_read_as_nccl_names_them() {
    assert_eq!(nccl::status_name(6), "ncclRemoteError");
    assert_eq!(nccl::status_name(8), "ncclTimeout");
    assert_eq!(nccl::status_name(42), "ncclResult_t 42");
    assert_eq!(nccl::version_text(22705), "2.27.5");
    assert_eq!(nccl::version_text(2804), "2.8.4");
    let e = nccl::timeout_error("ncclAllReduce", Duration::from_secs(3));
    assert!(matches!(&e, Error::Nccl { status, .. } if status == "timeout"));
    assert!(e.to_string().contains("3.0 s") && e.to_string().contains("set_timeout"));
}

#[test]
fn nvlink_multicast_is_off_unless_the_user_chose() {
    nccl::nvls_off();
    assert!(std::env::var_os("NCCL_NVLS_ENABLE").is_some());
}

#[test]
fn sums_of_bools_are_refused() {
    assert!(reduce_dtype::<bool>("all_reduce", ReduceOp::Sum).is_err());
    assert!(reduce_dtype::<bool>("all_reduce", ReduceOp::Max).is_ok());
    assert!(reduce_dtype::<f32>("all_reduce", ReduceOp::Mean).is_ok());
}

/// A fresh random stream each run, its seed printed for a rerun.
fn fresh() -> crate::random::SplitMix64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    eprintln!("seed {t}");
    crate::random::SplitMix64::new(t)
}

#[test]
fn the_bucket_plan_packs_tensors_in_push_order_by_dtype() {
    use dp::BucketPlan;
    let mut rng = fresh();
    let kinds = [DTypeKind::F32, DTypeKind::BF16, DTypeKind::F64];
    for _ in 0..50 {
        let bytes = 1 + (rng.next_u64() % 4096) as usize;
        let mut plan = BucketPlan::new(bytes);
        // (dtype, numel, placement) in push order, and the buckets
        // started, in order.
        let mut pushed = Vec::new();
        let mut started = Vec::new();
        let n = (rng.next_u64() % 60) as usize;
        for _ in 0..n {
            let dtype = kinds[(rng.next_u64() % 3) as usize];
            let numel = match rng.next_u64() % 8 {
                0 => 0,
                1 => (rng.next_u64() % 4096) as usize, // often larger than a bucket
                _ => (rng.next_u64() % 64) as usize,
            };
            let p = plan.place(dtype, numel);
            started.extend(p.closed_before);
            if p.full {
                started.extend(p.bucket);
            }
            pushed.push((dtype, numel, p));
        }
        started.extend(plan.flush());
        // Every bucket is started exactly once, each after it opened.
        let mut sorted = started.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..plan.buckets.len()).collect::<Vec<_>>());
        assert!(plan.buckets.iter().all(|b| b.closed));
        for (b, bucket) in plan.buckets.iter().enumerate() {
            let cap = (bytes / bucket.dtype.size_bytes()).max(1);
            let members: Vec<_> = pushed
                .iter()
                .filter(|(_, _, p)| p.bucket == Some(b))
                .collect();
            assert!(!members.is_empty(), "bucket {b} is empty");
            // One dtype, tensors back to back in push order from 0.
            let mut offset = 0;
            for (dtype, numel, p) in &members {
                assert_eq!(*dtype, bucket.dtype);
                assert_eq!(p.offset, offset, "bucket {b}");
                offset += numel;
            }
            assert_eq!(offset, bucket.len);
            assert!(members[0].2.opened);
            assert!(members[1..].iter().all(|(_, _, p)| !p.opened));
            // Never more than the size, unless one tensor alone is larger.
            assert_eq!(bucket.capacity, cap.max(members[0].1));
            assert!(bucket.len <= bucket.capacity);
            if members.len() > 1 {
                assert!(bucket.len <= cap, "bucket {b}: {} > {cap}", bucket.len);
            }
        }
        for (i, (dtype, numel, p)) in pushed.iter().enumerate() {
            if *numel == 0 {
                assert_eq!(p.bucket, None);
                continue;
            }
            let b = p.bucket.unwrap();
            let cap = (bytes / dtype.size_bytes()).max(1);
            // A bucket fills when it reaches the size.
            assert_eq!(p.full, p.offset + numel >= cap);
            // A bucket closed before a tensor is the previous one of its
            // dtype, and the tensor did not fit in it.
            if let Some(c) = p.closed_before {
                let prev = &plan.buckets[c];
                assert_eq!(prev.dtype, *dtype);
                assert!(prev.len + numel > prev.capacity);
                assert!(c < b && p.opened);
            }
            // Buckets of a dtype open in push order.
            for (d2, n2, q) in &pushed[..i] {
                if d2 == dtype && *n2 > 0 {
                    assert!(q.bucket.unwrap() <= b);
                }
            }
        }
    }
}

#[test]
fn replicas_must_agree_across_devices() {
    let ok = vec![
        (
            "w".to_string(),
            DTypeKind::F32,
            vec![2, 3],
            crate::DeviceKind::Cuda(0),
        ),
        (
            "b".to_string(),
            DTypeKind::F32,
            vec![3],
            crate::DeviceKind::Cuda(0),
        ),
    ];
    let mut other = ok.clone();
    for t in &mut other {
        t.3 = crate::DeviceKind::Cuda(1);
    }
    assert!(dp::check_replicas("t", &[0, 1], &[ok.clone(), other.clone()]).is_ok());
    let mut bad = other.clone();
    bad[1].2 = vec![4];
    let e = dp::check_replicas("t", &[0, 1], &[ok.clone(), bad]).unwrap_err();
    assert!(e.to_string().contains("`b` of device 1"), "{e}");
    let mut cpu = other.clone();
    cpu[0].3 = crate::DeviceKind::Cpu;
    let e = dp::check_replicas("t", &[0, 1], &[ok.clone(), cpu]).unwrap_err();
    assert!(e.to_string().contains("cuda:1"), "{e}");
    let e = dp::check_replicas("t", &[0, 1], &[ok, other[..1].to_vec()]).unwrap_err();
    assert!(e.to_string().contains("1 tensors"), "{e}");
}
