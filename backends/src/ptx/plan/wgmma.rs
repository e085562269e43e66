//! Which dots lower to Hopper `wgmma` (see `lower/wgmma.rs` for the layout and the issue): the
//! eligibility of a dot ([`wgmma_dot`]) and the operand tiles that take the 128B-swizzled core
//! layout ([`core_tiles`]), with the layout's size and alignment.

use super::block::Block;
use super::ir::{dot_reads, lit, tile_source, unmasked};
use crate::target::Target;
use kir_ir::edit::{def_data, use_count};
use kir_ir::{Dtype, Kernel, OpData, Opcode, Value};
use std::collections::{HashMap, HashSet};

/// A dot that lowers to wgmma: where A comes from (a `load` or `smem_read` whose tile uses the
/// core layout — the SS form — or, when `a` is `None`, registers: the RS form), whether A is
/// M-major (the `transpose` of a [K, M] core tile: wgmma's transposed A, as attention_bwd's
/// kᵀ), the B tile, whether B is N-major (a tile of [K, N] used directly, wgmma's transposed B)
/// rather than K-major (`transpose` of a tile of [N, K]), whether B is a register tile (a cast
/// from f32, stored into a core-layout region before the dot: attention_bwd's dSᵀ; `b` is then
/// the cast's result), and whether the accumulator is a constant zero (the first wgmma then
/// ignores it: scale-d = false, no register copies).
#[derive(Clone, Copy, Debug)]
pub struct WgmmaDot {
    pub a: Option<Value>,
    pub a_m_major: bool,
    pub b: Value,
    pub b_n_major: bool,
    pub b_in_regs: bool,
    pub zero_init: bool,
}

/// The row-covering cp.async copy of a [rows, cols] tile of 16-bit elements into the core
/// layout keeps each thread's rows within one swizzle phase: threads cover whole rows of a
/// column group of 16-byte chunks, 8 rows apart or a multiple.
fn copy_ok(cols: usize, threads: usize) -> bool {
    core_copy_chunks(cols, threads).is_some()
}

/// The 16-byte chunks per row that one pass of a core-layout copy of `cols` 16-bit columns by
/// `threads` threads covers: the whole row when the threads then sit a multiple of 8 rows apart,
/// else the widest group of whole 64-column blocks (8 chunks each) that does, the groups copied
/// one after another (a 256-column tile on 128 threads: two groups of 128 columns, the threads
/// 8 rows apart). `None` when no group qualifies.
pub fn core_copy_chunks(cols: usize, threads: usize) -> Option<usize> {
    let cpr = cols / 8;
    if cols % 64 != 0 || cpr == 0 {
        return None;
    }
    (1..=cpr / 8)
        .rev()
        .map(|blocks| blocks * 8)
        .find(|&w| cpr % w == 0 && threads % w == 0 && (threads / w) % 8 == 0)
}

/// For a `dot` op that can use wgmma on `target` with block `b`: its operand loads and B's
/// major-ness. A shared operand tile may feed several dots (attention_bwd's q and do, each the B
/// of two dots, once through a `transpose`): then every dot that reads it must take wgmma too,
/// since the tile is stored in the core layout that only wgmma reads ([`eligible`]).
pub fn wgmma_dot(k: &Kernel, op: &OpData, b: Block, target: Target) -> Option<WgmmaDot> {
    let r = *op.results.first()?;
    local(k, op, b, target)?;
    eligible(k, b, target).remove(&r)
}

/// The dots of `k` that take wgmma, by result: the dots whose own shapes and operand forms
/// qualify ([`local`]), less, until none is left to remove, every dot that shares a shared
/// operand tile with a reader that does not (another op, or a dot that does not qualify).
fn eligible(k: &Kernel, b: Block, target: Target) -> HashMap<Value, WgmmaDot> {
    let mut dots: HashMap<Value, WgmmaDot> = k
        .dfg
        .ops
        .values()
        .filter_map(|o| Some((*o.results.first()?, local(k, o, b, target)?)))
        .collect();
    // Every op that reads a value, once.
    let mut users: HashMap<Value, Vec<&OpData>> = HashMap::new();
    for o in k.dfg.ops.values() {
        let mut seen = HashSet::new();
        for v in o.uses() {
            if seen.insert(v) {
                users.entry(v).or_default().push(o);
            }
        }
    }
    let is_dot = |dots: &HashMap<Value, WgmmaDot>, o: &OpData| {
        o.results.first().is_some_and(|r| dots.contains_key(r))
    };
    // A register B is this dot's own (a cast it stores itself); only shared tiles are shared.
    let shared_operands = |w: &WgmmaDot| {
        w.a.into_iter()
            .chain((!w.b_in_regs).then_some(w.b))
            .collect::<Vec<_>>()
    };
    // A shared tile's readers: wgmma dots, or transposes that only a wgmma dot reads.
    let read_by_wgmma_only = |dots: &HashMap<Value, WgmmaDot>, v: Value| {
        users.get(&v).into_iter().flatten().all(|u| match u.opcode {
            Opcode::Transpose => u
                .results
                .first()
                .is_some_and(|t| users.get(t).into_iter().flatten().all(|d| is_dot(dots, d))),
            _ => is_dot(dots, u),
        })
    };
    loop {
        let drop: Vec<Value> = dots
            .iter()
            .filter(|(_, w)| {
                !shared_operands(w)
                    .into_iter()
                    .all(|v| read_by_wgmma_only(&dots, v))
            })
            .map(|(&r, _)| r)
            .collect();
        if drop.is_empty() {
            return dots;
        }
        for r in drop {
            dots.remove(&r);
        }
    }
}

/// The conditions of one dot alone: target, shapes, dtypes, and operand forms (A a shared tile,
/// read directly or through a transpose, or a register tile cast from f32; B a shared tile read
/// directly or through a transpose, or a register tile cast from f32 with N a multiple of 64).
fn local(k: &Kernel, op: &OpData, b: Block, target: Target) -> Option<WgmmaDot> {
    if !target.has_wgmma()
        || !matches!(op.opcode, Opcode::Dot | Opcode::DotAsync)
        || b.warps % 4 != 0
    {
        return None;
    }
    let (&a, &bv, &r) = (
        op.operands.first()?,
        op.operands.get(1)?,
        op.results.first()?,
    );
    let (ta, tr) = (k.dfg.ty(a), k.dfg.ty(r));
    let lowp =
        matches!(ta.dtype(), Some(Dtype::F16 | Dtype::Bf16)) && ta.dtype() == k.dfg.ty(bv).dtype();
    let (sa, sr) = (ta.shape()?, tr.shape()?);
    let (m, n, kd) = (*sr.first()?, *sr.get(1)?, *sa.get(1)?);
    let shapes_ok = sr.len() == 2
        && sa.len() == 2
        && m == 16 * b.warps as usize
        && n % 8 == 0
        && (8..=256).contains(&n)
        && kd % 16 == 0
        && m % 8 == 0
        && tr.dtype() == Some(Dtype::F32);
    // A: a core-layout tile (SS) read directly, or through a transpose of a [K, M] tile (M-major:
    // each warpgroup's 64 rows are one 64-column block of it), or a register tile converted from
    // f32 in this kernel (RS: the FlashAttention P·V form, P packed from the accumulator layout).
    let a_def = def_data(&k.dfg, a)?;
    let only_here = |v: Value| use_count(&k.dfg, v) == 1;
    let threads = 32 * b.warps as usize;
    // A masked `load` is copied into the core layout with its masked elements zero-filled
    // (memory.rs `copy_tile`, as B's masked tiles are: attention_bwd's k and v with VARLEN); a
    // stage read's ring copies must be unmasked.
    let copy_masks_ok = |o: &OpData| o.opcode == Opcode::Load || unmasked(k, o);
    let (a_smem, a_m_major) = if tile_source(k, a_def) {
        if !(copy_masks_ok(a_def) && copy_ok(kd, threads)) {
            return None;
        }
        (Some(a), false)
    } else if a_def.opcode == Opcode::Transpose && only_here(a) {
        let src = *a_def.operands.first()?;
        let src_def = def_data(&k.dfg, src).filter(|o| tile_source(k, o))?;
        if !(copy_masks_ok(src_def) && copy_ok(m, threads) && src_def.results.len() == 1) {
            return None;
        }
        (Some(src), true)
    } else if from_f32(k, a_def, ta.shape()) && only_dot_operands(k, a) {
        (None, false)
    } else {
        return None;
    };
    // B: the transpose of a K-major [N, K] load, an N-major [K, N] load used directly, or an
    // N-major register tile cast from f32 (stored in the core layout by the dot itself).
    let b_def = def_data(&k.dfg, bv)?;
    let (b_src, b_n_major, b_in_regs) = match b_def.opcode {
        Opcode::Transpose => (*b_def.operands.first()?, false, false),
        Opcode::Load | Opcode::SmemRead => (bv, true, false),
        Opcode::Cast
            if n % 64 == 0
                && from_f32(k, b_def, k.dfg.ty(bv).shape())
                && only_dot_operands(k, bv) =>
        {
            (bv, true, true)
        }
        _ => return None,
    };
    let b_load_ok = b_in_regs
        || def_data(&k.dfg, b_src)
            .filter(|o| tile_source(k, o))
            .is_some_and(|o| o.results.len() == 1);
    // Every read of a shared operand tile is an operand of a dot (which of them take wgmma is
    // [`eligible`]'s question).
    let reads_ok = |v: Value| dot_reads(k, v).is_some();
    let zero_init = op
        .operands
        .get(2)
        .and_then(|&acc| def_data(&k.dfg, acc))
        .is_some_and(|o| o.opcode == Opcode::Const && lit(o.lead.as_ref()) == Some(0.0));
    let copies_ok = b_in_regs || copy_ok(if b_n_major { n } else { kd }, threads);
    // K in whole 64-column blocks wherever K is an operand tile's contiguous dim (a K-major A or
    // B: one 16-deep slice is 32 bytes of a 128-byte swizzle row). Where neither is (A in
    // registers or M-major, B N-major or in registers), K runs along the tiles' rows and whole
    // 16-deep slices would do: P·V with key blocks of 96 or 176 (FlashAttention-3's d128 tile).
    // K under 64 stays on mma.sync there: it would move defaults that no GPU has run this way
    // (attention_bwd's d192 dQ kernel, 32-key blocks), so only K ≥ 64 takes the relaxed rule.
    let k_contiguous = (a_smem.is_some() && !a_m_major) || !b_n_major;
    let k_ok = kd % 64 == 0 || (!k_contiguous && kd > 64);
    let ok = lowp
        && shapes_ok
        && k_ok
        && copies_ok
        && a_smem.is_none_or(reads_ok)
        && (b_n_major || only_here(bv))
        && (b_in_regs || reads_ok(b_src))
        && b_load_ok;
    ok.then_some(WgmmaDot {
        a: a_smem,
        a_m_major,
        b: b_src,
        b_n_major,
        b_in_regs,
        zero_init,
    })
}

/// `o` is a `cast` of an f32 tile of the same shape (a 16-bit operand rounded from f32 registers,
/// which the dot packs from the f32 source itself).
fn from_f32(k: &Kernel, o: &OpData, shape: Option<Vec<usize>>) -> bool {
    o.opcode == Opcode::Cast
        && o.operands.first().is_some_and(|&s| {
            k.dfg.ty(s).dtype() == Some(Dtype::F32) && k.dfg.ty(s).shape() == shape
        })
}

/// Every use of `v` is operand 0 or 1 of a dot (attention_bwd's dSᵀ is the A of dk's dot and the
/// B of dqᵀ's).
fn only_dot_operands(k: &Kernel, v: Value) -> bool {
    k.dfg
        .ops
        .values()
        .filter(|o| o.uses().contains(&v))
        .all(|o| {
            matches!(o.opcode, Opcode::Dot | Opcode::DotAsync)
                && o.operands.iter().skip(2).all(|&x| x != v)
        })
}

/// Bytes of a core-layout tile (no padding).
pub fn core_tile_bytes(shape: &[usize], eb: usize) -> u32 {
    (shape.iter().product::<usize>() * eb) as u32
}

/// Alignment of core-layout tiles (the 128B swizzle repeats every 8 rows of 128 bytes).
pub const CORE_ALIGN: u32 = 1024;

/// The operand tiles of every wgmma-eligible dot of `k` and the stage buffers they are read
/// from (all use the core layout).
pub fn core_tiles(k: &Kernel, b: Block, target: Target) -> HashSet<Value> {
    let mut out: HashSet<Value> = k
        .dfg
        .ops
        .values()
        .filter_map(|o| wgmma_dot(k, o, b, target))
        .flat_map(|w| w.a.into_iter().chain((!w.b_in_regs).then_some(w.b)))
        .collect();
    let bufs: Vec<Value> = out
        .iter()
        .filter_map(|&v| match k.dfg.values.get(v)?.def {
            kir_ir::ValueDef::Result(o, _) => Some(&k.dfg.ops[o]),
            kir_ir::ValueDef::Arg(..) => None,
        })
        .filter(|o| o.opcode == Opcode::SmemRead)
        .filter_map(|o| o.operands.first().copied())
        .collect();
    out.extend(bufs);
    out
}
