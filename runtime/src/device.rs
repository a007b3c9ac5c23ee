//! Devices as types: `Cpu` and `Cuda<ORD>`.

use std::fmt;

mod sealed {
    pub trait Sealed {}
}

/// Where a tensor's elements live, as a value.
///
/// ```
/// use tensorfn_runtime::{Device, DeviceKind, Cpu, Cuda};
/// assert_eq!(Cpu::KIND, DeviceKind::Cpu);
/// assert_eq!(<Cuda<1>>::KIND, DeviceKind::Cuda(1));
/// assert_eq!(<Cuda>::KIND.to_string(), "cuda:0");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// Host memory.
    Cpu,
    /// An NVIDIA GPU, by ordinal.
    Cuda(usize),
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Cpu => f.write_str("cpu"),
            DeviceKind::Cuda(o) => write!(f, "cuda:{o}"),
        }
    }
}

/// A device type. Tensors on different devices have different types, so
/// mixing them is a compile error; move with `to_device::<D>()`.
///
/// ```
/// use tensorfn_runtime::{Device, Cpu};
/// fn where_is<D: Device>() -> String { D::KIND.to_string() }
/// assert_eq!(where_is::<Cpu>(), "cpu");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensorfn device",
    note = "devices are `Cpu`, `Cuda` (cuda:0) and `Cuda<N>`"
)]
pub trait Device: sealed::Sealed + Copy + Default + Send + Sync + fmt::Debug + 'static {
    /// This device as a value.
    const KIND: DeviceKind;
    /// True for the host. A constant condition, so that code generic over
    /// the device compiles only its own backend: rustc drops the branch
    /// of the other before generating code (a `match` on [`KIND`](Self::KIND)
    /// compiles both).
    ///
    /// ```
    /// use tensorfn_runtime::{Device, Cpu, Cuda};
    /// assert!(Cpu::IS_CPU && !<Cuda<1>>::IS_CPU);
    /// assert_eq!(<Cuda<1>>::ORDINAL, 1);
    /// ```
    const IS_CPU: bool = matches!(Self::KIND, DeviceKind::Cpu);
    /// The GPU's ordinal (0 for the host).
    const ORDINAL: usize = match Self::KIND {
        DeviceKind::Cpu => 0,
        DeviceKind::Cuda(o) => o,
    };
}

/// The host CPU.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape};
/// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// assert_eq!(x.to_vec().unwrap(), vec![1.0, 1.0]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cpu;

/// An NVIDIA GPU; `Cuda` is cuda:0, `Cuda<1>` is cuda:1.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, Cuda, Error, shape};
/// let x = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
/// match x.to_device::<Cuda>() {
///     Ok(g) => assert_eq!(g.to_cpu().unwrap().to_vec().unwrap(), vec![1.0, 1.0]),
///     Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. })),
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cuda<const ORD: usize = 0>;

impl sealed::Sealed for Cpu {}
impl<const ORD: usize> sealed::Sealed for Cuda<ORD> {}

impl Device for Cpu {
    const KIND: DeviceKind = DeviceKind::Cpu;
}
impl<const ORD: usize> Device for Cuda<ORD> {
    const KIND: DeviceKind = DeviceKind::Cuda(ORD);
}

/// Proof that two tensors live on the same device; the compiler names both
/// devices when they differ.
///
/// ```
/// use tensorfn_runtime::{Cpu, Device, DeviceKind, SameDevice};
/// fn common<A: Device + SameDevice<B>, B: Device>() -> DeviceKind { A::KIND }
/// assert_eq!(common::<Cpu, Cpu>(), DeviceKind::Cpu);
/// ```
///
/// Two devices, even two GPUs, do not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{Cuda, Device, DeviceKind, SameDevice};
/// fn common<A: Device + SameDevice<B>, B: Device>() -> DeviceKind { A::KIND }
/// common::<Cuda<0>, Cuda<1>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "tensors on different devices: `{Self}` and `{D}`",
    label = "this tensor is on `{Self}`",
    note = "move it first with `.to_device::<{D}>()`"
)]
pub trait SameDevice<D: Device>: Device {}
impl<D: Device> SameDevice<D> for D {}
