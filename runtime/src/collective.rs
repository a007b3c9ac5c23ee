//! Collectives over GPUs named by their types, on NCCL.
//!
//! A [`DeviceGroup`] is a tuple of GPU types, `(Cuda<0>, Cuda<1>)`, each
//! ordinal once (a compile error otherwise). A [`Comm`] over the group
//! holds one NCCL communicator per GPU, each on that GPU's own stream.
//! The collectives take one tensor per device, as a tuple in the group's
//! order, `(Tensor<Cuda<0>, T, S>, Tensor<Cuda<1>, T, S>)`: the same dtype
//! and shape type everywhere, or the call does not compile ([`Replicas`]).
//!
//! | PyTorch (`torch.distributed`)         | tensorfn                                   |
//! |---------------------------------------|--------------------------------------------|
//! | `all_reduce(t, op=ReduceOp.SUM)`      | [`Comm::all_reduce`], [`Comm::all_reduce_`] |
//! | `ReduceOp.AVG`, `MAX`, `MIN`          | [`ReduceOp::Mean`], `Max`, `Min`           |
//! | `all_gather_into_tensor(out, t)`      | [`Comm::all_gather`] (along dim 0)         |
//! | `reduce_scatter_tensor(out, t)`       | [`Comm::reduce_scatter`] (along dim 0)     |
//! | `broadcast(t, src)`                   | [`Comm::broadcast`]                        |
//! | `async_op=True`, `work.wait()`        | [`Comm::all_reduce_async`], [`Pending::wait`] |
//! | DDP's initial broadcast of the module | [`Comm::broadcast_params`]                 |
//! | DDP's gradient buckets (`bucket_cap_mb`) | [`GradBuckets`], [`Comm::grad_buckets`] |
//! | `init_process_group` with a store     | [`NcclId`] + [`Comm::from_rank`]           |
//!
//! Each collective has a form that does not wait, `*_async`, returning a
//! [`Pending`] handle: the work is queued on a communication stream per
//! GPU, after every kernel already queued there, and the GPUs keep
//! computing (a backward pass, say) while it runs; [`Pending::wait`]
//! gives the result. The plain forms are the same call, waited on.
//!
//! Every call waits until the GPUs have done the work, within the
//! communicator's timeout ([`Comm::set_timeout`], 5 minutes by default):
//! communicators are non-blocking, so a peer that never joins or goes
//! away gives `Err(Error::Nccl { status: "timeout", .. })` and an aborted
//! communicator, never a hung process. NCCL is opened on first use
//! (`libnccl.so.2`, e.g. from the `nvidia-nccl-cu12` wheel, on the
//! loader's path); without it every call is
//! `Err(Error::NcclUnavailable)`. NVLink multicast stays off:
//! `NCCL_NVLS_ENABLE=0` is set before the first communicator unless the
//! environment already sets it.

use crate::cuda::nccl::{self, red, Collective, Comms, Flight, DEFAULT_TIMEOUT};
use crate::cuda::{contiguous_ptr, CudaStorage};
use crate::device::Cuda;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::{Shape, MAX_RANK};
use crate::storage::Storage;
use crate::tensor::Tensor;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

mod dp;

pub use dp::{GradBuckets, ParamReplicas, Reduced, Ticket, DEFAULT_BUCKET_BYTES};

mod sealed {
    pub trait Group {}
    pub trait World {}
    pub trait Replicas {}
}

/// GPUs driven together by one process, as a tuple of device types:
/// `(Cuda<0>,)` up to eight, `(Cuda<0>, Cuda<1>, ..., Cuda<7>)`. Each
/// ordinal may appear once; [`Comm::new`] does not compile otherwise.
///
/// ```
/// use tensorfn_runtime::{collective::DeviceGroup, Cuda};
/// type Pair = (Cuda<0>, Cuda<1>);
/// assert_eq!(<Pair as DeviceGroup>::N, 2);
/// assert_eq!(<Pair as DeviceGroup>::ORDINALS, &[0, 1]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a group of GPUs",
    note = "a device group is a tuple of one to eight GPU types, e.g. `(Cuda<0>, Cuda<1>)`"
)]
pub trait DeviceGroup:
    sealed::Group + Copy + Default + std::fmt::Debug + Send + Sync + 'static
{
    /// Number of GPUs.
    const N: usize;
    /// Their ordinals, in the group's order (rank order).
    const ORDINALS: &'static [usize];
}

/// Whether a [`Comm`]'s ranks are all in this process ([`Local`]: the
/// world is the group, so shard sizes are checked at compile time) or
/// spread over processes ([`Ranks`]: the world is known at run time).
///
/// ```
/// use tensorfn_runtime::collective::{Local, Ranks, World};
/// assert!(Local::ONE_PROCESS && !Ranks::ONE_PROCESS);
/// ```
pub trait World: sealed::World + Copy + Default + std::fmt::Debug + Send + Sync + 'static {
    /// True when every rank is a device of the group.
    const ONE_PROCESS: bool;
}

/// Every rank in this process: [`Comm::new`].
///
/// ```
/// use tensorfn_runtime::collective::{Comm, Local};
/// use tensorfn_runtime::Cuda;
/// fn takes(_: &Comm<(Cuda<0>,), Local>) {}
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Local;

/// Ranks in several processes or machines: [`Comm::from_rank`].
///
/// ```
/// use tensorfn_runtime::collective::{Comm, Ranks};
/// use tensorfn_runtime::Cuda;
/// fn takes(_: &Comm<(Cuda<0>,), Ranks>) {}
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ranks;

impl sealed::World for Local {}
impl sealed::World for Ranks {}
impl World for Local {
    const ONE_PROCESS: bool = true;
}
impl World for Ranks {
    const ONE_PROCESS: bool = false;
}

/// One tensor of a per-device tuple, without its device type; what
/// [`Replicas`] hands between the tuple and the collectives.
#[doc(hidden)]
pub struct Part<T: DType> {
    storage: Arc<Storage<T>>,
    layout: Layout,
}

impl<T: DType> Part<T> {
    fn of<D: crate::Device, S: Shape>(t: &Tensor<D, T, S>) -> Self {
        Part {
            storage: t.storage.clone(),
            layout: t.layout.clone(),
        }
    }

    fn tensor<D: crate::Device, S: Shape>(self) -> Tensor<D, T, S> {
        Tensor::from_parts(self.storage, self.layout)
    }

    fn cuda(&self) -> &CudaStorage<T> {
        self.storage.as_cuda()
    }
}

/// One tensor per device of the group `G`, as a tuple in the group's
/// order, all of one dtype and one shape type: what the collectives take
/// and return.
///
/// ```
/// use tensorfn_runtime::collective::Replicas;
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// type Pair = (Cuda<0>, Cuda<1>);
/// type X = (Tensor<Cuda<0>, f32, shape![4, 2]>, Tensor<Cuda<1>, f32, shape![4, 2]>);
/// fn elem<G: tensorfn_runtime::collective::DeviceGroup, R: Replicas<G>>() -> usize {
///     <R::Shape as tensorfn_runtime::Shape>::RANK
/// }
/// assert_eq!(elem::<Pair, X>(), 2);
/// ```
///
/// Tensors whose shapes differ do not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::collective::{DeviceGroup, Replicas};
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// fn takes<G: DeviceGroup, R: Replicas<G>>() {}
/// takes::<(Cuda<0>, Cuda<1>), (Tensor<Cuda<0>, f32, shape![4]>, Tensor<Cuda<1>, f32, shape![8]>)>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not one tensor per device of the group `{G}` with one dtype and one shape",
    label = "a collective over `{G}` takes these tensors",
    note = "pass a tuple of tensors in the group's order with the same dtype and shape type, \
            e.g. `(Tensor<Cuda<0>, f32, S>, Tensor<Cuda<1>, f32, S>)` for `(Cuda<0>, Cuda<1>)`"
)]
pub trait Replicas<G: DeviceGroup>: sealed::Replicas + Sized {
    /// The dtype of every tensor.
    type Elem: DType;
    /// The shape type of every tensor.
    type Shape: Shape;
    /// The same devices and dtype under another shape type (the output of
    /// [`Comm::all_gather`] and [`Comm::reduce_scatter`]).
    type With<S2: Shape>: Replicas<G, Elem = Self::Elem, Shape = S2>;
    #[doc(hidden)]
    fn __parts(&self) -> Vec<Part<Self::Elem>>;
    #[doc(hidden)]
    fn __from_parts(parts: Vec<Part<Self::Elem>>) -> Self;
}

macro_rules! group {
    ($n:literal; $($o:ident $i:tt),+) => {
        impl<$(const $o: usize),+> sealed::Group for ($(Cuda<$o>,)+) {}
        impl<$(const $o: usize),+> DeviceGroup for ($(Cuda<$o>,)+) {
            const N: usize = $n;
            const ORDINALS: &'static [usize] = &[$($o),+];
        }
        impl<T: DType, S: Shape, $(const $o: usize),+> sealed::Replicas
            for ($(Tensor<Cuda<$o>, T, S>,)+) {}
        // Not listed in the error of a tuple that is not `Replicas`: the
        // trait's own message says what to pass.
        #[diagnostic::do_not_recommend]
        impl<T: DType, S: Shape, $(const $o: usize),+> Replicas<($(Cuda<$o>,)+)>
            for ($(Tensor<Cuda<$o>, T, S>,)+)
        {
            type Elem = T;
            type Shape = S;
            type With<S2: Shape> = ($(Tensor<Cuda<$o>, T, S2>,)+);
            fn __parts(&self) -> Vec<Part<T>> {
                vec![$(Part::of(&self.$i)),+]
            }
            fn __from_parts(parts: Vec<Part<T>>) -> Self {
                let mut it = parts.into_iter();
                ($(it.next().expect("one part per device").tensor::<Cuda<$o>, S>(),)+)
            }
        }
    };
}

group!(1; A 0);
group!(2; A 0, B 1);
group!(3; A 0, B 1, C 2);
group!(4; A 0, B 1, C 2, D 3);
group!(5; A 0, B 1, C 2, D 3, E 4);
group!(6; A 0, B 1, C 2, D 3, E 4, F 5);
group!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
group!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// True when no ordinal appears twice.
///
/// ```
/// use tensorfn_runtime::collective::distinct;
/// assert!(distinct(&[0, 1, 2]));
/// assert!(!distinct(&[1, 0, 1]));
/// ```
pub const fn distinct(ordinals: &[usize]) -> bool {
    let mut i = 0;
    while i < ordinals.len() {
        let mut j = i + 1;
        while j < ordinals.len() {
            if ordinals[i] == ordinals[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// How [`Comm::all_reduce`] and [`Comm::reduce_scatter`] combine the
/// devices' values, as PyTorch's `dist.ReduceOp`.
///
/// ```
/// use tensorfn_runtime::collective::ReduceOp;
/// assert_eq!(ReduceOp::default(), ReduceOp::Sum);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (`ReduceOp.SUM`).
    #[default]
    Sum,
    /// The mean over the ranks (`ReduceOp.AVG`; integers divide
    /// truncating).
    Mean,
    /// The largest value (`ReduceOp.MAX`).
    Max,
    /// The smallest value (`ReduceOp.MIN`).
    Min,
}

impl ReduceOp {
    fn nccl(self) -> std::ffi::c_int {
        match self {
            ReduceOp::Sum => red::SUM,
            ReduceOp::Mean => red::AVG,
            ReduceOp::Max => red::MAX,
            ReduceOp::Min => red::MIN,
        }
    }
}

/// The id that joins processes into one communicator, like PyTorch's
/// rendezvous: rank 0 makes it with [`NcclId::new`], sends
/// [`to_bytes`](Self::to_bytes) to every other process (a file, a socket,
/// an environment variable as hex), and each passes it to
/// [`Comm::from_rank`].
///
/// ```
/// use tensorfn_runtime::collective::NcclId;
/// let bytes = [7u8; 128];
/// let id = NcclId::from_bytes(&bytes).unwrap();
/// assert_eq!(id.to_bytes(), bytes);
/// assert_eq!(NcclId::from_hex(&id.to_hex()).unwrap(), id);
/// assert!(NcclId::from_bytes(&bytes[..5]).is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NcclId([u8; 128]);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclId({}..)", &self.to_hex()[..16])
    }
}

impl NcclId {
    /// The size of an id in bytes.
    ///
    /// ```
    /// assert_eq!(tensorfn_runtime::collective::NcclId::LEN, 128);
    /// ```
    pub const LEN: usize = 128;

    /// A fresh id from `ncclGetUniqueId` (made once, by rank 0);
    /// `Err(NcclUnavailable)` without NCCL.
    ///
    /// ```
    /// use tensorfn_runtime::collective::NcclId;
    /// use tensorfn_runtime::Error;
    /// match NcclId::new() {
    ///     Ok(id) => assert_eq!(id.to_bytes().len(), NcclId::LEN),
    ///     Err(e) => assert!(matches!(e, Error::NcclUnavailable { .. } | Error::Nccl { .. })),
    /// }
    /// ```
    pub fn new() -> Result<NcclId> {
        Ok(NcclId(nccl::api()?.unique_id()?))
    }

    /// The id's 128 bytes, to send to the other processes.
    ///
    /// ```
    /// use tensorfn_runtime::collective::NcclId;
    /// let id = NcclId::from_bytes(&[1; 128]).unwrap();
    /// assert_eq!(id.to_bytes()[0], 1);
    /// ```
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0
    }

    /// The id from the bytes [`to_bytes`](Self::to_bytes) gave; `Err`
    /// unless there are exactly 128.
    ///
    /// ```
    /// use tensorfn_runtime::collective::NcclId;
    /// assert!(NcclId::from_bytes(&[0; 128]).is_ok());
    /// assert!(NcclId::from_bytes(&[0; 129]).is_err());
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<NcclId> {
        <[u8; 128]>::try_from(bytes)
            .map(NcclId)
            .map_err(|_| Error::InvalidArgument {
                op: "NcclId::from_bytes".into(),
                message: format!(
                    "`bytes` has {} bytes; an NCCL id has {}: pass what `NcclId::to_bytes` gave",
                    bytes.len(),
                    Self::LEN
                ),
            })
    }

    /// The id as 256 lowercase hex digits (for an environment variable or
    /// a command line).
    ///
    /// ```
    /// use tensorfn_runtime::collective::NcclId;
    /// let hex = NcclId::from_bytes(&[0xab; 128]).unwrap().to_hex();
    /// assert_eq!(hex.len(), 256);
    /// assert!(hex.starts_with("abab"));
    /// ```
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id from [`to_hex`](Self::to_hex)'s digits; `Err` on anything
    /// else.
    ///
    /// ```
    /// use tensorfn_runtime::collective::NcclId;
    /// assert!(NcclId::from_hex(&"00".repeat(128)).is_ok());
    /// assert!(NcclId::from_hex("zz").is_err());
    /// ```
    pub fn from_hex(hex: &str) -> Result<NcclId> {
        let bad = || Error::InvalidArgument {
            op: "NcclId::from_hex".into(),
            message: format!(
                "`hex` is {} characters; an NCCL id is {} hex digits: pass what \
                 `NcclId::to_hex` gave",
                hex.len(),
                2 * Self::LEN
            ),
        };
        if hex.len() != 2 * Self::LEN || !hex.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(NcclId(out))
    }
}

/// NCCL communicators over the GPUs of the group `G`, one per GPU on that
/// GPU's stream; `W` says whether all ranks are in this process
/// ([`Local`], from [`Comm::new`]) or not ([`Ranks`], from
/// [`Comm::from_rank`]).
///
/// ```
/// use tensorfn_runtime::collective::{Comm, ReduceOp};
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// # fn main() -> tensorfn_runtime::Result<()> {
/// // One GPU here; a machine with two would use `(Cuda<0>, Cuda<1>)`.
/// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) }; // no GPU or no NCCL
/// let x = Tensor::<Cuda<0>, f32, shape![2]>::from_vec(vec![1.0, 2.0])?;
/// let (sum,) = comm.all_reduce(&(x,), ReduceOp::Sum)?;
/// assert_eq!(sum.to_vec()?, vec![1.0, 2.0]);
/// # Ok(()) }
/// ```
pub struct Comm<G: DeviceGroup, W: World = Local> {
    comms: Comms,
    _marker: PhantomData<(G, W)>,
}

impl<G: DeviceGroup, W: World> std::fmt::Debug for Comm<G, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("ordinals", &G::ORDINALS)
            .field("ranks", &(self.rank()..self.rank() + G::N))
            .field("world", &self.world())
            .field("library", &self.comms.library())
            .finish()
    }
}

impl<G: DeviceGroup> Comm<G, Local> {
    /// A communicator over every GPU of `G` in this process (ranks 0 to
    /// N - 1 in the group's order), like NCCL's `ncclCommInitAll` but
    /// non-blocking. `Err(CudaUnavailable)` when a GPU is missing,
    /// `Err(NcclUnavailable)` without NCCL.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{Cuda, Error};
    /// match Comm::<(Cuda<0>,)>::new() {
    ///     Ok(comm) => assert_eq!(comm.world(), 1),
    ///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. } | Error::NcclUnavailable { .. })),
    /// }
    /// ```
    ///
    /// A GPU listed twice does not compile:
    ///
    /// ```compile_fail
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// let _ = Comm::<(Cuda<0>, Cuda<0>)>::new();
    /// ```
    pub fn new() -> Result<Self> {
        const { check_group(G::ORDINALS) };
        let id = nccl::api()?.unique_id()?;
        Ok(Comm {
            comms: Comms::new(G::ORDINALS, id, 0, G::N, DEFAULT_TIMEOUT)?,
            _marker: PhantomData,
        })
    }
}

impl<G: DeviceGroup> Comm<G, Ranks> {
    /// This process's part of a communicator of `world` ranks spread over
    /// processes: the group's GPUs are ranks `rank`, `rank + 1`, ... (one
    /// GPU per process is the usual layout, `rank` its place), joined
    /// through `id`, which rank 0 made with [`NcclId::new`] and passed to
    /// every process. Returns when all `world` ranks have joined, or `Err`
    /// after the timeout (5 minutes).
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, NcclId, Ranks};
    /// use tensorfn_runtime::{Cuda, Error};
    /// // A world of one: rank 0 makes the id and is the only rank.
    /// match NcclId::new().and_then(|id| Comm::<(Cuda<0>,), Ranks>::from_rank(&id, 0, 1)) {
    ///     Ok(comm) => assert_eq!((comm.rank(), comm.world()), (0, 1)),
    ///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. } | Error::NcclUnavailable { .. })),
    /// }
    /// ```
    pub fn from_rank(id: &NcclId, rank: usize, world: usize) -> Result<Self> {
        const { check_group(G::ORDINALS) };
        nccl::api()?;
        Ok(Comm {
            comms: Comms::new(G::ORDINALS, id.0, rank, world, DEFAULT_TIMEOUT)?,
            _marker: PhantomData,
        })
    }
}

impl<G: DeviceGroup, W: World> Comm<G, W> {
    /// The number of ranks in the whole communicator.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     assert_eq!(comm.world(), 1);
    /// }
    /// ```
    pub fn world(&self) -> usize {
        self.comms.world
    }

    /// The rank of the group's first GPU (0 for [`Comm::new`]).
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     assert_eq!(comm.rank(), 0);
    /// }
    /// ```
    pub fn rank(&self) -> usize {
        self.comms.first_rank
    }

    /// How long a call may take before the communicator is aborted and
    /// the call returns `Err(Error::Nccl { status: "timeout", .. })`.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     assert_eq!(comm.timeout().as_secs(), 300);
    /// }
    /// ```
    pub fn timeout(&self) -> Duration {
        self.comms.timeout()
    }

    /// Sets the [`timeout`](Self::timeout) of later calls.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::Cuda;
    /// if let Ok(comm) = Comm::<(Cuda<0>,)>::new() {
    ///     comm.set_timeout(Duration::from_secs(30));
    ///     assert_eq!(comm.timeout().as_secs(), 30);
    /// }
    /// ```
    pub fn set_timeout(&self, timeout: Duration) {
        self.comms.set_timeout(timeout)
    }

    /// The element-wise reduction over every rank, on every device (new
    /// tensors; the inputs are unchanged): PyTorch's `dist.all_reduce`.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, i64, shape![3]>::from_vec(vec![1, -2, 3])?;
    /// let (m,) = comm.all_reduce(&(x,), ReduceOp::Max)?;
    /// assert_eq!(m.to_vec()?, vec![1, -2, 3]);
    /// # Ok(()) }
    /// ```
    pub fn all_reduce<R: Replicas<G>>(&self, x: &R, op: ReduceOp) -> Result<R> {
        self.start_all_reduce("all_reduce", x, op)?.wait()
    }

    /// [`all_reduce`](Self::all_reduce) without waiting: queues the
    /// reduction after the work already queued on each GPU and returns at
    /// once; [`Pending::wait`] gives the result (the timeout counts from
    /// this call). The tensors are taken and reduced in place where each
    /// is contiguous and not shared (PyTorch's `all_reduce(t,
    /// async_op=True)`), into new buffers otherwise.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let g = Tensor::<Cuda<0>, f32, shape![3]>::from_vec(vec![1.0, 2.0, 3.0])?;
    /// let pending = comm.all_reduce_async((g,), ReduceOp::Mean)?;
    /// // ... more work queued on the GPU runs meanwhile ...
    /// let (g,) = pending.wait()?;
    /// assert_eq!(g.to_vec()?, vec![1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn all_reduce_async<R: Replicas<G>>(&self, x: R, op: ReduceOp) -> Result<Pending<'_, R>> {
        let parts = x.__parts();
        // The tuple holds one reference; `parts` the other.
        let owned = parts
            .iter()
            .all(|p| p.layout.is_contiguous() && Arc::strong_count(&p.storage) == 2);
        if !owned {
            drop(parts);
            return self.start_all_reduce("all_reduce_async", &x, op);
        }
        let flight = self.start_in_place("all_reduce_async", &parts, op)?;
        drop(parts);
        Ok(Pending {
            flight,
            value: Some(x),
        })
    }

    /// The out-of-place reduction, started.
    fn start_all_reduce<R: Replicas<G>>(
        &self,
        name: &str,
        x: &R,
        op: ReduceOp,
    ) -> Result<Pending<'_, R>> {
        let parts = x.__parts();
        let dims = same_dims(name, &parts)?;
        let dtype = reduce_dtype::<R::Elem>(name, op)?;
        let n = numel(&dims);
        let inputs = contiguous(&parts)?;
        let outs = outputs::<R::Elem>(&parts, n)?;
        let flight = if n > 0 {
            let bufs = pairs(&inputs, &outs);
            Some(self.comms.launch(
                Collective::AllReduce(op.nccl()),
                &bufs,
                n,
                dtype,
                keep(parts, inputs),
            )?)
        } else {
            None
        };
        Ok(Pending {
            flight,
            value: Some(R::__from_parts(wrap(outs, &dims))),
        })
    }

    /// The reduction in place over contiguous unshared `parts`, started.
    fn start_in_place<T: DType>(
        &self,
        name: &str,
        parts: &[Part<T>],
        op: ReduceOp,
    ) -> Result<Option<Flight<'_>>> {
        let dims = same_dims(name, parts)?;
        let dtype = reduce_dtype::<T>(name, op)?;
        let n = numel(&dims);
        if n == 0 {
            return Ok(None);
        }
        let bufs: Vec<(u64, u64)> = parts
            .iter()
            .map(|p| {
                let ptr = p.cuda().ptr_at(p.layout.offset());
                (ptr, ptr)
            })
            .collect();
        self.comms
            .launch(
                Collective::AllReduce(op.nccl()),
                &bufs,
                n,
                dtype,
                Vec::new(),
            )
            .map(Some)
    }

    /// [`all_reduce`](Self::all_reduce) in place: each tensor takes the
    /// result (a tensor that shares its storage with another, or is a
    /// strided view, gets a new buffer instead, as a write would).
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let mut g = (Tensor::<Cuda<0>, f32, shape![2]>::from_vec(vec![2.0, 4.0])?,);
    /// comm.all_reduce_(&mut g, ReduceOp::Mean)?;
    /// assert_eq!(g.0.to_vec()?, vec![2.0, 4.0]); // one rank: the mean is itself
    /// # Ok(()) }
    /// ```
    pub fn all_reduce_<R: Replicas<G>>(&self, x: &mut R, op: ReduceOp) -> Result<()> {
        let parts = x.__parts();
        same_dims("all_reduce_", &parts)?;
        reduce_dtype::<R::Elem>("all_reduce_", op)?;
        // The tuple holds one reference; `parts` the other.
        let owned = parts
            .iter()
            .all(|p| p.layout.is_contiguous() && Arc::strong_count(&p.storage) == 2);
        if !owned {
            drop(parts);
            *x = self.all_reduce(x, op)?;
            return Ok(());
        }
        match self.start_in_place("all_reduce_", &parts, op)? {
            Some(flight) => flight.wait(),
            None => Ok(()),
        }
    }

    /// Every rank's tensor, concatenated along dim 0 in rank order, on
    /// every device: PyTorch's `all_gather_into_tensor`. The output's
    /// shape type `S2` has dim 0 = world × the input's and the input's
    /// other dims: a compile error for static shapes of a [`Local`]
    /// communicator, `Err` naming the output otherwise.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, f32, shape![2, 2]>::from_vec(vec![1.0, 2.0, 3.0, 4.0])?;
    /// let (all,) = comm.all_gather::<shape![2, 2], _>(&(x,))?;
    /// assert_eq!(all.to_vec()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn all_gather<S2: Shape, R: Replicas<G>>(&self, x: &R) -> Result<R::With<S2>> {
        const { check_gather::<R::Shape, S2>(W::ONE_PROCESS, G::N) };
        self.start_all_gather::<S2, R>(x)?.wait()
    }

    /// [`all_gather`](Self::all_gather) without waiting: returns at once
    /// with a [`Pending`] result (see [`all_reduce_async`](Self::all_reduce_async)).
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, i32, shape![2]>::from_vec(vec![5, 6])?;
    /// let (all,) = comm.all_gather_async::<shape![2], _>(&(x,))?.wait()?;
    /// assert_eq!(all.to_vec()?, vec![5, 6]);
    /// # Ok(()) }
    /// ```
    pub fn all_gather_async<S2: Shape, R: Replicas<G>>(
        &self,
        x: &R,
    ) -> Result<Pending<'_, R::With<S2>>> {
        const { check_gather::<R::Shape, S2>(W::ONE_PROCESS, G::N) };
        self.start_all_gather::<S2, R>(x)
    }

    fn start_all_gather<S2: Shape, R: Replicas<G>>(
        &self,
        x: &R,
    ) -> Result<Pending<'_, R::With<S2>>> {
        let parts = x.__parts();
        let dims = same_dims("all_gather", &parts)?;
        let out_dims = shard_dims::<S2>("all_gather", &dims, self.world(), true)?;
        let n = numel(&dims);
        let inputs = contiguous(&parts)?;
        let outs = outputs::<R::Elem>(&parts, numel(&out_dims))?;
        let flight = if n > 0 {
            let bufs = pairs(&inputs, &outs);
            let dtype = nccl::data_type(R::Elem::KIND);
            Some(
                self.comms
                    .launch(Collective::AllGather, &bufs, n, dtype, keep(parts, inputs))?,
            )
        } else {
            None
        };
        Ok(Pending {
            flight,
            value: Some(R::With::<S2>::__from_parts(wrap(outs, &out_dims))),
        })
    }

    /// The reduction over every rank, split along dim 0: rank r keeps the
    /// r-th of world equal blocks; PyTorch's `reduce_scatter_tensor`. The
    /// input's dim 0 must divide by the world and the output's shape type
    /// `S2` has dim 0 = the input's ÷ world: a compile error for static
    /// shapes of a [`Local`] communicator, `Err` naming the operand
    /// otherwise.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, f32, shape![_, 2]>::from_vec_dims(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let (mine,) = comm.reduce_scatter::<shape![_, 2], _>(&(x,), ReduceOp::Sum)?;
    /// assert_eq!(mine.to_vec()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn reduce_scatter<S2: Shape, R: Replicas<G>>(
        &self,
        x: &R,
        op: ReduceOp,
    ) -> Result<R::With<S2>> {
        const { check_scatter::<R::Shape, S2>(W::ONE_PROCESS, G::N) };
        self.start_reduce_scatter::<S2, R>(x, op)?.wait()
    }

    /// [`reduce_scatter`](Self::reduce_scatter) without waiting: returns
    /// at once with a [`Pending`] result (see
    /// [`all_reduce_async`](Self::all_reduce_async)).
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, f64, shape![2]>::from_vec(vec![0.5, 1.5])?;
    /// let (mine,) = comm.reduce_scatter_async::<shape![2], _>(&(x,), ReduceOp::Sum)?.wait()?;
    /// assert_eq!(mine.to_vec()?, vec![0.5, 1.5]);
    /// # Ok(()) }
    /// ```
    pub fn reduce_scatter_async<S2: Shape, R: Replicas<G>>(
        &self,
        x: &R,
        op: ReduceOp,
    ) -> Result<Pending<'_, R::With<S2>>> {
        const { check_scatter::<R::Shape, S2>(W::ONE_PROCESS, G::N) };
        self.start_reduce_scatter::<S2, R>(x, op)
    }

    fn start_reduce_scatter<S2: Shape, R: Replicas<G>>(
        &self,
        x: &R,
        op: ReduceOp,
    ) -> Result<Pending<'_, R::With<S2>>> {
        let parts = x.__parts();
        let dims = same_dims("reduce_scatter", &parts)?;
        let dtype = reduce_dtype::<R::Elem>("reduce_scatter", op)?;
        let out_dims = shard_dims::<S2>("reduce_scatter", &dims, self.world(), false)?;
        let count = numel(&out_dims);
        let inputs = contiguous(&parts)?;
        let outs = outputs::<R::Elem>(&parts, count)?;
        let flight = if count > 0 {
            let bufs = pairs(&inputs, &outs);
            Some(self.comms.launch(
                Collective::ReduceScatter(op.nccl()),
                &bufs,
                count,
                dtype,
                keep(parts, inputs),
            )?)
        } else {
            None
        };
        Ok(Pending {
            flight,
            value: Some(R::With::<S2>::__from_parts(wrap(outs, &out_dims))),
        })
    }

    /// Rank `root`'s tensor on every device (new tensors): PyTorch's
    /// `dist.broadcast(t, src=root)`. `Err` when `root` is not a rank.
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{bf16, shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let w = Tensor::<Cuda<0>, bf16, shape![2]>::full(bf16::from_f32(0.5))?;
    /// let (w,) = comm.broadcast(&(w,), 0)?;
    /// assert_eq!(w.to_vec()?, vec![bf16::from_f32(0.5); 2]);
    /// assert!(comm.broadcast(&(w,), 1).is_err()); // a world of one has rank 0 only
    /// # Ok(()) }
    /// ```
    pub fn broadcast<R: Replicas<G>>(&self, x: &R, root: usize) -> Result<R> {
        self.broadcast_async(x, root)?.wait()
    }

    /// [`broadcast`](Self::broadcast) without waiting: returns at once
    /// with a [`Pending`] result (see
    /// [`all_reduce_async`](Self::all_reduce_async)).
    ///
    /// ```
    /// use tensorfn_runtime::collective::Comm;
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let w = Tensor::<Cuda<0>, f32, shape![2]>::from_vec(vec![1.0, -1.0])?;
    /// let pending = comm.broadcast_async(&(w,), 0)?;
    /// let (w,) = pending.wait()?;
    /// assert_eq!(w.to_vec()?, vec![1.0, -1.0]);
    /// # Ok(()) }
    /// ```
    pub fn broadcast_async<R: Replicas<G>>(&self, x: &R, root: usize) -> Result<Pending<'_, R>> {
        if root >= self.world() {
            return Err(Error::InvalidArgument {
                op: "broadcast".into(),
                message: format!(
                    "`root` is {root} but the communicator has ranks 0 to {}; pass one of them",
                    self.world() - 1
                ),
            });
        }
        let parts = x.__parts();
        let dims = same_dims("broadcast", &parts)?;
        let n = numel(&dims);
        let inputs = contiguous(&parts)?;
        let outs = outputs::<R::Elem>(&parts, n)?;
        let flight = if n > 0 {
            let bufs = pairs(&inputs, &outs);
            let dtype = nccl::data_type(R::Elem::KIND);
            Some(self.comms.launch(
                Collective::Broadcast(root),
                &bufs,
                n,
                dtype,
                keep(parts, inputs),
            )?)
        } else {
            None
        };
        Ok(Pending {
            flight,
            value: Some(R::__from_parts(wrap(outs, &dims))),
        })
    }
}

/// A collective queued on the GPUs and not yet waited on, from the
/// `*_async` methods of [`Comm`] (PyTorch's `Work` of `async_op=True`):
/// [`wait`](Self::wait) gives its result. The timeout counts from the
/// call that started it; a collective that does not finish in time, or
/// fails, aborts the communicator and `wait` returns the `Err`. Dropping
/// a `Pending` waits too (ignoring the result), so buffers are never
/// freed while NCCL still uses them.
///
/// ```
/// use tensorfn_runtime::collective::{Comm, ReduceOp};
/// use tensorfn_runtime::{shape, Cuda, Tensor};
/// # fn main() -> tensorfn_runtime::Result<()> {
/// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
/// let a = Tensor::<Cuda<0>, f32, shape![2]>::from_vec(vec![1.0, 2.0])?;
/// let b = Tensor::<Cuda<0>, f32, shape![3]>::from_vec(vec![3.0, 4.0, 5.0])?;
/// // Two reductions in flight at once, waited on in order.
/// let pa = comm.all_reduce_async((a,), ReduceOp::Sum)?;
/// let pb = comm.all_reduce_async((b,), ReduceOp::Sum)?;
/// let ((a,), (b,)) = (pa.wait()?, pb.wait()?);
/// assert_eq!((a.to_vec()?, b.to_vec()?), (vec![1.0, 2.0], vec![3.0, 4.0, 5.0]));
/// # Ok(()) }
/// ```
#[must_use = "a collective's result is only there after `wait`"]
pub struct Pending<'c, R> {
    // Dropped first: waits before `value`'s buffers are released.
    flight: Option<Flight<'c>>,
    value: Option<R>,
}

impl<R> std::fmt::Debug for Pending<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("queued", &self.flight.is_some())
            .finish()
    }
}

impl<R> Pending<'_, R> {
    /// Waits until the GPUs have done the collective and returns its
    /// result; `Err` (and the communicator aborted) on an NCCL error or
    /// after the communicator's timeout.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, i64, shape![1]>::from_vec(vec![7])?;
    /// let (y,) = comm.all_reduce_async((x,), ReduceOp::Max)?.wait()?;
    /// assert_eq!(y.to_vec()?, vec![7]);
    /// # Ok(()) }
    /// ```
    pub fn wait(mut self) -> Result<R> {
        if let Some(flight) = self.flight.take() {
            flight.wait()?;
        }
        Ok(self
            .value
            .take()
            .expect("a pending collective's value is taken once"))
    }

    /// Whether the collective has finished, without blocking (PyTorch's
    /// `Work.is_completed()`); `Err` (and the communicator aborted) on an
    /// NCCL error.
    ///
    /// ```
    /// use tensorfn_runtime::collective::{Comm, ReduceOp};
    /// use tensorfn_runtime::{shape, Cuda, Tensor};
    /// # fn main() -> tensorfn_runtime::Result<()> {
    /// let Ok(comm) = Comm::<(Cuda<0>,)>::new() else { return Ok(()) };
    /// let x = Tensor::<Cuda<0>, f32, shape![4]>::ones()?;
    /// let p = comm.all_reduce_async((x,), ReduceOp::Sum)?;
    /// while !p.is_done()? {
    ///     std::thread::yield_now();
    /// }
    /// assert_eq!(p.wait()?.0.to_vec()?, vec![1.0; 4]);
    /// # Ok(()) }
    /// ```
    pub fn is_done(&self) -> Result<bool> {
        match &self.flight {
            Some(f) => f.is_done(),
            None => Ok(true),
        }
    }
}

/// What a flight keeps alive: the input tensors and their contiguous
/// copies.
fn keep<T: DType>(parts: Vec<Part<T>>, inputs: Vec<Input<T>>) -> Vec<Box<dyn std::any::Any>> {
    vec![Box::new(parts), Box::new(inputs)]
}

/// The dims every tensor of the tuple has; `Err` naming the tensor whose
/// run-time dims differ from the first's.
pub(crate) fn same_dims<T: DType>(op: &str, parts: &[Part<T>]) -> Result<Vec<usize>> {
    let dims: Vec<Vec<usize>> = parts.iter().map(|p| p.layout.dims().to_vec()).collect();
    check_same_dims(op, &dims)
}

/// [`same_dims`] on the dims alone.
pub(crate) fn check_same_dims(op: &str, dims: &[Vec<usize>]) -> Result<Vec<usize>> {
    let first = dims.first().cloned().unwrap_or_default();
    for (i, d) in dims.iter().enumerate().skip(1) {
        if *d != first {
            return Err(Error::shape(
                op,
                format!("tensor {i} of the tuple to have the dims of tensor 0, {first:?}"),
                format!("{d:?}; every device must pass the same shape"),
            ));
        }
    }
    Ok(first)
}

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// The output dims of a gather (`gather`) or scatter along dim 0 over
/// `world` ranks, checked against `S2`; `Err` names the operand.
pub(crate) fn shard_dims<S2: Shape>(
    op: &str,
    dims: &[usize],
    world: usize,
    gather: bool,
) -> Result<Vec<usize>> {
    let Some(&d0) = dims.first() else {
        return Err(Error::shape(
            op,
            "an input with at least one dim (it is split or joined along dim 0)",
            "a 0-d input",
        ));
    };
    let mut out = dims.to_vec();
    if gather {
        out[0] = d0.checked_mul(world).ok_or_else(|| {
            Error::shape(
                op,
                "an output size that fits in memory",
                format!("{d0} × {world}"),
            )
        })?;
    } else {
        if d0 % world != 0 {
            return Err(Error::shape(
                op,
                format!("the input's dim 0 to divide by the {world} ranks"),
                format!("input dims {dims:?} (dim 0 = {d0}); pad or trim dim 0 to a multiple of {world}"),
            ));
        }
        out[0] = d0 / world;
    }
    S2::check(&out).map_err(|_| {
        let rule = if gather {
            format!("dim 0 = {world} × {d0}")
        } else {
            format!("dim 0 = {d0} / {world}")
        };
        Error::shape(
            op,
            format!(
                "the output type `{}` to take dims {out:?} ({rule})",
                std::any::type_name::<S2>()
            ),
            format!("a mismatch with the input's dims {dims:?}; change the output's shape type"),
        )
    })?;
    Ok(out)
}

const OK: u8 = 0;
const BAD_RANK: u8 = 1;
const BAD_TAIL: u8 = 2;
const BAD_DIM0: u8 = 3;
const NOT_DIVISIBLE: u8 = 4;

/// The compile-time check of a device group, shared by the constructors:
/// a panic here is a compile error at the caller.
const fn check_group(ordinals: &[usize]) {
    assert!(
        distinct(ordinals),
        "a device group lists each GPU once: two of its ordinals are the same"
    )
}

/// The compile-time check of `all_gather` and its `_async` twin from `S`
/// to `S2` (a panic here is a compile error at the caller; a const panic
/// cannot format, so each collective has its own messages).
const fn check_gather<S: Shape, S2: Shape>(one_process: bool, n: usize) {
    let c = static_shard::<S, S2>(true, one_process, n);
    assert!(
        c != BAD_RANK,
        "all_gather: the output must have the input's rank, at least 1"
    );
    assert!(
        c != BAD_TAIL,
        "all_gather: the output's dims after dim 0 must be the input's"
    );
    assert!(
        c != BAD_DIM0,
        "all_gather: the output's dim 0 must be N times the input's (N: the GPUs of the group)"
    );
}

/// [`check_gather`] for `reduce_scatter` and its `_async` twin.
const fn check_scatter<S: Shape, S2: Shape>(one_process: bool, n: usize) {
    let c = static_shard::<S, S2>(false, one_process, n);
    assert!(
        c != BAD_RANK,
        "reduce_scatter: the output must have the input's rank, at least 1"
    );
    assert!(
        c != BAD_TAIL,
        "reduce_scatter: the output's dims after dim 0 must be the input's"
    );
    assert!(
        c != NOT_DIVISIBLE,
        "reduce_scatter: the input's dim 0 does not divide by N (N: the GPUs of the group)"
    );
    assert!(
        c != BAD_DIM0,
        "reduce_scatter: the output's dim 0 must be the input's divided by N (N: the GPUs of the group)"
    );
}

/// The compile-time check of a gather or scatter between shape types:
/// what can be told from their `Const` dims (and `n` GPUs when the whole
/// world is the group).
const fn static_shard<S: Shape, S2: Shape>(gather: bool, one_process: bool, n: usize) -> u8 {
    static_shard_dims(
        S::RANK,
        &S::DIMS,
        S2::RANK,
        &S2::DIMS,
        gather,
        one_process,
        n,
    )
}

/// [`static_shard`] on the dims.
pub(crate) const fn static_shard_dims(
    rank: usize,
    dims: &[Option<usize>; MAX_RANK],
    out_rank: usize,
    out: &[Option<usize>; MAX_RANK],
    gather: bool,
    one_process: bool,
    n: usize,
) -> u8 {
    if rank == 0 || out_rank != rank {
        return BAD_RANK;
    }
    let mut i = 1;
    while i < rank {
        if let (Some(a), Some(b)) = (dims[i], out[i]) {
            if a != b {
                return BAD_TAIL;
            }
        }
        i += 1;
    }
    if !one_process {
        return OK;
    }
    match (dims[0], out[0]) {
        (Some(a), _) if !gather && a % n != 0 => NOT_DIVISIBLE,
        (Some(a), Some(b)) if gather && b != a * n => BAD_DIM0,
        (Some(a), Some(b)) if !gather && b * n != a => BAD_DIM0,
        _ => OK,
    }
}

/// The NCCL dtype of a reduction, or `Err` for sums and means of bools.
fn reduce_dtype<T: DType>(op: &str, r: ReduceOp) -> Result<std::ffi::c_int> {
    if T::KIND == DTypeKind::Bool && matches!(r, ReduceOp::Sum | ReduceOp::Mean) {
        return Err(Error::DType {
            op: op.to_string(),
            expected: "a numeric tensor for `ReduceOp::Sum` and `ReduceOp::Mean`".into(),
            found: "a `bool` tensor; use `ReduceOp::Max` (any) or `Min` (all), or cast it first"
                .into(),
        });
    }
    Ok(nccl::data_type(T::KIND))
}

type Input<T> = (u64, Option<CudaStorage<T>>);

/// Each tensor's first element's address, made contiguous where it is a
/// strided view (the copy is kept alive with it).
fn contiguous<T: DType>(parts: &[Part<T>]) -> Result<Vec<Input<T>>> {
    parts
        .iter()
        .map(|p| {
            p.cuda().context().bind()?;
            contiguous_ptr(p.cuda(), &p.layout)
        })
        .collect()
}

/// New storage of `n` elements on each tensor's device.
fn outputs<T: DType>(parts: &[Part<T>], n: usize) -> Result<Vec<CudaStorage<T>>> {
    parts
        .iter()
        .map(|p| {
            let ctx = p.cuda().context();
            ctx.bind()?;
            ctx.storage::<T>(n)
        })
        .collect()
}

fn pairs<T: DType>(inputs: &[Input<T>], outs: &[CudaStorage<T>]) -> Vec<(u64, u64)> {
    inputs
        .iter()
        .zip(outs)
        .map(|((p, _), o)| (*p, o.device_ptr()))
        .collect()
}

fn wrap<T: DType>(outs: Vec<CudaStorage<T>>, dims: &[usize]) -> Vec<Part<T>> {
    outs.into_iter()
        .map(|s| Part {
            storage: Arc::new(Storage::Cuda(s)),
            layout: Layout::contiguous(dims),
        })
        .collect()
}

#[cfg(test)]
mod tests;
