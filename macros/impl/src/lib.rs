//! The stages of the `tensor_fn!` macro as a plain library, so that tests
//! and benchmarks can run them without a compiler in the loop.
//!
//! [`expand()`](fn@expand) runs them in order:
//!
//! 1. [`parse`]: tokens to the typed input of [`ast`];
//! 2. [`sig`] and [`kernel`]: the signature of every function (symbols of
//!    its shapes, run-time dims and where they are bound) and the element
//!    program of every `#[kernel]`;
//! 3. [`check`]: device, dtype and [`shape`] of every expression, built as
//!    the typed [`graph`], with every error of a function reported;
//! 4. [`plan`]: fusion groups of elementwise work (each a
//!    `tensorfn_kernels::ir::Kernel`), runtime calls, drops and the peak
//!    memory of intermediates, once per [`instance`] of a function generic
//!    over its dtype;
//! 5. [`expand`](mod@expand): Rust code against the `tensorfn` runtime,
//!    with each fused group's kernel printed as a CPU closure
//!    ([`expand::rust_code`]) and as PTX (the kernels crate's back-end).
//!
//! ```
//! use quote::quote;
//! let out = tensorfn_macros_impl::expand(quote! {
//!     pub fn scale(x: &Tensor<Cpu, f32, [2, 3]>) -> Tensor<Cpu, f32, [2, 3]> {
//!         x * 2.0 + 1.0
//!     }
//! });
//! let text = out.to_string();
//! assert!(text.contains("fn scale"));
//! assert!(text.contains("fused1"));
//! assert!(!text.contains("compile_error"));
//! ```
#![deny(missing_docs)]

pub mod ast;
pub mod check;
pub mod derive_params;
pub mod expand;
pub mod grad;
pub mod graph;
pub mod instance;
pub mod kernel;
pub mod parse;
pub mod plan;
pub mod shape;
pub mod sig;
pub mod structs;

use ast::{KernelFn, TensorFn};
use proc_macro2::TokenStream;
use quote::quote;
use std::collections::{BTreeMap, HashMap};
use tensorfn_kernels::ir::Kernel;

/// Joins errors into one `syn::Error` (`None` for none).
pub fn combine(errors: Vec<syn::Error>) -> Option<syn::Error> {
    let mut it = errors.into_iter();
    let mut first = it.next()?;
    for e in it {
        first.combine(e);
    }
    Some(first)
}

/// One instance of a checked function (see [`instance`]) with its plan.
pub struct Planned {
    /// The dtypes of the instance.
    pub instance: instance::Instance,
    /// The function with those dtypes.
    pub f: check::CheckedFn,
    /// Its plan.
    pub plan: plan::Plan,
}

/// Everything the stages produce for one invocation, for tests.
pub struct Analysis {
    /// Checked functions (`None` where errors were found).
    pub checked: Vec<Option<check::CheckedFn>>,
    /// Plans of the checked functions (of the first instance of a
    /// dtype-generic one).
    pub plans: Vec<Option<plan::Plan>>,
    /// Every instance of the checked functions with its plan.
    pub planned: Vec<Option<Vec<Planned>>>,
    /// Every instance of each `#[grad]` function's joint function (its
    /// forward and backward as one graph) with its plan.
    pub joints: Vec<Option<Vec<Planned>>>,
    /// All errors, in source order of the stages.
    pub errors: Vec<syn::Error>,
}

struct Invocation<'a> {
    fns: Vec<&'a TensorFn>,
    kernels: Vec<&'a KernelFn>,
    kernel_programs: Vec<Option<Kernel>>,
    sigs: Vec<Option<sig::Signature>>,
    checked: Vec<Option<check::CheckedFn>>,
    planned: Vec<Option<Vec<Planned>>>,
    /// The joint function of each `#[grad]` function, with its instances.
    joints: Vec<Option<(grad::Joint, Vec<Planned>)>>,
    /// The joint function of each `#[grad]` function's `vjp`, with the
    /// function it is the value of ([`grad::vjp_ast`]) and its instances.
    vjps: Vec<Option<(TensorFn, grad::Joint, Vec<Planned>)>>,
    errors: Vec<syn::Error>,
}

/// `field_errors`: the errors [`structs::resolve`] found in each function
/// (a function with any is not checked further).
fn analyse<'a>(input: &'a ast::Input, field_errors: &mut [Vec<syn::Error>]) -> Invocation<'a> {
    let mut errors = Vec::new();
    let fns = input.fns();
    let kernels = input.kernels();
    let mut seen: HashMap<String, ()> = HashMap::new();
    for name in fns
        .iter()
        .map(|f| &f.name)
        .chain(kernels.iter().map(|k| &k.name))
    {
        if seen.insert(name.to_string(), ()).is_some() {
            errors.push(syn::Error::new(
                name.span(),
                format!("`{name}` is defined twice in this `tensor_fn!`"),
            ));
        }
    }
    let (kernel_programs, row_programs, kernel_errors) = kernel::build_all(&kernels);
    errors.extend(kernel_errors);
    let sigs: Vec<Option<sig::Signature>> = fns
        .iter()
        .map(|f| match sig::signature(f) {
            Ok(s) => Some(s),
            Err(es) => {
                errors.extend(es);
                None
            }
        })
        .collect();
    let ksigs: Vec<check::KernelSig> = kernels
        .iter()
        .zip(&kernel_programs)
        .zip(&row_programs)
        .map(|((k, program), row)| check::KernelSig {
            ast: k,
            program: program.clone(),
            row: row.clone(),
        })
        .collect();
    let mut checked = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        if sigs[i].is_none() {
            checked.push(None);
            continue;
        }
        let fields = field_errors
            .get_mut(i)
            .map(std::mem::take)
            .unwrap_or_default();
        match check::check_fn(f, i, &sigs, &ksigs) {
            Ok(c) if fields.is_empty() => match structs::unreported(f, &c) {
                Some(e) => {
                    errors.push(e);
                    checked.push(None);
                }
                None => checked.push(Some(c)),
            },
            Ok(_) => {
                errors.extend(fields);
                checked.push(None);
            }
            Err(es) => {
                errors.extend(fields);
                errors.extend(es);
                checked.push(None);
            }
        }
    }
    let mut planned: Vec<Option<Vec<Planned>>> = (0..fns.len()).map(|_| None).collect();
    let mut state = vec![0u8; fns.len()];
    let mut peaks = plan::Peaks::new();
    for i in 0..fns.len() {
        plan_rec(
            i,
            &checked,
            &kernel_programs,
            &mut planned,
            &mut state,
            &mut peaks,
        );
    }
    let plan_joint = |joint: &grad::Joint| -> Vec<Planned> {
        instance::instances(&joint.f.sig.type_params)
            .into_iter()
            .map(|inst| {
                let mut g = inst.apply(&joint.f);
                plan::fold_slot_sums(&mut g);
                plan::fold_transposed_products(&mut g);
                plan::fold_gelu_backward(&mut g);
                plan::fold_bias_gradients(&mut g);
                let p = plan::plan(&g, &kernel_programs, &peaks);
                Planned {
                    instance: inst,
                    f: g,
                    plan: p,
                }
            })
            .collect()
    };
    let bodies = grad::KernelBodies {
        names: kernels.iter().map(|k| k.name.to_string()).collect(),
        programs: kernel_programs.clone(),
        rows: row_programs.clone(),
    };
    let mut joints = Vec::new();
    let mut vjps = Vec::new();
    for (i, f) in fns.iter().enumerate() {
        let (Some(names), Some(c)) = (&f.grad, &checked[i]) else {
            joints.push(None);
            vjps.push(None);
            continue;
        };
        // A loss gets `value_and_grad` and `vjp`, a tensor result `vjp`.
        if grad::scalar_result(c) {
            match grad::derive(f, c, names, &checked, &bodies) {
                Ok(joint) => {
                    let planned = plan_joint(&joint);
                    joints.push(Some((joint, planned)));
                }
                Err(es) => {
                    errors.extend(es);
                    joints.push(None);
                    vjps.push(None);
                    continue;
                }
            }
        } else {
            joints.push(None);
        }
        let vjp = grad::vjp_ast(f).map_err(|e| vec![e]).and_then(|vf| {
            let mut vsigs = sigs.clone();
            vsigs[i] = Some(sig::signature(&vf)?);
            let vc = check::check_fn(&vf, i, &vsigs, &ksigs)?;
            let joint = grad::derive_vjp(&vf, &vc, names, &checked, &bodies)?;
            Ok((vf, joint))
        });
        match vjp {
            Ok((vf, joint)) => {
                let planned = plan_joint(&joint);
                vjps.push(Some((vf, joint, planned)));
            }
            Err(es) => {
                errors.extend(es);
                vjps.push(None);
            }
        }
    }
    Invocation {
        fns,
        kernels,
        kernel_programs,
        sigs,
        checked,
        planned,
        joints,
        vjps,
        errors,
    }
}

/// Plans callees before callers so that a caller's peak includes theirs,
/// every instance of a function (see [`instance`]) at once.
fn plan_rec(
    i: usize,
    checked: &[Option<check::CheckedFn>],
    programs: &[Option<Kernel>],
    planned: &mut Vec<Option<Vec<Planned>>>,
    state: &mut Vec<u8>,
    peaks: &mut plan::Peaks,
) {
    if state[i] != 0 {
        return;
    }
    state[i] = 1;
    let Some(f) = &checked[i] else {
        state[i] = 2;
        return;
    };
    for n in &f.graph.nodes {
        if let graph::Op::Call { callee, .. } = n.op {
            plan_rec(callee, checked, programs, planned, state, peaks);
        }
    }
    // A callee still in progress (recursion) has no peak yet: the caller's
    // stays unknown.
    let mut out = Vec::new();
    for inst in instance::instances(&f.sig.type_params) {
        let mut g = inst.apply(f);
        plan::fold_activations(&mut g);
        plan::fold_transposed_products(&mut g);
        plan::fold_bias_gradients(&mut g);
        let p = plan::plan(&g, programs, peaks);
        out.push(Planned {
            instance: inst,
            f: g,
            plan: p,
        });
    }
    for p in &out {
        let key = (i, p.instance.kinds());
        peaks.insert(key, p.plan.peak.clone());
    }
    planned[i] = Some(out);
    state[i] = 2;
}

/// Runs every stage but code generation (for tests and tools). Parameter
/// structs take their fields from `tables` (the second stage's input after
/// `@input { .. }`: `@struct ["Mlp"] Mlp [generics] { fields }`, as
/// [`structs::fields_macro`] writes them).
pub fn analyse_tokens(input: TokenStream) -> Result<Analysis, syn::Error> {
    analyse_tokens_with(input, TokenStream::new())
}

/// [`analyse_tokens`] with the tables of parameter structs.
///
/// ```
/// use quote::quote;
/// let a = tensorfn_macros_impl::analyse_tokens_with(
///     quote! {
///         fn f(x: &Tensor<Cpu, f32, [2, 3]>, p: &Lin) -> Tensor<Cpu, f32, [2, 4]> {
///             matmul(x, p.w)
///         }
///     },
///     quote!(@struct ["Lin"] Lin [] { w: Tensor<Cpu, f32, shape![3, 4]>, }),
/// )
/// .unwrap();
/// assert!(a.errors.is_empty());
/// ```
pub fn analyse_tokens_with(
    input: TokenStream,
    tables: TokenStream,
) -> Result<Analysis, syn::Error> {
    let carry = structs::Carry::parse(quote!(@input { #input } #tables))?;
    let mut parsed = parse::parse_input(input.clone())?;
    let mut field_errors = match structs::resolve(&mut parsed, &carry.tables, &input, &carry.raw) {
        structs::Resolution::Done(e) => e,
        structs::Resolution::Fetch(_) => {
            return Err(syn::Error::new(
                proc_macro2::Span::call_site(),
                "the tables of some parameter structs are missing",
            ))
        }
    };
    let inv = analyse(&parsed, &mut field_errors);
    let plans = inv
        .planned
        .iter()
        .map(|p| p.as_ref().and_then(|v| v.first()).map(|p| p.plan.clone()))
        .collect();
    Ok(Analysis {
        checked: inv.checked,
        plans,
        planned: inv.planned,
        joints: inv.joints.into_iter().map(|j| j.map(|(_, p)| p)).collect(),
        errors: inv.errors,
    })
}

/// The whole macro: `tensor_fn! { .. }` input to generated items, with
/// every error as a `compile_error!` spanned on the input. A function
/// taking parameter structs expands first to the macros that fetch their
/// fields (see [`structs`]).
pub fn expand(input: TokenStream) -> TokenStream {
    expand_stage(input, BTreeMap::new(), TokenStream::new())
}

/// The second stage of `tensor_fn!`: its input with the fields of the
/// parameter structs gathered so far ([`structs::Carry`]).
///
/// ```
/// use quote::quote;
/// let out = tensorfn_macros_impl::expand_with_fields(quote! {
///     @input {
///         fn f(x: &Tensor<Cpu, f32, [2, 3]>, p: &Lin) -> Tensor<Cpu, f32, [2, 4]> {
///             matmul(x, p.w)
///         }
///     }
///     @struct ["Lin"] Lin [] { w: Tensor<Cpu, f32, shape![3, 4]>, }
/// });
/// let text = out.to_string();
/// assert!(text.contains("p : & Lin"));
/// assert!(text.contains("let __tf_field_p_w = & p . w ;"));
/// assert!(!text.contains("compile_error"));
/// ```
pub fn expand_with_fields(input: TokenStream) -> TokenStream {
    match structs::Carry::parse(input) {
        Ok(c) => expand_stage(c.input, c.tables, c.raw),
        Err(e) => e.to_compile_error(),
    }
}

fn expand_stage(
    input: TokenStream,
    tables: BTreeMap<String, structs::Table>,
    raw: TokenStream,
) -> TokenStream {
    let mut parsed = match parse::parse_input(input.clone()) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error(),
    };
    let mut field_errors = match structs::resolve(&mut parsed, &tables, &input, &raw) {
        structs::Resolution::Done(e) => e,
        structs::Resolution::Fetch(next) => return next,
    };
    let inv = analyse(&parsed, &mut field_errors);
    let ptx = |k: &Kernel, name: &str| expand::fused_ptx(k, name).map_err(|e| e.to_string());
    let ctx = expand::Ctx {
        sigs: &inv.sigs,
        fns: &inv.fns,
        kernels: &inv.kernels,
        ptx: &ptx,
    };
    let mut out = TokenStream::new();
    for (k, program) in inv.kernels.iter().zip(&inv.kernel_programs) {
        out.extend(match program {
            // A row kernel runs inside the functions that call it.
            _ if k.is_row() => TokenStream::new(),
            Some(program) => expand::kernel_fn(k, program),
            None => expand::stub_kernel(k),
        });
    }
    for (i, f) in inv.fns.iter().enumerate() {
        out.extend(match (&inv.checked[i], &inv.planned[i]) {
            (Some(c), Some(p)) => expand::tensor_fn_with_grad(
                &ctx,
                f,
                c,
                p,
                inv.joints[i].as_ref().map(|(j, p)| (j, p.as_slice())),
                inv.vjps[i].as_ref().map(|(vf, j, p)| (vf, j, p.as_slice())),
            ),
            _ => expand::stub_fn(f),
        });
    }
    if let Some(e) = combine(inv.errors) {
        let errors = e.to_compile_error();
        out.extend(quote!(#errors));
    }
    out
}
