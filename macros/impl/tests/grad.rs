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
