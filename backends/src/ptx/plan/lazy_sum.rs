//! Row sums that a loop only accumulates stay *quad partials* until the loop ends.
//!
//! In the mma-accumulator layout (`RowMma`) a tile row's columns lie in the four lanes of a quad,
//! so a full row sum takes two butterfly shuffles after each thread adds its own columns. The
//! online softmax's row sum `l` is carried by the key loop as `l' = l · α + rowsum(p)`
//! (attention_fwd) and read only after it: the shuffles can wait until then (FlashAttention's
//! form). A thread then carries the sum of its own columns over every block, scaled by α as
//! the full sum would be (α is a row vector, equal in the quad's four lanes, and scaling
//! distributes over the lanes' sum), and the loop's result is reduced over the quad once, where
//! the loop ends: two shuffles per row instead of two per row and block. The sums are added in
//! another order than the per-block reduction adds them, so the low bits of `l` differ from the
//! unfused form's (the outputs stay within every tolerance; runs remain the same bit for bit).
//!
//! A carried value qualifies when, in its `for` loop:
//! - it is an f32 `[M, 1]` tile in `RowMma`, whose initial value is the constant 0 (a partial
//!   of 0 in each lane sums to 0; any other start would be counted four times);
//! - the yield's value for it is `add(x, r)` or `add(r, x)`, with `r = reduce sum p axis 1` of
//!   an f32 `RowMma` tile `p`, and `x` the carried value itself or `mul` of it by a `RowMma`
//!   row vector (either order);
//! - the carried value, `x`, `r` and the `add` each have exactly that one use;
//! - the kernel's dot accumulators take at most [`MAX_ACC_REGS`] f32 registers a thread.

use super::block::Block;
use super::ir::lit;
use super::layout::{Layout, Place};
use kir_ir::edit::{def_data, use_count};
use kir_ir::{Dtype, Kernel, Opcode, ReduceKind, Value};
use std::collections::{HashMap, HashSet};

/// The row sums of one kernel that stay quad partials (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LazySums {
    /// Results of `reduce sum` ops lowered without the quad shuffles.
    pub partial: HashSet<Value>,
    /// Results of `for` ops whose registers hold quad partials when the loop ends: the lowering
    /// reduces them over the quad there.
    pub finish: HashSet<Value>,
}

/// Kernels whose dot accumulators take more f32 registers a thread than this keep the
/// per-block reduction: at 192 (d128's 128×64 tile on 4 warps, at the 255-register limit)
/// ptxas spilled 16 bytes, 40 causal, with the sums kept partial, where it spilled nothing
/// before; d256's warp-specialized 128×80 tile takes 168.
pub const MAX_ACC_REGS: usize = 176;

/// The quad-partial row sums of `k` with its values placed as `places` says, on `blk`.
pub fn lazy_sums(k: &Kernel, places: &HashMap<Value, Place>, blk: Block) -> LazySums {
    let mut out = LazySums::default();
    let acc_regs: usize = k
        .dfg
        .ops
        .values()
        .filter(|o| matches!(o.opcode, Opcode::Dot | Opcode::DotAsync))
        .filter_map(|o| o.results.first().and_then(|&r| k.dfg.ty(r).shape()))
        .map(|s| s.iter().product::<usize>() / blk.threads.max(1) as usize)
        .sum();
    if acc_regs > MAX_ACC_REGS {
        return out;
    }
    let row_mma = |v: Value| places.get(&v) == Some(&Place::Reg(Layout::RowMma));
    let f32_of = |v: Value| k.dfg.ty(v).dtype() == Some(Dtype::F32);
    let column = |v: Value| {
        k.dfg
            .ty(v)
            .shape()
            .is_some_and(|s| s.len() == 2 && s[1] == 1)
    };
    let single = |v: Value| use_count(&k.dfg, v) == 1;
    for od in k.dfg.ops.values().filter(|o| o.opcode == Opcode::For) {
        let Some(&body) = od.regions.first() else {
            continue;
        };
        let args = &k.dfg.blocks[body].args;
        let Some(y) = k.dfg.blocks[body]
            .ops
            .last()
            .map(|&o| &k.dfg.ops[o])
            .filter(|o| o.opcode == Opcode::Yield)
        else {
            continue;
        };
        for (i, &init) in od.operands.iter().skip(3).enumerate() {
            let (Some(&a), Some(&yv), Some(&res)) =
                (args.get(i + 1), y.operands.get(i), od.results.get(i))
            else {
                continue;
            };
            let zero_init = def_data(&k.dfg, init)
                .is_some_and(|d| d.opcode == Opcode::Const && lit(d.lead.as_ref()) == Some(0.0));
            if !(zero_init && row_mma(a) && f32_of(a) && column(a) && single(a) && single(yv)) {
                continue;
            }
            let Some(add) = def_data(&k.dfg, yv).filter(|d| d.opcode == Opcode::Add) else {
                continue;
            };
            let [p, q] = add.operands[..] else {
                continue;
            };
            // Which operand is the block's partial sum, which the scaled carried value.
            let sum_of = |v: Value| {
                def_data(&k.dfg, v).and_then(|d| {
                    let src = *d.operands.first()?;
                    let two_d = k.dfg.ty(src).shape().is_some_and(|s| s.len() == 2);
                    let ok = d.opcode == Opcode::Reduce
                        && d.reduce_kind() == Some(ReduceKind::Sum)
                        && lit(d.attr("axis")) == Some(1.0)
                        && two_d
                        && row_mma(src)
                        && f32_of(src)
                        && row_mma(v)
                        && single(v);
                    ok.then_some(v)
                })
            };
            let scaled = |v: Value| {
                v == a
                    || single(v)
                        && def_data(&k.dfg, v).is_some_and(|d| {
                            d.opcode == Opcode::Mul
                                && d.operands.len() == 2
                                && d.operands.contains(&a)
                                && d.operands.iter().all(|&x| row_mma(x))
                        })
            };
            let r = match (sum_of(p), sum_of(q)) {
                (Some(r), _) if scaled(q) => r,
                (_, Some(r)) if scaled(p) => r,
                _ => continue,
            };
            out.partial.insert(r);
            out.finish.insert(res);
        }
    }
    out
}
