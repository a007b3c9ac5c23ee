//! `#[grad]` agrees with the catalogue: every op it marks
//! `Derivative::Rule` is differentiated, every other one on the path to a
//! differentiated parameter is an error naming the parameter.

use proc_macro2::TokenStream;
use std::str::FromStr;
use tensorfn_core::ops::{self, Derivative, OpKind};

fn errors_of(body: &str, params: &str) -> Vec<String> {
    let src = format!(
        "#[grad(x)] fn f(x: &Tensor<Cpu, f32, [4, 4]>{params}) -> Tensor<Cpu, f32, []> {{ {body} }}"
    );
    let a = tensorfn_macros_impl::analyse_tokens(TokenStream::from_str(&src).unwrap()).unwrap();
    a.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn every_elementwise_and_row_op_marked_rule_is_differentiated() {
    let mut walked = 0;
    for def in ops::all() {
        let body = match def.kind {
            OpKind::Unary(_) => format!("{}(x).sum()", def.name),
            OpKind::Binary(_) => format!("{}(x, x * 2.0).sum()", def.name),
            OpKind::Row(_) => format!("x.{}(1).sum()", def.name),
            _ => continue,
        };
        assert_eq!(def.derivative, Derivative::Rule, "{}", def.name);
        let errors = errors_of(&body, "");
        assert!(errors.is_empty(), "{}: {errors:?}", def.name);
        walked += 1;
    }
    assert!(walked > 30);
}

#[test]
fn ops_without_a_derivative_are_errors_naming_the_parameter() {
    let cases = [("argmax", "x.argmax(1).cast::<f32>().sum()", "")];
    for (name, body, params) in cases {
        let def = ops::all().find(|d| d.name == name).unwrap();
        assert_ne!(def.derivative, Derivative::Rule, "{name}");
        let errors = errors_of(body, params);
        assert!(
            errors.iter().any(|e| e.contains(name) && e.contains("`x`")),
            "{name}: {errors:?}"
        );
    }
}

#[test]
fn the_index_ops_are_differentiated() {
    let cases = [
        (
            "gather(x, 1, ids).sum()",
            ", ids: &Tensor<Cpu, i64, [4, 4]>",
        ),
        (
            "embedding(ids, x).sum()",
            ", ids: &Tensor<Cpu, i64, [2, 3]>",
        ),
        (
            "x.index_select(-1, ids).sum()",
            ", ids: &Tensor<Cpu, i32, [6]>",
        ),
        (
            "x.index_add(0, ids, x * 2.0, alpha = 3).sum()",
            ", ids: &Tensor<Cpu, i64, [4]>",
        ),
        (
            "x.scatter_add(1, ids, x).sum()",
            ", ids: &Tensor<Cpu, i64, [4, 2]>",
        ),
    ];
    for (body, params) in cases {
        let errors = errors_of(body, params);
        assert!(errors.is_empty(), "{body}: {errors:?}");
    }
}

fn errors_of_invocation(src: &str) -> Vec<String> {
    let a = tensorfn_macros_impl::analyse_tokens(TokenStream::from_str(src).unwrap()).unwrap();
    a.errors.iter().map(|e| e.to_string()).collect()
}

/// A scalar `#[kernel]` is differentiated through its body; a body whose
/// result depends on the argument through integers or a comparison used
/// as a number is an error naming the kernel and the operation.
#[test]
fn kernels_are_differentiated_through_their_bodies() {
    let call = "#[grad(x)] fn f(x: &Tensor<Cpu, f32, [4, 4]>, s: f32) -> Tensor<Cpu, f32, []> { k(x * 2.0, s).sum() }";
    let cases = [
        (
            "if v > 0.0 { v.tanh() * s } else { (v * s).exp() + sq(v) }",
            None,
        ),
        ("let t = s * 2.0 + 1.0; v.max(t) / (1.0 + v.abs())", None),
        ("(v > s) as f32 * v", Some("the comparison `>`")),
        ("((v * 4.0) as i32 / 2) as f32", Some("to `i32`")),
    ];
    for (body, want) in cases {
        let src = format!(
            "#[kernel] fn sq(a: f32) -> f32 {{ a * a }} #[kernel] fn k(v: f32, s: f32) -> f32 {{ {body} }} {call}"
        );
        let errors = errors_of_invocation(&src);
        match want {
            None => assert!(errors.is_empty(), "{body}: {errors:?}"),
            Some(w) => assert!(
                errors
                    .iter()
                    .any(|e| e.contains(w) && e.contains("`k`") && e.contains("`x`")),
                "{body}: {errors:?}"
            ),
        }
    }
}

#[test]
fn topk_values_are_differentiated_and_its_indices_are_not() {
    let def = ops::all().find(|d| d.name == "topk").unwrap();
    assert_eq!(def.derivative, Derivative::Rule);
    assert!(errors_of("let (v, i) = x.topk(2); (v * 2.0).sum()", "").is_empty());
    let errors = errors_of("let (v, i) = x.topk(2); i.cast::<f32>().sum()", "");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("`topk`") && e.contains("`x`")),
        "{errors:?}"
    );
}

fn kernel_errors(kernel: &str, body: &str) -> Vec<String> {
    let src = format!(
        "#[kernel] {kernel} #[grad(x)] fn f(x: &Tensor<Cpu, f32, [4, 4]>, w: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, []> {{ {body} }}"
    );
    let a = tensorfn_macros_impl::analyse_tokens(TokenStream::from_str(&src).unwrap()).unwrap();
    a.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn row_kernels_are_differentiated_through_their_row_programs() {
    let cases = [
        (
            "fn k(x: Row<f32>, w: Row<f32>, eps: f32) -> Row<f32> { x * rsqrt(mean(x * x) + eps) * w }",
            "k(x, w, 1e-6).sum()",
        ),
        (
            "fn k(x: Row<f32>, t: f32) -> f32 { let m = max(x * t); m + log(sum(exp(x * t - m))) + min(x) * 0.5 }",
            "(k(x, 1.5) * w).sum()",
        ),
        (
            "fn k(x: Row<f32>) -> f32 { max(x) }",
            "k(x).sum()",
        ),
    ];
    for (kernel, body) in cases {
        let errors = kernel_errors(kernel, body);
        assert!(errors.is_empty(), "{kernel}: {errors:?}");
    }
}

#[test]
fn a_row_kernel_through_an_integer_is_an_error_naming_it() {
    let errors = kernel_errors(
        "fn k(x: Row<f32>) -> Row<f32> { x * ((max(x) as i32) as f32) }",
        "k(x).sum()",
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("`k`") && e.contains("i32") && e.contains("`x`")),
        "{errors:?}"
    );
}
