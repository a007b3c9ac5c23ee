//! The GPU architectures the emitted PTX is written for, and the header
//! each module starts with. A leaf module: the launch contract
//! ([`abi`](crate::abi)) and the emitter ([`ptx`](crate::ptx)) both name a
//! target, neither through the other.

/// The first lines of every module this crate emits.
///
/// ```
/// assert!(tensorfn_kernels::ptx::HEADER.contains(".target sm_70"));
/// ```
pub const HEADER: &str = ".version 7.0\n.target sm_70\n.address_size 64\n";

/// The GPU architecture a module is written for.
///
/// [`Sm70`](Target::Sm70) text runs on every supported device. On
/// [`Sm80`](Target::Sm80) (compute capability 8.0 and newer) rounding an
/// `f32` to `bf16` is one `cvt.rn.bf16x2.f32` instead of an integer
/// sequence of about eight instructions, and `+`, `-`, `*` of two bf16
/// values are one `fma.rn.bf16` each instead of an f32 op and a rounding;
/// nothing else differs, and both compute the same bits (round to nearest even, subnormals kept,
/// overflow to infinity), NaN payloads aside: the integer sequence keeps a
/// NaN's sign and top payload bits, the conversion may give another NaN.
///
/// ```
/// use tensorfn_kernels::ptx::Target;
/// assert_eq!(Target::default(), Target::Sm70);
/// assert_eq!(Target::for_compute_capability(7, 5), Target::Sm70);
/// assert_eq!(Target::for_compute_capability(9, 0), Target::Sm80);
/// assert!(Target::Sm80.header().contains(".target sm_80"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Volta and newer (`.target sm_70`): runs everywhere.
    #[default]
    Sm70,
    /// Ampere and newer (`.target sm_80`): native `bf16` conversion.
    Sm80,
}

impl Target {
    /// The best target for a device of compute capability `major.minor`.
    pub fn for_compute_capability(major: u32, minor: u32) -> Target {
        if (major, minor) >= (8, 0) {
            Target::Sm80
        } else {
            Target::Sm70
        }
    }

    /// The first lines of a module for this target ([`HEADER`] for sm_70).
    pub fn header(self) -> &'static str {
        match self {
            Target::Sm70 => HEADER,
            // cvt.rn.bf16x2.f32 needs PTX ISA 7.0 and sm_80.
            Target::Sm80 => ".version 7.0\n.target sm_80\n.address_size 64\n",
        }
    }

    /// The architecture name, as `ptxas -arch` spells it.
    pub fn arch(self) -> &'static str {
        match self {
            Target::Sm70 => "sm_70",
            Target::Sm80 => "sm_80",
        }
    }
}
