//! Recording the lowering decisions of a kernel while it is lowered ([`Notes`] on the `Ctx`:
//! each dot's path and why a faster one was declined, each rescale, each wait joined into an
//! in-flight group) and building the kernel's [`PtxReport`] from them.

use super::ctx::Ctx;
use super::report::{DotChoice, DotPath, PtxReport, Rescale, Ring, WarpsFrom};
use crate::ptx::emit::isa::Requirements;
use crate::ptx::plan::layout::{self, Layout};
use kir_ir::{Dtype, Kernel, OpData, Opcode, Type};

/// The arena position of `op` in `k` (a stable identity while lowering).
fn op_index(k: &Kernel, op: &OpData) -> usize {
    k.dfg
        .ops
        .values()
        .position(|o| std::ptr::eq(o, op))
        .unwrap_or(usize::MAX)
}

/// Records the lowering of `dot` `op`: wgmma when `wgmma`, else mma.sync when `mma`, else an FMA
/// loop, with its accumulator in `layout`.
pub(super) fn note_dot(c: &mut Ctx, op: &OpData, wgmma: bool, mma: bool, layout: Layout) {
    let key = op_index(c.k, op);
    if let Some((_, d)) = c.report.dots.iter_mut().find(|(i, _)| *i == key) {
        d.emitted += 1;
        return;
    }
    let k = c.k;
    let ty = |i: usize| op.operands.get(i).map(|&v| k.dfg.ty(v).clone());
    let (Some(ta), Some(tb), Some(tr)) = (ty(0), ty(1), op.results.first().map(|&r| k.dfg.ty(r)))
    else {
        return;
    };
    let (sa, sr) = (
        ta.shape().unwrap_or_default(),
        tr.shape().unwrap_or_default(),
    );
    let (m, n) = layout::rows_cols(&sr);
    let kd = sa.get(1).copied().unwrap_or(0);
    let path = if wgmma {
        DotPath::Wgmma
    } else if mma {
        DotPath::MmaSync
    } else {
        DotPath::Fma
    };
    let mut declined = Vec::new();
    if path != DotPath::Wgmma {
        declined.push(wgmma_declined(c, op, &ta, &tb, tr, layout, (m, n, kd)));
    }
    if path == DotPath::Fma {
        declined.push(mma_declined(
            &ta,
            &tb,
            tr,
            c.plan.blk.warps,
            layout,
            (m, n, kd),
        ));
    }
    let index = k
        .dfg
        .ops
        .values()
        .take(key.min(k.dfg.ops.len()))
        .filter(|o| matches!(o.opcode, Opcode::Dot | Opcode::DotAsync))
        .count();
    let choice = DotChoice {
        index,
        span: op.span,
        m,
        n,
        k: kd,
        dtype: ta.dtype().unwrap_or(Dtype::F32),
        path,
        declined,
        acc_regs: layout::slots(layout, &sr, c.plan.blk),
        emitted: 1,
    };
    c.report.dots.push((key, choice));
}

/// Why a dot did not take wgmma. The decision itself is `wgmma::wgmma_dot`'s; this names the
/// first of its conditions that fails, or its remaining (operand-form) conditions together.
fn wgmma_declined(
    c: &Ctx,
    op: &OpData,
    ta: &Type,
    tb: &Type,
    tr: &Type,
    layout: Layout,
    (m, n, kd): (usize, usize, usize),
) -> String {
    let w = c.plan.blk.warps as usize;
    let lowp = matches!(ta.dtype(), Some(Dtype::F16 | Dtype::Bf16)) && ta.dtype() == tb.dtype();
    let why = if !c.target.has_wgmma() {
        format!("target {} has no wgmma", c.target.name())
    } else if w % 4 != 0 {
        format!("{w} warps are not whole warpgroups of 4")
    } else if !lowp {
        "operands are not both bf16 or both f16".to_string()
    } else if tr.dtype() != Some(Dtype::F32) {
        "the accumulator is not f32".to_string()
    } else if m != 16 * w {
        format!("M = {m} is not 16·warps = {}", 16 * w)
    } else if n % 8 != 0 || !(8..=256).contains(&n) {
        format!("N = {n} is not a multiple of 8 from 8 to 256")
    } else if kd % 16 != 0 {
        format!("K = {kd} is not a multiple of 16 (one wgmma slice)")
    } else if kd % 64 != 0 && kd < 64 {
        format!("K = {kd} is not a multiple of 64 (one 128-byte swizzle row) and under 64")
    } else if kd % 64 != 0 {
        format!(
            "K = {kd} is not a multiple of 64 (one 128-byte swizzle row), which it must be where \
             K is an operand tile's contiguous dim (a K-major A or B)"
        )
    } else if crate::ptx::plan::wgmma::wgmma_dot(c.k, op, c.plan.blk, c.target).is_some() {
        format!("the accumulator is in the {layout:?} layout, not one 16-row fragment per warp")
    } else {
        "the operands are not in a form wgmma reads (see wgmma_dot: tiles loaded, or an A \
         read from a stage that unmasked copies fill, copied in whole 128-byte rows, or an A \
         converted from f32 registers; every dot that reads a shared operand tile takes \
         wgmma, or none does)"
            .to_string()
    };
    format!("wgmma: {why}")
}

/// Why a dot did not take mma.sync (the conditions of `layout::dot_uses_mma` and the layout).
fn mma_declined(
    ta: &Type,
    tb: &Type,
    tr: &Type,
    warps: u32,
    layout: Layout,
    (m, n, kd): (usize, usize, usize),
) -> String {
    let lowp = matches!(ta.dtype(), Some(Dtype::F16 | Dtype::Bf16)) && ta.dtype() == tb.dtype();
    let so = tr.shape().unwrap_or_default();
    let why = if !lowp {
        let dt = |t: &Type| t.dtype().map_or("?".to_string(), |d| d.to_string());
        format!(
            "operands are {} and {}, not both bf16 or both f16",
            dt(ta),
            dt(tb)
        )
    } else if kd % 16 != 0 {
        format!("K = {kd} is not a multiple of 16")
    } else if n % 8 != 0 {
        format!("N = {n} is not a multiple of 8")
    } else if !(layout::fits_rowmma(&so, warps) || layout::fits_grid(&so, warps)) {
        format!("M = {m} fits neither 16 rows per warp on {warps} warps nor a 2-D warp grid")
    } else {
        format!("the layout pass kept the accumulator in the {layout:?} layout (a tile it is unified with fits no mma layout)")
    };
    format!("mma.sync: {why}")
}

/// Records a candidate rescale `op`: skipped, or why not.
pub(super) fn note_rescale(c: &mut Ctx, op: &OpData, why_not: Option<&'static str>) {
    let key = op_index(c.k, op);
    if c.report.rescales.iter().any(|(i, _)| *i == key) {
        return;
    }
    c.report.rescales.push((
        key,
        Rescale {
            span: op.span,
            skipped: why_not.is_none(),
            why_not,
        },
    ));
}

/// Records that `if` op `op` is lowered while a wgmma group is in flight (once per op).
pub(super) fn note_join_in_flight(c: &mut Ctx, op: &OpData) {
    let key = op_index(c.k, op);
    if !c.report.joins.iter().any(|(i, _)| *i == key) {
        c.report.joins.push((key, op.span));
    }
}

/// Records that broadcast op `op` keeps its row vector compact (row_compact.rs; once per op).
pub(super) fn note_compact_row(c: &mut Ctx, op: &OpData) {
    let key = op_index(c.k, op);
    if !c.report.compact_rows.iter().any(|(i, _)| *i == key) {
        c.report.compact_rows.push((key, op.span));
    }
}

/// The report of the kernel `c` lowered, with the block's origin, the shared bytes (and, with
/// several consumers, the stride of their arenas) and what its instructions need.
pub(super) fn build(
    c: &mut Ctx,
    symbol: &str,
    warps_from: WarpsFrom,
    (shared_bytes, arena_stride): (u32, u32),
    isa: &Requirements,
) -> PtxReport {
    let k = c.k;
    let names = kir_ir::text::printer::value_names(k);
    let mut rings: Vec<Ring> = c
        .mem
        .smem_bufs
        .iter()
        .map(|(&v, buf)| {
            // The pass's `smem_alloc` has no place in the source; its reads carry the span of
            // the load they replace.
            let located = |o: &&OpData| o.span.end > o.span.start;
            let ops = || k.dfg.ops.values();
            let span = ops()
                .filter(|o| o.opcode == Opcode::SmemAlloc && o.results.first() == Some(&v))
                .chain(ops().filter(|o| {
                    matches!(o.opcode, Opcode::SmemRead | Opcode::AsyncCopy)
                        && o.operands.first() == Some(&v)
                }))
                .find(located)
                .map_or(k.span, |o| o.span);
            Ring {
                buffer: format!("%{}", names[v]),
                span,
                stages: buf.stages,
                stage_shape: buf.shape,
                dtype: buf.dtype,
                bytes: buf.stride * buf.stages as u32,
                swizzled: buf.core,
            }
        })
        .collect();
    let offset = |r: &Ring| {
        c.mem
            .smem_bufs
            .iter()
            .find(|(v, _)| format!("%{}", names[**v]) == r.buffer)
            .map_or(0, |(_, b)| b.off)
    };
    rings.sort_by_key(offset);
    let mut dots: Vec<DotChoice> = std::mem::take(&mut c.report.dots)
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    dots.sort_by_key(|d| d.index);
    let mut rescales = std::mem::take(&mut c.report.rescales);
    rescales.sort_by_key(|(i, _)| *i);
    PtxReport {
        kernel: k.name.clone(),
        symbol: symbol.to_string(),
        target: c.target,
        warps: c.plan.blk.warps,
        warps_from,
        acc_regs: dots.iter().map(|d| d.acc_regs).sum(),
        dots,
        rings,
        rescales: rescales.into_iter().map(|(_, r)| r).collect(),
        joins_in_flight: {
            let mut j = std::mem::take(&mut c.report.joins);
            j.sort_by_key(|(i, _)| *i);
            j.into_iter().map(|(_, s)| s).collect()
        },
        compact_rows: {
            let mut r = std::mem::take(&mut c.report.compact_rows);
            r.sort_by_key(|(i, _)| *i);
            r.into_iter().map(|(_, s)| s).collect()
        },
        ptx_version: isa.version,
        features: isa.features.keys().copied().collect(),
        families: isa.used.iter().copied().collect(),
        shared_bytes,
        consumer_arena: c.mem.arena.map(|a| (arena_stride, a.copies)),
    }
}
