//! Structure of the emitted PTX: header, entries and parameters as the ABI
//! says, declared registers, defined labels, no approximate or
//! flush-to-zero instructions.

use super::Target;
use crate::abi::meta_bytes;
use crate::builtin::{self, Kernel};
use crate::ir::ElementwiseBuilder;
use crate::norm::NormEntry;
use crate::ops::{BinaryOp, CmpOp, NormOp, ReduceOp, RowOp, UnaryOp};
use std::collections::{HashMap, HashSet};
use tensorfn_core::DTypeKind;

/// One `.entry`: its name, parameter list and body.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) params: Vec<String>,
    pub(super) body: String,
}

pub(super) fn entries(ptx: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(pos) = rest.find(".visible .entry ") {
        rest = &rest[pos + ".visible .entry ".len()..];
        let open = rest.find('(').expect("parameter list");
        let name = rest[..open].to_string();
        let close = rest.find(')').expect("end of parameters");
        let params = rest[open + 1..close]
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        let body_start = rest.find('{').expect("body");
        let mut depth = 0;
        let mut end = body_start;
        for (i, c) in rest[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = body_start + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        assert_eq!(depth, 0, "unbalanced braces in {name}");
        out.push(Entry {
            name,
            params,
            body: rest[body_start + 1..end].to_string(),
        });
        rest = &rest[end..];
    }
    out
}

/// Every register used is declared, every branch target defined once.
fn check_body(e: &Entry) {
    let mut declared: HashMap<String, usize> = HashMap::new();
    for line in e.body.lines() {
        let line = line.trim();
        if let Some(decl) = line.strip_prefix(".reg ") {
            // .reg .f32 %f<12>;
            let reg = decl.split_whitespace().nth(1).expect("register");
            let (prefix, count) = reg.trim_end_matches(';').split_once('<').expect("<N>");
            let n: usize = count.trim_end_matches('>').parse().expect("count");
            declared.insert(prefix.to_string(), n);
        }
    }
    let mut labels = HashSet::new();
    for line in e.body.lines() {
        if let Some(l) = line.strip_suffix(':') {
            assert!(labels.insert(l.to_string()), "{}: label {l} twice", e.name);
        }
    }
    for line in e.body.lines() {
        let line = line.trim();
        if line.starts_with(".reg") || line.starts_with("//") {
            continue;
        }
        // registers: %p3, %rd12, %fd0 ... (special registers %tid.x have a dot)
        for (i, _) in line.match_indices('%') {
            let tail = &line[i + 1..];
            let letters: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let digits: String = tail[letters.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            if digits.is_empty() {
                continue; // %tid.x, %ctaid.x, ...
            }
            let n: usize = digits.parse().unwrap();
            let prefix = format!("%{letters}");
            let max = declared
                .get(&prefix)
                .unwrap_or_else(|| panic!("{}: {prefix} never declared", e.name));
            assert!(n < *max, "{}: {prefix}{n} beyond its declaration", e.name);
        }
        if let Some(pos) = line.find("bra") {
            let target = line[pos..]
                .split_whitespace()
                .nth(1)
                .expect("branch target")
                .trim_end_matches(';');
            assert!(
                labels.contains(target),
                "{}: undefined label {target}",
                e.name
            );
        }
    }
}

/// No approximations, no flush-to-zero, every float add/sub/mul/div/fma
/// rounded explicitly (so ptxas cannot contract it into an fma).
/// A Hopper attention forward module: one entry with the `mma.sync`
/// form's parameters, `sm_90a` only (`wgmma`), the products, fences and
/// copies every form has and the form's own `ops`, `threads` a block, and
/// exact arithmetic but for the exponentials and the log-sum-exp's `lg2`.
fn check_hopper_forward(k: &Kernel, ops: &[&str], threads: usize) {
    let es = entries(&k.ptx);
    assert_eq!(es.len(), 1, "{}", k.name);
    assert_eq!(es[0].params.len(), super::attention::MMA_PARAMS.len());
    check_body(&es[0]);
    assert!(
        k.ptx.starts_with(".version 8.0\n.target sm_90a\n"),
        "{}",
        k.name
    );
    let common = [
        "wgmma.mma_async.sync.aligned.m64n128k16",
        "wgmma.fence.sync.aligned",
        "wgmma.commit_group.sync.aligned",
        "fence.proxy.async.shared::cta",
        "cp.async.cg.shared.global",
    ];
    for op in common.iter().chain(ops) {
        assert!(es[0].body.contains(op), "{}: no {op}", k.name);
    }
    assert!(
        k.ptx.contains(&format!(".maxntid {threads}, 1, 1")),
        "{}",
        k.name
    );
    check_exact(
        &k.name,
        &k.ptx
            .replace("ex2.approx.ftz.f32", "ex2.f32")
            .replace("lg2.approx.f32", "lg2.f32"),
    );
}

fn check_exact(name: &str, ptx: &str) {
    assert!(
        !ptx.contains(".approx"),
        "{name} uses an approximate instruction"
    );
    assert!(!ptx.contains(".ftz"), "{name} flushes subnormals");
    for line in ptx.lines() {
        let op = line.split_whitespace().next().unwrap_or("");
        for base in ["add.", "sub.", "mul.", "div.", "fma."] {
            if op.starts_with(base) && (op.ends_with(".f32") || op.ends_with(".f64")) {
                assert!(op.contains(".rn."), "{name}: {op} without .rn");
            }
        }
    }
}

fn elementwise_params(inputs: usize, strided: bool) -> Vec<String> {
    let mut p = vec![".param .u64 p_out".to_string()];
    p.extend((0..inputs).map(|i| format!(".param .u64 p_in{i}")));
    p.push(".param .u64 p_n".to_string());
    if strided {
        p.push(format!(
            ".param .align 8 .b8 p_meta[{}]",
            meta_bytes(inputs)
        ));
    }
    p
}

fn check_elementwise(k: &Kernel, inputs: usize) {
    check_elementwise_for(k, inputs, Target::Sm70);
}

fn check_elementwise_for(k: &Kernel, inputs: usize, target: Target) {
    assert!(k.ptx.starts_with(target.header()), "{}: header", k.name);
    let es = entries(&k.ptx);
    assert_eq!(es.len(), 3, "{}: three entries", k.name);
    assert_eq!(es[0].name, k.contig_entry());
    assert_eq!(es[1].name, k.strided_entry());
    assert_eq!(es[2].name, k.cols_entry());
    assert_eq!(
        es[0].params,
        elementwise_params(inputs, false),
        "{}",
        k.name
    );
    assert_eq!(es[1].params, elementwise_params(inputs, true), "{}", k.name);
    let mut cols = elementwise_params(inputs, false);
    cols.extend([".param .u64 p_cols".into(), ".param .u64 p_mask".into()]);
    assert_eq!(es[2].params, cols, "{}", k.name);
    for e in &es {
        check_body(e);
        assert!(e.body.contains("ret;"));
        // inputs through the read-only path
        assert!(e.body.contains("ld.global.nc"), "{}: nc loads", e.name);
        assert!(e.body.contains("st.global"), "{}: stores", e.name);
        assert!(e.body.contains("%nctaid.x"), "{}: grid-stride loop", e.name);
    }
    check_exact(&k.name, &k.ptx);
}

#[test]
fn every_builtin_is_well_formed() {
    let all = builtin::all();
    let mut names = HashSet::new();
    for k in &all {
        assert!(names.insert(k.name.clone()), "duplicate {}", k.name);
        if k.name.starts_with("tf_unary_") || k.name.starts_with("tf_cast_") {
            check_elementwise(k, 1);
        } else if k.name.starts_with("tf_binary_") {
            check_elementwise(k, 2);
        } else if k.name.starts_with("tf_gather_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 8, "{}", k.name);
            assert_eq!(
                es[0].params[7],
                format!(".param .align 8 .b8 p_meta[{}]", meta_bytes(2))
            );
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_scatter_add_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 9, "{}", k.name);
            assert_eq!(
                es[0].params[8],
                format!(".param .align 8 .b8 p_meta[{}]", meta_bytes(2))
            );
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_attention_wgmma_bwd") {
            let pair = k.name.starts_with("tf_attention_wgmma_bwd2_");
            let ws = k.name.starts_with("tf_attention_wgmma_bwd_ws_");
            let bulk = ws || k.name.starts_with("tf_attention_wgmma_bwd2_bulk_");
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 2, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[1].name, format!("{}_delta", k.name));
            assert_eq!(
                es[0].params.len(),
                super::attention_mma_bwd::MMA_BWD_PARAMS.len()
            );
            for e in &es {
                check_body(e);
            }
            assert!(
                k.ptx.starts_with(".version 8.1\n.target sm_90a\n"),
                "{}",
                k.name
            );
            let d = if k.name.ends_with("_d64") { 64 } else { 128 };
            for op in [
                format!("wgmma.mma_async.sync.aligned.m64n{d}k16"),
                "wgmma.mma_async.sync.aligned.m64n64k16".into(),
                "fence.proxy.async.shared::cta".into(),
                "cp.async.cg.shared.global".into(),
                if bulk {
                    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32".into()
                } else {
                    "red.global.add.v4.f32".into()
                },
                format!(
                    ".maxntid {}, 1, 1",
                    if ws {
                        super::WGMMA_BWD_WS_THREADS
                    } else if pair {
                        super::WGMMA_BWD2_THREADS
                    } else {
                        super::WGMMA_BWD_THREADS
                    }
                ),
            ] {
                assert!(k.ptx.contains(&op), "{}: no {op}", k.name);
            }
            // The warp-specialised form's copier and its buffers.
            let ws_ops = [
                "setmaxnreg.dec.sync.aligned.u32",
                "setmaxnreg.inc.sync.aligned.u32",
                "cp.async.mbarrier.arrive.noinc.shared.b64",
                "mbarrier.try_wait.parity.shared::cta.b64",
            ];
            for op in ws_ops.into_iter().filter(|_| ws) {
                assert!(k.ptx.contains(op), "{}: no {op}", k.name);
            }
            // Exact but for the exponentials, `ex2.approx.ftz` as in
            // FlashAttention.
            check_exact(&k.name, &k.ptx.replace("ex2.approx.ftz.f32", "ex2.f32"));
        } else if k.name.starts_with("tf_attention_ws_") {
            check_hopper_forward(
                k,
                &[
                    "wgmma.wait_group.sync.aligned 1",
                    "setmaxnreg.dec.sync.aligned.u32 72",
                    "setmaxnreg.inc.sync.aligned.u32 216",
                    "mbarrier.init.shared::cta.b64",
                    "mbarrier.try_wait.parity.shared::cta.b64",
                    "mbarrier.arrive.shared::cta.b64",
                    "cp.async.mbarrier.arrive.noinc.shared.b64",
                    "fence.proxy.async.shared::cta",
                ],
                super::ATTENTION_WS_THREADS,
            );
        } else if k.name.starts_with("tf_attention_wgmma_") {
            check_hopper_forward(
                k,
                &["wgmma.wait_group.sync.aligned 0"],
                super::attention_wgmma_threads(if k.name.ends_with("_d64") { 64 } else { 128 }),
            );
        } else if k.name.starts_with("tf_attention_mma_bwd_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 2, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[1].name, format!("{}_delta", k.name));
            assert_eq!(
                es[0].params.len(),
                super::attention_mma_bwd::MMA_BWD_PARAMS.len()
            );
            assert_eq!(
                es[1].params.len(),
                super::attention_mma_bwd::MMA_BWD_DELTA_PARAMS.len()
            );
            for e in &es {
                check_body(e);
            }
            assert!(
                k.ptx.starts_with(".version 7.0\n.target sm_80\n"),
                "{}",
                k.name
            );
            for op in [
                "mma.sync.aligned.m16n8k16",
                "cp.async.cg.shared.global",
                "ldmatrix.sync.aligned.m8n8.x4.trans",
                "red.global.add.f32",
            ] {
                assert!(es[0].body.contains(op), "{}: no {op}", k.name);
            }
            // Exact but for the exponentials, `ex2.approx.ftz` as in
            // FlashAttention.
            check_exact(&k.name, &k.ptx.replace("ex2.approx.ftz.f32", "ex2.f32"));
        } else if k.name.starts_with("tf_attention_mma_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].params.len(), super::attention::MMA_PARAMS.len());
            check_body(&es[0]);
            assert!(
                es[0].body.contains("mma.sync.aligned.m16n8k16"),
                "{}",
                k.name
            );
            assert!(
                k.ptx.starts_with(".version 7.0\n.target sm_80\n"),
                "{}",
                k.name
            );
            for op in [
                "cp.async.cg.shared.global",
                "ldmatrix.sync.aligned.m8n8.x4.trans",
            ] {
                assert!(es[0].body.contains(op), "{}: no {op}", k.name);
            }
            // Blocks of `attention_mma_threads(d)` threads, whose tiles fit
            // the 48 KiB of static shared memory.
            let d: usize = k
                .name
                .rsplit("_d")
                .next()
                .and_then(|x| x.parse().ok())
                .expect("a head dim in the name");
            let threads = super::attention_mma_threads(d);
            assert!(
                k.ptx.contains(&format!(".maxntid {threads}, 1, 1")),
                "{}",
                k.name
            );
            let shared: usize = k
                .ptx
                .split("att_kv[")
                .nth(1)
                .and_then(|x| x.split(']').next())
                .and_then(|x| x.parse().ok())
                .expect("a shared tile");
            assert!(shared <= 48 * 1024, "{}: {shared} bytes", k.name);
            // Exact but for the exponentials of the softmax, which are
            // `ex2.approx.ftz` as in FlashAttention, and the logarithm of
            // the rows' sums written as log-sum-exps for a backward
            // (`lg2.approx`, 2^-22 relative, below the f32 sums' own error).
            check_exact(
                &k.name,
                &k.ptx
                    .replace("ex2.approx.ftz.f32", "ex2.f32")
                    .replace("lg2.approx.f32", "lg2.f32"),
            );
        } else if k.name.starts_with("tf_attention_bwd_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].params.len(), super::attention::BWD_PARAMS.len());
            check_body(&es[0]);
            assert!(es[0].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
            assert!(!es[0].body.contains("atom."), "{}: no atomics", k.name);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_attention_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].params.len(), super::attention::PARAMS.len());
            check_body(&es[0]);
            assert!(es[0].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_cat_rows_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].params.len(), 3 + 3 * builtin::CAT_PARTS);
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_adamw")
            || k.name.starts_with("tf_sgd")
            || k.name.starts_with("tf_grad_square_sum_")
        {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 5 + super::OPTIM_HYPER, "{}", k.name);
            // Only the sum of squares adds atomically (once per warp).
            let atomic = k.name.starts_with("tf_grad_square_sum_");
            assert_eq!(
                es[0].body.contains("atom.global.add.f64"),
                atomic,
                "{}",
                k.name
            );
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_pool2d_") {
            let es = entries(&k.ptx);
            // The channel-vector max entry, for the dtypes that have it.
            let vec = es.iter().find(|e| e.name == format!("{}_max_vec", k.name));
            let dtype = k.name.trim_start_matches("tf_pool2d_");
            let has_vec = ["bf16", "f16", "f32"].contains(&dtype);
            assert_eq!(vec.is_some(), has_vec, "{}", k.name);
            if let Some(e) = vec {
                assert_eq!(e.params.len(), 3, "{}", e.name);
                assert!(e.body.contains("ld.global.nc.v4.u32"), "{}", e.name);
                assert!(e.body.contains("st.global.v4.u32"), "{}", e.name);
                check_body(e);
            }
            assert_eq!(es.len(), 6 + usize::from(has_vec), "{}", k.name);
            for kind in ["max", "avg", "adaptive"] {
                for (bwd, params) in [("", 3), ("_backward", 4)] {
                    let e = es
                        .iter()
                        .find(|e| e.name == format!("{}_{kind}{bwd}", k.name))
                        .unwrap_or_else(|| panic!("{}: no {kind}{bwd}", k.name));
                    assert_eq!(e.params.len(), params, "{}", e.name);
                    assert_eq!(
                        e.params[params - 1],
                        format!(".param .align 8 .b8 p_meta[{}]", 8 * super::POOL_META_WORDS)
                    );
                    check_body(e);
                    assert!(!e.body.contains("atom."), "{}: no atomics", e.name);
                }
            }
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_conv2d_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 2, "{}", k.name);
            for (e, suffix) in es.iter().zip(["im2col", "col2im"]) {
                assert_eq!(e.name, format!("{}_{suffix}", k.name));
                assert_eq!(
                    e.params[2],
                    format!(".param .align 8 .b8 p_meta[{}]", 8 * super::CONV_META_WORDS)
                );
                check_body(e);
                assert!(!e.body.contains("atom."), "{}: no atomics", e.name);
            }
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_dropout_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 6, "{}", k.name);
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_multinomial_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 9, "{}", k.name);
            check_body(&es[0]);
            assert!(es[0].body.contains("atom.global.max.u32"), "{}", k.name);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_batch_norm_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 5, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[1].name, format!("{}_backward", k.name));
            assert_eq!(es[0].params.len(), 10, "{}", k.name);
            assert_eq!(es[1].params.len(), 10, "{}", k.name);
            for (e, suffix) in es[2..]
                .iter()
                .zip(["_stats_sum", "_stats_dev", "_backward_sums"])
            {
                assert_eq!(e.name, format!("{}{suffix}", k.name));
                assert_eq!(e.params.len(), 5, "{}", e.name);
            }
            for e in &es {
                check_body(e);
                assert!(e.body.contains("bar.sync 0"), "{}", e.name);
                assert!(!e.body.contains("atom."), "{}: no atomics", e.name);
            }
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_colsum_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 3, "{}", k.name);
            for (e, (suffix, params)) in es.iter().zip([("_part", 5), ("_part1", 5), ("_sum", 5)]) {
                assert_eq!(e.name, format!("{}{suffix}", k.name));
                assert_eq!(e.params.len(), params, "{}", e.name);
                check_body(e);
                assert!(e.body.contains("bar.sync 0"), "{}", e.name);
                assert!(!e.body.contains("atom."), "{}: no atomics", e.name);
            }
            // 16-byte loads in the vector form, one element in the other.
            assert!(es[0].body.contains("ld.global.nc.v4.u32"), "{}", k.name);
            assert!(!es[1].body.contains(".v4."), "{}", k.name);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_cumsum_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 4, "{}", k.name);
            check_body(&es[0]);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_topk_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[0].params.len(), 6, "{}", k.name);
            check_body(&es[0]);
            assert!(es[0].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_cross_entropy_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 3, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[1].name, format!("{}_backward", k.name));
            assert_eq!(es[2].name, format!("{}_fused", k.name));
            assert_eq!(es[0].params.len(), 9, "{}", k.name);
            assert_eq!(es[1].params.len(), 13, "{}", k.name);
            assert_eq!(es[2].params.len(), 12, "{}", k.name);
            // The backward's and the fused entry's row copy: 16-byte
            // chunks into their shared row.
            for (e, suffix) in es[1..].iter().zip(["backward", "fused"]) {
                assert!(e.body.contains("ld.global.nc.v4.u32"), "{}", e.name);
                assert!(e.body.contains("st.shared.v4.u32"), "{}", e.name);
                assert!(
                    k.ptx.contains(&format!(
                        ".extern .shared .align 16 .b8 {}_{suffix}_row[];",
                        k.name
                    )),
                    "{}",
                    e.name
                );
            }
            // The fused entry stores each row's loss and counts the rows.
            assert!(es[2].body.contains("st.global.f64"), "{}", k.name);
            assert!(es[2].body.contains("atom.global.add.u64"), "{}", k.name);
            for e in &es {
                check_body(e);
                assert!(e.body.contains("shfl.sync.bfly.b32"), "{}", e.name);
                assert!(e.body.contains("bar.sync 0"), "{}", e.name);
            }
            // A bad target is flagged, never read through.
            assert!(es[0].body.contains("atom.global.exch.b64"), "{}", k.name);
            assert!(es[1].body.contains("atom.global.exch.b64"), "{}", k.name);
            // Exact but for the exponentials of 32-bit (and 16-bit) rows,
            // `ex2.approx.ftz` of `(x - m) * log2(e)`; f64 rows keep the
            // exact exponential.
            let approx = k.ptx.contains("ex2.approx.ftz.f32");
            assert_eq!(approx, !k.name.contains("_f64_"), "{}", k.name);
            check_exact(&k.name, &k.ptx.replace("ex2.approx.ftz.f32", "ex2.f32"));
        } else if k.name.starts_with("tf_rope_") {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 2, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(es[1].name, format!("{}_v", k.name));
            for e in &es {
                assert_eq!(e.params.len(), 7, "{}", e.name);
                check_body(e);
                assert!(e.body.contains("ld.global.nc"), "{}", e.name);
            }
            // The vector entry moves 16 bytes per access.
            assert_eq!(es[1].body.matches("ld.global.nc.v4.u32").count(), 6);
            assert_eq!(es[1].body.matches("st.global.v4.u32").count(), 2);
            check_exact(&k.name, &k.ptx);
        } else if k.name.starts_with("tf_norm_backward_") {
            check_norm_backward(k);
        } else if NormOp::ALL
            .iter()
            .any(|op| k.name.starts_with(&format!("tf_{}_", op.name())))
        {
            check_norm(k);
        } else {
            let es = entries(&k.ptx);
            assert_eq!(es.len(), 1, "{}", k.name);
            assert_eq!(es[0].name, k.name);
            assert_eq!(
                es[0].params,
                [
                    ".param .u64 p_out",
                    ".param .u64 p_in",
                    ".param .u64 p_rows",
                    ".param .u64 p_cols"
                ]
            );
            check_body(&es[0]);
            assert!(es[0].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
            assert!(es[0].body.contains("bar.sync 0"), "{}", k.name);
            assert!(es[0].body.contains(".shared"), "{}", k.name);
            check_exact(&k.name, &k.ptx);
        }
    }
    // Float-only ops on 4 floats, the others on 7 numeric dtypes.
    let per_op = |float_only: bool| if float_only { 4 } else { 7 };
    let unary = all
        .iter()
        .filter(|k| k.name.starts_with("tf_unary_"))
        .count();
    let want: usize = UnaryOp::ALL.iter().map(|op| per_op(op.needs_float())).sum();
    assert_eq!(unary, want);
    let binary = all
        .iter()
        .filter(|k| k.name.starts_with("tf_binary_"))
        .count();
    let want: usize = BinaryOp::ALL
        .iter()
        .map(|op| per_op(op.needs_float()))
        .sum();
    assert_eq!(binary, want);
    let casts = all
        .iter()
        .filter(|k| k.name.starts_with("tf_cast_"))
        .count();
    assert_eq!(casts, 64);
    let reduce = all
        .iter()
        .filter(|k| k.name.starts_with("tf_reduce_"))
        .count();
    assert_eq!(reduce, 5 * 7 + 4);
    for op in RowOp::ALL {
        let prefix = format!("tf_{}_", op.name());
        let n = all.iter().filter(|k| k.name.starts_with(&prefix)).count();
        assert_eq!(n, 4, "{}: one kernel per float dtype", op.name());
    }
    for op in NormOp::ALL {
        let prefix = format!("tf_{}_", op.name());
        let n = all.iter().filter(|k| k.name.starts_with(&prefix)).count();
        assert_eq!(n, 4, "{}: one module per float dtype", op.name());
    }
    let cat = all
        .iter()
        .filter(|k| k.name.starts_with("tf_cat_rows_"))
        .count();
    assert_eq!(cat, builtin::CAT_UNITS.len());
    let gather = all
        .iter()
        .filter(|k| k.name.starts_with("tf_gather_"))
        .count();
    assert_eq!(gather, 2 * builtin::GATHER_UNITS.len());
    let scatter = all
        .iter()
        .filter(|k| k.name.starts_with("tf_scatter_add_"))
        .count();
    assert_eq!(scatter, 2 * 4, "one per float dtype and index dtype");
    // AdamW: 4 variants for f16 and bf16, 2 (no master weights) for f32
    // and f64; SGD: 2 per float dtype.
    let optim = all
        .iter()
        .filter(|k| k.name.starts_with("tf_adamw") || k.name.starts_with("tf_sgd"))
        .count();
    assert_eq!(optim, 4 + 4 + 2 + 2 + 2 * 4);
    let square_sum = all
        .iter()
        .filter(|k| k.name.starts_with("tf_grad_square_sum_"))
        .count();
    assert_eq!(square_sum, 4, "one per float dtype");
}

/// An index outside the table is never an address: the gather entries
/// compare it (signed, so negatives too) before the only source load.
#[test]
fn gather_checks_the_index_before_reading() {
    for index in [DTypeKind::I64, DTypeKind::I32] {
        for unit in builtin::GATHER_UNITS {
            let k = builtin::gather(unit, index).unwrap();
            let body = &entries(&k.ptx)[0].body;
            let check = body.find("setp.lt.s64").expect("sign check");
            let skip = body
                .find("gather_in_range")
                .expect("the branch past the error path");
            let src_loads: Vec<usize> = body
                .match_indices("ld.global.nc.")
                .map(|(i, _)| i)
                .collect();
            // The index load comes first, the element load after the check.
            assert_eq!(src_loads.len(), 2, "{}", k.name);
            assert!(
                src_loads[0] < check && check < skip && skip < src_loads[1],
                "{}",
                k.name
            );
        }
    }
}

/// An index outside the accumulator is never an address: the scatter-add
/// entries compare it (signed, so negatives too) before the source load
/// and the one atomic add.
#[test]
fn scatter_add_checks_the_index_before_adding() {
    for index in [DTypeKind::I64, DTypeKind::I32] {
        for dtype in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            let k = builtin::scatter_add(dtype, index).unwrap();
            let body = &entries(&k.ptx)[0].body;
            let check = body.find("setp.lt.s64").expect("sign check");
            let skip = body
                .find("scatter_in_range")
                .expect("the branch past the error path");
            let loads: Vec<usize> = body
                .match_indices("ld.global.nc.")
                .map(|(i, _)| i)
                .collect();
            assert_eq!(loads.len(), 2, "{}", k.name);
            let add = body.find("red.global.add.").expect("the atomic add");
            assert_eq!(body.matches("red.global.add.").count(), 1, "{}", k.name);
            assert!(
                loads[0] < check && check < skip && skip < loads[1] && loads[1] < add,
                "{}",
                k.name
            );
        }
    }
}

/// A normalisation module: its five entries with the norm ABI, each
/// reading through the read-only path, the block entries through shared
/// memory and barriers, the vector entries 16 bytes at a time.
fn check_norm(k: &Kernel) {
    let es = entries(&k.ptx);
    assert_eq!(es.len(), NormEntry::ALL.len(), "{}", k.name);
    for (e, entry) in es.iter().zip(NormEntry::ALL) {
        assert_eq!(e.name, format!("{}{}", k.name, entry.suffix()));
        // The row kernel's parameters: `x`, `weight` (and `bias`) as
        // rows, `eps` as the one scalar.
        let rows = if k.name.contains("layer_norm") { 3 } else { 2 };
        let mut want = vec![".param .u64 p_out".to_string()];
        want.extend((0..rows).map(|i| format!(".param .u64 p_in{i}")));
        want.extend((0..rows).map(|i| format!(".param .u64 p_step{i}")));
        want.extend(
            [
                ".param .u64 p_rows",
                ".param .u64 p_cols",
                ".param .f64 p_s0",
            ]
            .map(String::from),
        );
        assert_eq!(e.params, want, "{}", e.name);
        check_body(e);
        assert!(e.body.contains("shfl.sync.bfly.b32"), "{}", e.name);
        assert!(e.body.contains("ld.global.nc"), "{}", e.name);
        let block = !matches!(entry, NormEntry::Warp { .. });
        assert_eq!(e.body.contains("bar.sync 0"), block, "{}", e.name);
        let vector = matches!(
            entry,
            NormEntry::Warp { vector: true } | NormEntry::Block { vector: true }
        );
        assert_eq!(e.body.contains("ld.global.nc.v4.u32"), vector, "{}", e.name);
        assert_eq!(e.body.contains("st.global.v4.u32"), vector, "{}", e.name);
    }
    check_exact(&k.name, &k.ptx);
}

/// A normalisation's backward: the `dx` entry (block reductions through
/// shared memory, read-only loads, partial sums written without atomics)
/// and the `sum` entry adding them.
fn check_norm_backward(k: &Kernel) {
    let es = entries(&k.ptx);
    assert_eq!(es.len(), 3, "{}", k.name);
    assert_eq!(es[0].name, format!("{}_dx", k.name));
    // The warp entry: the same parameters, 16-byte loads of the row,
    // reductions within the warp, one barrier per statistic's column sums.
    assert_eq!(es[2].name, format!("{}_dx_warp", k.name));
    assert_eq!(es[2].params, es[0].params);
    assert!(es[2].body.contains("ld.global.nc.v4.u32"), "{}", k.name);
    assert!(es[2].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
    let barriers = es[2].body.matches("bar.sync 0").count();
    let bias = k.name.contains("layer_norm");
    assert_eq!(barriers, 1 + 2 * usize::from(bias), "{}", k.name);
    assert_eq!(
        es[0].params,
        [
            ".param .u64 p_out",
            ".param .u64 p_in",
            ".param .u64 p_w",
            ".param .u64 p_g",
            ".param .u64 p_rows",
            ".param .u64 p_cols",
            ".param .f64 p_eps",
            ".param .u64 p_part"
        ]
    );
    assert!(es[0].body.contains("shfl.sync.bfly.b32"), "{}", k.name);
    assert!(es[0].body.contains("bar.sync 0"), "{}", k.name);
    assert!(es[0].body.contains("ld.global.nc"), "{}", k.name);
    assert_eq!(es[1].name, format!("{}_sum", k.name));
    // The column sums: blocks of 32 columns, every warp a share of the
    // partial sums, merged through shared memory.
    assert!(es[1].body.contains("bar.sync 0"), "{}", k.name);
    assert!(k.ptx.contains(")\n.maxntid 1024, 1, 1\n{"), "{}", k.name);
    assert_eq!(
        es[1].params,
        [
            ".param .u64 p_dw",
            ".param .u64 p_db",
            ".param .u64 p_part",
            ".param .u64 p_blocks",
            ".param .u64 p_cols"
        ]
    );
    for e in &es {
        check_body(e);
        assert!(!e.body.contains("atom."), "{}: atomics", e.name);
    }
    check_exact(&k.name, &k.ptx);
}

/// A row of a normalisation is read from global memory once by the
/// entries that keep it in registers: one load per access of the row,
/// and as many of weight (and bias).
#[test]
fn norm_register_entries_read_each_row_once() {
    for op in NormOp::ALL {
        for dtype in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            let k = builtin::norm(op, dtype);
            for e in entries(&k.ptx) {
                if e.name.ends_with("_long") {
                    continue;
                }
                let vector = e.name.ends_with("_v");
                let per = if vector {
                    crate::norm::vector(dtype)
                } else {
                    1
                };
                let accesses = crate::norm::slots(dtype) / per;
                let loads = e.body.matches("ld.global.nc").count();
                let tensors = if op.has_bias() { 3 } else { 2 };
                assert_eq!(loads, tensors * accesses, "{}", e.name);
            }
        }
    }
}

/// f32 and f64 rows of the register path (16-bit ones: below) are
/// read and written directly, one access per slot.
#[test]
fn softmax_reads_short_rows_once() {
    let slots = builtin::SOFTMAX_REGISTER_COLS / builtin::BLOCK as usize;
    for dt in [DTypeKind::F32, DTypeKind::F64] {
        let k = builtin::row(RowOp::Softmax, dt);
        let e = &entries(&k.ptx)[0];
        let at = |what: &str| e.body.find(what).unwrap_or_else(|| panic!("{what}"));
        // The length test comes before both paths.
        let test = at("setp.gt.u64 %p");
        assert!(e.body[test..].contains(&format!(", {}", builtin::SOFTMAX_REGISTER_COLS)));
        // The register path: one load and one store per slot, with the
        // slot's offset, between the test and the three-pass path.
        let long = at("$L_long_row");
        let size = dt.size_bytes();
        let last = (slots - 1) * builtin::BLOCK as usize * size;
        let short = &e.body[test..e.body[long + 1..].find("$L_long_row").unwrap() + long];
        assert_eq!(short.matches("ld.global.nc.").count(), slots, "{dt}");
        assert_eq!(short.matches("st.global.").count(), slots, "{dt}");
        assert!(short.contains(&format!("+{last}]")), "{dt}");
        assert!(!k.ptx.contains("stage"), "{dt}: no staging buffer");
    }
}

/// The register path computes each slot's exponential once (in the sum;
/// softmax divides the kept value), the three-pass path twice: once in
/// the sum, once for the output (log-softmax: only in the sum).
#[test]
fn softmax_register_path_computes_each_exponential_once() {
    let slots = builtin::SOFTMAX_REGISTER_COLS / builtin::BLOCK as usize;
    for dt in [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ] {
        for op in [RowOp::Softmax, RowOp::LogSoftmax] {
            let k = builtin::row(op, dt);
            let e = &entries(&k.ptx)[0];
            let long = e.body.find("$L_long_row").unwrap();
            let short_end = e.body[long + 1..].find("$L_long_row").unwrap() + long;
            // `exp` rounds its scaled argument to an integer once.
            let exps = |text: &str| text.matches("cvt.rni.").count();
            assert_eq!(exps(&e.body[long..short_end]), slots, "{}", k.name);
            let passes = if op == RowOp::LogSoftmax { 1 } else { 2 };
            assert_eq!(exps(&e.body[short_end..]), passes, "{}", k.name);
        }
    }
}

/// The 16-bit softmax entries promise ptxas their block size and ask for
/// four blocks per SM (at most 64 registers); the others leave ptxas free.
#[test]
fn softmax_16_bit_entries_declare_launch_bounds() {
    for dt in [
        DTypeKind::F16,
        DTypeKind::BF16,
        DTypeKind::F32,
        DTypeKind::F64,
    ] {
        for op in [RowOp::Softmax, RowOp::LogSoftmax] {
            let k = builtin::row(op, dt);
            let bounds = format!(")\n.maxntid {}, 1, 1\n.minnctapersm 4\n{{", builtin::BLOCK);
            let half = matches!(dt, DTypeKind::F16 | DTypeKind::BF16);
            assert_eq!(k.ptx.contains(&bounds), half, "{}", k.name);
            assert_eq!(k.ptx.contains(".maxntid"), half, "{}", k.name);
        }
    }
}

/// 16-bit rows of the register path move through shared memory: per
/// thread two 16-byte loads and stores of global memory and one 2-byte
/// access for each end of the row, one shared read and write per slot;
/// the three-pass path is unchanged.
#[test]
fn softmax_stages_short_16_bit_rows_in_shared_memory() {
    let slots = builtin::SOFTMAX_REGISTER_COLS / builtin::BLOCK as usize;
    let chunks = 2 * builtin::SOFTMAX_REGISTER_COLS / (16 * builtin::BLOCK as usize);
    for dt in [DTypeKind::F16, DTypeKind::BF16] {
        for op in [RowOp::Softmax, RowOp::LogSoftmax] {
            let k = builtin::row(op, dt);
            assert!(k.ptx.contains(&format!(
                ".shared .align 16 .b8 stage[{}];",
                2 * builtin::SOFTMAX_REGISTER_COLS + 16
            )));
            let e = &entries(&k.ptx)[0];
            let long = e.body.find("$L_long_row").unwrap();
            let short_end = e.body[long + 1..].find("$L_long_row").unwrap() + long;
            let short = &e.body[long..short_end];
            let bits = if dt == DTypeKind::F16 { "b16" } else { "u16" };
            let count = |what: &str| short.matches(what).count();
            assert_eq!(count("ld.global.nc.v4.u32 "), chunks, "{}", k.name);
            assert_eq!(count("st.global.v4.u32 "), chunks, "{}", k.name);
            assert_eq!(count("ld.global.nc.u16 "), 2, "{}", k.name);
            assert_eq!(count("st.global.u16 "), 2, "{}", k.name);
            assert_eq!(count("ld.global"), chunks + 2, "{}", k.name);
            assert_eq!(count("st.global"), chunks + 2, "{}", k.name);
            assert_eq!(count("st.shared.v4.u32 "), chunks, "{}", k.name);
            assert_eq!(count("ld.shared.v4.u32 "), chunks, "{}", k.name);
            let slot_reads = format!("ld.shared.{bits} ");
            let slot_writes = format!("st.shared.{bits} ");
            // Slots, plus the ends of the row in the copies (bf16 slots
            // and copies both move u16).
            let ends = if bits == "u16" { 2 } else { 0 };
            assert_eq!(count(&slot_reads), slots + ends, "{}", k.name);
            assert_eq!(count(&slot_writes), slots + ends, "{}", k.name);
            // A barrier after the copy in, one before the copy out.
            let copy_in = short.find("st.shared.v4.u32").unwrap();
            let first_read = short.find(&slot_reads[..]).unwrap();
            assert!(short[copy_in..first_read].contains("bar.sync 0"));
            let last_write = short.rfind(&slot_writes[..]).unwrap();
            let copy_out = short.find("ld.shared.v4.u32").unwrap();
            assert!(last_write < copy_out);
            assert!(short[last_write..copy_out].contains("bar.sync 0"));
            // The three-pass path still loads and stores element by element.
            let rest = &e.body[short_end..];
            assert!(
                !rest.contains("stage") && !rest.contains(".v4."),
                "{}",
                k.name
            );
        }
    }
}

#[test]
fn cat_rows_moves_whole_units() {
    for unit in builtin::CAT_UNITS {
        let k = builtin::cat_rows(unit).unwrap();
        let e = &entries(&k.ptx)[0];
        let ty = match unit {
            1 => "u8",
            2 => "u16",
            4 => "u32",
            8 => "u64",
            _ => "v4.u32",
        };
        assert_eq!(e.body.matches(&format!("ld.global.nc.{ty} ")).count(), 1);
        assert_eq!(e.body.matches(&format!("st.global.{ty} ")).count(), 1);
        // Each input is picked by ctaid.y and read from its own parameters.
        assert!(e.body.contains("%ctaid.y"));
        for p in 0..builtin::CAT_PARTS {
            assert!(e.body.contains(&format!("[p_src{p}]")));
        }
    }
    assert!(builtin::cat_rows(0).is_err());
    assert!(builtin::cat_rows(32).is_err());
}

#[test]
fn contiguous_entry_vectorises_16_bytes() {
    let k = builtin::binary(BinaryOp::Add, DTypeKind::F32);
    let contig = &entries(&k.ptx)[0];
    assert!(contig.body.contains("ld.global.nc.v4.u32"));
    assert!(contig.body.contains("st.global.v4.u32"));
    assert!(contig.body.contains("and.b64"), "alignment test");
    // f64: two per access; u8: sixteen
    let d = builtin::unary(UnaryOp::Neg, DTypeKind::F64);
    assert!(entries(&d.ptx)[0].body.contains("ld.global.nc.v4.u32"));
    let b = builtin::unary(UnaryOp::Neg, DTypeKind::U8);
    assert_eq!(entries(&b.ptx)[0].body.matches("bfe.u32").count(), 16);
    // mixed sizes: the widest input sets 16 bytes, narrower ones less
    let c = builtin::cast(DTypeKind::F32, DTypeKind::F16);
    let body = &entries(&c.ptx)[0].body;
    assert!(body.contains("ld.global.nc.v4.u32"));
    assert!(body.contains("st.global.v2.u32"));
}

#[test]
fn cols_entry_vectorises_and_divides_once_per_thread_and_loop() {
    let k = builtin::binary(BinaryOp::Add, DTypeKind::BF16);
    let contig = &entries(&k.ptx)[0].body;
    let cols = &entries(&k.ptx)[2].body;
    // The same 16-byte accesses as the contiguous entry.
    assert!(cols.contains("ld.global.nc.v4.u32") && cols.contains("st.global.v4.u32"));
    // The column of the first step of each loop, and its step: four
    // remainders, none inside a loop; no other division.
    assert_eq!(cols.matches("rem.u64").count(), 4);
    assert!(!cols.contains("div."));
    let (_, vector) = cols.split_once("\n$L_vec_loop").expect("a vector loop");
    let (vector, rest) = vector.split_once("\n$L_vec_end").expect("its end");
    let (_, tail) = rest.split_once("\n$L_tail_loop").expect("a scalar loop");
    for lp in [vector, tail] {
        assert!(!lp.contains("rem."));
        // Each input picks its offset: its index or its column.
        assert_eq!(lp.matches("selp.b64").count(), 2);
    }
    // A vector needs the row length to be a multiple of its 8 elements.
    assert!(cols.contains(", 7;"));
    // Beyond the column bookkeeping, it is the contiguous entry.
    assert_eq!(
        cols.matches("add.rn.f32").count(),
        contig.matches("add.rn.f32").count()
    );
}

#[test]
fn strided_entry_reads_every_meta_word_it_needs() {
    let k = builtin::binary(BinaryOp::Mul, DTypeKind::I64);
    let strided = &entries(&k.ptx)[1];
    // dims, out strides and both inputs' strides: 6 * 4 words
    for w in 0..24 {
        assert!(
            strided.body.contains(&format!("[p_meta+{}]", 8 * w)),
            "meta word {w}"
        );
    }
    assert!(!strided.body.contains("[p_meta+192]"));
}

#[test]
fn strided_entry_walks_in_32_bits_where_every_offset_fits() {
    let k = builtin::binary(BinaryOp::Mul, DTypeKind::F32);
    let strided = &entries(&k.ptx)[1].body;
    // The choice: n and each operand's largest offset against 2^32 - 1.
    assert_eq!(strided.matches("4294967295").count(), 1 + 3, "{strided}");
    let (_, walks) = strided.split_once("\n$L_loop32").expect("a 32-bit walk");
    let (narrow, wide) = walks.split_once("\n$L_wide").expect("a 64-bit walk");
    // The 32-bit walk divides and multiplies in 32 bits and widens only
    // the final addresses (two inputs and the output).
    assert!(narrow.contains("div.u32") && !narrow.contains("div.u64"));
    assert!(!narrow.contains("mad.lo.u64"));
    assert_eq!(narrow.matches("mad.wide.u32").count(), 3);
    // The 64-bit walk keeps the 64-bit division for indices past 2^32.
    assert!(wide.contains("div.u64") && wide.contains("mad.lo.u64"));
    assert_eq!(narrow.matches("mul.rn.f32").count(), 1);
    assert_eq!(wide.matches("mul.rn.f32").count(), 1);
}

#[test]
fn fused_kernels_share_the_abi() {
    let mut k = ElementwiseBuilder::new();
    let a = k.input(DTypeKind::Bool);
    let b = k.input(DTypeKind::BF16);
    let c = k.input(DTypeKind::I64);
    let cf = k.cast(c, DTypeKind::BF16);
    let lt = k.compare(CmpOp::Lt, b, cf);
    let both = k.compare(CmpOp::Eq, lt, a);
    let s = k.unary(UnaryOp::Sin, b);
    let z = k.constant(0.0, DTypeKind::BF16);
    let y = k.select(both, s, z);
    let kernel = k.output(y).unwrap();
    let text = super::elementwise(&kernel, "tf_test_fused").unwrap();
    let fk = Kernel {
        name: "tf_test_fused".into(),
        ptx: text,
    };
    check_elementwise(&fk, 3);
    // sin's exact reduction for huge arguments sits under a branch
    assert!(fk.ptx.contains("$L_common_"));
    // f16 arguments never need it
    let mut k = ElementwiseBuilder::new();
    let h = k.input(DTypeKind::F16);
    let s = k.unary(UnaryOp::Sin, h);
    let text = super::elementwise(&k.output(s).unwrap(), "tf_test_sin_f16").unwrap();
    assert!(!text.contains("$L_common_"));
}

#[test]
fn unused_inputs_are_not_loaded() {
    let mut k = ElementwiseBuilder::new();
    let _a = k.input(DTypeKind::F64);
    let b = k.input(DTypeKind::F32);
    let kernel = k.output(b).unwrap();
    let text = super::elementwise(&kernel, "only_b").unwrap();
    assert!(!text.contains("[p_in0]"));
    assert!(text.contains("[p_in1]"));
    assert!(!text.contains("ld.global.nc.f64"));
}

#[test]
fn reductions_use_the_row_abi() {
    let k = builtin::reduce(ReduceOp::ArgMin, DTypeKind::F64);
    let e = &entries(&k.ptx)[0];
    // 64-bit values and indices cross lanes as two 32-bit shuffles each
    assert_eq!(e.body.matches("shfl.sync.bfly.b32").count(), 2 * 2 * 2 * 5);
    assert!(e.body.contains("%nctaid.x"), "grid-stride over rows");
    let s = builtin::row(RowOp::LogSoftmax, DTypeKind::BF16);
    assert!(s.ptx.contains(".entry tf_log_softmax_bf16("));
}

/// A pair of bf16 results is packed into one word with one byte permute:
/// the top halves of the two f32 registers, the first element low.
#[test]
fn bf16_pairs_are_packed_with_one_permute() {
    let k = builtin::all()
        .into_iter()
        .find(|k| k.name == "tf_binary_add_bf16")
        .expect("bf16 add");
    let contig = &entries(&k.ptx)[0];
    assert_eq!(
        contig.body.matches("prmt.b32").count(),
        4,
        "8 results, 4 words"
    );
    assert!(contig.body.contains(", 0x7632;"));
}

/// The marker of the integer bf16 rounding (its bias, half a bf16 ulp).
const INTEGER_BF16_ROUNDING: &str = "0x00007FFF";

/// Every elementwise built-in for sm_80 is well formed; it differs from
/// its sm_70 text exactly when it rounds to bf16, and then it rounds with
/// `cvt.rn.bf16x2.f32` (or computes in bf16 with `fma.rn.bf16`) instead
/// of integers.
#[test]
fn sm80_builtins_round_to_bf16_natively_and_change_nothing_else() {
    let t = Target::Sm80;
    let mut native = 0;
    for dtype in DTypeKind::ALL {
        let mut pairs = Vec::new();
        for op in UnaryOp::ALL {
            if let (Ok(a), Ok(b)) = (
                builtin::try_unary(op, dtype),
                builtin::try_unary_for(op, dtype, t),
            ) {
                pairs.push((a, b, 1));
            }
        }
        for op in BinaryOp::ALL {
            if let (Ok(a), Ok(b)) = (
                builtin::try_binary(op, dtype),
                builtin::try_binary_for(op, dtype, t),
            ) {
                pairs.push((a, b, 2));
            }
        }
        for to in DTypeKind::ALL {
            pairs.push((builtin::cast(dtype, to), builtin::cast_for(dtype, to, t), 1));
        }
        for (sm70, sm80, inputs) in pairs {
            check_elementwise_for(&sm80, inputs, t);
            assert!(!sm70.ptx.contains("bf16x2"), "{}", sm70.name);
            let rounds = sm70.ptx.contains(INTEGER_BF16_ROUNDING);
            assert_eq!(
                sm80.ptx.contains("cvt.rn.bf16x2.f32") || sm80.ptx.contains("fma.rn.bf16"),
                rounds,
                "{}",
                sm80.name
            );
            assert!(!sm80.ptx.contains(INTEGER_BF16_ROUNDING), "{}", sm80.name);
            if rounds {
                native += 1;
            } else {
                let body = |p: &str, h: &str| p.strip_prefix(h).unwrap().to_string();
                assert_eq!(
                    body(&sm70.ptx, Target::Sm70.header()),
                    body(&sm80.ptx, t.header()),
                    "{}",
                    sm80.name
                );
            }
        }
    }
    // bf16 unary and binary ops but the exact ones (neg, abs, relu, max,
    // min, ...); casts to bf16 from f32, f64, f16, i32, i64, u8 (not bool:
    // exact)
    let unary = UnaryOp::ALL.iter().filter(|op| !op.is_exact()).count();
    let binary = BinaryOp::ALL.iter().filter(|op| !op.is_exact()).count();
    assert_eq!(native, unary + binary + 6);
}

/// A bf16 chain: the sm_80 text rounds `sin` with `cvt.rn.bf16x2.f32` and
/// computes `* 2` and `+ 5` with `fma.rn.bf16`, the sm_70 text rounds all
/// three with the integer sequence and has no bf16 instruction.
#[test]
fn bf16_chain_uses_cvt_on_sm80_only() {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(DTypeKind::BF16);
    let s = k.unary(UnaryOp::Sin, x);
    let two = k.constant(2.0, DTypeKind::BF16);
    let m = k.binary(BinaryOp::Mul, s, two);
    let five = k.constant(5.0, DTypeKind::BF16);
    let y = k.binary(BinaryOp::Add, m, five);
    let kernel = k.output(y).unwrap();
    assert!(super::differs_on(&kernel, Target::Sm80));
    assert!(!super::differs_on(&kernel, Target::Sm70));
    let sm70 = super::elementwise(&kernel, "chain").unwrap();
    let sm80 = super::elementwise_for(&kernel, "chain", Target::Sm80).unwrap();
    assert!(sm70.starts_with(".version 7.0\n.target sm_70\n"));
    assert!(sm80.starts_with(".version 7.0\n.target sm_80\n"));
    assert!(!sm70.contains("cvt.rn.bf16"));
    assert!(!sm80.contains(INTEGER_BF16_ROUNDING));
    // three ops in each of the contig and cols entries' vector lanes and
    // scalar tails, and the strided entry's two walks (32-bit and 64-bit
    // offsets)
    let lanes = builtin_bf16_lanes();
    let cvts = sm80.matches("cvt.rn.bf16x2.f32").count();
    let fmas = sm80.matches("fma.rn.bf16").count();
    assert_eq!(cvts, 2 * (lanes + 1) + 2, "{sm80}");
    assert_eq!(fmas, 2 * (2 * (lanes + 1) + 2), "{sm80}");
    assert_eq!(
        sm70.matches(INTEGER_BF16_ROUNDING).count(),
        cvts + fmas,
        "one integer rounding per cvt or fma"
    );
}

/// Elements per thread of the contig entry's vector loop for bf16 alone.
fn builtin_bf16_lanes() -> usize {
    16 / DTypeKind::BF16.size_bytes()
}

/// f32 and f64 kernels never differ between targets.
#[test]
fn kernels_without_bf16_rounding_have_one_text() {
    for dtype in [DTypeKind::F32, DTypeKind::F64, DTypeKind::F16] {
        let mut k = ElementwiseBuilder::new();
        let x = k.input(dtype);
        let g = k.unary(UnaryOp::Gelu, x);
        let kernel = k.output(g).unwrap();
        assert!(!super::differs_on(&kernel, Target::Sm80), "{dtype}");
    }
    // reading bf16 is exact: a bf16 -> f32 kernel needs no second text
    let mut k = ElementwiseBuilder::new();
    let x = k.input(DTypeKind::BF16);
    let y = k.cast(x, DTypeKind::F32);
    let e = k.unary(UnaryOp::Exp, y);
    assert!(!super::differs_on(&k.output(e).unwrap(), Target::Sm80));
}

/// Row kernels written in `tensor_fn!`: an entry per row strategy of
/// the built-in norms, each with an input and a row step per row
/// parameter, then rows, cols and an `f64` per scalar; a reduction per
/// statistic (a butterfly, and shared memory in a block), exact
/// arithmetic only; the register entries read each row once, with
/// 16-byte accesses in the `_v` ones.
#[test]
fn row_kernels_are_well_formed() {
    use crate::norm::NormEntry;
    use crate::rowkernel::norm_program;
    for dtype in [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ] {
        for op in [NormOp::LayerNorm, NormOp::RmsNorm] {
            let prog = norm_program(op, dtype);
            let name = format!("tf_rows_{}_{dtype}", op.name());
            let ptx = super::row_kernel(&prog, &name).unwrap();
            check_exact(&name, &ptx);
            let es = entries(&ptx);
            assert_eq!(es.len(), NormEntry::ALL.len(), "{name}");
            let rows = if op.has_bias() { 3 } else { 2 };
            let mut want = vec![".param .u64 p_out".to_string()];
            want.extend((0..rows).map(|k| format!(".param .u64 p_in{k}")));
            want.extend((0..rows).map(|k| format!(".param .u64 p_step{k}")));
            want.push(".param .u64 p_rows".into());
            want.push(".param .u64 p_cols".into());
            want.push(".param .f64 p_s0".into());
            let stats = if op.has_bias() { 2 } else { 1 };
            for (e, entry) in es.iter().zip(NormEntry::ALL) {
                let what = format!("{name}{}", entry.suffix());
                assert_eq!(e.name, what);
                assert_eq!(e.params, want, "{what}");
                check_body(e);
                assert_eq!(
                    e.body.matches("shfl.sync.bfly.b32").count(),
                    stats * if dtype == DTypeKind::F64 { 10 } else { 5 },
                    "{what}: a butterfly per statistic"
                );
                let block = !matches!(entry, NormEntry::Warp { .. });
                assert_eq!(
                    e.body.matches("bar.sync 0").count(),
                    if block { stats + 1 } else { 0 },
                    "{what}"
                );
                let loads = e.body.matches("ld.global.nc").count();
                let vector = e.body.matches("ld.global.nc.v4.u32").count();
                match entry {
                    NormEntry::Long => assert_eq!(vector, 0, "{what}"),
                    // `x` once, `weight` (and `bias`) once, 16 bytes at a time.
                    NormEntry::Warp { vector: true } | NormEntry::Block { vector: true } => {
                        let per_row = crate::norm::slots(dtype) / crate::norm::vector(dtype);
                        assert_eq!(vector, per_row * rows, "{what}");
                        assert_eq!(loads, vector, "{what}");
                    }
                    _ => assert_eq!(loads, crate::norm::slots(dtype) * rows, "{what}"),
                }
            }
        }
    }
}

/// A row program's work that reads no row parameter (a norm's
/// `1 / sqrt(var + eps)`) runs once per row, not once per element: one
/// `sqrt.rn` in every entry, and the divisions only that one and the
/// means.
#[test]
fn row_kernels_compute_per_row_values_once() {
    for op in NormOp::ALL {
        for dtype in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            let k = builtin::norm(op, dtype);
            for e in entries(&k.ptx) {
                assert_eq!(e.body.matches("sqrt.rn").count(), 1, "{}", e.name);
                let means = if op.has_bias() { 2 } else { 1 };
                assert_eq!(e.body.matches("div.rn").count(), means + 1, "{}", e.name);
            }
        }
    }
}
