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
    errors_with(input, tables())
}

fn errors_with(input: TokenStream, tables: TokenStream) -> Vec<String> {
    analyse_tokens_with(input, tables)
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
    assert!(
        out.contains("fn f (x : & impl :: tensorfn :: TensorArg <"),
        "{out}"
    );
    assert!(out.contains("let x : & :: tensorfn :: Tensor <"), "{out}");
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

fn net_tables() -> TokenStream {
    quote! {
        @struct ["Norm"] Norm [D T] {
            w: Tensor<D, T, shape![4]>,
            b: Tensor<D, T, shape![4]>,
        }
        @struct ["Lin"] Lin [D T IN OUT] {
            w: Tensor<D, T, shape![IN, OUT]>,
            b: Tensor<D, T, shape![OUT]>,
        }
        @struct ["Block"] Block [D T] {
            ln_1: Norm<D, T>,
            ln_2: Norm<D, T>,
            fc: Lin<D, T, 4, 8>,
            half: Norm<D, f32>,
        }
        @struct ["Net"] Net [D T] { h: [Block<D, T>; 2], v: Vec<Block<D, T>>, ln_f: Norm<D, T>, }
    }
}

/// The functions of a small network, each taking a parameter struct and
/// passing its parts on.
fn net() -> TokenStream {
    quote! {
        fn norm<D: Device, T: Float, const S: usize>(
            x: &Tensor<D, T, [S, 4]>,
            p: &Norm<D, T>,
        ) -> Tensor<D, T, [S, 4]> {
            x * p.w + p.b
        }
        fn lin<D: Device, T: Float, const S: usize, const IN: usize, const OUT: usize>(
            x: &Tensor<D, T, [S, IN]>,
            p: &Lin<D, T, IN, OUT>,
        ) -> Tensor<D, T, [S, OUT]> {
            addmm(p.b, x, p.w)
        }
        fn block<D: Device, T: Float, const S: usize>(
            x: &Tensor<D, T, [S, 4]>,
            p: &Block<D, T>,
        ) -> Tensor<D, T, [S, 8]> {
            lin(norm(x, p.ln_1) + norm(x, p.ln_2), p.fc)
        }
        fn twice<D: Device, T: Float, const S: usize>(
            x: &Tensor<D, T, [S, 4]>,
            p: &Block<D, T>,
        ) -> Tensor<D, T, [S, 8]> {
            block(x, p) * 2.0
        }
        fn net<D: Device, T: Float, const S: usize>(
            x: &Tensor<D, T, [S, 4]>,
            p: &Net<D, T>,
        ) -> Tensor<D, T, [S, 8]> {
            let y = norm(x, p.ln_f);
            block(y, p.h[1]) + twice(x, p.v[2])
        }
    }
}

#[test]
fn calls_pass_structs_and_the_fields_the_callee_uses() {
    let input = net();
    let a = analyse_tokens_with(input.clone(), net_tables()).unwrap();
    let all: Vec<String> = a.errors.iter().map(|e| e.to_string()).collect();
    assert!(all.is_empty(), "{all:?}");
    // Every function is planned, the callers' peaks include their callees'.
    for p in &a.plans {
        assert!(p.as_ref().is_some_and(|p| p.peak.is_some()));
    }
    // `net` sees the fields its callees use through its own paths.
    let net = a.checked[4].as_ref().unwrap();
    for f in ["p.ln_f.w", "p.h[1].ln_2.b", "p.h[1].fc.w", "p.v[2].ln_1.w"] {
        assert!(
            net.sig.param_names.iter().any(|n| n == f),
            "{f}: {:?}",
            net.sig.param_names
        );
    }
    // `p.h[1].half` is used by no callee.
    assert!(!net.sig.param_names.iter().any(|n| n.contains("half")));
    let t = net_tables();
    let out = expand_with_fields(quote!(@input { #input } #t)).to_string();
    assert!(!out.contains("compile_error"), "{}", excerpt(&out));
    // The struct is passed (under the body's dtype in a generic function).
    assert!(
        out.contains("let __tf_struct_p_ln_1 : & Norm < D , f32 > = :: tensorfn :: __private :: retype_struct (& p . ln_1) ?"),
        "{}", excerpt(&out)
    );
    assert!(
        out.contains(
            "let __tf_struct_p : & Block < D , f64 > = :: tensorfn :: __private :: retype_struct (p) ?"
        ),
        "{}",
        excerpt(&out)
    );
    assert!(
        out.contains("block :: < _ , _ , S > (x , __tf_struct_p)"),
        "{}",
        excerpt(&out)
    );
    assert!(
        out.contains("norm :: < _ , _ , S > (x , __tf_struct_p_ln_1)"),
        "{}",
        excerpt(&out)
    );
    // `IN` of `lin` from its tensor, `OUT` from the struct's arguments.
    assert!(
        out.contains("lin :: < _ , _ , S , 4 , 8 >"),
        "{}",
        excerpt(&out)
    );
    // A `Vec` element is checked when the function is entered.
    assert!(out.contains("p . v . get (2)"), "{}", excerpt(&out));
}

#[test]
fn a_plain_caller_passes_the_struct_as_is() {
    let e = analyse_tokens_with(
        quote! {
            fn norm(x: &Tensor<Cpu, f32, [2, 4]>, p: &Norm<Cpu, f32>) -> Tensor<Cpu, f32, [2, 4]> {
                x * p.w
            }
            fn outer(x: &Tensor<Cpu, f32, [2, 4]>, p: &Block<Cpu, f32>) -> Tensor<Cpu, f32, [2, 4]> {
                norm(x, p.half) + norm(x, named = 1, p = p.ln_1)
            }
        },
        net_tables(),
    )
    .unwrap();
    let all: Vec<String> = e.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].contains("`norm` has no argument `named`"), "{all:?}");
    let t = net_tables();
    let out = expand_with_fields(quote! {
        @input {
            fn norm(x: &Tensor<Cpu, f32, [2, 4]>, p: &Norm<Cpu, f32>) -> Tensor<Cpu, f32, [2, 4]> {
                x * p.w
            }
            fn outer(x: &Tensor<Cpu, f32, [2, 4]>, p: &Block<Cpu, f32>) -> Tensor<Cpu, f32, [2, 4]> {
                norm(x, p.half) + norm(x, p = p.ln_1)
            }
        }
        #t
    })
    .to_string();
    assert!(!out.contains("compile_error"), "{out}");
    assert!(
        out.contains("let __tf_struct_p_half = & p . half ;"),
        "{out}"
    );
    assert!(out.contains("norm (x , __tf_struct_p_ln_1)"), "{out}");
}

#[test]
fn struct_arguments_that_do_not_fit_name_what_was_expected() {
    let e = errors_with(
        quote! {
            fn norm<D: Device, T: Float, const S: usize>(
                x: &Tensor<D, T, [S, 4]>,
                p: &Norm<D, T>,
            ) -> Tensor<D, T, [S, 4]> {
                x * p.w
            }
            fn f<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>, p: &Block<D, T>) -> Tensor<D, T, [2, 4]> {
                let a = norm(x, p.fc);
                let b = norm(x, p.half);
                let c = norm(x, p.ln_1.w);
                let d = norm(p.ln_1, p.ln_1);
                let e = norm(x, x);
                x
            }
        },
        net_tables(),
    );
    let all = e.join("\n");
    assert_eq!(e.len(), 5, "{all}");
    assert!(
        all.contains(
            "`norm` takes `p` as `&Norm<D, T>`, but `p.fc` is a `Lin<D, T, 4, 8>`: pass a `Norm`"
        ),
        "{all}"
    );
    assert!(
        all.contains("`norm` takes `p` as `&Norm<D, T>` (its `T` is `T` here, from the arguments before it), but `p.half` is a `Norm<D, f32>`: its argument `f32` must be `T`"),
        "{all}"
    );
    assert!(
        all.contains("`norm` takes the parameter struct `&Norm<D, T>` for `p`, but `p.ln_1.w` is a tensor (D T [4]): pass a `Norm`"),
        "{all}"
    );
    assert!(
        all.contains(
            "`p.ln_1` is a parameter struct `Norm<D, T>`, not a tensor: use its fields (`w`, `b`)"
        ),
        "{all}"
    );
    assert!(all.contains("but `x` is a tensor (D T [2, 4])"), "{all}");
}

#[test]
fn a_struct_of_another_device_or_an_integer_dtype_does_not_fit() {
    let e = errors_with(
        quote! {
            fn norm<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>, p: &Norm<D, T>) -> Tensor<D, T, [2, 4]> {
                x * p.w
            }
            fn f(x: &Tensor<Cpu, f32, [2, 4]>, p: &Norm<Cuda, f32>, q: &Norm<Cpu, i32>) -> Tensor<Cpu, f32, [2, 4]> {
                norm(x, p) + norm(x, q)
            }
        },
        net_tables(),
    );
    let all = e.join("\n");
    assert_eq!(e.len(), 2, "{all}");
    assert!(all.contains("its `D` is `Cpu` here"), "{all}");
    assert!(all.contains("but `p` is a `Norm<Cuda, f32>`"), "{all}");
    assert!(
        all.contains("but `q` is a `Norm<Cpu, i32>`: its argument `i32` must be `f32`"),
        "{all}"
    );
    // Bound by the struct alone: the bound says what fits.
    let e = errors_with(
        quote! {
            fn w<D: Device, T: Float>(p: &Norm<D, T>) -> Tensor<D, T, [4]> { p.w }
            fn f(q: &Norm<Cpu, i32>) -> Tensor<Cpu, i32, [4]> { w(q) }
        },
        net_tables(),
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("its argument `i32` must be a dtype its bound `T: Float` admits"),
        "{e:?}"
    );
}

#[test]
fn a_type_parameter_only_in_a_struct_is_bound_from_it() {
    let e = errors_with(
        quote! {
            fn norm<D: Device, T: Float>(x: &Tensor<D, f32, [2, 4]>, p: &Norm<D, T>) -> Tensor<D, T, [4]> {
                p.w * 2.0
            }
            fn f(x: &Tensor<Cpu, f32, [2, 4]>, p: &Norm<Cpu, f64>) -> Tensor<Cpu, f64, [4]> {
                norm(x, p)
            }
        },
        net_tables(),
    );
    assert!(e.is_empty(), "{e:?}");
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

/// The generated code without its PTX and CPU closures, for messages.
fn excerpt(out: &str) -> String {
    out.split(" ; ")
        .filter(|s| s.contains("__tf_struct") || s.contains(":: < _"))
        .collect::<Vec<_>>()
        .join(" ;\n")
}
