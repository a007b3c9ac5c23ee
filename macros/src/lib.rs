//! The `tensor_fn!` procedural macro. The stages live in the
//! `tensorfn-macros-impl` library; this crate only connects them to the
//! compiler. See the `tensorfn` crate for the documentation.
#![deny(missing_docs)]

use proc_macro::TokenStream;

/// Checks device, dtype and shape of whole tensor functions at compile
/// time and compiles them to typed functions (see the `tensorfn` crate).
#[proc_macro]
pub fn tensor_fn(input: TokenStream) -> TokenStream {
    tensorfn_macros_impl::expand(input.into()).into()
}
