//! Column sums of a contiguous `[rows, cols]` matrix (a bias's gradient
//! summed over batch and positions), in two deterministic passes:
//!
//! - `NAME_part` (16-byte loads, `cols` a multiple of [`vector_width`]
//!   and the matrix 16-byte aligned) and `NAME_part1` (one element a
//!   load), parameters `(part, x, rows, cols, chunk)`: `BLOCK` threads a
//!   block, block `(x, y)` summing the `32 * w` columns from `32 * w * x`
//!   (`w` elements a lane) over rows `chunk * y ..` (at most `chunk`):
//!   warp `v` of the block takes rows `v, v + WARPS, ..` of the chunk, a
//!   row's lanes reading it in order (coalesced), [`UNROLL`] rows' loads
//!   in flight before they are added; the warps' sums are then added in
//!   warp order through shared memory into `part[y][col]` (f32).
//! - `NAME_sum`: the norms' backward's partial-sum entry over one part a
//!   block (`norm::partial_sums_entry`), the chunks' sums added in a
//!   fixed order and rounded once to the dtype.
//!
//! So the matrix is read once, by as many blocks as the caller asks for,
//! and the result has the same bits every run for a given chunk count.

use super::body::{Body, Class};
use super::memory::load_vector;
use crate::abi::BLOCK;
use tensorfn_core::DTypeKind;

const PARAMS: &str = "(\n\t.param .u64 p_part,\n\t.param .u64 p_x,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols,\n\t.param .u64 p_chunk\n)";

/// Warps of a `_part` block.
const WARPS: u32 = BLOCK / 32;

/// Rows a warp loads before adding them.
pub const UNROLL: usize = 4;

/// Elements a lane of `NAME_part` loads at once: 16 bytes of `dtype`.
pub fn vector_width(dtype: DTypeKind) -> usize {
    16 / dtype.size_bytes()
}

/// The `_part` entry (`w` = [`vector_width`]) or `_part1` entry (`w` = 1)
/// of `NAME` over rows of `dtype` (f32, f16 or bf16).
pub(crate) fn part_entry(name: &str, dtype: DTypeKind, w: usize) -> String {
    let mut body = Body::new();
    let tile = 32 * w;
    body.raw(format!(
        ".shared .align 16 .b8 csum[{}];",
        WARPS as usize * tile * 4
    ));
    let param = |body: &mut Body, p: &str, global: bool| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        if global {
            body.op(format!("cvta.to.global.u64 {r}, {r}"));
        }
        r
    };
    let part = param(&mut body, "p_part", true);
    let x = param(&mut body, "p_x", true);
    let rows = param(&mut body, "p_rows", false);
    let cols = param(&mut body, "p_cols", false);
    let chunk = param(&mut body, "p_chunk", false);
    let size = dtype.size_bytes();
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let lane = body.reg(Class::B32);
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    let warp = body.reg(Class::B32);
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    // The block's first column and this lane's.
    let first = body.reg(Class::B64);
    let cx = body.reg(Class::B32);
    body.op(format!("mov.u32 {cx}, %ctaid.x"));
    body.op(format!("mul.wide.u32 {first}, {cx}, {tile}"));
    let col = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {col}, {lane}, {w}"));
    body.op(format!("add.u64 {col}, {col}, {first}"));
    // Rows `[r, end)` of the chunk, this warp's from `r + warp`.
    let cy = body.reg(Class::B32);
    body.op(format!("mov.u32 {cy}, %ctaid.y"));
    let y = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {y}, {cy}"));
    let r = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {r}, {y}, {chunk}"));
    let end = body.reg(Class::B64);
    body.op(format!("add.u64 {end}, {r}, {chunk}"));
    body.op(format!("min.u64 {end}, {end}, {rows}"));
    let w64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {w64}, {warp}"));
    body.op(format!("add.u64 {r}, {r}, {w64}"));
    let acc: Vec<String> = (0..w).map(|_| body.reg(Class::F32)).collect();
    for a in &acc {
        body.op(format!("mov.f32 {a}, 0f00000000"));
    }
    // Lanes past the last column add nothing but meet the barrier.
    let combine = body.label("colsum_combine");
    let outside = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {outside}, {col}, {cols}"));
    body.op(format!("@{outside} bra {combine}"));
    let addr = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {addr}, {r}, {cols}, {col}"));
    body.op(format!("mad.lo.u64 {addr}, {addr}, {size}, {x}"));
    let step = body.reg(Class::B64);
    body.op(format!(
        "mul.lo.u64 {step}, {cols}, {}",
        WARPS as usize * size
    ));
    // `UNROLL` rows at a time while they all lie in the chunk.
    let group = body.label("colsum_group");
    let group_end = body.label("colsum_group_end");
    body.place(&group);
    let last = body.reg(Class::B64);
    body.op(format!(
        "add.u64 {last}, {r}, {}",
        (UNROLL - 1) * WARPS as usize
    ));
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {last}, {end}"));
    body.op(format!("@{past} bra {group_end}"));
    let loaded: Vec<Vec<String>> = (0..UNROLL)
        .map(|u| {
            let at = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {at}, {step}, {u}, {addr}"));
            load_vector(&mut body, dtype, w, &at, true)
        })
        .collect();
    for vs in loaded {
        for (a, v) in acc.iter().zip(vs) {
            body.op(format!("add.rn.f32 {a}, {a}, {v}"));
        }
    }
    body.op(format!("mad.lo.u64 {addr}, {step}, {UNROLL}, {addr}"));
    body.op(format!("add.u64 {r}, {r}, {}", UNROLL * WARPS as usize));
    body.op(format!("bra.uni {group}"));
    body.place(&group_end);
    let tail = body.label("colsum_tail");
    body.place(&tail);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {r}, {end}"));
    body.op(format!("@{done} bra {combine}"));
    let vs = load_vector(&mut body, dtype, w, &addr, true);
    for (a, v) in acc.iter().zip(vs) {
        body.op(format!("add.rn.f32 {a}, {a}, {v}"));
    }
    body.op(format!("add.u64 {addr}, {addr}, {step}"));
    body.op(format!("add.u64 {r}, {r}, {}", WARPS));
    body.op(format!("bra.uni {tail}"));
    body.place(&combine);
    // csum[warp][lane * w + j]; then thread `t < tile` adds column
    // `first + t` over the warps in warp order.
    let slot = body.reg(Class::B64);
    body.op(format!("mov.u64 {slot}, csum"));
    let off = body.reg(Class::B32);
    body.op(format!("mul.lo.u32 {off}, {warp}, {}", tile * 4));
    body.op(format!("mad.lo.u32 {off}, {lane}, {}, {off}", w * 4));
    let mine = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {mine}, {off}"));
    body.op(format!("add.u64 {mine}, {mine}, {slot}"));
    for (j, a) in acc.iter().enumerate() {
        body.op(format!("st.shared.f32 [{mine}+{}], {a}", 4 * j));
    }
    body.op("bar.sync 0");
    let exit = body.label("colsum_exit");
    let idle = body.reg(Class::Pred);
    body.op(format!("setp.ge.u32 {idle}, {tid}, {tile}"));
    body.op(format!("@{idle} bra {exit}"));
    let c = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {c}, {tid}"));
    body.op(format!("add.u64 {c}, {c}, {first}"));
    let beyond = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {beyond}, {c}, {cols}"));
    body.op(format!("@{beyond} bra {exit}"));
    let from = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {from}, {tid}, 4"));
    body.op(format!("add.u64 {from}, {from}, {slot}"));
    let s = body.reg(Class::F32);
    body.op(format!("ld.shared.f32 {s}, [{from}]"));
    for v in 1..WARPS as usize {
        let t = body.reg(Class::F32);
        body.op(format!("ld.shared.f32 {t}, [{from}+{}]", v * tile * 4));
        body.op(format!("add.rn.f32 {s}, {s}, {t}"));
    }
    let out = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {out}, {y}, {cols}, {c}"));
    body.op(format!("mad.lo.u64 {out}, {out}, 4, {part}"));
    body.op(format!("st.global.f32 [{out}], {s}"));
    body.place(&exit);
    body.op("ret");
    let suffix = if w == 1 { "_part1" } else { "_part" };
    format!(
        ".visible .entry {name}{suffix}{PARAMS}\n.maxntid {BLOCK}, 1, 1\n{{\n{}}}\n",
        body.finish()
    )
}
