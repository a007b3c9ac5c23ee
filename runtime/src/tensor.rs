//! `Tensor<D, T, S>`: the typed handle, its creation and its moves between
//! devices.

use crate::backend::CopyTo as _;
use crate::cpu::copy::try_filled;
use crate::device::{Cpu, Device, DeviceKind};
use crate::dtype::{DType, DTypeKind, FloatDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::dispatch::dispatch;
use crate::random::SplitMix64;
use crate::shape::{type_name, Shape};
use crate::storage::Storage;
use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

/// A tensor of dtype `T` and shape `S` on device `D`.
///
/// Device, dtype and the static part of the shape are types, so mixing
/// devices or dtypes, or pairing incompatible static shapes, does not
/// compile. Cloning is cheap (the storage is shared); views share it too.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
/// assert_eq!(x.shape(), &[2, 3]);
/// assert_eq!(x.to_vec().unwrap()[4], 5.0);
/// ```
pub struct Tensor<D: Device, T: DType, S: Shape> {
    pub(crate) storage: Arc<Storage<T>>,
    pub(crate) layout: Layout,
    _marker: PhantomData<(D, S)>,
}

impl<D: Device, T: DType, S: Shape> Clone for Tensor<D, T, S> {
    fn clone(&self) -> Self {
        Tensor {
            storage: self.storage.clone(),
            layout: self.layout.clone(),
            _marker: PhantomData,
        }
    }
}

impl<D: Device, T: DType, S: Shape> std::fmt::Debug for Tensor<D, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("device", &D::KIND)
            .field("dtype", &T::KIND)
            .field("shape", &self.layout.dims())
            .finish()
    }
}

/// The dims a shape type fixes, or an error telling the user to pass them.
fn static_dims<S: Shape>(op: &str) -> Result<Vec<usize>> {
    S::static_dims().ok_or_else(|| {
        Error::shape(
            op,
            "a shape type with only Const dims",
            format!(
                "{}; pass the dims with `{op}_dims(&[..])`",
                type_name::<S>()
            ),
        )
    })
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// Wraps storage and a layout whose dims already satisfy `S`.
    pub(crate) fn from_parts(storage: Arc<Storage<T>>, layout: Layout) -> Self {
        debug_assert!(S::check(layout.dims()).is_ok());
        Tensor {
            storage,
            layout,
            _marker: PhantomData,
        }
    }

    /// Puts a row-major host buffer on device `D`.
    pub(crate) fn from_host(data: Vec<T>, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let storage = dispatch!(D, |be| be.wrap(be.upload(Cow::Owned(data))?));
        Ok(Self::from_parts(
            Arc::new(storage),
            Layout::contiguous(dims),
        ))
    }

    /// A tensor from row-major data; `Err` unless `data.len()` is the
    /// element count of `S` (all of whose dims must be `Const`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// assert!(Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![1, 2, 3, 4]).is_ok());
    /// assert!(Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![1, 2, 3]).is_err());
    /// ```
    pub fn from_vec(data: Vec<T>) -> Result<Self> {
        let dims = static_dims::<S>("from_vec")?;
        Self::from_vec_dims(data, &dims)
    }

    /// A tensor of run-time `dims` from row-major data.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 2]>::from_vec_dims(vec![0.0; 6], &[3, 2]).unwrap();
    /// assert_eq!(x.shape(), &[3, 2]);
    /// ```
    pub fn from_vec_dims(data: Vec<T>, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let numel = checked_numel("from_vec", dims)?;
        if data.len() != numel {
            return Err(Error::shape(
                "from_vec",
                format!("{numel} elements for dims {dims:?}"),
                format!("{} elements", data.len()),
            ));
        }
        Self::from_host(data, dims)
    }

    /// A tensor filled with `value`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, u8, shape![3]>::full(7).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![7, 7, 7]);
    /// ```
    pub fn full(value: T) -> Result<Self> {
        Self::full_dims(value, &static_dims::<S>("full")?)
    }

    /// [`full`](Self::full) with run-time dims (on a GPU, filled there).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 2]>::full_dims(0.5, &[3, 2]).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0.5; 6]);
    /// assert!(Tensor::<Cpu, f32, shape![_, 2]>::full_dims(0.5, &[3, 4]).is_err()); // 4 is not 2
    /// ```
    pub fn full_dims(value: T, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let n = checked_numel("full", dims)?;
        let storage = dispatch!(D, |be| be.wrap(be.filled(n, value)?));
        Ok(Self::from_parts(
            Arc::new(storage),
            Layout::contiguous(dims),
        ))
    }

    /// All zeros.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// assert_eq!(Tensor::<Cpu, f32, shape![2]>::zeros().unwrap().to_vec().unwrap(), vec![0.0, 0.0]);
    /// ```
    pub fn zeros() -> Result<Self> {
        Self::full(T::zero())
    }

    /// [`zeros`](Self::zeros) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i64, shape![_]>::zeros_dims(&[4]).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0; 4]);
    /// ```
    pub fn zeros_dims(dims: &[usize]) -> Result<Self> {
        Self::full_dims(T::zero(), dims)
    }

    /// All ones.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// assert_eq!(Tensor::<Cpu, i32, shape![2]>::ones().unwrap().to_vec().unwrap(), vec![1, 1]);
    /// ```
    pub fn ones() -> Result<Self> {
        Self::full(T::one())
    }

    /// [`ones`](Self::ones) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, u8, shape![_, _]>::ones_dims(&[2, 0]).unwrap();
    /// assert_eq!(x.numel(), 0); // empty dims are fine
    /// ```
    pub fn ones_dims(dims: &[usize]) -> Result<Self> {
        Self::full_dims(T::one(), dims)
    }

    /// `start, start + step, ...` in row-major order over the shape (a 1-D
    /// shape gives PyTorch's `arange(start, start + n * step, step)`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i64, shape![4]>::arange(2, 3).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![2, 5, 8, 11]);
    /// ```
    pub fn arange(start: T, step: T) -> Result<Self> {
        Self::arange_dims(start, step, &static_dims::<S>("arange")?)
    }

    /// [`arange`](Self::arange) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 2]>::arange_dims(0.0, 0.5, &[2, 2]).unwrap();
    /// assert_eq!(x.to_vec().unwrap(), vec![0.0, 0.5, 1.0, 1.5]);
    /// ```
    pub fn arange_dims(start: T, step: T, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let data = if T::KIND.is_float() {
            let (s, d) = (start.to_f64(), step.to_f64());
            host_buffer("arange", dims, |i| T::from_f64(s + d * i as f64))?
        } else {
            let (s, d) = (start.to_i64(), step.to_i64());
            host_buffer("arange", dims, |i| {
                T::from_i64(s.wrapping_add(d.wrapping_mul(i as i64)))
            })?
        };
        Self::from_host(data, dims)
    }

    /// The dims, like PyTorch's `x.shape`.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert_eq!(x.shape(), &[2, 3]);
    /// assert_eq!(x.t().unwrap().shape(), &[3, 2]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.layout.dims()
    }

    /// Same as [`shape`](Self::shape).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 3]>::zeros_dims(&[5, 3]).unwrap();
    /// assert_eq!(x.dims(), x.shape());
    /// ```
    pub fn dims(&self) -> &[usize] {
        self.layout.dims()
    }

    /// Number of elements (1 for a 0-D tensor).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// assert_eq!(Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap().numel(), 6);
    /// assert_eq!(Tensor::<Cpu, f32, shape![]>::zeros().unwrap().numel(), 1);
    /// ```
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// Number of dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// assert_eq!(Tensor::<Cpu, f32, shape![2, 3, 4]>::zeros().unwrap().rank(), 3);
    /// ```
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// The layout (dims, strides, offset) of this view.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert_eq!(x.t().unwrap().layout().strides(), &[1, 3]);
    /// ```
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// True when the elements are row-major without gaps.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
    /// assert!(x.is_contiguous());
    /// assert!(!x.t().unwrap().is_contiguous());
    /// assert!(x.t().unwrap().contiguous().unwrap().is_contiguous());
    /// ```
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The device as a value.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, DeviceKind, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::zeros().unwrap();
    /// assert_eq!(x.device(), DeviceKind::Cpu);
    /// ```
    pub fn device(&self) -> DeviceKind {
        D::KIND
    }

    /// The dtype as a value.
    ///
    /// ```
    /// use tensorfn_runtime::{bf16, Tensor, Cpu, DTypeKind, shape};
    /// let x = Tensor::<Cpu, bf16, shape![2]>::zeros().unwrap();
    /// assert_eq!(x.dtype(), DTypeKind::BF16);
    /// ```
    pub fn dtype(&self) -> DTypeKind {
        T::KIND
    }

    /// The elements in row-major order, copied to the host.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// assert_eq!(x.t().unwrap().to_vec().unwrap(), vec![1., 3., 2., 4.]);
    /// ```
    pub fn to_vec(&self) -> Result<Vec<T>> {
        dispatch!(D, |be| be.download(be.buf(&self.storage), &self.layout))
    }

    /// The only element of a one-element tensor (a scalar, `[1]`, ...).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f64, shape![]>::full(2.5).unwrap();
    /// assert_eq!(x.item().unwrap(), 2.5);
    /// ```
    pub fn item(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                "a tensor with one element",
                format!("shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_vec()?[0])
    }

    /// Copies the tensor to device `D2` (a no-op clone when `D2 == D`).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Cuda, shape};
    /// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// if let Ok(g) = x.to_device::<Cuda>() {
    ///     assert_eq!(g.to_cpu().unwrap().to_vec().unwrap(), vec![1.0, 1.0]);
    /// }
    /// ```
    pub fn to_device<D2: Device>(&self) -> Result<Tensor<D2, T, S>> {
        if D::KIND == D2::KIND {
            return Ok(Tensor::from_parts(
                self.storage.clone(),
                self.layout.clone(),
            ));
        }
        // The pair of backends decides how the elements cross (a page-locked
        // host buffer, for one, goes to a GPU in one DMA).
        let pinned = self.storage.is_pinned();
        let storage = dispatch!(D, |src| {
            let x = src.buf(&self.storage);
            dispatch!(D2, |dst| dst.wrap(src.copy_to(
                x,
                &self.layout,
                pinned,
                dst
            )?))
        });
        Ok(Tensor::from_parts(
            Arc::new(storage),
            Layout::contiguous(self.shape()),
        ))
    }

    /// Copies the tensor to host memory (a contiguous copy of a view).
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, Cuda, shape};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// let back = match x.to_device::<Cuda>() {
    ///     Ok(g) => g.to_cpu().unwrap(),
    ///     Err(_) => x.to_cpu().unwrap(), // no GPU: a host-to-host copy
    /// };
    /// assert_eq!(back.to_vec().unwrap(), vec![1., 2., 3., 4.]);
    /// ```
    pub fn to_cpu(&self) -> Result<Tensor<Cpu, T, S>> {
        self.to_device::<Cpu>()
    }

    /// The same tensor under another shape type with the same dims, e.g.
    /// `shape![_, 784]` to `shape![32, 784]`; `Err` if a dim disagrees.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![_, 2]>::zeros_dims(&[3, 2]).unwrap();
    /// let y: Tensor<Cpu, f32, shape![3, 2]> = x.clone().into_shape().unwrap();
    /// assert!(x.into_shape::<shape![4, 2]>().is_err());
    /// # let _ = y;
    /// ```
    pub fn into_shape<S2: Shape>(self) -> Result<Tensor<D, T, S2>> {
        S2::check(self.layout.dims())?;
        Ok(Tensor::from_parts(self.storage, self.layout))
    }
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// Uniform samples in `[0, 1)` from a seeded generator.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![100]>::rand(1).unwrap().to_vec().unwrap();
    /// assert!(a.iter().all(|v| (0.0..1.0).contains(v)));
    /// assert_eq!(a, Tensor::<Cpu, f32, shape![100]>::rand(1).unwrap().to_vec().unwrap());
    /// ```
    pub fn rand(seed: u64) -> Result<Self> {
        Self::rand_dims(seed, &static_dims::<S>("rand")?)
    }

    /// [`rand`](Self::rand) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f64, shape![_]>::rand_dims(7, &[50]).unwrap().to_vec().unwrap();
    /// assert!(a.iter().all(|v| (0.0..1.0).contains(v)));
    /// ```
    pub fn rand_dims(seed: u64, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let mut rng = SplitMix64::new(seed);
        // Rounding can reach 1.0 in a narrow dtype; PyTorch's range is half-open.
        let below_one = |v: f64| {
            let x = T::from_f64(v);
            if x.to_f64() >= 1.0 {
                T::from_f64(0.0)
            } else {
                x
            }
        };
        let data = host_buffer("rand", dims, |_| below_one(rng.uniform()))?;
        Self::from_host(data, dims)
    }

    /// Standard-normal samples from a seeded generator.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f64, shape![1000]>::randn(3).unwrap().to_vec().unwrap();
    /// let mean = a.iter().sum::<f64>() / 1000.0;
    /// assert!(mean.abs() < 0.15);
    /// ```
    pub fn randn(seed: u64) -> Result<Self> {
        Self::randn_dims(seed, &static_dims::<S>("randn")?)
    }

    /// [`randn`](Self::randn) with run-time dims.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let a = Tensor::<Cpu, f32, shape![_, 4]>::randn_dims(9, &[250, 4]).unwrap();
    /// let v = a.to_vec().unwrap();
    /// let var = v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32;
    /// assert!((var - 1.0).abs() < 0.2);
    /// ```
    pub fn randn_dims(seed: u64, dims: &[usize]) -> Result<Self> {
        S::check(dims)?;
        let mut rng = SplitMix64::new(seed);
        let data = host_buffer("randn", dims, |_| T::from_f64(rng.normal()))?;
        Self::from_host(data, dims)
    }
}

/// The element count of `dims`, or an `Err` when it overflows `usize`.
pub(crate) fn checked_numel(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            Error::shape(
                op,
                "an element count that fits in usize",
                format!("dims {dims:?}"),
            )
        })
}

/// A host buffer of `numel(dims)` elements filled by `fill(index)`; a size
/// the host cannot allocate is an `Err`, not an abort.
fn host_buffer<T: DType>(op: &str, dims: &[usize], fill: impl FnMut(usize) -> T) -> Result<Vec<T>> {
    try_filled(checked_numel(op, dims)?, fill)
}
