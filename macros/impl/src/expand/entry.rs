//! What a function does when it is entered: binding run-time dims and
//! checking the parameter dims its types do not fix.

use super::*;

impl FnGen<'_> {
    /// The entry: fields of parameter structs bound, run-time dims bound,
    /// parameter dims checked. The checks of the parameters `skip` are left out: the forward of a
    /// split `vjp` runs before `grad_output` is given (its pullback checks
    /// it, [`FnGen::checks_of`]).
    pub(super) fn entry(&self, skip: &[usize]) -> TokenStream {
        let sig = &self.f.sig;
        let mut out = TokenStream::new();
        // The fields of parameter structs the body uses, first: run-time
        // dims and checks may read them.
        for p in &self.ast.params {
            if let ParamTy::Field(f) = &p.ty {
                out.extend(f.binding.clone());
            }
        }
        // The parameter structs the body passes on, under this instance's
        // dtypes where their arguments name a dtype parameter.
        for a in &self.ast.struct_args {
            let v = crate::structs::struct_var(&a.text);
            let access = &a.access;
            let retyped = !self.instance.is_plain()
                && a.args.iter().any(|t| {
                    t.clone().into_iter().any(|tt| {
                        self.instance
                            .dtypes
                            .iter()
                            .any(|(n, _)| matches!(&tt, proc_macro2::TokenTree::Ident(i) if *i == n.to_string()))
                    })
                });
            if !retyped {
                out.extend(quote!(let #v = #access;));
                continue;
            }
            let subst: std::collections::BTreeMap<String, TokenStream> = self
                .instance
                .dtypes
                .iter()
                .map(|(n, k)| (n.to_string(), dtype_tokens(*k)))
                .collect();
            let args = a
                .args
                .iter()
                .map(|t| crate::structs::substitute(t.clone(), &subst));
            let path: TokenStream = match syn::parse_str::<syn::Path>(&a.path) {
                Ok(p) => quote!(#p),
                Err(e) => e.to_compile_error(),
            };
            out.extend(quote! {
                let #v: &#path<#(#args),*> = ::tensorfn::__private::retype_struct(#access)?;
            });
        }
        // Run-time dims some shape of the body or an entry check uses.
        let mut used: std::collections::BTreeSet<String> = sig
            .entry_checks
            .iter()
            .flat_map(|c| c.expected.symbols())
            .map(|s| s.to_string())
            .collect();
        for n in &self.g().nodes {
            if let Ty::Tensor(t) = &n.ty {
                used.extend(
                    t.dims
                        .iter()
                        .flat_map(|d| d.symbols())
                        .map(|s| s.to_string()),
                );
            }
        }
        floor_inputs(&mut used);
        for (name, kind) in &sig.symbols.map {
            let SymKind::Runtime(Some(src)) = kind else {
                continue;
            };
            if !used.contains(name) {
                continue;
            }
            let v = format_ident!("{}", Symbols::var_name(name));
            let value = match src {
                Source::TensorDim { param, dim } => {
                    let p = &self.ast.params[*param].name;
                    quote!(#p.shape()[#dim])
                }
                Source::Scalar { param } => {
                    let p = &self.ast.params[*param].name;
                    quote!(#p)
                }
            };
            out.extend(quote!(let #v: usize = #value;));
        }
        out.extend(floor_bindings(&used, self.symbols()));
        out.extend(self.checks(&|i| !skip.contains(&i)));
        out
    }

    /// The entry checks of the parameters `params` alone.
    pub(super) fn checks_of(&self, params: &[usize]) -> TokenStream {
        self.checks(&|i| params.contains(&i))
    }

    /// The entry checks of the parameters `which` accepts.
    fn checks(&self, which: &dyn Fn(usize) -> bool) -> TokenStream {
        let sig = &self.f.sig;
        let mut out = TokenStream::new();
        for c in sig.entry_checks.iter().filter(|c| which(c.param)) {
            let p = &self.ast.params[c.param].name;
            let dim = c.dim;
            let expected = dim_value(&c.expected, self.symbols());
            let origins: Vec<String> = c
                .expected
                .symbols()
                .iter()
                .filter_map(|s| match sig.symbols.map.get(&**s) {
                    Some(SymKind::Runtime(Some(Source::TensorDim { param, dim }))) => {
                        Some(format!("{s} is dim {dim} of `{}`", sig.param_names[*param]))
                    }
                    Some(SymKind::Runtime(Some(Source::Scalar { param }))) => Some(format!(
                        "{s} is the parameter `{}`",
                        sig.param_names[*param]
                    )),
                    _ => None,
                })
                .collect();
            let origin = if origins.is_empty() {
                String::new()
            } else {
                format!(" ({})", origins.join(", "))
            };
            let what = format!(
                "dim {dim} of `{}` to be {}{{}}{origin}",
                sig.param_names[c.param], c.expected
            );
            let show_value = c.expected.as_constant().is_none();
            let fn_name = &sig.name;
            let fmt_value = if show_value {
                quote!(::std::format!(" = {}", __tf_expected))
            } else {
                quote!(::std::string::String::new())
            };
            out.extend(quote! {
                {
                    let __tf_expected: usize = #expected;
                    if #p.shape()[#dim] != __tf_expected {
                        return ::core::result::Result::Err(::tensorfn::Error::shape(
                            #fn_name,
                            ::std::format!(#what, #fmt_value),
                            ::std::format!("{}", #p.shape()[#dim]),
                        ));
                    }
                }
            });
        }
        out
    }
}
