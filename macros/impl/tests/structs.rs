//! `&Struct` parameters: the fields a body uses, checked as tensor
//! parameters, and the errors of paths into a struct.

use proc_macro2::TokenStream;
use quote::quote;
use tensorfn_macros_impl::{analyse_tokens_with, expand_with_fields};

fn tables() -> TokenStream {
    quote! {
        @struct ["Mlp"] Mlp [D T] {
            w1: Tensor<D, T, shape![784, 128]>,
            b1: Tensor<D, T, shape![128]>,
        }
        @struct ["Stack"] Stack [] { h: [Mlp<Cpu, f32>; 2], v: Vec<Mlp<Cpu, f32>>, n: usize, }
        @struct ["Aliased"] Aliased [] { w: Tensor<Cpu, f32, S3>, }
    }
}

fn errors(input: TokenStream) -> Vec<String> {
    analyse_tokens_with(input, tables())
        .unwrap()
        .errors
        .iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn field_of_a_tensor() {
    let e = errors(quote! {
        fn f(x: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [3]> { x.w }
    });
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("only parameter structs have fields"), "{e:?}");
}

#[test]
fn alias() {
    let e = errors(quote! {
        fn f(a: &Aliased) -> Tensor<Cpu, f32, [3]> { a.w * 2.0 }
    });
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("the field `a.w` of `Aliased`"), "{e:?}");
}

#[test]
fn a_struct_without_its_table_expands_to_its_fields_macro() {
    let out = tensorfn_macros_impl::expand(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 784]>, p: &nn::Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [4, 128]> {
            addmm(p.b1, x, p.w1)
        }
    })
    .to_string();
    assert!(
        out.starts_with("nn :: __tensorfn_fields_Mlp ! { [:: tensorfn :: __tensor_fn_with_fields] [\"nn::Mlp\"] @ input {"),
        "{out}"
    );
}

#[test]
fn nested_structs_are_fetched_in_a_later_round() {
    // `Stack`'s table is known, the `Mlp` its array holds is not.
    let out = expand_with_fields(quote! {
        @input {
            fn f(s: &m::Stack) -> Tensor<Cpu, f32, [128]> { s.h[0].b1 }
        }
        @struct ["m::Stack"] Stack [] { h: [Mlp<Cpu, f32>; 2], }
    })
    .to_string();
    // Looked up beside `Stack`, the tables so far carried on.
    assert!(
        out.starts_with(
            "m :: __tensorfn_fields_Mlp ! { [:: tensorfn :: __tensor_fn_with_fields] [\"m::Mlp\"]"
        ),
        "{out}"
    );
    assert!(out.contains("@ struct [\"m::Stack\"] Stack"), "{out}");
}

#[test]
fn used_fields_are_bound_once_and_typed_from_the_written_arguments() {
    let out = expand_with_fields({
        let t = tables();
        quote! {
            @input {
                fn f(x: &Tensor<Cpu, f32, [4, 784]>, s: &Stack) -> Tensor<Cpu, f32, [4, 128]> {
                    let h = addmm(s.h[1].b1, x, s.h[1].w1);
                    relu(h) + s.h[1].b1 + s.v[3].b1
                }
            }
            #t
        }
    })
    .to_string();
    assert!(!out.contains("compile_error"), "{out}");
    assert!(out.contains("fn f (x : & :: tensorfn :: Tensor"), "{out}");
    assert!(out.contains("s : & Stack"), "{out}");
    assert_eq!(
        out.matches("let __tf_field_s_h_1__b1 = & s . h [1] . b1 ;")
            .count(),
        1,
        "{out}"
    );
    // A `Vec` element: checked at run time.
    assert!(out.contains("s . v . get (3)"), "{out}");
    assert!(out.contains("Error :: Index"), "{out}");
    assert!(out.contains("index 3 is out of range for `s.v`"), "{out}");
}

#[test]
fn errors_of_paths_name_the_struct_and_the_fix() {
    let e = errors(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 100]>, p: &Mlp<Cpu, f32>, s: &Stack) -> Tensor<Cpu, f32, [4, 128]> {
            let a = addmm(p.b1, x, p.w1);
            let b = p.w3 + s.h[2].b1 + s.h[i].b1;
            let c = p + s.h + s.n + s.h[0] + p.w1.x;
            a
        }
    });
    let all = e.join("\n");
    assert_eq!(e.len(), 9, "{all}");
    assert!(
        all.contains("`x` is [4, 100] (k = 100) but `p.w1` is [784, 128]"),
        "{all}"
    );
    assert!(
        all.contains("`p` is a `Mlp<Cpu, f32>` and has no field `w3`: its fields are `w1`, `b1`"),
        "{all}"
    );
    assert!(
        all.contains("index 2 is out of range for `s.h`, an array of 2 `Mlp<Cpu, f32>`"),
        "{all}"
    );
    assert!(
        all.contains("`s.h` is indexed with one integer literal"),
        "{all}"
    );
    assert!(
        all.contains(
            "`p` is a parameter struct `Mlp<Cpu, f32>`, not a tensor: use its fields (`w1`, `b1`)"
        ),
        "{all}"
    );
    assert!(
        all.contains("`s.h` is an array of 2 `Mlp<Cpu, f32>`, not a tensor"),
        "{all}"
    );
    assert!(
        all.contains("`s.n` is a `usize`, neither a tensor nor a parameter struct"),
        "{all}"
    );
    assert!(
        all.contains("`p.w1` is a tensor and has no field `x`"),
        "{all}"
    );
}

#[test]
fn calls_to_functions_taking_structs_are_refused_for_now() {
    let e = errors(quote! {
        fn inner(p: &Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [128]> { p.b1 }
        fn outer(p: &Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [128]> { inner(p) }
    });
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("`inner` takes a parameter struct"), "{e:?}");
}

#[test]
fn the_derive_writes_the_fields_macro() {
    let out = tensorfn_macros_impl::derive_params::derive(quote! {
        struct Block<D: Device, T: Float, const N: usize> { w: [Tensor<D, T, shape![N]>; 2] }
    })
    .to_string();
    assert!(
        out.contains("macro_rules ! __tensorfn_fields_Block"),
        "{out}"
    );
    assert!(
        out.contains("Block [D T N] { w : [Tensor < D , T , shape ! [N] > ; 2] , }"),
        "{out}"
    );
    assert!(
        out.contains("pub (crate) use __tensorfn_fields_Block ;"),
        "{out}"
    );
}
