//! Loads and stores of every dtype between global memory and the register
//! form of `prim` (`f16`/`bf16` in `f32`, `u8` in `b32`, `bool` in a
//! predicate), one element at a time or as one vector access of up to 16
//! bytes.

use super::body::{Body, Class};
use tensorfn_core::DTypeKind;

/// Loads one element at `[addr]` (read-only inputs use the non-coherent
/// path when `nc`); returns the register holding it in register form.
pub(crate) fn load(body: &mut Body, dtype: DTypeKind, addr: &str, nc: bool) -> String {
    let space = if nc { "global.nc" } else { "global" };
    match dtype {
        DTypeKind::F32 => {
            let f = body.reg(Class::F32);
            body.op(format!("ld.{space}.f32 {f}, [{addr}]"));
            f
        }
        DTypeKind::F64 => {
            let f = body.reg(Class::F64);
            body.op(format!("ld.{space}.f64 {f}, [{addr}]"));
            f
        }
        DTypeKind::F16 | DTypeKind::BF16 => {
            let raw = load_half_bits(body, dtype, addr, nc);
            widen_half(body, dtype, &raw)
        }
        DTypeKind::I32 => {
            let r = body.reg(Class::B32);
            body.op(format!("ld.{space}.u32 {r}, [{addr}]"));
            r
        }
        DTypeKind::I64 => {
            let r = body.reg(Class::B64);
            body.op(format!("ld.{space}.u64 {r}, [{addr}]"));
            r
        }
        DTypeKind::U8 => {
            let r = body.reg(Class::B32);
            body.op(format!("ld.{space}.u8 {r}, [{addr}]"));
            r
        }
        DTypeKind::Bool => {
            let r = body.reg(Class::B32);
            body.op(format!("ld.{space}.u8 {r}, [{addr}]"));
            byte_to_pred(body, &r)
        }
    }
}

/// Loads the 16 bits of an `f16`/`bf16` element at `[addr]` without
/// widening them: a kernel that issues many loads before using any keeps
/// them all in flight, where a widening right after each load would wait
/// for it. [`widen_half`] gives the register form.
pub(crate) fn load_half_bits(body: &mut Body, dtype: DTypeKind, addr: &str, nc: bool) -> String {
    let space = if nc { "global.nc" } else { "global" };
    load_half_bits_from(body, dtype, &format!("ld.{space}"), addr)
}

/// [`load_half_bits`] with the load instruction `ld` (`ld.global.nc`,
/// `ld.shared`...).
pub(crate) fn load_half_bits_from(
    body: &mut Body,
    dtype: DTypeKind,
    ld: &str,
    addr: &str,
) -> String {
    let r = match dtype {
        DTypeKind::F16 => body.reg(Class::B16),
        DTypeKind::BF16 => body.reg(Class::B32),
        other => unreachable!("{} is not a 16-bit float", other.name()),
    };
    body.op(format!("{ld}.{} {r}, [{addr}]", half_bits_ty(dtype)));
    r
}

/// The `f32` register form of bits read by [`load_half_bits`].
pub(crate) fn widen_half(body: &mut Body, dtype: DTypeKind, raw: &str) -> String {
    match dtype {
        DTypeKind::F16 => half_to_f32(body, dtype, raw),
        _ => {
            let s = body.reg(Class::B32);
            body.op(format!("shl.b32 {s}, {raw}, 16"));
            let f = bits_to_f32(body, &s);
            // The 16-bit form too, for bf16 arithmetic (dropped by `ptxas`
            // when nothing uses it).
            let h = body.reg(Class::B16);
            body.op(format!("cvt.u16.u32 {h}, {raw}"));
            body.set_half(&f, dtype, &h);
            f
        }
    }
}

/// The 16 bits of register-form `value` of an `f16`/`bf16` (already a
/// value of that type), in the register class [`load_half_bits`] gives.
pub(crate) fn narrow_half(body: &mut Body, dtype: DTypeKind, value: &str) -> String {
    match dtype {
        DTypeKind::F16 => f32_to_half(body, dtype, value),
        DTypeKind::BF16 => {
            if let Some(h) = body.half_of(value, dtype).map(str::to_string) {
                let s = body.reg(Class::B32);
                body.op(format!("cvt.u32.u16 {s}, {h}"));
                return s;
            }
            let r = body.reg(Class::B32);
            body.op(format!("mov.b32 {r}, {value}"));
            let s = body.reg(Class::B32);
            body.op(format!("shr.u32 {s}, {r}, 16"));
            s
        }
        other => unreachable!("{} is not a 16-bit float", other.name()),
    }
}

/// The PTX type moving the bits of [`load_half_bits`] and [`narrow_half`]
/// (`b16` from an `f16`'s 16-bit register, `u16` from a `bf16`'s 32-bit one).
pub(crate) fn half_bits_ty(dtype: DTypeKind) -> &'static str {
    match dtype {
        DTypeKind::F16 => "b16",
        _ => "u16",
    }
}

/// Stores register-form `value` of `dtype` at `[addr]`.
pub(crate) fn store(body: &mut Body, dtype: DTypeKind, addr: &str, value: &str) {
    match dtype {
        DTypeKind::F32 => body.op(format!("st.global.f32 [{addr}], {value}")),
        DTypeKind::F64 => body.op(format!("st.global.f64 [{addr}], {value}")),
        DTypeKind::F16 | DTypeKind::BF16 => {
            let bits = narrow_half(body, dtype, value);
            body.op(format!(
                "st.global.{} [{addr}], {bits}",
                half_bits_ty(dtype)
            ));
        }
        DTypeKind::I32 => body.op(format!("st.global.u32 [{addr}], {value}")),
        DTypeKind::I64 => body.op(format!("st.global.u64 [{addr}], {value}")),
        DTypeKind::U8 => body.op(format!("st.global.u8 [{addr}], {value}")),
        DTypeKind::Bool => {
            let r = pred_to_byte(body, value);
            body.op(format!("st.global.u8 [{addr}], {r}"));
        }
    }
}

/// The `f32` register form of `dtype` (f16 or bf16) value `h`, a 16-bit
/// register (remembered by the body, so that [`f32_to_half`] gives `h`
/// back).
pub(crate) fn half_to_f32(body: &mut Body, dtype: DTypeKind, h: &str) -> String {
    let f = body.reg(Class::F32);
    if dtype == DTypeKind::F16 {
        body.op(format!("cvt.f32.f16 {f}, {h}"));
    } else {
        // A bf16 is the top half of the f32 of the same value.
        let zero = body.reg(Class::B16);
        body.op(format!("mov.b16 {zero}, 0"));
        body.op(format!("mov.b32 {f}, {{{zero}, {h}}}"));
    }
    body.set_half(&f, dtype, h);
    f
}

/// The 16-bit register of `f`, an `f32` holding a `dtype` (f16 or bf16)
/// value: the register it was widened from, or an exact conversion.
pub(crate) fn f32_to_half(body: &mut Body, dtype: DTypeKind, f: &str) -> String {
    if let Some(h) = body.half_of(f, dtype) {
        return h.to_string();
    }
    let h = body.reg(Class::B16);
    if dtype == DTypeKind::F16 {
        // Exact: the value is already an f16.
        body.op(format!("cvt.rn.f16.f32 {h}, {f}"));
    } else {
        let low = body.reg(Class::B16);
        body.op(format!("mov.b32 {{{low}, {h}}}, {f}"));
    }
    body.set_half(f, dtype, &h);
    h
}

fn bits_to_f32(body: &mut Body, r: &str) -> String {
    let f = body.reg(Class::F32);
    body.op(format!("mov.b32 {f}, {r}"));
    f
}

fn byte_to_pred(body: &mut Body, r: &str) -> String {
    let p = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {p}, {r}, 0"));
    p
}

fn pred_to_byte(body: &mut Body, p: &str) -> String {
    let r = body.reg(Class::B32);
    body.op(format!("selp.u32 {r}, 1, 0, {p}"));
    r
}

/// Loads `bytes` (1, 2, 4, 8 or 16, aligned) at `[addr]` as 32-bit words
/// (one word, zero-extended, below 4 bytes).
pub(crate) fn load_words(body: &mut Body, bytes: usize, addr: &str, nc: bool) -> Vec<String> {
    let space = if nc { "global.nc" } else { "global" };
    match bytes {
        1 | 2 => {
            let r = body.reg(Class::B32);
            let t = if bytes == 1 { "u8" } else { "u16" };
            body.op(format!("ld.{space}.{t} {r}, [{addr}]"));
            vec![r]
        }
        4 => {
            let r = body.reg(Class::B32);
            body.op(format!("ld.{space}.u32 {r}, [{addr}]"));
            vec![r]
        }
        8 | 16 => {
            let n = bytes / 4;
            let regs: Vec<String> = (0..n).map(|_| body.reg(Class::B32)).collect();
            body.op(format!(
                "ld.{space}.v{n}.u32 {{{}}}, [{addr}]",
                regs.join(", ")
            ));
            regs
        }
        _ => unreachable!("vector of {bytes} bytes"),
    }
}

/// Stores 32-bit `words` as `bytes` bytes at `[addr]`.
pub(crate) fn store_words(body: &mut Body, bytes: usize, addr: &str, words: &[String]) {
    match bytes {
        1 => body.op(format!("st.global.u8 [{addr}], {}", words[0])),
        2 => body.op(format!("st.global.u16 [{addr}], {}", words[0])),
        4 => body.op(format!("st.global.u32 [{addr}], {}", words[0])),
        8 | 16 => body.op(format!(
            "st.global.v{}.u32 [{addr}], {{{}}}",
            bytes / 4,
            words.join(", ")
        )),
        _ => unreachable!("vector of {bytes} bytes"),
    }
}

/// Loads `w` consecutive elements at `[addr]` (aligned to `w * size`) with
/// one vector access; returns them in register form.
pub(crate) fn load_vector(
    body: &mut Body,
    dtype: DTypeKind,
    w: usize,
    addr: &str,
    nc: bool,
) -> Vec<String> {
    let size = dtype.size_bytes();
    if w == 1 {
        return vec![load(body, dtype, addr, nc)];
    }
    let bytes = w * size;
    let words = load_words(body, bytes, addr, nc);
    let mut out = Vec::with_capacity(w);
    match size {
        8 => {
            for pair in words.chunks(2) {
                let class = if dtype == DTypeKind::F64 {
                    Class::F64
                } else {
                    Class::B64
                };
                let r = body.reg(class);
                body.op(format!("mov.b64 {r}, {{{}, {}}}", pair[0], pair[1]));
                out.push(r);
            }
        }
        4 => {
            for wd in words {
                out.push(if dtype == DTypeKind::F32 {
                    bits_to_f32(body, &wd)
                } else {
                    wd
                });
            }
        }
        2 => {
            for wd in words {
                match dtype {
                    DTypeKind::F16 => {
                        let lo = body.reg(Class::B16);
                        let hi = body.reg(Class::B16);
                        body.op(format!("mov.b32 {{{lo}, {hi}}}, {wd}"));
                        out.push(half_to_f32(body, dtype, &lo));
                        out.push(half_to_f32(body, dtype, &hi));
                    }
                    _ => {
                        let lo = body.reg(Class::B32);
                        body.op(format!("shl.b32 {lo}, {wd}, 16"));
                        let hi = body.reg(Class::B32);
                        body.op(format!("and.b32 {hi}, {wd}, 0xFFFF0000"));
                        // The 16-bit halves too, for bf16 arithmetic.
                        let (lo16, hi16) = (body.reg(Class::B16), body.reg(Class::B16));
                        body.op(format!("mov.b32 {{{lo16}, {hi16}}}, {wd}"));
                        let (lo, hi) = (bits_to_f32(body, &lo), bits_to_f32(body, &hi));
                        body.set_half(&lo, dtype, &lo16);
                        body.set_half(&hi, dtype, &hi16);
                        out.push(lo);
                        out.push(hi);
                    }
                }
            }
        }
        1 => {
            for wd in words {
                let per = (bytes.min(4)).min(w);
                for j in 0..per {
                    let r = body.reg(Class::B32);
                    body.op(format!("bfe.u32 {r}, {wd}, {}, 8", 8 * j));
                    out.push(if dtype == DTypeKind::Bool {
                        byte_to_pred(body, &r)
                    } else {
                        r
                    });
                }
            }
        }
        _ => unreachable!("element size {size}"),
    }
    debug_assert_eq!(out.len(), w);
    out
}

/// Stores `values` (register form) as consecutive elements at `[addr]`
/// (aligned to their total size) with one vector access.
pub(crate) fn store_vector(body: &mut Body, dtype: DTypeKind, addr: &str, values: &[String]) {
    let w = values.len();
    if w == 1 {
        store(body, dtype, addr, &values[0]);
        return;
    }
    let size = dtype.size_bytes();
    let bytes = w * size;
    let words: Vec<String> = match size {
        8 => {
            let mut words = Vec::new();
            for v in values {
                let lo = body.reg(Class::B32);
                let hi = body.reg(Class::B32);
                body.op(format!("mov.b64 {{{lo}, {hi}}}, {v}"));
                words.push(lo);
                words.push(hi);
            }
            words
        }
        4 => values
            .iter()
            .map(|v| {
                if dtype == DTypeKind::F32 {
                    let r = body.reg(Class::B32);
                    body.op(format!("mov.b32 {r}, {v}"));
                    r
                } else {
                    v.clone()
                }
            })
            .collect(),
        2 => values
            .chunks(2)
            .map(|pair| {
                let wd = body.reg(Class::B32);
                // A bf16 pair is packed from its 16-bit registers only when
                // both are at hand (computed in bf16).
                let halves = dtype == DTypeKind::F16
                    || pair.iter().all(|v| body.half_of(v, dtype).is_some());
                if halves {
                    let lo = f32_to_half(body, dtype, &pair[0]);
                    let hi = f32_to_half(body, dtype, &pair[1]);
                    body.op(format!("mov.b32 {wd}, {{{lo}, {hi}}}"));
                } else {
                    // The top halves of both: bytes 2, 3 of `lo` then
                    // bytes 2, 3 of `hi` (bytes 6, 7 of the pair).
                    let lo = body.reg(Class::B32);
                    body.op(format!("mov.b32 {lo}, {}", pair[0]));
                    let hi = body.reg(Class::B32);
                    body.op(format!("mov.b32 {hi}, {}", pair[1]));
                    body.op(format!("prmt.b32 {wd}, {lo}, {hi}, 0x7632"));
                }
                wd
            })
            .collect(),
        1 => values
            .chunks(4)
            .map(|group| {
                let wd = body.reg(Class::B32);
                body.op(format!("mov.u32 {wd}, 0"));
                for (j, v) in group.iter().enumerate() {
                    let byte = if dtype == DTypeKind::Bool {
                        pred_to_byte(body, v)
                    } else {
                        v.clone()
                    };
                    body.op(format!("bfi.b32 {wd}, {byte}, {wd}, {}, 8", 8 * j));
                }
                wd
            })
            .collect(),
        _ => unreachable!("element size {size}"),
    };
    store_words(body, bytes, addr, &words);
}
