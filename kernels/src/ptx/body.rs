//! The body of one PTX entry: virtual registers by class, labels and the
//! instruction lines, assembled with their declarations at the end.

use super::Target;
use crate::prim::Ty;
use std::collections::HashMap;
use std::fmt::Write;
use tensorfn_core::DTypeKind;

/// A PTX register class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Pred,
    B16,
    B32,
    B64,
    F32,
    F64,
}

impl Class {
    const ALL: [Class; 6] = [
        Class::Pred,
        Class::B16,
        Class::B32,
        Class::B64,
        Class::F32,
        Class::F64,
    ];

    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "%p",
            Class::B16 => "%h",
            Class::B32 => "%r",
            Class::B64 => "%rd",
            Class::F32 => "%f",
            Class::F64 => "%fd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::B64 => ".b64",
            Class::F32 => ".f32",
            Class::F64 => ".f64",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The class holding values of machine type `ty`.
    pub(crate) fn of(ty: Ty) -> Class {
        match ty {
            Ty::F32 => Class::F32,
            Ty::F64 => Class::F64,
            Ty::I32 => Class::B32,
            Ty::I64 => Class::B64,
            Ty::Pred => Class::Pred,
        }
    }
}

/// Instruction lines of an entry and the registers they use.
#[derive(Debug, Default)]
pub(crate) struct Body {
    lines: Vec<String>,
    counts: [u32; 6],
    labels: u32,
    target: Target,
    /// For `f32` registers holding an f16 or bf16 value that also sits in
    /// a 16-bit register (widened from it, or loaded beside it): the type
    /// and that register, so narrowing the value again costs nothing.
    halves: HashMap<String, (DTypeKind, String)>,
}

impl Body {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// An empty body whose instructions may use what `target` offers.
    pub(crate) fn for_target(target: Target) -> Self {
        Body {
            target,
            ..Self::default()
        }
    }

    pub(crate) fn target(&self) -> Target {
        self.target
    }

    /// A fresh register of `class`.
    pub(crate) fn reg(&mut self, class: Class) -> String {
        let n = &mut self.counts[class.index()];
        let name = format!("{}{}", class.prefix(), *n);
        *n += 1;
        name
    }

    /// Records that `f32` register `wide` holds the `dtype` (f16 or bf16)
    /// value in 16-bit register `half`.
    pub(crate) fn set_half(&mut self, wide: &str, dtype: DTypeKind, half: &str) {
        self.halves
            .insert(wide.to_string(), (dtype, half.to_string()));
    }

    /// The 16-bit register holding the `dtype` value of `wide`, if known.
    pub(crate) fn half_of(&self, wide: &str, dtype: DTypeKind) -> Option<&str> {
        match self.halves.get(wide) {
            Some((d, h)) if *d == dtype => Some(h),
            _ => None,
        }
    }

    /// A fresh register for machine type `ty`.
    pub(crate) fn reg_ty(&mut self, ty: Ty) -> String {
        self.reg(Class::of(ty))
    }

    /// Appends one instruction (without the final `;`).
    pub(crate) fn op(&mut self, text: impl AsRef<str>) {
        self.lines.push(format!("\t{};", text.as_ref()));
    }

    /// Appends a comment line.
    pub(crate) fn comment(&mut self, text: impl AsRef<str>) {
        self.lines.push(format!("\t// {}", text.as_ref()));
    }

    /// Appends a raw line (declarations of shared memory and the like).
    pub(crate) fn raw(&mut self, text: impl AsRef<str>) {
        self.lines.push(format!("\t{}", text.as_ref()));
    }

    /// A fresh label name.
    pub(crate) fn label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("$L_{what}_{}", self.labels)
    }

    /// Places `label` at the current point.
    pub(crate) fn place(&mut self, label: &str) {
        self.lines.push(format!("{label}:"));
    }

    /// Declarations followed by the lines.
    pub(crate) fn finish(self) -> String {
        let mut s = String::new();
        for class in Class::ALL {
            let n = self.counts[class.index()];
            if n > 0 {
                let _ = writeln!(s, "\t.reg {} {}<{}>;", class.decl(), class.prefix(), n);
            }
        }
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}
