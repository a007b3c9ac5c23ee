//! The closed set of element types, as a value.
//!
//! ```
//! use tensorfn_core::dtype::DTypeKind;
//! let floats: Vec<&str> = DTypeKind::ALL.iter().filter(|k| k.is_float()).map(|k| k.name()).collect();
//! assert_eq!(floats, ["f32", "f64", "f16", "bf16"]);
//! ```

use std::fmt;

/// An element type, known at run time (the typed API carries it in `T`).
///
/// ```
/// use tensorfn_core::DTypeKind;
/// assert_eq!(DTypeKind::F16.size_bytes(), 2);
/// assert!(DTypeKind::BF16.is_float());
/// assert_eq!(DTypeKind::parse("i64"), Some(DTypeKind::I64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DTypeKind {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE float (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean, stored as one byte.
    Bool,
}

impl DTypeKind {
    /// Every dtype, in a fixed order.
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert_eq!(DTypeKind::ALL.len(), 8);
    /// assert_eq!(DTypeKind::ALL.iter().filter(|k| k.is_float()).count(), 4);
    /// ```
    pub const ALL: [DTypeKind; 8] = [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
        DTypeKind::I32,
        DTypeKind::I64,
        DTypeKind::U8,
        DTypeKind::Bool,
    ];

    /// The Rust spelling used in types (`f32`, `f16`, `bool`, ...).
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert_eq!(DTypeKind::BF16.name(), "bf16");
    /// assert_eq!(DTypeKind::Bool.to_string(), "bool");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            DTypeKind::F32 => "f32",
            DTypeKind::F64 => "f64",
            DTypeKind::F16 => "f16",
            DTypeKind::BF16 => "bf16",
            DTypeKind::I32 => "i32",
            DTypeKind::I64 => "i64",
            DTypeKind::U8 => "u8",
            DTypeKind::Bool => "bool",
        }
    }

    /// Parses the Rust spelling back (`half::f16` and `f16` both work).
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert_eq!(DTypeKind::parse("half::f16"), Some(DTypeKind::F16));
    /// assert_eq!(DTypeKind::parse("f32"), Some(DTypeKind::F32));
    /// assert_eq!(DTypeKind::parse("float"), None);
    /// ```
    pub fn parse(s: &str) -> Option<DTypeKind> {
        let last = s.rsplit("::").next().unwrap_or(s).trim();
        DTypeKind::ALL.into_iter().find(|k| k.name() == last)
    }

    /// Bytes per element.
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert_eq!(DTypeKind::F64.size_bytes(), 8);
    /// assert_eq!(DTypeKind::Bool.size_bytes(), 1);
    /// ```
    pub const fn size_bytes(self) -> usize {
        match self {
            DTypeKind::F64 | DTypeKind::I64 => 8,
            DTypeKind::F32 | DTypeKind::I32 => 4,
            DTypeKind::F16 | DTypeKind::BF16 => 2,
            DTypeKind::U8 | DTypeKind::Bool => 1,
        }
    }

    /// True for the four floating-point types.
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert!(DTypeKind::F16.is_float());
    /// assert!(!DTypeKind::I32.is_float());
    /// ```
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DTypeKind::F32 | DTypeKind::F64 | DTypeKind::F16 | DTypeKind::BF16
        )
    }

    /// True for the signed and unsigned integer types (not `bool`).
    ///
    /// ```
    /// use tensorfn_core::DTypeKind;
    /// assert!(DTypeKind::U8.is_int());
    /// assert!(!DTypeKind::Bool.is_int());
    /// ```
    pub const fn is_int(self) -> bool {
        matches!(self, DTypeKind::I32 | DTypeKind::I64 | DTypeKind::U8)
    }
}

impl fmt::Display for DTypeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
