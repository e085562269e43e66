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
/// core layout — the SS form — or, when `a` is `None`, registers: the RS form), the B tile, whether
/// B is N-major (a tile of [K, N] used directly, wgmma's transposed B) rather than K-major
/// (`transpose` of a tile of [N, K]), and whether the accumulator is a constant zero (the first
/// wgmma then ignores it: scale-d = false, no register copies).
#[derive(Clone, Copy, Debug)]
pub struct WgmmaDot {
    pub a: Option<Value>,
    pub b: Value,
    pub b_n_major: bool,
    pub zero_init: bool,
}

/// The row-covering cp.async copy of a [rows, cols] tile keeps each thread's rows within one
/// swizzle phase: threads cover whole rows of 16-byte chunks, 8 rows apart or a multiple.
fn copy_ok(cols: usize, threads: usize) -> bool {
    let cpr = cols / 8;
    cols % 64 == 0 && cpr > 0 && threads % cpr == 0 && (threads / cpr) % 8 == 0
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
                !w.a.into_iter()
                    .chain([w.b])
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

/// The conditions of one dot alone: target, shapes, dtypes, and operand forms (A a shared tile
/// or a register tile cast from f32, B a shared tile read directly or through a transpose).
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
        && kd % 64 == 0
        && m % 8 == 0
        && tr.dtype() == Some(Dtype::F32);
    // A: a core-layout tile (SS), or a register tile converted from f32 in this kernel (RS: the
    // FlashAttention P·V form, P packed from the accumulator layout).
    let a_def = def_data(&k.dfg, a)?;
    let only_here = |v: Value| use_count(&k.dfg, v) == 1;
    let a_smem = if tile_source(k, a_def) {
        // A masked `load` is copied into the core layout with its masked elements zero-filled
        // (memory.rs `copy_tile`, as B's masked tiles are: attention_bwd's k and v with
        // VARLEN); a stage read's ring copies must be unmasked.
        let copy_masks_ok = a_def.opcode == Opcode::Load || unmasked(k, a_def);
        if !(copy_masks_ok && copy_ok(kd, 32 * b.warps as usize)) {
            return None;
        }
        Some(a)
    } else if a_def.opcode == Opcode::Cast
        && only_here(a)
        && a_def.operands.first().is_some_and(|&s| {
            k.dfg.ty(s).dtype() == Some(Dtype::F32) && k.dfg.ty(s).shape() == ta.shape()
        })
    {
        None
    } else {
        return None;
    };
    // B: the transpose of a K-major [N, K] load, or an N-major [K, N] load used directly.
    let b_def = def_data(&k.dfg, bv)?;
    let (b_src, b_n_major) = match b_def.opcode {
        Opcode::Transpose => (*b_def.operands.first()?, false),
        Opcode::Load | Opcode::SmemRead => (bv, true),
        _ => return None,
    };
    let b_load = def_data(&k.dfg, b_src).filter(|o| tile_source(k, o))?;
    // Every read of a shared operand tile is an operand of a dot (which of them take wgmma is
    // [`eligible`]'s question).
    let reads_ok = |v: Value| dot_reads(k, v).is_some();
    let zero_init = op
        .operands
        .get(2)
        .and_then(|&acc| def_data(&k.dfg, acc))
        .is_some_and(|o| o.opcode == Opcode::Const && lit(o.lead.as_ref()) == Some(0.0));
    let threads = 32 * b.warps as usize;
    let copies_ok = copy_ok(if b_n_major { n } else { kd }, threads);
    let ok = lowp
        && shapes_ok
        && copies_ok
        && a_smem.is_none_or(reads_ok)
        && (b_n_major || only_here(bv))
        && reads_ok(b_src)
        && b_load.results.len() == 1;
    ok.then_some(WgmmaDot {
        a: a_smem,
        b: b_src,
        b_n_major,
        zero_init,
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
        .flat_map(|w| w.a.into_iter().chain([w.b]))
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
