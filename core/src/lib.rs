//! Facts shared by every tensorfn crate: the dtype names, the op catalogue
//! ([`ops`]) and the shape rules of each operation.
//!
//! The rules are written once, generic over [`DimValue`], so the
//! `tensor_fn!` macro applies them to symbolic dims (`B`, `N * M`) at
//! expansion time and the runtime applies them to `usize` dims at run time.
//! Both report the same [`RuleError`] text.
//!
//! ```
//! use tensorfn_core::rules;
//! let out = rules::cat("cat", &[("a", &[2usize, 3, 4][..]), ("b", &[2, 5, 4][..])], 1).unwrap();
//! assert_eq!(out, vec![2, 8, 4]);
//! ```
#![deny(missing_docs)]

pub mod dtype;
pub mod ops;
pub mod rules;

pub use dtype::DTypeKind;
pub use rules::{DimValue, RuleError};
