//! The 16-bit softmax register path moves rows through shared memory
//! with 16-byte accesses. These tests run the emitted address arithmetic
//! and copies (straight-line integer PTX) for every thread of a block, for
//! rows of every alignment and many lengths, and check that each element
//! lands where the thread that reduces it reads it, and that the outputs
//! reach exactly the output row: no access outside the row or the buffer,
//! none misaligned, every byte moved once.

use crate::builtin;
use crate::ops::RowOp;
use crate::test_support::{sweep, Sweep};
use std::collections::HashMap;
use tensorfn_core::DTypeKind;

const BLOCK: u64 = builtin::BLOCK as u64;
const SLOTS: u64 = builtin::SOFTMAX_REGISTER_COLS as u64 / BLOCK;
/// Where the simulation places the shared arrays (16-byte aligned).
const SMEM_AT: u64 = 0x100;
const STAGE_AT: u64 = 0x1000;
/// Where the simulation places the input and output buffers.
const IN_AT: u64 = 0x10_0000;
const OUT_AT: u64 = 0x80_0000;

/// The lines of one entry body that the simulation runs, split into the
/// parts of the register path.
struct Parts {
    /// Parameters, thread and block indices: up to the row loop.
    prologue: Vec<String>,
    /// Row addresses, slot predicates, the input copy (to the barrier).
    copy_in: Vec<String>,
    /// Each thread's reads of its slots.
    read: Vec<String>,
    /// The output row's placement and this thread's first slot there.
    out_plan: Vec<String>,
    /// The slot stores into the buffer: (address register, offset).
    out_slots: Vec<(String, u64)>,
    /// The output copy, after the barrier.
    copy_out: Vec<String>,
}

fn parts(body: &str) -> Parts {
    let lines: Vec<String> = body
        .lines()
        .map(|l| l.trim().trim_end_matches(';').to_string())
        .filter(|l| !l.is_empty() && !l.starts_with(".reg") && !l.starts_with("//"))
        .filter(|l| !l.starts_with(".shared"))
        .collect();
    let find = |from: usize, what: &dyn Fn(&str) -> bool| -> usize {
        from + lines[from..]
            .iter()
            .position(|l| what(l))
            .expect("a line the simulation expects")
    };
    let loop_label = find(0, &|l| l.ends_with(':'));
    let prologue = lines[..loop_label].to_vec();
    let short = find(loop_label, &|l| l.contains("bra.uni $L_long_row")) + 1;
    let bar = find(short, &|l| l == "bar.sync 0");
    let copy_in = lines[short..bar].to_vec();
    let read_end = find(bar + 1, &|l| {
        !(l.starts_with("mad.lo.u32") || l.starts_with("ld.shared."))
    });
    let read = lines[bar + 1..read_end].to_vec();
    let first_store = find(read_end, &|l| l.contains("bra $L_stored"));
    let plan_start = (0..first_store)
        .rev()
        .find(|&i| lines[i].starts_with("mul.lo.u64"))
        .expect("the output row's address");
    let out_plan = lines[plan_start..first_store].to_vec();
    let stored = find(first_store, &|l| {
        l.starts_with("$L_stored") && l.ends_with(':')
    });
    let out_slots = lines[first_store..stored]
        .iter()
        .filter(|l| l.starts_with("st.shared."))
        .map(|l| {
            let (reg, off) = address(l);
            (reg.to_string(), off)
        })
        .collect();
    assert_eq!(
        lines[stored + 1],
        "bar.sync 0",
        "barrier before the copy out"
    );
    let end = find(stored, &|l| l.contains("bra.uni $L_row_done"));
    let copy_out = lines[stored + 2..end].to_vec();
    Parts {
        prologue,
        copy_in,
        read,
        out_plan,
        out_slots,
        copy_out,
    }
}

/// `[%r14+4096]` in `line`: the register and the offset.
fn address(line: &str) -> (&str, u64) {
    let open = line.find('[').expect("an address");
    let close = line.find(']').expect("an address");
    let inner = &line[open + 1..close];
    match inner.split_once('+') {
        Some((r, off)) => (r, off.parse().expect("offset")),
        None => (inner, 0),
    }
}

/// Memory one simulated access touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    Global,
    Shared,
}

/// What the memory a thread runs against does.
trait Memory {
    fn load(&mut self, space: Space, addr: u64, bytes: u64) -> Vec<u8>;
    fn store(&mut self, space: Space, addr: u64, data: &[u8]);
}

/// One thread's registers.
struct Thread {
    regs: HashMap<String, u64>,
    tid: u64,
    ctaid: u64,
    params: HashMap<&'static str, u64>,
}

impl Thread {
    fn value(&self, operand: &str) -> u64 {
        match operand {
            "%tid.x" => self.tid,
            "%ctaid.x" => self.ctaid,
            "%nctaid.x" => 1,
            "stage" => STAGE_AT,
            "smem" => SMEM_AT,
            r if r.starts_with('%') => *self
                .regs
                .get(r)
                .unwrap_or_else(|| panic!("{r} read before it is written")),
            n => n.parse().unwrap_or_else(|_| panic!("operand {n}")),
        }
    }

    fn run(&mut self, lines: &[String], mem: &mut dyn Memory) {
        for line in lines {
            self.step(line, mem);
        }
    }

    fn step(&mut self, line: &str, mem: &mut dyn Memory) {
        let (guard, inst) = match line.strip_prefix('@') {
            Some(rest) => {
                let (p, inst) = rest.split_once(' ').expect("guarded instruction");
                (Some(p), inst.trim())
            }
            None => (None, line),
        };
        if let Some(p) = guard {
            let (neg, p) = match p.strip_prefix('!') {
                Some(p) => (true, p),
                None => (false, p),
            };
            if (self.value(p) != 0) == neg {
                return;
            }
        }
        let (op, rest) = inst.split_once(' ').unwrap_or((inst, ""));
        if op.starts_with("ld.") || op.starts_with("st.") {
            return self.access(op, rest, mem);
        }
        let args: Vec<&str> = rest.split(',').map(str::trim).collect();
        let v = |i: usize| self.value(args[i]);
        let m32 = |x: u64| x & 0xFFFF_FFFF;
        let result = match op {
            "ld.param.u64" => unreachable!(),
            "cvta.to.global.u64" | "mov.u64" | "mov.u32" => v(1),
            "cvt.u64.u32" | "cvt.u32.u64" => m32(v(1)),
            "and.b32" => m32(v(1) & v(2)),
            "and.b64" => v(1) & v(2),
            "shr.u32" => m32(v(1)) >> v(2),
            "shl.b32" => m32(v(1) << v(2)),
            "add.u32" => m32(v(1) + v(2)),
            "sub.u32" => m32(v(1).wrapping_sub(v(2))),
            "min.u32" => m32(v(1)).min(m32(v(2))),
            "mad.lo.u32" => m32(v(1) * v(2) + v(3)),
            "mad.wide.u32" => m32(v(1)) * m32(v(2)) + v(3),
            "add.u64" => v(1) + v(2),
            "mul.lo.u64" => v(1) * v(2),
            "mad.lo.u64" => v(1) * v(2) + v(3),
            "setp.eq.u32" => (m32(v(1)) == m32(v(2))) as u64,
            "setp.lt.u32" => (m32(v(1)) < m32(v(2))) as u64,
            "setp.lt.u64" => (v(1) < v(2)) as u64,
            "setp.ge.u64" => (v(1) >= v(2)) as u64,
            "setp.gt.u64" => (v(1) > v(2)) as u64,
            _ => panic!("the simulation does not model `{line}`"),
        };
        self.regs.insert(args[0].to_string(), result);
    }

    fn access(&mut self, op: &str, rest: &str, mem: &mut dyn Memory) {
        if op == "ld.param.u64" {
            let name = rest.split('[').nth(1).unwrap().trim_end_matches(']');
            let reg = rest.split(',').next().unwrap().trim();
            let value = self.params[name];
            self.regs.insert(reg.to_string(), value);
            return;
        }
        let space = if op.contains(".global") {
            Space::Global
        } else {
            assert!(op.contains(".shared"), "{op}");
            Space::Shared
        };
        let (base, off) = address(rest);
        let addr = self.value(base) + off;
        let vector = op.ends_with(".v4.u32");
        assert!(
            vector || op.ends_with(".u16") || op.ends_with(".b16"),
            "access {op}"
        );
        let bytes = if vector { 16 } else { 2 };
        assert_eq!(addr % bytes, 0, "{op} at {addr:#x} is misaligned");
        let regs: Vec<String> = if op.starts_with("ld.") {
            let dst = rest.split('[').next().unwrap();
            dst.trim()
                .trim_end_matches(',')
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(|r| r.trim().to_string())
                .collect()
        } else {
            let src = rest.split(']').nth(1).unwrap();
            src.trim()
                .trim_start_matches(',')
                .trim()
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(|r| r.trim().to_string())
                .collect()
        };
        let words = (bytes as usize / 4).max(1);
        assert_eq!(regs.len(), words, "{op} {rest}");
        if op.starts_with("ld.") {
            let data = mem.load(space, addr, bytes);
            for (i, r) in regs.iter().enumerate() {
                let mut w = [0u8; 4];
                let chunk = &data[4 * i..(4 * i + 4).min(data.len())];
                w[..chunk.len()].copy_from_slice(chunk);
                self.regs.insert(r.clone(), u32::from_le_bytes(w) as u64);
            }
        } else {
            let mut data = Vec::new();
            for r in &regs {
                data.extend_from_slice(&(self.value(r) as u32).to_le_bytes());
            }
            data.truncate(bytes as usize);
            mem.store(space, addr, &data);
        }
    }
}

/// Global and shared memory of one block working on one row.
struct Block {
    /// The input row: global address and elements.
    input: (u64, Vec<u16>),
    /// The output row's global address and bytes written there (each
    /// exactly once).
    output: (u64, Vec<Option<u8>>),
    /// The staging buffer (`None`: never written), and the `smem` words.
    stage: Vec<Option<u8>>,
    stage_bytes: u64,
}

impl Memory for Block {
    fn load(&mut self, space: Space, addr: u64, bytes: u64) -> Vec<u8> {
        match space {
            Space::Global => {
                let (base, ref row) = self.input;
                assert!(
                    addr >= base && addr + bytes <= base + 2 * row.len() as u64,
                    "load of {bytes} bytes at {addr:#x} outside the input row at {base:#x}"
                );
                (addr..addr + bytes)
                    .map(|a| {
                        let e = row[((a - base) / 2) as usize].to_le_bytes();
                        e[((a - base) % 2) as usize]
                    })
                    .collect()
            }
            Space::Shared => {
                assert!(
                    addr >= STAGE_AT && addr + bytes <= STAGE_AT + self.stage_bytes,
                    "shared load at {addr:#x} outside the buffer"
                );
                (addr..addr + bytes)
                    .map(|a| self.stage[(a - STAGE_AT) as usize].unwrap_or(0xEE))
                    .collect()
            }
        }
    }

    fn store(&mut self, space: Space, addr: u64, data: &[u8]) {
        let n = data.len() as u64;
        match space {
            Space::Global => {
                let (base, ref mut row) = self.output;
                assert!(
                    addr >= base && addr + n <= base + row.len() as u64,
                    "store of {n} bytes at {addr:#x} outside the output row at {base:#x}"
                );
                for (i, &b) in data.iter().enumerate() {
                    let slot = &mut row[(addr - base) as usize + i];
                    assert!(slot.is_none(), "output byte {addr:#x}+{i} written twice");
                    *slot = Some(b);
                }
            }
            Space::Shared => {
                assert!(
                    addr >= STAGE_AT && addr + n <= STAGE_AT + self.stage_bytes,
                    "shared store at {addr:#x} outside the buffer"
                );
                for (i, &b) in data.iter().enumerate() {
                    self.stage[(addr - STAGE_AT) as usize + i] = Some(b);
                }
            }
        }
    }
}

/// The staging buffer's size, from its declaration.
fn stage_bytes(ptx: &str) -> u64 {
    let decl = ptx
        .lines()
        .find(|l| l.contains(".shared") && l.contains(" stage["))
        .expect("the staging buffer");
    let n = decl.split('[').nth(1).unwrap().trim_end_matches("];");
    n.parse().unwrap()
}

/// Runs the register path of `dtype`'s softmax entry for row `row` of
/// `cols` elements, the input buffer starting `in_shift` elements and
/// the output `out_shift` elements past a 16-byte boundary.
fn simulate(dtype: DTypeKind, op: RowOp, cols: u64, row: u64, in_shift: u64, out_shift: u64) {
    simulate_with(dtype, op, cols, row, in_shift, out_shift, &|_| {});
}

/// [`simulate`] with the lines changed by `edit` first.
fn simulate_with(
    dtype: DTypeKind,
    op: RowOp,
    cols: u64,
    row: u64,
    in_shift: u64,
    out_shift: u64,
    edit: &dyn Fn(&mut Parts),
) {
    let k = builtin::row(op, dtype);
    let body = &super::tests::entries(&k.ptx)[0].body;
    let mut p = parts(body);
    edit(&mut p);
    let what = format!(
        "{} cols={cols} row={row} shifts={in_shift},{out_shift}",
        k.name
    );
    let in_buf = IN_AT + 2 * in_shift;
    let out_buf = OUT_AT + 2 * out_shift;
    let in_row = in_buf + 2 * row * cols;
    let out_row = out_buf + 2 * row * cols;
    let value = |c: u64| (c as u16).wrapping_mul(0x9E37) ^ 0x5A5A;
    let result = |c: u64| (c as u16).wrapping_mul(0x7F4B) ^ 0x1234;
    let bytes = stage_bytes(&k.ptx);
    let mut block = Block {
        input: (in_row, (0..cols).map(value).collect()),
        output: (out_row, vec![None; 2 * cols as usize]),
        stage: vec![None; bytes as usize],
        stage_bytes: bytes,
    };
    let mut threads: Vec<Thread> = (0..BLOCK)
        .map(|tid| {
            let params = HashMap::from([
                ("p_out", out_buf),
                ("p_in", in_buf),
                ("p_rows", row + 1),
                ("p_cols", cols),
            ]);
            Thread {
                regs: HashMap::new(),
                tid,
                ctaid: row,
                params,
            }
        })
        .collect();
    for t in &mut threads {
        t.run(&p.prologue, &mut block);
        t.run(&p.copy_in, &mut block);
    }
    // Barrier. Each thread reads its slots (all of them: those past the
    // row may hold anything).
    let mut reads = Vec::new();
    for t in &mut threads {
        let mut slots = Vec::new();
        for line in &p.read {
            t.step(line, &mut block);
            if line.starts_with("ld.shared.") {
                let dst = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .trim_end_matches(',');
                slots.push(t.regs[dst] as u16);
            }
        }
        assert_eq!(slots.len() as u64, SLOTS, "{what}: one read per slot");
        reads.push(slots);
    }
    for (tid, slots) in reads.iter().enumerate() {
        for (j, &got) in slots.iter().enumerate() {
            let c = tid as u64 + j as u64 * BLOCK;
            if c < cols {
                assert_eq!(got, value(c), "{what}: thread {tid} slot {j} (column {c})");
            }
        }
    }
    // The reductions' barriers. Each thread writes its in-row slots.
    assert_eq!(
        p.out_slots.len() as u64,
        SLOTS,
        "{what}: one store per slot"
    );
    for t in &mut threads {
        t.run(&p.out_plan, &mut block);
        for (j, (reg, off)) in p.out_slots.iter().enumerate() {
            let c = t.tid + j as u64 * BLOCK;
            if c >= cols {
                break;
            }
            let at = t.value(reg) + off;
            block.store(Space::Shared, at, &result(c).to_le_bytes());
        }
    }
    // Barrier, then the copy out.
    for t in &mut threads {
        t.run(&p.copy_out, &mut block);
    }
    let written = &block.output.1;
    for c in 0..cols as usize {
        let got = match (written[2 * c], written[2 * c + 1]) {
            (Some(lo), Some(hi)) => u16::from_le_bytes([lo, hi]),
            _ => panic!("{what}: output column {c} never written"),
        };
        assert_eq!(got, result(c as u64), "{what}: output column {c}");
    }
}

/// Lengths around a chunk (8 elements), the lead and rest, the block
/// and the longest row of the register path.
const COLS: [u64; 24] = [
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 2047, 2048, 2049, 4089, 4095,
    4096, 4088,
];

#[test]
fn staged_rows_reach_every_slot_and_the_output_row() {
    for dtype in [DTypeKind::F16, DTypeKind::BF16] {
        for cols in COLS {
            // Every alignment of the short rows; of the long ones, which
            // cost the simulation their length, the first, one in the
            // middle and the last, unless `TENSORFN_SLOW_TESTS` asks for all.
            let every = cols < 1000 || sweep() != Sweep::Quick;
            for in_shift in (0..8).filter(|s| every || [0, 3, 7].contains(s)) {
                // Rows 0 and 1: with odd lengths the second row starts at
                // another alignment than the first.
                for row in 0..2 {
                    simulate(
                        dtype,
                        RowOp::Softmax,
                        cols,
                        row,
                        in_shift,
                        (in_shift * 3 + row) % 8,
                    );
                }
            }
        }
    }
}

#[test]
fn staged_log_softmax_moves_rows_the_same_way() {
    for dtype in [DTypeKind::F16, DTypeKind::BF16] {
        for cols in [1, 7, 9, 1000, 4095, 4096] {
            for shift in [0, 1, 5, 7] {
                simulate(dtype, RowOp::LogSoftmax, cols, 1, shift, 7 - shift);
            }
        }
    }
}

/// The simulation notices a copy that goes wrong: without its last
/// instruction (the store of the rest) the output row misses its end.
#[test]
#[should_panic(expected = "output column 8 never written")]
fn simulation_catches_a_short_copy() {
    simulate_with(DTypeKind::F16, RowOp::Softmax, 9, 0, 0, 0, &|p| {
        p.copy_out.pop();
    });
}

/// ... and a copy that starts at the wrong place.
#[test]
#[should_panic(expected = "misaligned")]
fn simulation_catches_a_misplaced_chunk() {
    simulate_with(DTypeKind::BF16, RowOp::Softmax, 64, 0, 0, 0, &|p| {
        for l in &mut p.copy_in {
            if l.contains("ld.global.nc.v4.u32") {
                *l = l.replace("+0]", "+2]");
            }
        }
    });
}
