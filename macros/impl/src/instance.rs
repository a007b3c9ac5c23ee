//! Instances of dtype-generic functions. A function generic over
//! `T: Float` is checked once, with `T` a symbol; it is planned and
//! expanded once per dtype the bound admits, each instance with its own
//! fused kernels, and the generated function takes the body of its `T`.
//! Device parameters need no instances: the runtime is generic over the
//! device, and every fused kernel carries its PTX.

use crate::ast::{Dt, Name, TypeParamKind};
use crate::check::CheckedFn;
use crate::graph::{Op, TensorTy, Ty};
use crate::sig::{ParamSig, Signature};
use tensorfn_core::DTypeKind;

/// One choice of a function's dtype parameters (empty for a function with
/// none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Each dtype parameter with the dtype it stands for here.
    pub dtypes: Vec<(Name, DTypeKind)>,
}

/// Every instance of a function: the product of its dtype parameters'
/// bounds, one empty instance for a function without them.
///
/// ```
/// use tensorfn_macros_impl::{instance::instances, parse::parse_input};
/// use tensorfn_macros_impl::ast::Item;
/// let input = parse_input(quote::quote! {
///     fn f<D: Device, T: Float>(x: &Tensor<D, T, [2]>) -> Tensor<D, T, [2]> { x * 2.0 }
/// })?;
/// let Item::Fn(f) = &input.items[0] else { unreachable!() };
/// assert_eq!(instances(&f.type_params).len(), 4);
/// # Ok::<(), syn::Error>(())
/// ```
pub fn instances(params: &[crate::ast::TypeParam]) -> Vec<Instance> {
    let mut out = vec![Instance { dtypes: Vec::new() }];
    for p in params {
        let TypeParamKind::DType(bound) = p.kind else {
            continue;
        };
        out = out
            .into_iter()
            .flat_map(|i| {
                bound.dtypes().iter().map(move |&k| {
                    let mut dtypes = i.dtypes.clone();
                    dtypes.push((p.name, k));
                    Instance { dtypes }
                })
            })
            .collect();
    }
    out
}

impl Instance {
    /// True for the instance of a function without dtype parameters.
    pub fn is_plain(&self) -> bool {
        self.dtypes.is_empty()
    }

    /// A dtype with this instance's parameters replaced.
    pub fn dtype(&self, d: Dt) -> Dt {
        match d {
            Dt::Param(n, _) => self
                .dtypes
                .iter()
                .find(|(m, _)| *m == n)
                .map(|(_, k)| Dt::Kind(*k))
                .unwrap_or(d),
            d => d,
        }
    }

    fn tensor(&self, t: &TensorTy) -> TensorTy {
        TensorTy {
            dtype: self.dtype(t.dtype),
            ..t.clone()
        }
    }

    /// The signature with this instance's dtypes.
    pub fn signature(&self, s: &Signature) -> Signature {
        let mut s = s.clone();
        for p in &mut s.params {
            if let ParamSig::Tensor(t) = p {
                *t = self.tensor(t);
            }
        }
        for t in &mut s.ret {
            *t = self.tensor(t);
        }
        s
    }

    /// The checked function with this instance's dtypes everywhere.
    pub fn apply(&self, f: &CheckedFn) -> CheckedFn {
        let mut graph = f.graph.clone();
        for n in &mut graph.nodes {
            match &mut n.ty {
                Ty::Tensor(t) => *t = self.tensor(t),
                Ty::Tuple(ts) => {
                    for t in ts {
                        *t = self.tensor(t);
                    }
                }
                Ty::Scalar(_) | Ty::Error => {}
            }
            match &mut n.op {
                Op::Cast(_, d) => *d = self.dtype(*d),
                Op::Call { dtypes, .. } => {
                    for d in dtypes {
                        *d = self.dtype(*d);
                    }
                }
                _ => {}
            }
        }
        CheckedFn {
            sig: self.signature(&f.sig),
            graph,
            params: f.params.clone(),
            ret: f.ret.clone(),
        }
    }

    /// The instance's dtypes, in the order of the parameters (its key
    /// among the peaks of planned instances).
    ///
    /// ```
    /// use tensorfn_macros_impl::{ast::Name, instance::Instance};
    /// use tensorfn_core::DTypeKind;
    /// let i = Instance { dtypes: vec![(Name::new("T"), DTypeKind::BF16)] };
    /// assert_eq!(i.kinds(), [DTypeKind::BF16]);
    /// ```
    pub fn kinds(&self) -> Vec<DTypeKind> {
        self.dtypes.iter().map(|(_, k)| *k).collect()
    }

    /// The dtypes of a call's callee instance, as concrete dtypes.
    pub fn concrete(dtypes: &[Dt]) -> Vec<DTypeKind> {
        dtypes.iter().map(|d| d.kind()).collect()
    }
}
