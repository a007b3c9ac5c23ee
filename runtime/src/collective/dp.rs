//! Data-parallel building blocks over [`Params`]: the parameters of rank 0
//! copied to every device ([`Comm::broadcast_params`]) and the gradients
//! averaged over the ranks in buckets while the backward still runs
//! ([`GradBuckets`]), as PyTorch's `DistributedDataParallel` does.

use super::{Comm, DeviceGroup, Local, ReduceOp, World};
use crate::cuda::nccl::{self, copy_on, Buffer, Collective, Flight};
use crate::cuda::CudaStorage;
use crate::dtype::DTypeKind;
use crate::error::{Error, Result};
use crate::params::AnyTensor;
use crate::storage::Storage;
use crate::{bf16, f16, DeviceKind, Params};
use std::any::Any;
use std::marker::PhantomData;

mod sealed {
    pub trait ParamReplicas {}
}

/// One value of a [`Params`] type per device of the group `G`, as a tuple
/// in the group's order: the parameters (or gradients) of each replica of
/// a data-parallel model, `(P0, P1)` for `(Cuda<0>, Cuda<1>)`. The tuple's
/// types may differ (a struct generic over its device is one type per
/// device); their tensors must agree in names, dtypes and dims, and each
/// must be on its device, or the calls taking them return `Err` naming
/// the tensor.
///
/// ```
/// use tensorfn_runtime::collective::{DeviceGroup, ParamReplicas};
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// fn takes<G: DeviceGroup, P: ParamReplicas<G>>() {}
/// takes::<(Cuda<0>, Cuda<1>), (Vec<Tensor<Cuda<0>, f32, shape![4]>>, Vec<Tensor<Cuda<1>, f32, shape![4]>>)>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not one `Params` value per device of the group `{G}`",
    note = "pass a tuple with one parameter (or gradient) struct per device, in the group's order"
)]
pub trait ParamReplicas<G: DeviceGroup>: sealed::ParamReplicas + Sized + 'static {
    #[doc(hidden)]
    fn __tensors(&self) -> Vec<Vec<(String, &dyn AnyTensor)>>;
    #[doc(hidden)]
    fn __tensors_mut(&mut self) -> Vec<Vec<(String, &mut dyn AnyTensor)>>;
}

macro_rules! replicas {
    ($($p:ident $o:ident $i:tt),+) => {
        impl<$($p: Params + 'static),+> sealed::ParamReplicas for ($($p,)+) {}
        impl<$($p: Params + 'static,)+ $(const $o: usize),+> ParamReplicas<($(crate::Cuda<$o>,)+)>
            for ($($p,)+)
        {
            fn __tensors(&self) -> Vec<Vec<(String, &dyn AnyTensor)>> {
                vec![$(self.$i.tensors()),+]
            }
            fn __tensors_mut(&mut self) -> Vec<Vec<(String, &mut dyn AnyTensor)>> {
                vec![$(self.$i.tensors_mut()),+]
            }
        }
    };
}

replicas!(P0 A 0);
replicas!(P0 A 0, P1 B 1);
replicas!(P0 A 0, P1 B 1, P2 C 2);
replicas!(P0 A 0, P1 B 1, P2 C 2, P3 D 3);
replicas!(P0 A 0, P1 B 1, P2 C 2, P3 D 3, P4 E 4);
replicas!(P0 A 0, P1 B 1, P2 C 2, P3 D 3, P4 E 4, P5 F 5);
replicas!(P0 A 0, P1 B 1, P2 C 2, P3 D 3, P4 E 4, P5 F 5, P6 G 6);
replicas!(P0 A 0, P1 B 1, P2 C 2, P3 D 3, P4 E 4, P5 F 5, P6 G 6, P7 H 7);

/// What a call needs of one tensor of one device: its address, its
/// storage (the device's context comes with it) and its dtype.
struct Slice {
    ptr: u64,
    numel: usize,
    dtype: DTypeKind,
    ctx: std::sync::Arc<nccl::Ctx>,
}

/// The device address of `storage`'s element `offset`, for a storage of
/// dtype `kind` on a GPU.
fn cuda_slice(storage: &dyn Any, kind: DTypeKind, offset: usize, numel: usize) -> Option<Slice> {
    fn of<T: crate::dtype::DType>(s: &dyn Any) -> Option<&CudaStorage<T>> {
        match s.downcast_ref::<Storage<T>>()? {
            Storage::Cuda(c) => Some(c),
            _ => None,
        }
    }
    macro_rules! slice {
        ($t:ty) => {
            of::<$t>(storage).map(|c| Slice {
                ptr: c.ptr_at(offset),
                numel,
                dtype: kind,
                ctx: c.context().clone(),
            })
        };
    }
    match kind {
        DTypeKind::F32 => slice!(f32),
        DTypeKind::F64 => slice!(f64),
        DTypeKind::F16 => slice!(f16),
        DTypeKind::BF16 => slice!(bf16),
        DTypeKind::I32 => slice!(i32),
        DTypeKind::I64 => slice!(i64),
        DTypeKind::U8 => slice!(u8),
        DTypeKind::Bool => slice!(bool),
    }
}

/// A tensor's name, dtype, dims and device.
pub(crate) type Described = (String, DTypeKind, Vec<usize>, DeviceKind);

/// Checks that every device's tensors have device 0's names, dtypes and
/// dims and lie on their device; gives device 0's `(name, dtype, dims)`.
pub(crate) fn check_replicas(
    op: &str,
    ordinals: &[usize],
    lists: &[Vec<Described>],
) -> Result<Vec<(String, DTypeKind, Vec<usize>)>> {
    let bad = |message: String| Error::InvalidArgument {
        op: op.to_string(),
        message,
    };
    let first = &lists[0];
    for (d, list) in lists.iter().enumerate() {
        if list.len() != first.len() {
            return Err(bad(format!(
                "device {d} of the tuple has {} tensors and device 0 has {}; pass the same \
                 parameter struct for every device",
                list.len(),
                first.len()
            )));
        }
        for ((name, dtype, dims, device), (n0, t0, d0, _)) in list.iter().zip(first) {
            if (name, dtype, dims) != (n0, t0, d0) {
                return Err(bad(format!(
                    "tensor `{name}` of device {d} is {dtype} {dims:?} but device 0's `{n0}` is \
                     {t0} {d0:?}; every device must pass the same parameters"
                )));
            }
            if *device != DeviceKind::Cuda(ordinals[d]) {
                return Err(bad(format!(
                    "tensor `{name}` of device {d} of the tuple is on {device}; it must be on \
                     cuda:{} (move it with `to_device`)",
                    ordinals[d]
                )));
            }
        }
    }
    Ok(first
        .iter()
        .map(|(n, t, d, _)| (n.clone(), *t, d.clone()))
        .collect())
}

fn describe(list: &[(String, &dyn AnyTensor)]) -> Vec<Described> {
    list.iter()
        .map(|(n, t)| (n.clone(), t.dtype(), t.dims(), t.device()))
        .collect()
}

fn describe_mut(list: &[(String, &mut dyn AnyTensor)]) -> Vec<Described> {
    list.iter()
        .map(|(n, t)| (n.clone(), t.dtype(), t.dims(), t.device()))
        .collect()
}

/// Each tensor's elements for writing (contiguous and unshared), as
/// slices per device.
fn slices_mut(
    op: &str,
    lists: &mut [Vec<(String, &mut dyn AnyTensor)>],
) -> Result<Vec<Vec<Slice>>> {
    lists
        .iter_mut()
        .map(|list| {
            list.iter_mut()
                .map(|(name, t)| {
                    let (dtype, numel) = (t.dtype(), t.numel());
                    let e = t.erased_mut()?;
                    cuda_slice(e.storage, dtype, e.offset, numel).ok_or_else(|| {
                        Error::InvalidArgument {
                            op: op.to_string(),
                            message: format!("tensor `{name}` is not on a GPU"),
                        }
                    })
                })
                .collect()
        })
        .collect()
}

impl<G: DeviceGroup, W: World> Comm<G, W> {
    /// Overwrites every replica's parameters with rank 0's, in place:
    /// the start of data-parallel training, so that every device steps
    /// from the same weights (what `DistributedDataParallel` does on
    /// construction). `params` holds one parameter struct per device of
    /// the group (made with `to_device`, or initialised on each device);
    /// tensors that differ in names, dtypes or dims between devices, or
    /// lie on another device, are an `Err` naming the tensor. In a
    /// [`Ranks`](super::Ranks) communicator each process passes its own
    /// devices' structs and receives rank 0's values from wherever it is.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let w = Tensor::<Cuda<0>, f32, shape![2]>::from_vec(vec![0.5, -1.0])?;
    /// let mut replicas = (vec![w],);
    /// comm.broadcast_params(&mut replicas)?;
    /// assert_eq!(replicas.0[0].to_vec()?, vec![0.5, -1.0]); // one rank: rank 0's own
    /// # Ok(()) }
    /// ```
    pub fn broadcast_params<P: ParamReplicas<G>>(&self, params: &mut P) -> Result<()> {
        let op = "broadcast_params";
        let mut lists = params.__tensors_mut();
        let described: Vec<_> = lists.iter().map(|l| describe_mut(l)).collect();
        check_replicas(op, G::ORDINALS, &described)?;
        let slices = slices_mut(op, &mut lists)?;
        let bufs: Vec<Vec<Buffer>> = slices
            .iter()
            .map(|s| {
                s.iter()
                    .filter(|s| s.numel > 0)
                    .map(|s| (s.ptr, s.numel, nccl::data_type(s.dtype)))
                    .collect()
            })
            .collect();
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(());
        }
        // The tensors outlive the call: `params` is borrowed until it
        // returns, and it waits.
        self.comms.broadcast_each(&bufs, 0, Vec::new())?.wait()
    }

    /// A [`GradBuckets`] over this communicator with PyTorch's bucket size,
    /// 25 MiB.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     assert_eq!(comm.grad_buckets().bucket_bytes(), 25 << 20);
    /// }
    /// ```
    pub fn grad_buckets(&self) -> GradBuckets<'_, G, W> {
        GradBuckets::new(self, DEFAULT_BUCKET_BYTES)
    }
}

/// The bytes of a [`GradBuckets`] bucket unless told otherwise: PyTorch
/// DDP's `bucket_cap_mb = 25`.
///
/// ```
/// use tensorfn_runtime::collective::DEFAULT_BUCKET_BYTES;
/// assert_eq!(DEFAULT_BUCKET_BYTES, 25 * 1024 * 1024);
/// ```
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Where [`BucketPlan::place`] put a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Its bucket (none for an empty tensor).
    pub(crate) bucket: Option<usize>,
    /// Its first element's index in the bucket.
    pub(crate) offset: usize,
    /// A bucket of its dtype closed because the tensor did not fit: to
    /// start before copying the tensor.
    pub(crate) closed_before: Option<usize>,
    /// Whether the tensor opened its bucket (to allocate).
    pub(crate) opened: bool,
    /// Whether the tensor filled its bucket (to start after copying it).
    pub(crate) full: bool,
}

/// One bucket of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedBucket {
    pub(crate) dtype: DTypeKind,
    /// Elements placed so far.
    pub(crate) len: usize,
    /// Elements it can hold: the bucket size, or one larger tensor.
    pub(crate) capacity: usize,
    pub(crate) closed: bool,
}

/// How gradients are packed into buckets, as they are pushed: one open
/// bucket per dtype; a tensor goes into its dtype's open bucket at the
/// next offset; a tensor that does not fit closes that bucket first and
/// opens a new one (a tensor larger than the bucket size gets a bucket of
/// its own size); a bucket closes as soon as it is full. Unlike PyTorch,
/// which closes a bucket after the tensor that crosses the size, a bucket
/// never holds more than the size unless one tensor alone is larger, so
/// its buffer is allocated once when it opens.
#[derive(Clone, Debug)]
pub(crate) struct BucketPlan {
    bytes: usize,
    pub(crate) buckets: Vec<PlannedBucket>,
    /// The open bucket of each dtype.
    open: Vec<(DTypeKind, usize)>,
}

impl BucketPlan {
    pub(crate) fn new(bytes: usize) -> BucketPlan {
        BucketPlan {
            bytes: bytes.max(1),
            buckets: Vec::new(),
            open: Vec::new(),
        }
    }

    /// Places a tensor of `numel` elements of `dtype`.
    pub(crate) fn place(&mut self, dtype: DTypeKind, numel: usize) -> Placement {
        let mut p = Placement {
            bucket: None,
            offset: 0,
            closed_before: None,
            opened: false,
            full: false,
        };
        if numel == 0 {
            return p;
        }
        let cap = (self.bytes / dtype.size_bytes()).max(1);
        let open = self.open.iter().position(|(d, _)| *d == dtype);
        let mut current = open.map(|i| self.open[i].1);
        if let (Some(i), Some(b)) = (open, current) {
            if self.buckets[b].len + numel > self.buckets[b].capacity {
                self.buckets[b].closed = true;
                self.open.remove(i);
                p.closed_before = Some(b);
                current = None;
            }
        }
        let b = match current {
            Some(b) => b,
            None => {
                self.buckets.push(PlannedBucket {
                    dtype,
                    len: 0,
                    capacity: cap.max(numel),
                    closed: false,
                });
                let b = self.buckets.len() - 1;
                self.open.push((dtype, b));
                p.opened = true;
                b
            }
        };
        let bucket = &mut self.buckets[b];
        p.bucket = Some(b);
        p.offset = bucket.len;
        bucket.len += numel;
        if bucket.len >= cap {
            bucket.closed = true;
            self.open.retain(|&(_, o)| o != b);
            p.full = true;
        }
        p
    }

    /// Closes the open buckets, in the order they were opened.
    pub(crate) fn flush(&mut self) -> Vec<usize> {
        let mut open: Vec<usize> = self.open.drain(..).map(|(_, b)| b).collect();
        open.sort_unstable();
        for &b in &open {
            self.buckets[b].closed = true;
        }
        open
    }
}

/// A bucket's buffers, one per device, and its reduction once started.
struct Bucket<'c> {
    // Dropped first: waits before the buffers go.
    flight: Option<Flight<'c>>,
    dtype: DTypeKind,
    len: usize,
    bufs: Vec<CudaStorage<u8>>,
}

/// A pushed gradient value: the value and, per tensor, where its
/// elements are.
struct Slot {
    value: Box<dyn Held>,
    places: Vec<Placement>,
}

/// A pushed value with its group's type forgotten.
trait Held {
    fn lists(&mut self) -> Vec<Vec<(String, &mut dyn AnyTensor)>>;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

struct Holding<G, P>(P, PhantomData<fn() -> G>);

impl<G: DeviceGroup, P: ParamReplicas<G>> Held for Holding<G, P> {
    fn lists(&mut self) -> Vec<Vec<(String, &mut dyn AnyTensor)>> {
        self.0.__tensors_mut()
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        Box::new(self.0)
    }
}

/// Averages gradients over the ranks of a [`Comm`] in buckets, while the
/// backward still runs: PyTorch `DistributedDataParallel`'s reducer.
/// [`push`](Self::push) takes a gradient value per device (a whole
/// gradient struct, or a block's as a per-layer backward gives it) as
/// soon as it is computed and copies its tensors into buckets of
/// [`bucket_bytes`](Self::bucket_bytes) (25 MiB by default, one dtype per
/// bucket); a bucket that is full is all-reduced (the mean,
/// [`ReduceOp::Mean`]) at once, without waiting, on the communication
/// streams, while the devices go on computing. [`finish`](Self::finish)
/// reduces the last buckets, waits for all of them (within the
/// communicator's timeout: an error or a timeout aborts the communicator
/// and returns `Err`) and writes the means back into the pushed values,
/// which [`Reduced::take`] gives back by their [`Ticket`]s.
///
/// ```
/// use tensorfn_runtime::collective::Comm;
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// # fn main() -> tensorfn_runtime::Result<()> {
/// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
/// let mut buckets = comm.grad_buckets();
/// // Gradients of the last block come out of the backward first.
/// let g2 = vec![Tensor::<Cuda<0>, f32, shape![3]>::from_vec(vec![1.0, 2.0, 3.0])?];
/// let t2 = buckets.push((g2,))?;
/// let g1 = [Tensor::<Cuda<0>, f32, shape![2, 2]>::ones()?];
/// let t1 = buckets.push((g1,))?;
/// let mut reduced = buckets.finish()?;
/// let (g1,) = reduced.take(t1)?;
/// let (g2,) = reduced.take(t2)?;
/// // One rank: the mean over the ranks is the gradient itself.
/// assert_eq!(g2[0].to_vec()?, vec![1.0, 2.0, 3.0]);
/// assert_eq!(g1[0].to_vec()?, vec![1.0; 4]);
/// # Ok(()) }
/// ```
pub struct GradBuckets<'c, G: DeviceGroup, W: World = Local> {
    // Dropped first: each waits for its reduction before its buffers go.
    buckets: Vec<Bucket<'c>>,
    comm: &'c Comm<G, W>,
    plan: BucketPlan,
    slots: Vec<Slot>,
    /// Tells this bucketer's tickets from another's.
    owner: u64,
}

impl<G: DeviceGroup, W: World> std::fmt::Debug for GradBuckets<'_, G, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradBuckets")
            .field("bucket_bytes", &self.plan.bytes)
            .field("buckets", &self.buckets.len())
            .field("pushed", &self.slots.len())
            .finish()
    }
}

/// Names a value pushed into [`GradBuckets`], to take it back from
/// [`Reduced`].
///
/// ```
/// use tensorfn_runtime::collective::Ticket;
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// fn takes(_: Ticket<(Vec<Tensor<Cuda<0>, f32, shape![3]>>,)>) {}
/// ```
#[must_use = "the reduced value is taken back with its ticket"]
pub struct Ticket<P> {
    owner: u64,
    index: usize,
    _marker: PhantomData<fn() -> P>,
}

impl<P> std::fmt::Debug for Ticket<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({})", self.index)
    }
}

/// The pushed values of a [`GradBuckets`] after [`finish`](GradBuckets::finish),
/// holding the means over the ranks.
///
/// ```
/// use tensorfn_runtime::collective::Comm;
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// # fn main() -> tensorfn_runtime::Result<()> {
/// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
/// let mut b = comm.grad_buckets();
/// let t = b.push((Tensor::<Cuda<0>, f64, shape![2]>::from_vec(vec![4.0, 8.0])?,))?;
/// let mut r = b.finish()?;
/// assert_eq!(r.take(t)?.0.to_vec()?, vec![4.0, 8.0]);
/// # Ok(()) }
/// ```
pub struct Reduced {
    owner: u64,
    values: Vec<Option<Box<dyn Any>>>,
}

impl std::fmt::Debug for Reduced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reduced")
            .field("values", &self.values.len())
            .finish()
    }
}

impl Reduced {
    /// The value pushed with `ticket`, its tensors now the means over the
    /// ranks; `Err` for a ticket of another [`GradBuckets`].
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let mut b = comm.grad_buckets();
    /// let t = b.push((Tensor::<Cuda<0>, f32, shape![1]>::ones()?,))?;
    /// let (g,) = b.finish()?.take(t)?;
    /// assert_eq!(g.to_vec()?, vec![1.0]);
    /// # Ok(()) }
    /// ```
    pub fn take<P: 'static>(&mut self, ticket: Ticket<P>) -> Result<P> {
        let value = (ticket.owner == self.owner)
            .then(|| self.values.get_mut(ticket.index).and_then(Option::take))
            .flatten()
            .ok_or_else(|| Error::InvalidArgument {
                op: "Reduced::take".into(),
                message: format!(
                    "no value for ticket {}: it is from another `GradBuckets`, or taken already",
                    ticket.index
                ),
            })?;
        value
            .downcast::<P>()
            .map(|b| *b)
            .map_err(|_| Error::InvalidArgument {
                op: "Reduced::take".into(),
                message: format!(
                    "ticket {} names a value of another type: it is from another `GradBuckets`",
                    ticket.index
                ),
            })
    }
}

impl<'c, G: DeviceGroup, W: World> GradBuckets<'c, G, W> {
    /// Buckets of `bucket_bytes` bytes each (at least one element) over
    /// `comm`: PyTorch's `bucket_cap_mb` × 2²⁰.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, GradBuckets};
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     let b = GradBuckets::new(&comm, 1 << 20);
    ///     assert_eq!(b.bucket_bytes(), 1 << 20);
    /// }
    /// ```
    pub fn new(comm: &'c Comm<G, W>, bucket_bytes: usize) -> Self {
        GradBuckets {
            buckets: Vec::new(),
            comm,
            plan: BucketPlan::new(bucket_bytes),
            slots: Vec::new(),
            owner: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        }
    }

    /// The size of a bucket in bytes.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, GradBuckets};
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     assert_eq!(GradBuckets::new(&comm, 4096).bucket_bytes(), 4096);
    /// }
    /// ```
    pub fn bucket_bytes(&self) -> usize {
        self.plan.bytes
    }

    /// Takes one gradient value per device of the group (a tuple in the
    /// group's order), copies its tensors into the buckets (on each
    /// device's stream, after the kernels that computed them) and starts
    /// the reduction of every bucket that is full, without waiting. The
    /// values must agree in names, dtypes and dims across devices and be
    /// floating point (f32, f64, f16, bf16), or the call is an `Err`
    /// naming the tensor. The returned [`Ticket`] takes the value back
    /// from [`Reduced`] after [`finish`](Self::finish).
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, GradBuckets};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// // 16-byte buckets: the first push fills one and starts its reduction.
    /// let mut b = GradBuckets::new(&comm, 16);
    /// let t = b.push((Tensor::<Cuda<0>, f32, shape![4]>::ones()?,))?;
    /// let ints = (Tensor::<Cuda<0>, i32, shape![1]>::ones()?,);
    /// assert!(b.push(ints).is_err()); // gradients are floating point
    /// assert_eq!(b.finish()?.take(t)?.0.to_vec()?, vec![1.0; 4]);
    /// # Ok(()) }
    /// ```
    pub fn push<P: ParamReplicas<G>>(&mut self, grads: P) -> Result<Ticket<P>> {
        let op = "GradBuckets::push";
        let lists = grads.__tensors();
        let described: Vec<_> = lists.iter().map(|l| describe(l)).collect();
        let tensors = check_replicas(op, G::ORDINALS, &described)?;
        for (name, dtype, _) in &tensors {
            if !dtype.is_float() {
                return Err(Error::DType {
                    op: op.to_string(),
                    expected: "floating-point gradients (f32, f64, f16, bf16)".into(),
                    found: format!("`{name}` of dtype {dtype}; leave it out of the gradients"),
                });
            }
        }
        // Each device's tensors, contiguous (strided views are copied and
        // kept alive until the copies into the buckets are queued; the
        // stream orders their reuse).
        let erased: Vec<Vec<_>> = lists
            .iter()
            .map(|l| {
                l.iter()
                    .map(|(_, t)| t.erased())
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let mut places = Vec::with_capacity(tensors.len());
        for (j, (name, dtype, dims)) in tensors.iter().enumerate() {
            let numel: usize = dims.iter().product();
            let p = self.plan.place(*dtype, numel);
            if let Some(b) = p.closed_before {
                self.start(b)?;
            }
            let Some(b) = p.bucket else {
                places.push(p);
                continue;
            };
            if p.opened {
                self.open(b)?;
            }
            let size = dtype.size_bytes();
            for (d, e) in erased.iter().enumerate() {
                let src =
                    cuda_slice(&*e[j].storage, *dtype, e[j].offset, numel).ok_or_else(|| {
                        Error::InvalidArgument {
                            op: op.to_string(),
                            message: format!("tensor `{name}` is not on a GPU"),
                        }
                    })?;
                let dst = self.buckets[b].bufs[d].ptr_at(p.offset * size);
                copy_on(&src.ctx, dst, src.ptr, numel * size)?;
            }
            if p.full {
                self.start(b)?;
            }
            places.push(p);
        }
        drop(erased);
        drop(lists);
        self.slots.push(Slot {
            value: Box::new(Holding::<G, P>(grads, PhantomData)),
            places,
        });
        Ok(Ticket {
            owner: self.owner,
            index: self.slots.len() - 1,
            _marker: PhantomData,
        })
    }

    /// Allocates bucket `b`'s buffers on every device.
    fn open(&mut self, b: usize) -> Result<()> {
        debug_assert_eq!(b, self.buckets.len());
        let planned = &self.plan.buckets[b];
        let bytes = planned.capacity * planned.dtype.size_bytes();
        let bufs = G::ORDINALS
            .iter()
            .map(|&o| {
                let ctx = nccl::device(o)?;
                ctx.bind()?;
                ctx.storage::<u8>(bytes)
            })
            .collect::<Result<Vec<_>>>()?;
        self.buckets.push(Bucket {
            flight: None,
            dtype: planned.dtype,
            len: 0,
            bufs,
        });
        Ok(())
    }

    /// Starts bucket `b`'s mean over the ranks.
    fn start(&mut self, b: usize) -> Result<()> {
        let len = self.plan.buckets[b].len;
        let bucket = &mut self.buckets[b];
        bucket.len = len;
        let bufs: Vec<(u64, u64)> = bucket
            .bufs
            .iter()
            .map(|s| (s.device_ptr(), s.device_ptr()))
            .collect();
        let flight = self.comm.comms.launch(
            Collective::AllReduce(ReduceOp::Mean.nccl()),
            &bufs,
            len,
            nccl::data_type(bucket.dtype),
            Vec::new(),
        )?;
        bucket.flight = Some(flight);
        Ok(())
    }

    /// Starts the buckets still open, waits for every reduction and
    /// copies the means back into the pushed values (on each device's
    /// stream), which the result gives back by their tickets. `Err` on an
    /// NCCL error or after the communicator's timeout (the communicator
    /// is aborted).
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let b = comm.grad_buckets();
    /// let r = b.finish()?; // nothing pushed: nothing to reduce
    /// # let _ = r;
    /// # Ok(()) }
    /// ```
    pub fn finish(mut self) -> Result<Reduced> {
        for b in self.plan.flush() {
            self.start(b)?;
        }
        for bucket in &mut self.buckets {
            if let Some(f) = bucket.flight.take() {
                f.wait()?;
            }
        }
        let op = "GradBuckets::finish";
        let mut values = Vec::with_capacity(self.slots.len());
        for slot in std::mem::take(&mut self.slots) {
            let Slot { mut value, places } = slot;
            let mut lists = value.lists();
            let slices = slices_mut(op, &mut lists)?;
            for (d, device) in slices.iter().enumerate() {
                for (s, p) in device.iter().zip(&places) {
                    let Some(b) = p.bucket else { continue };
                    let size = s.dtype.size_bytes();
                    let src = self.buckets[b].bufs[d].ptr_at(p.offset * size);
                    copy_on(&s.ctx, s.ptr, src, s.numel * size)?;
                }
            }
            drop(slices);
            drop(lists);
            values.push(Some(value.into_any()));
        }
        // The buckets' buffers go back to the allocator on the devices'
        // streams, after the copies just queued.
        Ok(Reduced {
            owner: self.owner,
            values,
        })
    }
}
