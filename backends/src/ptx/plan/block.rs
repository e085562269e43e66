//! The block a kernel runs with: threads and warps ([`Block`]), chosen by [`block_policy`]
//! unless the caller gives the warps.

use kir_ir::Kernel;

/// Threads per block used by every kernel today (4 warps).
pub const THREADS: u32 = 128;

/// Elements per chunk of the `Blocked` layout (16 bytes of bf16/f16).
pub const VEC: usize = 8;

/// Facts the lowering needs about the block.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub threads: u32,
    pub warps: u32,
}

/// The block a kernel runs with.
/// - Without a `dot` (elementwise and row-reduction work in the blocked layout): one thread per
///   16-byte chunk of its largest tile, from 4 to 16 warps, so a long row is spread over more
///   threads instead of more registers per thread.
/// - With dots whose results have fewer than 128 rows: 4 warps.
/// - With a dot result of 128 rows or more: 8 warps (16 rows of each accumulator per warp, or a
///   2-D warp grid for GEMM). A kernel that keeps row statistics of such tiles (a row `reduce`,
///   as attention's online softmax) instead gets one warp per 32 rows — each warp holds two
///   16-row fragments, so every B fragment read from shared memory feeds two mma.sync — when
///   its dot accumulators then fit in 160 f32 registers per thread (Σ of the dot results'
///   columns ≤ 160: d128 with 32-key blocks, d64 with 64-key blocks), leaving the rest of the
///   255-register budget for operands and addresses without spilling. (d128 with 64-key blocks
///   on 4 warps is faster still but sits at the register limit and spills with some features
///   and targets, so it is an explicit choice: `--warps 4`.)
///
/// Returns the block and the facts the policy went by (for the report).
pub fn block_policy(k: &Kernel) -> (Block, String) {
    let dots: Vec<Vec<usize>> = k
        .dfg
        .ops
        .values()
        .filter(|o| matches!(o.opcode, kir_ir::Opcode::Dot | kir_ir::Opcode::DotAsync))
        .filter_map(|o| o.results.first().and_then(|&r| k.dfg.ty(r).shape()))
        .collect();
    let (warps, why) = if dots.is_empty() {
        let largest = k
            .dfg
            .values
            .values()
            .filter(|d| !d.ty.is_resource())
            .filter_map(|d| d.ty.shape())
            .map(|s| s.iter().product::<usize>())
            .max()
            .unwrap_or(0);
        let chunks = largest.div_ceil(VEC).next_power_of_two();
        let w = (chunks / 32).clamp((THREADS / 32) as usize, 16) as u32;
        let why = format!(
            "no dot; one thread per 16-byte chunk of the largest tile ({largest} elements), 4 to 16 warps"
        );
        (w, why)
    } else {
        let big: Vec<&Vec<usize>> = dots
            .iter()
            .filter(|s| s.len() == 2 && s[0] >= 128 && s[0] % 128 == 0)
            .collect();
        let row_stats = k.dfg.ops.values().any(|o| {
            o.opcode == kir_ir::Opcode::Reduce
                && matches!(o.attr("axis"), Some(kir_ir::Attr::Expr(e)) if e.as_int() == Some(1))
                && o.operands
                    .first()
                    .and_then(|&a| k.dfg.ty(a).shape())
                    .is_some_and(|s| s.len() == 2 && big.iter().any(|b| b[0] == s[0]))
        });
        match big.iter().map(|s| s[0]).max() {
            None => (
                THREADS / 32,
                "dot results under 128 rows: 4 warps".to_string(),
            ),
            Some(m) => {
                let cols: usize = dots
                    .iter()
                    .filter(|s| s.len() == 2 && s[0] == m)
                    .map(|s| s[1])
                    .sum();
                if row_stats && cols <= 160 && m / 32 <= 16 {
                    let why = format!("{m}-row dot results with row statistics and {cols} accumulator columns (at most 160): one warp per 32 rows");
                    ((m / 32) as u32, why)
                } else {
                    (8, format!("a {m}-row dot result: 8 warps"))
                }
            }
        }
    };
    let blk = Block {
        threads: warps * 32,
        warps,
    };
    (blk, why)
}
