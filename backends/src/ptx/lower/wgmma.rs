//! Hopper `wgmma` for GEMM-like dots on sm_90a whose operands both come from shared memory: A a
//! K-major tile (a direct `load` of [M, K]), and B either K-major (`transpose` of a load of
//! [N, K], as `gemm -D TRANS_B=1` loads it) or N-major (a direct load of [K, N], plain `gemm`;
//! wgmma's transposed-B form).
//!
//! - Eligibility ([`wgmma_dot`]): operands loaded (`load`) or read from a stage of the
//!   `pipelining` pass's ring (`smem_read`), bf16/f16, f32 accumulation, result [M, N] with
//!   M = 16 · warps (each warpgroup of 4 warps takes 64 rows, each warp 16, so the accumulator is
//!   the `RowMma` layout with one row fragment per warp — wgmma's m64nNk16 D fragment is the
//!   mma.sync m16n8 C fragment repeated along N), N a multiple of 8 up to 256, K a multiple of
//!   64 (one 128-byte swizzle row; where K is no tile's contiguous dim, a multiple of 16 above 64,
//!   as P·V over 176 keys), the contiguous dim of every operand tile a multiple of 64 with
//!   the block's threads covering whole rows of it, and the accumulator carried by a loop (GEMM's
//!   K loop; attention's scores, which restart from zero each key block, keep mma.sync).
//! - Shared layout of such operand tiles ([rows, cols], cols contiguous, a multiple of 64): the
//!   128-byte-swizzled canonical layout. The columns split into blocks of 64 (128 bytes of
//!   bf16/f16), one after the other; inside a block, row r is 128 contiguous bytes whose 16-byte
//!   chunk c sits at chunk c ^ (r % 8): element (r, j) at (j/64)·rows·128 + r·128 +
//!   (((j%64)/8) ^ (r%8))·16 + (j%8)·2. Tiles are 1024-byte aligned; descriptors use swizzle
//!   mode 128B with SBO = 1024 (8 rows). A K-major slice of 16 starts 32 bytes further inside its
//!   block; an N-major slice of 16 starts 16 rows further and reaches the next 64 columns with
//!   LBO = rows·128. cp.async writes the layout ([`core_addr`], `cp_rows.rs`; a row's 8 chunks
//!   cover all 32 banks), and the writers fence the async proxy before the barrier that
//!   publishes the tile.
//! - Per dot: `wgmma.fence`, one `wgmma.mma_async` per 16-deep K slice on a private copy of the
//!   accumulator, `commit_group`, `wait_group 0` (the tile is finished before anyone may
//!   overwrite the operands); two independent dots next to each other share the wait
//!   (`wgmma_pair.rs`).
//!
//! Inter-warpgroup ping-pong for loops of wgmma dots (FlashAttention-3's schedule, without warp
//! specialization): in a block of two warpgroups whose loop body issues k ≥ 2 wgmma dots, the
//! warpgroups take turns on the tensor cores. Per iteration the issue order is
//! D0(wg0), D0(wg1), D1(wg0), D1(wg1), …, so while one warpgroup runs its softmax (the work
//! between two dots) the other one's dot occupies the tensor cores.
//!
//! The order comes from named barriers (ids 1 ..= 2k − 1; id 0 is the block-wide `bar.sync 0`):
//! - X_i (id 1 + i): warpgroup 0 arrives after issuing D_i; warpgroup 1 waits on it before
//!   issuing D_i.
//! - Y_i (id 1 + k + i, i < k − 1): warpgroup 1 arrives after issuing D_i; warpgroup 0 waits on
//!   it before issuing D_{i+1}.
//!
//! Each barrier counts 256 threads per phase (one warpgroup arriving, the other waiting), once per
//! iteration; the wrap-around (D0 of the next iteration after D_{k−1}) is ordered by the loop's
//! own block-wide barrier. Both warpgroups run the same trip count (loop bounds are uniform in a
//! block) and the dots sit directly in the loop body (no branch around them), so every phase
//! gets its 256 arrivals: the barriers order issue, they cannot deadlock. Results do not depend
//! on the order (each warpgroup computes its own rows).

use super::ctx::{Ctx, Val};
use super::PtxError;
use crate::ptx::emit::isa::Isa;
use crate::ptx::emit::{Operand, PtxInst, Reg, RegClass};
use crate::ptx::plan::roles::Turn;
use crate::ptx::plan::wgmma::{core_tile_bytes, WgmmaDot, CORE_ALIGN};
use kir_ir::edit::def_data;
use kir_ir::{Dtype, Kernel, Opcode, Span, Value, ValueDef};
use std::collections::HashSet;

/// Shared address of element (i, j) of a core-layout [rows, cols] tile at `off`.
pub fn core_addr(c: &mut Ctx, off: u32, i: Reg, j: Reg, rows: usize, eb: usize) -> Reg {
    let (a, t, u) = (
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
        c.b.reg(RegClass::B32),
    );
    // (j/64)·rows·128 + i·128 + (((j%64)/8) ^ (i%8))·16 + (j%8)·eb.
    c.b.ins(PtxInst::new("shr.u32").op(a).op(j).op(6));
    c.b.ins(PtxInst::new("mul.lo.s32").op(a).op(a).op(rows * 128));
    c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(i).op(128).op(a));
    c.b.ins(PtxInst::new("shr.u32").op(t).op(j).op(3));
    c.b.ins(PtxInst::new("and.b32").op(t).op(t).op(7));
    c.b.ins(PtxInst::new("and.b32").op(u).op(i).op(7));
    c.b.ins(PtxInst::new("xor.b32").op(t).op(t).op(u));
    c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(t).op(16).op(a));
    c.b.ins(PtxInst::new("and.b32").op(t).op(j).op(7));
    c.b.ins(PtxInst::new("mad.lo.s32").op(a).op(t).op(eb).op(a));
    c.shared_at(off, a)
}

/// A descriptor for the core-layout tile slice at shared byte address `addr` (a register) plus
/// `extra` bytes: 128B swizzle, SBO 1024 (the next 8 rows of a swizzle atom), and LBO `lbo` (the
/// next 64-column block; only read for N-major B — for K-major operands a 16-deep slice stays
/// inside one block).
/// The descriptor of `addr + extra` from the descriptor `base` of `addr`: the address field is
/// bits 0–13 of the descriptor, holding `(address >> 4) & 0x3fff`; shared addresses are below
/// 2¹⁸ and both terms are 16-byte aligned, so adding `extra >> 4` never carries out of it and
/// gives the same bits as [`descriptor`] of the sum, in one instruction instead of five.
fn descriptor_at(c: &mut Ctx, base: Reg, extra: u32) -> Reg {
    debug_assert_eq!(
        extra % 16,
        0,
        "wgmma descriptor offsets are 16-byte aligned"
    );
    if extra == 0 {
        return base;
    }
    let d = c.b.reg(RegClass::B64);
    c.b.ins(PtxInst::new("add.s64").op(d).op(base).op(extra >> 4));
    d
}

fn descriptor(c: &mut Ctx, addr: Reg, extra: u32, lbo: u32) -> Reg {
    let (a, d) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B64));
    c.b.ins(PtxInst::new("add.s32").op(a).op(addr).op(extra));
    c.b.ins(PtxInst::new("shr.u32").op(a).op(a).op(4));
    c.b.ins(PtxInst::new("and.b32").op(a).op(a).op(16383));
    c.b.ins(PtxInst::new("cvt.u64.u32").op(d).op(a));
    let hi: u64 = (((lbo as u64) >> 4) << 16) | ((1024u64 >> 4) << 32) | (1u64 << 62);
    c.b.ins(PtxInst::new("or.b64").op(d).op(d).op(hi));
    d
}

/// How a wgmma dot is issued: its ping-pong turn (`plan/roles.rs`) and whether it stays in flight
/// into the next iteration ([`held`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Issue {
    pub turn: Option<crate::ptx::plan::roles::Turn>,
    pub hold: bool,
    /// A `dot_async`: commit the group and leave it running (its `dot_wait` waits for it).
    pub asynchronous: bool,
    /// Issued with the dot right after it (`wgmma_pair.rs`): commit the group and leave it
    /// running; that dot's wait retires both.
    pub paired: bool,
}

/// True when the wgmma dot `op` may stay in flight until the next iteration of its loop ends
/// (`wgmma.wait_group 1` after issuing; the loop's exit waits for the last group): it sits
/// directly in a loop body, accumulates in place into a value that loop carries, its result is
/// read only by the loop's `yield` (chained wgmmas into the same registers need no wait), and
/// its operand stages are *held*: no `smem_release` in the body releases the stage it reads, and
/// every release there names a stage that folds to a different one (the `pipelining` pass's
/// held ring releases stage t at the end of iteration t + 1, after that iteration's
/// `wait_group 1` retired the group that read it).
pub fn held(c: &Ctx, op: &kir_ir::OpData, w: &WgmmaDot, acc_regs: &[Reg]) -> bool {
    let k = c.k;
    let (Some(&acc), Some(&r)) = (op.operands.get(2), op.results.first()) else {
        return false;
    };
    let Some(l) = k.dfg.ops.values().find(|o| {
        o.opcode == Opcode::For
            && o.regions.first().is_some_and(|&b| {
                k.dfg.blocks[b]
                    .ops
                    .iter()
                    .any(|&x| k.dfg.ops[x].results.first() == Some(&r))
            })
    }) else {
        return false;
    };
    let body = l.regions[0];
    let bd = &k.dfg.blocks[body];
    let carried = bd.args[1..].contains(&acc);
    let yielded_only = kir_ir::edit::use_count(&k.dfg, r) == 1
        && bd
            .ops
            .last()
            .is_some_and(|&y| k.dfg.ops[y].operands.contains(&r));
    if w.zero_init || !carried || !yielded_only || !acc_in_place(c, acc, acc_regs) {
        return false;
    }
    // A warp-specialized consumer's ring: every operand is a stage read, and the body ends its
    // reads with an empty-barrier arrival, which tma.rs defers by one iteration while a dot is
    // in flight (the stage is released after the next iteration's `wait_group 1`).
    if c.asyncs.ws.raw_tid.is_some() {
        let stage_reads =
            w.a.into_iter()
                .chain([w.b])
                .all(|v| def_data(&k.dfg, v).is_some_and(|o| o.opcode == Opcode::SmemRead));
        let empty_arrival = bd.ops.iter().any(|&o| {
            let od = &k.dfg.ops[o];
            od.opcode == Opcode::MbarArrive && od.attr("tx").is_none()
        });
        return stage_reads && empty_arrival;
    }
    // The stage reads of the operands: (buffer, folded stage).
    let reads: Vec<(Value, i64)> =
        w.a.into_iter()
            .chain([w.b])
            .filter_map(|v| def_data(&k.dfg, v))
            .filter(|o| o.opcode == Opcode::SmemRead)
            .filter_map(|o| {
                Some((
                    *o.operands.first()?,
                    super::statics::known(c, *o.operands.get(1)?)?,
                ))
            })
            .collect();
    if reads.len() != w.a.into_iter().count() + 1 {
        return false;
    }
    let mut releases = Vec::new();
    collect_releases(k, body, &mut releases);
    reads.iter().all(|&(buf, stage)| {
        releases
            .iter()
            .filter(|o| o.operands.first() == Some(&buf))
            .all(|o| {
                o.operands
                    .get(1)
                    .and_then(|&s| super::statics::known(c, s))
                    .is_some_and(|s| s != stage)
            })
    })
}

/// Every `smem_release` op in block `b` and the regions nested in it.
fn collect_releases<'k>(k: &'k Kernel, b: kir_ir::Block, out: &mut Vec<&'k kir_ir::OpData>) {
    for &o in &k.dfg.blocks[b].ops {
        let od = &k.dfg.ops[o];
        if od.opcode == Opcode::SmemRelease {
            out.push(od);
        }
        for &r in &od.regions {
            collect_releases(k, r, out);
        }
    }
}

/// True when a wgmma may accumulate into the registers of its accumulator operand `v`: the dot
/// is its only reader, and `v` owns distinct registers — a loop-carried block argument (each
/// owns its registers) or the result of a `mul` (fresh registers, or the in-place rescale of a
/// block argument that has no other reader, see `rescale.rs`).
fn acc_in_place(c: &Ctx, v: Value, regs: &[Reg]) -> bool {
    let owner = match c.k.dfg.values.get(v).map(|d| d.def) {
        Some(ValueDef::Arg(..)) => true,
        Some(ValueDef::Result(o, _)) => c.k.dfg.ops[o].opcode == Opcode::Mul,
        None => false,
    };
    let distinct = regs.iter().collect::<HashSet<_>>().len() == regs.len();
    owner && distinct && kir_ir::edit::use_count(&c.k.dfg, v) == 1
}

/// Stores an f32 register tile (any layout), rounded to `to` (f16 or bf16), into a fresh
/// core-layout [rows, cols] region, for a wgmma operand that is not in the accumulator layout
/// (A) or that wgmma reads from shared memory only (B): barrier (earlier readers of the region
/// are done), the stores, the async-proxy fence, barrier. Returns the region's offset. In the
/// accumulator layout a thread's slots 2i and 2i + 1 are columns j and j + 1 of one row (j
/// even: one 4-byte word of a 16-byte chunk), stored as one packed pair.
fn regs_to_core(c: &mut Ctx, a: &Val, to: Dtype, sp: Span) -> Result<u32, PtxError> {
    let Val::Tile {
        layout,
        shape,
        dtype: Dtype::F32,
        regs,
    } = a
    else {
        return Err(PtxError::at(
            sp,
            "internal: a wgmma register operand must be an f32 tile",
        ));
    };
    let (rows, eb) = (shape[0], 2);
    let off = c.alloc_shared_aligned(core_tile_bytes(shape, eb), CORE_ALIGN);
    let t = if to == Dtype::F16 { "f16" } else { "bf16" };
    let coords = c.coords(*layout, shape);
    c.sync_block();
    if *layout == crate::ptx::plan::layout::Layout::RowMma && shape[1] % 8 == 0 {
        for (pair, sc) in regs.chunks(2).zip(coords.iter().step_by(2)) {
            let addr = core_addr(c, off, sc.idx[0], sc.idx[1], rows, eb);
            let h = super::elem::pack_half2(c, t, pair[0], pair[1]);
            c.b.ins_if_opt(sc.valid, PtxInst::new("st.shared.b32").addr(addr).op(h));
        }
    } else {
        for (sc, &r) in coords.iter().zip(regs) {
            let addr = core_addr(c, off, sc.idx[0], sc.idx[1], rows, eb);
            let h = c.b.reg(RegClass::B16);
            c.b.need(Isa::cvt_from_f32(to))
                .ins(PtxInst::new("cvt.rn").m(t).m("f32").op(h).op(r));
            c.b.ins_if_opt(sc.valid, PtxInst::new("st.shared.b16").addr(addr).op(h));
        }
    }
    c.b.need(Isa::FENCE_PROXY_ASYNC)
        .ins(PtxInst::new("fence.proxy.async.shared::cta"));
    c.sync_block();
    Ok(off)
}

/// This warp's A fragments of a register [M, K] tile in the accumulator layout with one 16-row
/// fragment per warp: per 16-deep K slice, the four b32 registers of wgmma's register-A
/// fragment (the mma.m16n8k16 A pattern per warp: rows g and g + 8, columns 2q.. of the slice's
/// two 8-column halves), packed from adjacent accumulator column blocks.
fn a_fragments(c: &mut Ctx, regs: &[Reg], kdim: usize, t: &str) -> Vec<Vec<Reg>> {
    (0..kdim / 16)
        .map(|kf| {
            let mut f = Vec::with_capacity(4);
            for (nf, h) in [(2 * kf, 0), (2 * kf, 1), (2 * kf + 1, 0), (2 * kf + 1, 1)] {
                let (lo, hi) = (regs[nf * 4 + h * 2], regs[nf * 4 + h * 2 + 1]);
                f.push(super::elem::pack_half2(c, t, lo, hi));
            }
            f
        })
        .collect()
}

/// Lowers the wgmma dot `acc + a·b` (a: a core [M, K] tile, the transposed view of a core
/// [K, M] tile, or a register tile; b: a core tile, or the f32 source of a register B that is
/// stored into a core region here; see [`WgmmaDot`]); returns the result registers (the `RowMma`
/// slots of [M, N]).
#[allow(clippy::too_many_arguments)]
pub fn lower(
    c: &mut Ctx,
    w: WgmmaDot,
    issue: Issue,
    a: &Val,
    b: &Val,
    acc_value: Value,
    acc: &[Reg],
    shape: &[usize],
    kdim: usize,
    d: Dtype,
    sp: Span,
) -> Result<Vec<Reg>, PtxError> {
    let (ob, dyn_b) =
        match b {
            Val::Shared { off, dyn_off, .. } if !w.b_in_regs => (*off, *dyn_off),
            Val::Tile { .. } if w.b_in_regs => (regs_to_core(c, b, d, sp)?, None),
            _ => return Err(PtxError::at(
                sp,
                "internal: the wgmma B operand must be in shared memory or an f32 register tile",
            )),
        };
    let (ob, dyn_b) = (&ob, &dyn_b);
    c.b.need(Isa::WGMMA);
    let (m, n) = (shape[0], shape[1]);
    let t = if d == Dtype::F16 { "f16" } else { "bf16" };
    // A: register fragments (RS) when the tile is in the accumulator layout with one 16-row
    // fragment per warp, else a core-layout tile (SS), stored there first if it is in registers.
    let frags = match (w.a, a) {
        (
            None,
            Val::Tile {
                layout: crate::ptx::plan::layout::Layout::RowMma,
                shape: sa,
                regs,
                ..
            },
        ) if sa.len() == 2 && sa[0] == m && m == 16 * c.plan.blk.warps as usize => {
            Some(a_fragments(c, regs, kdim, t))
        }
        _ => None,
    };
    let oa = match (frags.is_some(), w.a, a) {
        (true, ..) => None,
        (false, Some(_), Val::Shared { off, dyn_off, .. }) => Some((*off, *dyn_off)),
        (false, None, Val::Tile { .. }) => Some((regs_to_core(c, a, d, sp)?, None)),
        _ => {
            return Err(PtxError::at(
                sp,
                "internal: a wgmma A operand must be a core-layout tile or registers",
            ))
        }
    };
    let zero = c.b.imm32(0);
    let base_a = match oa {
        Some((oa, dyn_a)) => {
            // This warpgroup's 64 rows of A start 64·128 bytes further per warpgroup; M-major,
            // its 64 columns of the [K, M] tile are the warpgroup's own 64-column block.
            let wg_stride = if w.a_m_major { kdim * 128 } else { 64 * 128 };
            let (wg, base) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::B32));
            c.b.ins(PtxInst::new("shr.u32").op(wg).op(c.thread.warp).op(2));
            let pa = c.shared_at(oa, zero);
            let pa = c.plus_dyn(pa, dyn_a);
            c.b.ins(
                PtxInst::new("mad.lo.s32")
                    .op(base)
                    .op(wg)
                    .op(wg_stride)
                    .op(pa),
            );
            Some(base)
        }
        None => None,
    };
    let base_b = c.b.reg(RegClass::B32);
    let pb = c.shared_at(*ob, zero);
    let pb = c.plus_dyn(pb, *dyn_b);
    c.b.ins(PtxInst::new("mov.b32").op(base_b).op(pb));
    // The accumulator: fresh registers the first wgmma overwrites (scale-d false) for a zero
    // start, set to 0.0; `acc`'s own registers when the dot is its last reader and it owns them (see
    // [`acc_in_place`]), so the wgmma accumulates where the value already is; else a copy.
    let in_place = !w.zero_init && acc_in_place(c, acc_value, acc);
    let cur: Vec<Reg> = if in_place {
        acc.to_vec()
    } else {
        acc.iter()
            .map(|&r| {
                // Zero starts are still defined (0.0): an undefined register that a wgmma names
                // is live from the kernel's entry for ptxas, which then holds it across loops.
                let x = c.b.reg(RegClass::F32);
                if w.zero_init {
                    c.b.ins(PtxInst::new("mov.f32").op(x).op(Operand::F32(0x00000000)));
                } else {
                    c.b.ins(PtxInst::new("mov.f32").op(x).op(r));
                }
                x
            })
            .collect()
    };
    let list = Operand::vec(&cur);
    let (p_acc, p_first) = (c.b.reg(RegClass::Pred), c.b.reg(RegClass::Pred));
    c.b.ins(PtxInst::new("setp.eq.u32").op(p_acc).op(0).op(0));
    if w.zero_init {
        c.b.ins(PtxInst::new("setp.ne.u32").op(p_first).op(0).op(0));
    }
    if let Some(t) = issue.turn.filter(|t| t.lead) {
        before_issue(c, t);
    }
    c.b.ins(PtxInst::new("wgmma.fence.sync.aligned"));
    // Each operand's descriptor is built once; the slices add their offsets to it.
    let lbo_b = if w.b_n_major {
        (kdim * 128) as u32
    } else {
        1 << 4
    };
    let desc_b = descriptor(c, base_b, 0, lbo_b);
    let lbo_a = if w.a_m_major {
        (kdim * 128) as u32
    } else {
        1 << 4
    };
    let desc_a = base_a.map(|a| descriptor(c, a, 0, lbo_a));
    for kf in 0..kdim / 16 {
        // K slice kf: 64-column block kf/4 (rows·128 bytes each), 32 bytes per slice inside it.
        let (blk, inner) = ((kf / 4) as u32, (kf % 4) as u32 * 32);
        // N-major B ([K, N] tile, N in 64-column blocks of kdim rows): slice kf is 16 rows
        // (2048 bytes) further, and the next 64 columns kdim·128 bytes further (LBO).
        let (db, trans_b) = if w.b_n_major {
            (descriptor_at(c, desc_b, (kf * 16 * 128) as u32), 1)
        } else {
            (descriptor_at(c, desc_b, blk * (n * 128) as u32 + inner), 0)
        };
        let p = if w.zero_init && kf == 0 {
            p_first
        } else {
            p_acc
        };
        let mma = PtxInst::new("wgmma.mma_async.sync.aligned")
            .m(format_args!("m64n{n}k16"))
            .m("f32")
            .m(t)
            .m(t);
        match (&frags, base_a) {
            (Some(f), _) => {
                let (a0, a1, a2, a3) = (f[kf][0], f[kf][1], f[kf][2], f[kf][3]);
                c.b.ins(
                    mma.op(&list)
                        .vec([a0, a1, a2, a3])
                        .op(db)
                        .op(p)
                        .op(1)
                        .op(1)
                        .op(trans_b),
                );
            }
            (None, Some(_)) => {
                let base = desc_a.expect("A's descriptor is built with its base");
                // M-major A (the [K, M] tile read transposed): slice kf is 16 rows further.
                let (da, trans_a) = if w.a_m_major {
                    (descriptor_at(c, base, (kf * 16 * 128) as u32), 1)
                } else {
                    (descriptor_at(c, base, blk * (m * 128) as u32 + inner), 0)
                };
                c.b.ins(
                    mma.op(&list)
                        .op(da)
                        .op(db)
                        .op(p)
                        .op(1)
                        .op(1)
                        .op(trans_a)
                        .op(trans_b),
                );
            }
            (None, None) => return Err(PtxError::at(sp, "internal: a wgmma without an A operand")),
        }
    }
    c.b.ins(PtxInst::new("wgmma.commit_group.sync.aligned"));
    if let Some(t) = issue.turn.filter(|t| t.tail) {
        after_issue(c, t);
    }
    // A dot before the tail of its ping-pong issue group stays in flight: the tail's wait
    // retires the group's dots together (groups retire in issue order).
    let grouped = issue.turn.is_some_and(|t| !t.tail);
    if issue.asynchronous || issue.paired || grouped {
        c.asyncs.wgmma_in_flight = true;
    } else if issue.hold {
        // Retire the previous iteration's group, leave this one running (see [`held`]).
        c.b.ins(PtxInst::new("wgmma.wait_group.sync.aligned").op(1));
        c.asyncs.wgmma_in_flight = true;
    } else {
        c.b.ins(PtxInst::new("wgmma.wait_group.sync.aligned").op(0));
        c.asyncs.wgmma_in_flight = false;
    }
    Ok(cur)
}

/// This thread's warpgroup is warpgroup 0 (a predicate).
fn first_group(c: &mut Ctx) -> Reg {
    let (wg, p) = (c.b.reg(RegClass::B32), c.b.reg(RegClass::Pred));
    c.b.ins(PtxInst::new("shr.u32").op(wg).op(c.thread.warp).op(2));
    c.b.ins(PtxInst::new("setp.eq.u32").op(p).op(wg).op(0));
    p
}

/// Waits for this warpgroup's turn before issuing the dot of turn `t`.
pub fn before_issue(c: &mut Ctx, t: Turn) {
    let p = first_group(c);
    if t.index > 0 {
        c.b.ins(
            PtxInst::new("bar.sync")
                .op(1 + t.count + t.index - 1)
                .op(256)
                .guard(p, false),
        );
    }
    c.b.ins(
        PtxInst::new("bar.sync")
            .op(1 + t.index)
            .op(256)
            .guard(p, true),
    );
}

/// Hands the turn on after issuing (and committing) the dot of turn `t`.
pub fn after_issue(c: &mut Ctx, t: Turn) {
    let p = first_group(c);
    c.b.ins(
        PtxInst::new("bar.arrive")
            .op(1 + t.index)
            .op(256)
            .guard(p, false),
    );
    if t.index + 1 < t.count {
        c.b.ins(
            PtxInst::new("bar.arrive")
                .op(1 + t.count + t.index)
                .op(256)
                .guard(p, true),
        );
    }
}
