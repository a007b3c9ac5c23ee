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

/// The second stage of `tensor_fn!` for functions taking parameter
/// structs: its input with the fields of the structs, which their hidden
/// fields macros (from `#[derive(Params)]`) add. Not called directly.
#[doc(hidden)]
#[proc_macro]
pub fn __tensor_fn_with_fields(input: TokenStream) -> TokenStream {
    tensorfn_macros_impl::expand_with_fields(input.into()).into()
}

/// Derives `tensorfn::Params` for a struct of tensors, nested parameter
/// structs, arrays and `Vec`s of them: loading and saving safetensors by
/// dotted field names (`#[params(rename = "key")]` renames a field), a
/// visit over (name, tensor), `num_params()`, and `to_device::<D2>()` /
/// `cast::<U>()` when the struct is generic over its device / dtype (see
/// the `tensorfn` crate).
#[proc_macro_derive(Params, attributes(params))]
pub fn derive_params(input: TokenStream) -> TokenStream {
    tensorfn_macros_impl::derive_params::derive(input.into()).into()
}
