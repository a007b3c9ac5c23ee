//! Conversions between tensors and `ndarray` arrays, `Vec`s and slices:
//! random data, every dtype, views with non-standard strides, shape errors.

use half::{bf16, f16};
use ndarray::{s, Array, Array1, Array2, Array3, ArrayD, Axis, Dimension, IxDyn};
use tensorfn_runtime::{shape, Cpu, Cuda, DType, DTypeKind, Error, Tensor};

/// A small generator seeded from the clock, so every run sees fresh data;
/// the seed is printed to replay a failure.
struct Rng(u64);

impl Rng {
    fn fresh(test: &str) -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9);
        eprintln!("{test}: seed {seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value of `T` that is neither zero nor constant across draws.
    fn value<T: DType>(&mut self) -> T {
        let bits = self.next();
        if T::KIND == DTypeKind::Bool {
            T::from_i64((bits & 1) as i64)
        } else if T::KIND.is_float() {
            T::from_f64((bits >> 11) as f64 / (1u64 << 53) as f64 * 200.0 - 100.0)
        } else {
            T::from_i64((bits % 251) as i64 + 1)
        }
    }

    fn array<T: DType>(&mut self, dims: &[usize]) -> ArrayD<T> {
        ArrayD::from_shape_simple_fn(IxDyn(dims), || self.value())
    }
}

/// The elements of any array in logical row-major order, read by index so
/// the reference does not depend on ndarray's iteration order.
fn by_index<T: Copy, D: Dimension>(a: &ndarray::ArrayView<'_, T, D>) -> Vec<T> {
    let dims = a.shape().to_vec();
    let a = a.view().into_dyn();
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        out.push(a[IxDyn(&idx)]);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn round_trip<T: DType>(rng: &mut Rng) {
    let a: Array3<T> = rng
        .array::<T>(&[3, 4, 5])
        .into_dimensionality()
        .expect("rank 3");
    let t = Tensor::<Cpu, T, shape![3, 4, 5]>::try_from(a.view()).unwrap();
    assert_eq!(t.dtype(), T::KIND);
    assert_eq!(t.to_vec().unwrap(), by_index(&a.view()));
    let back: Array3<T> = t.clone().into();
    assert_eq!(back, a, "{:?}", T::KIND);
    assert_eq!(t.to_ndarray().unwrap(), a);
    assert_eq!(Array3::from(&t), a);
    let dynamic = Tensor::<Cpu, T, shape![_, 4, _]>::try_from(a.clone()).unwrap();
    assert_eq!(dynamic.shape(), &[3, 4, 5]);
    assert_eq!(Vec::from(dynamic), a.iter().copied().collect::<Vec<_>>());
}

#[test]
fn every_dtype_round_trips_unchanged() {
    let mut rng = Rng::fresh("every_dtype_round_trips_unchanged");
    round_trip::<f32>(&mut rng);
    round_trip::<f64>(&mut rng);
    round_trip::<f16>(&mut rng);
    round_trip::<bf16>(&mut rng);
    round_trip::<i32>(&mut rng);
    round_trip::<i64>(&mut rng);
    round_trip::<u8>(&mut rng);
    round_trip::<bool>(&mut rng);
}

#[test]
fn f64_arrays_keep_every_bit() {
    let mut rng = Rng::fresh("f64_arrays_keep_every_bit");
    // Values that f32 cannot hold: a silent narrowing would change them.
    let a = Array2::from_shape_simple_fn((7, 9), || rng.value::<f64>() + 1e-12);
    let t = Tensor::<Cpu, f64, shape![7, 9]>::try_from(&a).unwrap();
    let back = t.to_ndarray().unwrap();
    for (x, y) in a.iter().zip(back.iter()) {
        assert_eq!(x.to_bits(), y.to_bits());
    }
}

#[test]
fn transposed_sliced_and_broadcast_views_read_in_logical_order() {
    let mut rng = Rng::fresh("views");
    let a: Array2<f32> = rng.array::<f32>(&[6, 8]).into_dimensionality().unwrap();

    let transposed = a.t();
    let t = Tensor::<Cpu, f32, shape![8, 6]>::try_from(transposed).unwrap();
    assert_eq!(t.to_vec().unwrap(), by_index(&transposed));
    for i in 0..8 {
        for j in 0..6 {
            assert_eq!(t.to_vec().unwrap()[i * 6 + j], a[[j, i]]);
        }
    }

    let stepped = a.slice(s![1..;2, ..;-3]);
    assert_eq!(stepped.shape(), &[3, 3]);
    let t = Tensor::<Cpu, f32, shape![3, 3]>::try_from(stepped).unwrap();
    assert_eq!(t.to_vec().unwrap(), by_index(&stepped));
    assert_eq!(t.to_vec().unwrap()[0], a[[1, 7]]);

    let column = a.index_axis(Axis(1), 5);
    let t = Tensor::<Cpu, f32, shape![6]>::try_from(column).unwrap();
    assert_eq!(t.to_vec().unwrap(), a.column(5).to_vec());

    let row = a.row(2);
    let broadcast = row.broadcast((4, 8)).unwrap();
    let t = Tensor::<Cpu, f32, shape![4, 8]>::try_from(broadcast).unwrap();
    let v = t.to_vec().unwrap();
    for i in 0..4 {
        assert_eq!(&v[i * 8..(i + 1) * 8], row.as_slice().unwrap());
    }
}

#[test]
fn permuted_owned_arrays_convert_in_logical_order() {
    let mut rng = Rng::fresh("permuted_owned_arrays_convert_in_logical_order");
    let a: Array3<i64> = rng.array::<i64>(&[2, 3, 4]).into_dimensionality().unwrap();
    let reference = by_index(&a.view().permuted_axes([2, 0, 1]));
    let permuted = a.clone().permuted_axes([2, 0, 1]);
    assert!(!permuted.is_standard_layout());
    let t = Tensor::<Cpu, i64, shape![4, 2, 3]>::try_from(permuted).unwrap();
    assert_eq!(t.to_vec().unwrap(), reference);

    // An owned array whose first element is not at the start of its buffer.
    let moved = a.slice_move(s![1.., 1.., ..]);
    assert!(moved.is_standard_layout());
    let reference = by_index(&moved.view());
    let t = Tensor::<Cpu, i64, shape![1, 2, 4]>::try_from(moved).unwrap();
    assert_eq!(t.to_vec().unwrap(), reference);
}

#[test]
fn dims_that_do_not_fit_the_shape_type_name_expected_and_found() {
    let a = Array2::<f32>::from_elem((3, 5), 1.5);
    let e = Tensor::<Cpu, f32, shape![3, 4]>::try_from(&a).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(msg.contains("shape![3, 4]"), "{msg}");
    assert!(msg.contains("[3, 5]"), "{msg}");
    assert!(msg.contains("dim 1 is 5, not 4"), "{msg}");

    let e = Tensor::<Cpu, f32, shape![_, 5, 1]>::try_from(a.view()).unwrap_err();
    assert!(e.to_string().contains("rank 3"), "{e}");
    assert!(e.to_string().contains("rank 2"), "{e}");

    let e = Tensor::<Cpu, f32, shape![5, 3]>::try_from(a).unwrap_err();
    assert!(e.to_string().contains("dim 0 is 3, not 5"), "{e}");
}

#[test]
fn empty_and_scalar_arrays() {
    let empty = Array2::<f64>::zeros((0, 3));
    let t = Tensor::<Cpu, f64, shape![_, 3]>::try_from(&empty).unwrap();
    assert_eq!(t.shape(), &[0, 3]);
    assert_eq!(t.to_ndarray().unwrap().shape(), &[0, 3]);

    let mut rng = Rng::fresh("empty_and_scalar_arrays");
    let v: f32 = rng.value();
    let scalar = ndarray::arr0(v);
    let t = Tensor::<Cpu, f32, shape![]>::try_from(scalar.view()).unwrap();
    assert_eq!(t.item().unwrap(), v);
    assert_eq!(t.to_ndarray().unwrap(), scalar);
}

#[test]
fn vec_and_slice_conversions_infer_one_dyn_dim() {
    let mut rng = Rng::fresh("vec_and_slice_conversions_infer_one_dyn_dim");
    let data: Vec<i32> = (0..24).map(|_| rng.value()).collect();

    let t = Tensor::<Cpu, i32, shape![2, 3, 4]>::try_from(data.clone()).unwrap();
    assert_eq!(Vec::from(&t), data);
    let t = Tensor::<Cpu, i32, shape![_, 4]>::try_from(&data[..]).unwrap();
    assert_eq!(t.shape(), &[6, 4]);
    let t = Tensor::<Cpu, i32, shape![2, _, 3]>::try_from(&data[..]).unwrap();
    assert_eq!(t.shape(), &[2, 4, 3]);
    assert_eq!(Vec::from(t), data);

    let e = Tensor::<Cpu, i32, shape![_, 5]>::try_from(data.clone()).unwrap_err();
    assert!(e.to_string().contains("multiple of 5"), "{e}");
    let e = Tensor::<Cpu, i32, shape![_, _]>::try_from(data.clone()).unwrap_err();
    assert!(e.to_string().contains("from_vec_dims"), "{e}");
    let e = Tensor::<Cpu, i32, shape![5, 5]>::try_from(&data[..]).unwrap_err();
    assert!(e.to_string().contains("25 elements"), "{e}");
}

#[test]
fn shared_tensors_are_copied_not_stolen() {
    let a = Array1::from(vec![1.0f32, 2.0, 3.0]);
    let t = Tensor::<Cpu, f32, shape![3]>::try_from(a).unwrap();
    let shared = t.clone();
    let moved: Array1<f32> = t.into();
    assert_eq!(moved.to_vec(), shared.to_vec().unwrap());
    assert_eq!(shared.to_vec().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn cpu_tensors_view_as_ndarray_without_a_copy() {
    let mut rng = Rng::fresh("cpu_tensors_view_as_ndarray_without_a_copy");
    let a: Array2<f32> = rng.array::<f32>(&[4, 3]).into_dimensionality().unwrap();
    let t = Tensor::<Cpu, f32, shape![4, 3]>::try_from(&a).unwrap();
    let v = t.as_ndarray().expect("a fresh tensor is contiguous");
    assert_eq!(v, a);
    assert_eq!(t.contiguous_ndarray(), a);
}

#[test]
fn gpu_round_trip_or_a_clear_error() {
    let mut rng = Rng::fresh("gpu_round_trip_or_a_clear_error");
    let a: Array2<f32> = rng.array::<f32>(&[5, 7]).into_dimensionality().unwrap();
    match Tensor::<Cuda, f32, shape![7, 5]>::from_ndarray(&a.t()) {
        Ok(g) => {
            let back: Array2<f32> = g.to_ndarray().unwrap();
            assert_eq!(back, a.t());
        }
        Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e:?}"),
    }
    // Shape errors come before any device work.
    let e = Tensor::<Cuda, f32, shape![5, 5]>::from_ndarray(&a).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
}

#[test]
fn dynamic_rank_arrays_convert_when_the_rank_matches() {
    let mut rng = Rng::fresh("dynamic_rank_arrays_convert_when_the_rank_matches");
    let a: ArrayD<u8> = rng.array::<u8>(&[2, 2, 3]);
    let t = Tensor::<Cpu, u8, shape![2, _, 3]>::try_from(a.view()).unwrap();
    let back: Array<u8, ndarray::Ix3> = t.to_ndarray().unwrap();
    assert_eq!(back.into_dyn(), a);
}

#[test]
fn strided_tensor_views_convert_in_logical_order() {
    let mut rng = Rng::fresh("strided_tensor_views_convert_in_logical_order");
    let a: Array2<f32> = rng.array::<f32>(&[3, 5]).into_dimensionality().unwrap();
    let t = Tensor::<Cpu, f32, shape![3, 5]>::try_from(&a).unwrap();

    assert_eq!(ndarray::ArrayView2::try_from(&t).unwrap(), a);
    let transposed = t.t().unwrap();
    assert!(!transposed.is_contiguous());
    assert!(transposed.as_ndarray().is_none());
    let e = ndarray::ArrayView2::try_from(&transposed).unwrap_err();
    assert!(e.to_string().contains("strided view"), "{e}");
    assert_eq!(Array2::from(&transposed), a.t());
    assert_eq!(transposed.contiguous_ndarray(), a.t());
    assert_eq!(Vec::from(&transposed), by_index(&a.t()));
    assert_eq!(Array2::from(transposed), a.t());

    let narrowed = t.narrow::<1, shape![3, 2]>(2, 2).unwrap();
    assert_eq!(narrowed.to_ndarray().unwrap(), a.slice(s![.., 2..4]));
    assert_eq!(Array2::from(narrowed), a.slice(s![.., 2..4]));

    let row = Tensor::<Cpu, f32, shape![5]>::try_from(a.row(1)).unwrap();
    let broadcast = row.broadcast_to::<shape![4, 5]>().unwrap();
    let want = a.row(1).broadcast((4, 5)).unwrap().to_owned();
    assert_eq!(Array2::from(&broadcast), want);
    assert_eq!(
        Vec::from(broadcast),
        want.iter().copied().collect::<Vec<_>>()
    );
}

#[test]
fn a_non_contiguous_view_round_trips_through_ndarray() {
    let mut rng = Rng::fresh("a_non_contiguous_view_round_trips_through_ndarray");
    let a: Array3<f64> = rng.array::<f64>(&[2, 3, 4]).into_dimensionality().unwrap();
    let t = Tensor::<Cpu, f64, shape![2, 3, 4]>::try_from(a.clone()).unwrap();
    let p = t.permute::<shape![4, 2, 3]>(&[2, 0, 1]).unwrap();
    let back: Array3<f64> = p.to_ndarray().unwrap();
    assert_eq!(back, a.view().permuted_axes([2, 0, 1]));
    let again = Tensor::<Cpu, f64, shape![4, 2, 3]>::try_from(back.view()).unwrap();
    assert_eq!(again.to_vec().unwrap(), p.to_vec().unwrap());
}
