//! The normalisations' backward `NAME_dx_warp` for rows a warp holds in
//! registers (16-byte accesses, at most [`warp_cols`](crate::norm::warp_cols)
//! elements): one warp per row, each row's `x`, `grad` and `weight` read
//! once in 16-byte loads (all issued before any is used), its statistics
//! and the means of `g * w * xhat` and `g * w` reduced by butterflies
//! within the warp (no barrier a row), and each lane's share of the
//! column sums `grad * xhat` (and `grad`) kept in registers across the
//! warp's rows. The block's eight warps then add their column sums in
//! warp order through shared memory into the block's partial sums, the
//! same `part[k][..][col]` layout the block entry `NAME_dx` writes, so
//! `NAME_sum` adds them the same way: the same bits from run to run for a
//! given grid.
//!
//! `_dx` reads every row four times from global memory and reduces four
//! times across its block per row (about 0.4 TB/s over GPT-2's 8192 rows
//! of 768 bf16); this entry moves each byte once.

use super::backward_rows::{grid, partial_sums, row_loop_head, row_loop_tail};
use super::{load_raw, reduce_threads, store_access, widen, Accesses, Gen, Threads};
use super::{BACKWARD_PARAMS, WARPS};
use crate::norm::{self, NormEntry};
use crate::ops::NormOp;
use crate::ptx::body::{Body, Class};
use tensorfn_core::DTypeKind;

/// The warp entry: see the module's notes. Rows of `cols` elements,
/// `cols` a multiple of the 16-byte access, every row, `weight`, `grad`
/// and `dx` 16-byte aligned (the host checks).
pub(super) fn backward_dx_warp(name: &str, op: NormOp, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let abytes = if dtype == DTypeKind::F64 { 8 } else { 4 };
    let wcols = norm::warp_cols(dtype);
    // Each warp's column sums, one statistic at a time.
    body.raw(format!(
        ".shared .align 16 .b8 nsmem_cols[{}];",
        WARPS * wcols * abytes
    ));
    let g = Gen::with_fourth(&mut body, op, dtype, false, "p_g");
    let a = g.a();
    let layer = op == NormOp::LayerNorm;
    let grid = grid(&mut body, WARPS);
    let lane = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {lane}, {}", g.lane));
    let acc = Accesses::new(
        &mut body,
        dtype,
        &g.cols,
        NormEntry::Warp { vector: true },
        &lane,
    );
    let width = acc.width;
    let elems = acc.count * width;
    let wbase = acc.base(&mut body, &g.w);
    // This lane's column sums over the warp's rows.
    let sums: Vec<[String; 2]> = (0..elems)
        .map(|_| {
            let pair = [g.acc(&mut body), g.acc(&mut body)];
            for s in &pair {
                body.op(format!("mov.{a} {s}, {}", g.zero()));
            }
            pair
        })
        .collect();
    let row = body.reg(Class::B64);
    let w32 = body.reg(Class::B32);
    body.op(format!("mov.u32 {w32}, %ctaid.x"));
    body.op(format!("mul.wide.u32 {row}, {w32}, {WARPS}"));
    let warp64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {warp64}, {}", g.warp));
    body.op(format!("add.u64 {row}, {row}, {warp64}"));
    let (rows, off) = row_loop_head(&mut body, &g, &row, ["warp_row", "warp_row_end"]);
    let bases: Vec<String> = [&g.input, &g.b, &g.out]
        .iter()
        .map(|p| {
            let r = super::addr(&mut body, p, &off);
            acc.base(&mut body, &r)
        })
        .collect();
    let (xb, gb, ob) = (&bases[0], &bases[1], &bases[2]);
    // Every load of the row first.
    let mut raw = Vec::new();
    for j in 0..acc.count {
        // Predicates are recomputed where used, not held across the row.
        let p = acc.inside(&mut body, j);
        let x = load_raw(&mut body, dtype, width, &p, &acc.at(xb, j));
        let gr = load_raw(&mut body, dtype, width, &p, &acc.at(gb, j));
        let w = load_raw(&mut body, dtype, width, &p, &acc.at(&wbase, j));
        raw.push((x, gr, w));
    }
    let xs: Vec<String> = raw
        .iter()
        .flat_map(|(x, _, _)| widen(&mut body, dtype, width, x))
        .collect();
    let threads = Threads {
        lane: &g.lane,
        warp: &g.warp,
        smem: None,
    };
    let warp_sum = |body: &mut Body, s: &str| -> String {
        reduce_threads(body, &threads, s, g.wide, 0, &mut |body, d, o| {
            body.op(format!("add.rn.{a} {d}, {d}, {o}"))
        })
    };
    let s = g.acc(&mut body);
    body.op(format!("mov.{a} {s}, {}", g.zero()));
    let mean = if layer {
        for x in &xs {
            body.op(format!("add.rn.{a} {s}, {s}, {x}"));
        }
        let total = warp_sum(&mut body, &s);
        let mean = g.mean(&mut body, &total);
        let q = g.acc(&mut body);
        body.op(format!("mov.{a} {q}, {}", g.zero()));
        for (i, x) in xs.iter().enumerate() {
            // Columns past the row's end add nothing.
            let p = acc.inside(&mut body, i / width);
            let d = g.acc(&mut body);
            body.op(format!("sub.rn.{a} {d}, {x}, {mean}"));
            body.op(format!("@!{p} mov.{a} {d}, {}", g.zero()));
            body.op(format!("fma.rn.{a} {q}, {d}, {d}, {q}"));
        }
        let total = warp_sum(&mut body, &q);
        body.op(format!("mov.{a} {s}, {total}"));
        Some(mean)
    } else {
        for x in &xs {
            body.op(format!("fma.rn.{a} {s}, {x}, {x}, {s}"));
        }
        let total = warp_sum(&mut body, &s);
        body.op(format!("mov.{a} {s}, {total}"));
        None
    };
    let stat = g.mean(&mut body, &s);
    let inv = g.inverse(&mut body, &stat);
    let gs: Vec<String> = raw
        .iter()
        .flat_map(|(_, gr, _)| widen(&mut body, dtype, width, gr))
        .collect();
    let ws: Vec<String> = raw
        .iter()
        .flat_map(|(_, _, w)| widen(&mut body, dtype, width, w))
        .collect();
    let sgx = g.acc(&mut body);
    body.op(format!("mov.{a} {sgx}, {}", g.zero()));
    let sg = g.acc(&mut body);
    body.op(format!("mov.{a} {sg}, {}", g.zero()));
    let mut hs = Vec::with_capacity(elems);
    let mut gws = Vec::with_capacity(elems);
    for i in 0..elems {
        let h = g.acc(&mut body);
        match &mean {
            Some(m) => {
                body.op(format!("sub.rn.{a} {h}, {}, {m}", xs[i]));
                body.op(format!("mul.rn.{a} {h}, {h}, {inv}"));
            }
            None => body.op(format!("mul.rn.{a} {h}, {}, {inv}", xs[i])),
        }
        let gw = g.acc(&mut body);
        body.op(format!("mul.rn.{a} {gw}, {}, {}", gs[i], ws[i]));
        body.op(format!("fma.rn.{a} {sgx}, {gw}, {h}, {sgx}"));
        // Past the row's end `grad` is 0: nothing is added.
        let [sw, sb] = &sums[i];
        body.op(format!("fma.rn.{a} {sw}, {}, {h}, {sw}", gs[i]));
        if layer {
            body.op(format!("add.rn.{a} {sg}, {sg}, {gw}"));
            body.op(format!("add.rn.{a} {sb}, {sb}, {}", gs[i]));
        }
        hs.push(h);
        gws.push(gw);
    }
    let total = warp_sum(&mut body, &sgx);
    let mean_gx = g.mean(&mut body, &total);
    let mean_g = layer.then(|| {
        let total = warp_sum(&mut body, &sg);
        g.mean(&mut body, &total)
    });
    for j in 0..acc.count {
        let ys: Vec<String> = (j * width..(j + 1) * width)
            .map(|i| {
                let t = g.acc(&mut body);
                match &mean_g {
                    Some(m) => body.op(format!("sub.rn.{a} {t}, {}, {m}", gws[i])),
                    None => body.op(format!("mov.{a} {t}, {}", gws[i])),
                }
                let u = g.acc(&mut body);
                body.op(format!("mul.rn.{a} {u}, {}, {mean_gx}", hs[i]));
                body.op(format!("sub.rn.{a} {t}, {t}, {u}"));
                body.op(format!("mul.rn.{a} {t}, {t}, {inv}"));
                g.round(&mut body, t)
            })
            .collect();
        let p = acc.inside(&mut body, j);
        store_access(&mut body, dtype, &p, &acc.at(ob, j), &ys);
    }
    row_loop_tail(&mut body, &row, &grid, &rows);
    // The warps' column sums, added in warp order into the block's
    // partial sums: dweight's, then dbias's.
    let smem = body.reg(Class::B64);
    body.op(format!("mov.u64 {smem}, nsmem_cols"));
    // This lane's first column in its warp's slice of shared memory.
    let mine = body.reg(Class::B64);
    body.op(format!(
        "mul.wide.u32 {mine}, {}, {}",
        g.warp,
        wcols * abytes
    ));
    body.op(format!("add.u64 {mine}, {mine}, {smem}"));
    let lane_off = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {lane_off}, {lane}, {}", width * abytes));
    body.op(format!("add.u64 {mine}, {mine}, {lane_off}"));
    let (pdw, pdb) = partial_sums(&mut body, &g, &grid, abytes);
    let stats: &[(usize, &str)] = if layer {
        &[(0, &pdw), (1, &pdb)]
    } else {
        &[(0, &pdw)]
    };
    for &(k, out) in stats {
        if k > 0 {
            // Every thread has read the previous statistic's sums.
            body.op("bar.sync 0");
        }
        for j in 0..acc.count {
            let p = acc.inside(&mut body, j);
            for e in 0..width {
                let at = (j * 32 * width + e) * abytes;
                body.op(format!(
                    "@{p} st.shared.{a} [{mine}+{at}], {}",
                    sums[j * width + e][k]
                ));
            }
        }
        body.op("bar.sync 0");
        super::cols_of_thread(&mut body, &g.tid, &g.cols, |body, col| {
            let at = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {at}, {col}, {abytes}, {smem}"));
            let t = g.acc(body);
            body.op(format!("ld.shared.{a} {t}, [{at}]"));
            for w in 1..WARPS {
                let v = g.acc(body);
                body.op(format!("ld.shared.{a} {v}, [{at}+{}]", w * wcols * abytes));
                body.op(format!("add.rn.{a} {t}, {t}, {v}"));
            }
            let pa = super::part_elem(body, out, col, abytes);
            body.op(format!("st.global.{a} [{pa}], {t}"));
        });
    }
    body.op("ret");
    format!(
        ".visible .entry {name}_dx_warp{BACKWARD_PARAMS}\n.maxntid {}, 1, 1\n{{\n{}}}\n",
        crate::abi::BLOCK,
        body.finish()
    )
}
