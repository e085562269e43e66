//! Type rules of the scheduled IR: stage buffers and mbarrier arrays are made only by their
//! allocation ops and used only by scheduling ops; stage indices and parities are i32 scalars;
//! byte counts, arrival counts and register budgets are in range; a kernel's shared memory fits
//! the largest per-block budget of any target ([`SMEM_LIMIT_BYTES`]).

use super::body::{opd, res, Body};
use super::common::{dim_eq, dtype_is, err, err_note, lit_int, ty_eq};
use crate::dtype::Dtype;
use crate::entities::{Block, Value};
use crate::module::{Kernel, OpData, ValueDef};
use crate::ops::{Attr, OpClass, Opcode};
use crate::types::Type;

/// The most shared memory one block may use on any target (227 KB on sm_90a and sm_100a).
/// Targets with less (sm_80: 163 KB, sm_120a: 99 KB) are checked by the passes and backends
/// that know the target.
pub const SMEM_LIMIT_BYTES: u64 = 232_448;

/// The most arrivals one mbarrier phase may expect (PTX `mbarrier.init` takes a count below 2^20).
pub const MAX_ARRIVALS: i64 = (1 << 20) - 1;

/// Bytes of one `smem<...>` buffer (every stage), when its shape and dtype are known.
pub fn smem_bytes(t: &Type) -> Option<u64> {
    match t {
        Type::Smem(..) => {
            let n = t
                .shape()?
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))?;
            n.checked_mul(t.dtype()?.size_bytes() as u64)
        }
        _ => None,
    }
}

/// Total bytes of every `smem_alloc` in the kernel (saturating), with the ones whose size is not
/// known yet counted as 0 and the ones too large to count as far over any budget.
pub fn kernel_smem_bytes(k: &Kernel) -> u64 {
    k.dfg
        .ops
        .values()
        .filter(|o| o.opcode == Opcode::SmemAlloc)
        .filter_map(|o| o.results.first().and_then(|&v| k.dfg.values.get(v)))
        .map(|v| match (v.ty.shape(), v.ty.dtype()) {
            (Some(_), Some(_)) => smem_bytes(&v.ty).unwrap_or(u64::MAX),
            _ => 0,
        })
        .fold(0u64, u64::saturating_add)
}

/// Resource values (`smem`, `mbar`) flow only from their allocation into scheduling ops: no other
/// op (arithmetic, `for`, `if`, `yield`) may take or produce one.
pub(crate) fn no_resources(b: &mut Body, d: &OpData) {
    if d.opcode.info().class == OpClass::Schedule {
        return;
    }
    let name = d.opcode.name();
    for (i, &v) in d.operands.iter().enumerate() {
        if let Some(t) = b.vty(v).filter(|t| t.is_resource()) {
            err(b.errs, d.span, format!("`{name}` cannot take {t} (operand {i}): shared-memory buffers and barriers are used only by scheduling ops"));
        }
    }
    for &v in &d.results {
        if let Some(t) = b.vty(v).filter(|t| t.is_resource()) {
            err_note(
                b.errs,
                d.span,
                format!("`{name}` cannot produce {t}"),
                "only `smem_alloc` and `mbar_alloc` make shared-memory buffers and barriers",
            );
        }
    }
}

/// The type rule of one scheduling op.
pub(crate) fn check(b: &mut Body, d: &OpData) {
    match d.opcode {
        Opcode::SmemAlloc => smem_alloc(b, d),
        Opcode::MbarAlloc => mbar_alloc(b, d),
        Opcode::AsyncCopy => {
            let stages = staged(b, d, 0, "a shared-memory buffer");
            if let Some(Attr::Value(bar)) = d.attr("bar") {
                if let Some(t) = b.vty(*bar) {
                    match (t, stages) {
                        (Type::Mbar(n), Some(s)) if dim_eq(n, s) == Some(false) => err(b.errs, d.span, format!("`async_copy` names barriers {t} for a buffer of {s} stages: one barrier per stage")),
                        (Type::Mbar(_), _) => {}
                        _ => err(b.errs, d.span, format!("`bar` of `async_copy` must be an mbarrier array, found {t}")),
                    }
                }
            }
            if let Some(Attr::Value(p)) = d.attr("multicast") {
                if d.attr("bar").is_none() {
                    err(b.errs, d.span, "`multicast` of `async_copy` needs `bar`: a shared copy completes on each CTA's barrier");
                }
                if let Some(t) = b.vty(*p) {
                    if !t.is_scalar() || dtype_is(t, |x| x == Dtype::I1) == Some(false) {
                        err(
                            b.errs,
                            d.span,
                            format!("`multicast` of `async_copy` must be an i1 scalar, found {t}"),
                        );
                    }
                }
                in_cluster(b, d, "multicast");
            }
            super::rules_memory::memory(b, d);
        }
        Opcode::AsyncCommit | Opcode::FenceAsync => {}
        Opcode::AsyncWait => count_attr(b, d, "pending", 0, i64::from(i32::MAX)),
        Opcode::MbarArrive => {
            staged(b, d, 0, "an mbarrier array");
            count_attr(b, d, "tx", 1, MAX_ARRIVALS);
            if d.attr("cluster").is_some() {
                count_attr(b, d, "cluster", 1, MAX_CLUSTER);
                if d.attr("tx").is_some() {
                    err(b.errs, d.span, "`mbar_arrive` with `cluster` takes no `tx`: the bytes a CTA owes are its own");
                }
                in_cluster(b, d, "cluster");
            }
        }
        Opcode::MbarWait => {
            staged(b, d, 0, "an mbarrier array");
            i32_scalar(b, d, 2, "the parity");
        }
        Opcode::SmemRead => {
            staged(b, d, 0, "a shared-memory buffer");
            let stage = opd(b, d, 0).and_then(|t| t.stage()).map(|(_, t)| t);
            if let (Some(st), Some(r)) = (stage, res(b, d, 0)) {
                if ty_eq(&st, r) == Some(false) {
                    err(
                        b.errs,
                        d.span,
                        format!("`smem_read` gives one stage, {st}, not {r}"),
                    );
                }
            }
        }
        Opcode::SmemRelease => {
            staged(b, d, 0, "a shared-memory buffer");
        }
        Opcode::DotAsync => super::rules_compute::dot(b, d),
        Opcode::DotWait => dot_wait(b, d),
        Opcode::WarpSpecialize => warp_specialize(b, d),
        _ => {}
    }
}

/// Operand `i` is a resource of the kind `what` names and operand `i + 1` an i32 stage index;
/// returns the stage count expression.
fn staged<'a>(b: &mut Body<'a>, d: &OpData, i: usize, what: &str) -> Option<&'a crate::expr::Expr> {
    let name = d.opcode.name();
    let stages = match opd(b, d, i) {
        Some(Type::Smem(dims, _)) if what.contains("buffer") => dims.first(),
        Some(Type::Mbar(n)) if what.contains("mbarrier") => Some(n),
        Some(t) => {
            err(
                b.errs,
                d.span,
                format!("operand {i} of `{name}` must be {what}, found {t}"),
            );
            None
        }
        None => None,
    };
    i32_scalar(b, d, i + 1, "the stage index");
    let index = d.operands.get(i + 1).and_then(|&v| const_int(b, v));
    if let (Some(s), Some(n)) = (index, stages.and_then(lit_int)) {
        if s < 0 || s >= n {
            let what = d.operands.get(i).map_or(String::new(), |&v| b.vname(v));
            err(
                b.errs,
                d.span,
                format!(
                    "stage index {s} of `{name}` is outside {what}, which has {n} stages (0 to {})",
                    n - 1
                ),
            );
        }
    }
    stages
}

/// The value of `v` when a `const` op with a literal integer defines it.
fn const_int(b: &Body, v: Value) -> Option<i64> {
    let Some(ValueDef::Result(op, _)) = b.k.dfg.values.get(v).map(|vd| vd.def) else {
        return None;
    };
    match b.k.dfg.ops.get(op) {
        Some(o) if o.opcode == Opcode::Const => match &o.lead {
            Some(Attr::Expr(e)) => lit_int(e),
            _ => None,
        },
        _ => None,
    }
}

/// A stage of a buffer or barrier array as the verifier can tell them apart: the array value
/// and the stage index, by its constant value when it has one, else by the index value.
#[derive(Clone, Copy, PartialEq)]
enum StageKey {
    Lit(Value, i64),
    Val(Value, Value),
}

fn stage_key(b: &Body, d: &OpData) -> Option<StageKey> {
    let (&arr, &s) = (d.operands.first()?, d.operands.get(1)?);
    Some(match const_int(b, s) {
        Some(c) => StageKey::Lit(arr, c),
        None => StageKey::Val(arr, s),
    })
}

/// Protocol errors visible in one block's straight-line code (region ops in between end the
/// stretch, since what runs inside them is not followed):
/// - a second `smem_release` of a stage with no `smem_read` of it since the first (a
///   partition releases each fill it read once; a second release would let a copy overwrite
///   the next fill while it is read);
/// - a second `mbar_arrive` on a barrier with no `mbar_wait` since the first (a duplicated
///   arrival completes a phase early, or counts for a phase it does not belong to).
pub(crate) fn straight_line(b: &mut Body, blk: Block) {
    let Some(bd) = b.k.dfg.blocks.get(blk) else {
        return;
    };
    let mut released: Vec<StageKey> = Vec::new();
    let mut arrived: Vec<StageKey> = Vec::new();
    for &op in &bd.ops {
        let Some(d) = b.k.dfg.ops.get(op) else {
            continue;
        };
        if !d.regions.is_empty() {
            released.clear();
            arrived.clear();
            continue;
        }
        let key = stage_key(b, d);
        match (d.opcode, key) {
            (Opcode::SmemRead, Some(k)) => released.retain(|r| *r != k),
            (Opcode::SmemRelease, Some(k)) if released.contains(&k) => err_note(
                b.errs,
                d.span,
                format!("`smem_release` of {} releases the stage again, with no `smem_read` of it since the last release", stage_text(b, d)),
                "a partition releases each fill it read once; a second release lets a copy overwrite the next fill while it is still read",
            ),
            (Opcode::SmemRelease, Some(k)) => released.push(k),
            (Opcode::MbarWait, _) => arrived.clear(),
            (Opcode::MbarArrive, Some(k)) if arrived.contains(&k) => err_note(
                b.errs,
                d.span,
                format!("`mbar_arrive` on {} arrives again with no `mbar_wait` since the last arrival", stage_text(b, d)),
                "a duplicated arrival completes the barrier's phase early, or counts for the next phase",
            ),
            (Opcode::MbarArrive, Some(k)) => arrived.push(k),
            _ => {}
        }
    }
}

/// `%buf[%s]` (or `%buf[1]` for a constant stage) for messages.
fn stage_text(b: &Body, d: &OpData) -> String {
    let (Some(&arr), Some(&s)) = (d.operands.first(), d.operands.get(1)) else {
        return "the stage".into();
    };
    match const_int(b, s) {
        Some(c) => format!("{}[{c}]", b.vname(arr)),
        None => format!("{}[{}]", b.vname(arr), b.vname(s)),
    }
}

/// The most CTAs of a cluster that the IR admits (the portable cluster size of PTX).
pub const MAX_CLUSTER: i64 = 8;

/// An op's cluster keyword (`key`) sits inside a `warp_specialize` with `cluster` over 1.
fn in_cluster(b: &mut Body, d: &OpData, key: &str) {
    let size = b
        .enclosing_ops()
        .find(|o| o.opcode == Opcode::WarpSpecialize)
        .map(|o| match o.attr("cluster") {
            Some(Attr::Expr(e)) => lit_int(e),
            _ => Some(1),
        });
    if let Some(Some(1)) | None = size {
        err(
            b.errs,
            d.span,
            format!(
                "`{key}` of `{}` needs a cluster: it must sit in a `warp_specialize` with `cluster` 2 or more",
                d.opcode.name()
            ),
        );
    }
}

/// Operand `i` is an i32 scalar.
fn i32_scalar(b: &mut Body, d: &OpData, i: usize, what: &str) {
    if let Some(t) = opd(b, d, i) {
        if !t.is_scalar() || dtype_is(t, |x| x == Dtype::I32) == Some(false) {
            let name = d.opcode.name();
            err(
                b.errs,
                d.span,
                format!("{what} of `{name}` (operand {i}) must be an i32 scalar, found {t}"),
            );
        }
    }
}

/// An optional integer attribute lies in [lo, hi] when it is a literal.
fn count_attr(b: &mut Body, d: &OpData, key: &str, lo: i64, hi: i64) {
    if let Some(Attr::Expr(e)) = d.attr(key) {
        if let Some(v) = lit_int(e).filter(|v| *v < lo || *v > hi) {
            let name = d.opcode.name();
            err(
                b.errs,
                e.span,
                format!("`{key}` of `{name}` must lie in [{lo}, {hi}], found {v}"),
            );
        }
    }
}

fn smem_alloc(b: &mut Body, d: &OpData) {
    let Some(t) = res(b, d, 0) else { return };
    let Type::Smem(dims, _) = t else {
        err(
            b.errs,
            d.span,
            format!("`smem_alloc` makes a buffer `smem<STAGES x ... x dtype>`, found {t}"),
        );
        return;
    };
    if dims.len() < 2 {
        err(
            b.errs,
            d.span,
            format!("{t} needs a stage count and at least one stage dim"),
        );
    }
    if dims.iter().filter_map(lit_int).any(|v| v < 1) {
        err(
            b.errs,
            d.span,
            format!("every dim of {t} (the stage count first) must be at least 1"),
        );
    }
    if dtype_is(t, |x| x == Dtype::I1) == Some(true) {
        err(
            b.errs,
            d.span,
            format!("{t}: a stage buffer holds no i1 (use u8)"),
        );
    }
    let total = kernel_smem_bytes(b.k);
    if total > SMEM_LIMIT_BYTES {
        let mine = smem_bytes(t).unwrap_or(0);
        err_note(
            b.errs,
            d.span,
            format!("the kernel's stage buffers need {total} bytes of shared memory (this one {mine}), over the {SMEM_LIMIT_BYTES}-byte limit per block"),
            "use fewer stages or smaller tiles",
        );
    }
}

fn mbar_alloc(b: &mut Body, d: &OpData) {
    match res(b, d, 0) {
        Some(Type::Mbar(n)) => {
            if lit_int(n).is_some_and(|v| v < 1) {
                err(
                    b.errs,
                    d.span,
                    format!("`mbar<{n}>` needs at least one barrier"),
                );
            }
        }
        Some(t) => err(
            b.errs,
            d.span,
            format!("`mbar_alloc` makes `mbar<STAGES>`, found {t}"),
        ),
        None => {}
    }
    count_attr(b, d, "arrivals", 1, MAX_ARRIVALS);
}

fn dot_wait(b: &mut Body, d: &OpData) {
    count_attr(b, d, "pending", 0, i64::from(i32::MAX));
    let (Some(&v), Some(x), Some(r)) = (d.operands.first(), opd(b, d, 0), res(b, d, 0)) else {
        return;
    };
    if ty_eq(x, r) == Some(false) {
        err(
            b.errs,
            d.span,
            format!("`dot_wait` gives its operand's type {x}, not {r}"),
        );
    }
    let from_async = match b.k.dfg.values.get(v).map(|vd| vd.def) {
        Some(ValueDef::Result(op, _)) => {
            b.k.dfg
                .ops
                .get(op)
                .is_some_and(|o| o.opcode == Opcode::DotAsync)
        }
        _ => false,
    };
    if !from_async {
        err(
            b.errs,
            d.span,
            format!(
                "`dot_wait` waits for a `dot_async` result; {} is not one",
                b.vname(v)
            ),
        );
    }
}

/// Register budgets that `setmaxnreg` can set: a multiple of 8 in [24, 256].
fn regs_ok(v: i64) -> bool {
    (24..=256).contains(&v) && v % 8 == 0
}

fn warp_specialize(b: &mut Body, d: &OpData) {
    if b.enclosing_ops()
        .any(|o| o.opcode == Opcode::WarpSpecialize)
    {
        err_note(
            b.errs,
            d.span,
            "`warp_specialize` inside a partition of another `warp_specialize`",
            "partitions cannot split again: a kernel specializes its warps once, at the top level or in a loop outside any partition",
        );
    }
    let mut vals = [0i64; 5];
    let keys = [
        "producer_warps",
        "producer_regs",
        "consumers",
        "consumer_warps",
        "consumer_regs",
    ];
    let mut known = true;
    for (slot, key) in vals.iter_mut().zip(keys) {
        match d.attr(key) {
            Some(Attr::Expr(e)) => match lit_int(e) {
                Some(v) => *slot = v,
                None => known = false,
            },
            _ => {
                err(b.errs, d.span, format!("`warp_specialize` needs `{key}`"));
                known = false;
            }
        }
    }
    if d.regions.len() == 2 {
        let args = |i: usize| {
            b.k.dfg
                .blocks
                .get(d.regions[i])
                .map(|bd| bd.args.clone())
                .unwrap_or_default()
        };
        if !args(0).is_empty() {
            err(
                b.errs,
                d.span,
                "the producer partition of `warp_specialize` takes no arguments",
            );
        }
        let ca = args(1);
        let ok = ca.len() == 1
            && b.vty(ca[0])
                .is_some_and(|t| t.is_scalar() && t.dtype() == Some(Dtype::I32));
        if !ok {
            err(
                b.errs,
                d.span,
                "the consumer partition of `warp_specialize` takes one i32 argument, its index",
            );
        }
    }
    if let Some(Attr::Expr(e)) = d.attr("cluster") {
        if let Some(v) = lit_int(e).filter(|&v| !(1..=MAX_CLUSTER).contains(&v) || v & (v - 1) != 0)
        {
            err(b.errs, e.span, format!("`cluster` of `warp_specialize` must be a power of 2 in [1, {MAX_CLUSTER}], found {v}"));
        }
    }
    if !known {
        return;
    }
    let [pw, pr, c, cw, cr] = vals;
    if pw < 1 || c < 1 || cw < 1 {
        err(b.errs, d.span, format!("`warp_specialize` needs at least one warp per partition and one consumer (producer_warps {pw}, consumers {c}, consumer_warps {cw})"));
        return;
    }
    for (key, v) in [("producer_regs", pr), ("consumer_regs", cr)] {
        if !regs_ok(v) {
            err(
                b.errs,
                d.span,
                format!("`{key}` {v} is not a register budget: a multiple of 8 in [24, 256]"),
            );
        }
    }
    let warps = pw + c * cw;
    if warps * 32 > 1024 {
        err(
            b.errs,
            d.span,
            format!(
                "`warp_specialize` uses {warps} warps ({} threads), over 1024 threads per block",
                warps * 32
            ),
        );
    }
    // The block starts with ⌊65536 / threads / 8⌋ · 8 registers per thread (its `.maxnreg`);
    // `setmaxnreg.inc` waits until registers another partition released are free, so budgets
    // over that allocation would wait forever.
    let regs = (pw * pr + c * cw * cr) * 32;
    let threads = (warps * 32).max(1);
    let pool = 65_536 / threads / 8 * 8 * threads;
    if regs > pool {
        err_note(
            b.errs,
            d.span,
            format!(
                "`warp_specialize` budgets {regs} registers per block, over the {pool} its \
                 {threads} threads start with (⌊65536 / threads / 8⌋ · 8 each)"
            ),
            format!("{pw} producer warps × {pr} + {c} × {cw} consumer warps × {cr}, × 32 threads"),
        );
    }
}
