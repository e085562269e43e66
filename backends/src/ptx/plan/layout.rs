//! Layout assignment: where each tile value lives and which thread holds which element.
//!
//! - `Scalar`: one register, the same in every thread.
//! - `Reg(Blocked)`: elements go to threads in chunks of [`VEC`] consecutive elements (row-major
//!   linear index): chunk k = e / VEC lives in thread k % T, slots (k / T)·VEC … + VEC − 1, so a
//!   thread's chunk is one 16-byte vector of bf16 in memory.
//! - `Reg(RowMma)`: the mma.sync m16n8 accumulator layout with the block's warps stacked along
//!   rows (FlashAttention-2's): for a [M, N] tile each warp owns M/W rows; lane (g = lane/4,
//!   q = lane%4) holds, per 16-row fragment mf and 8-column fragment nf, the elements
//!   (g + 8h, 2q + c) for h, c ∈ {0, 1}. A [M, 1] (or [M]) tile in this layout holds rows
//!   g and g + 8 per fragment, replicated over the 4 lanes of a quad, so row statistics of a
//!   softmax stay in registers and reduce with two quad shuffles.
//! - `Shared`: the tile lives only in shared memory (operands of `dot`).
//!
//! Values that must agree (operands and results of elementwise ops, loop-carried values, the
//! accumulator and result of a dot, a row reduction and its input) are unified; a class that
//! holds the result of an mma-eligible dot and whose shapes all fit gets `RowMma`, every other
//! class gets `Blocked`. Mismatches that remain become conversions through shared memory.

use super::block::{Block, VEC};
use kir_ir::{Attr, Dtype, Kernel, Opcode, Type, Value};
use std::collections::HashMap;

/// A register distribution of a tile over the threads of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Chunks of `VEC` consecutive elements dealt round-robin to the threads.
    Blocked,
    /// mma.sync accumulator fragments, warps stacked along rows.
    RowMma,
    /// mma.sync accumulator fragments, warps in a 2-D grid (see [`grid_dims`]): each warp owns a
    /// (M/wm)×(N/wn) block, so it reads only its slice of the B tile. For dot results whose
    /// class needs no row reductions or row broadcasts (GEMM).
    Grid,
}

/// (wm, wn): warps along rows and along columns of a `Grid` tile of `shape` — the most columns
/// (4, then 2) that divide the tile, else (W, 1).
pub fn grid_dims(shape: &[usize], b: Block) -> (usize, usize) {
    let (m, n) = rows_cols(shape);
    let w = b.warps as usize;
    for wn in [4, 2] {
        if w % wn == 0 {
            let wm = w / wn;
            if n % (8 * wn) == 0 && m % (16 * wm) == 0 && n != 1 {
                return (wm, wn);
            }
        }
    }
    (w, 1)
}

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Scalar,
    Reg(Layout),
    Shared,
}

/// Number of register slots per thread for a tile of `shape` in `layout`.
pub fn slots(layout: Layout, shape: &[usize], b: Block) -> usize {
    match layout {
        Layout::Blocked => {
            shape
                .iter()
                .product::<usize>()
                .div_ceil(VEC * b.threads as usize)
                * VEC
        }
        Layout::RowMma => {
            let (m, n) = rows_cols(shape);
            let mf = m / (16 * b.warps as usize);
            if n == 1 {
                mf * 2
            } else {
                mf * (n / 8) * 4
            }
        }
        Layout::Grid => {
            let (m, n) = rows_cols(shape);
            let (wm, wn) = grid_dims(shape, b);
            (m / wm / 16) * (n / wn / 8) * 4
        }
    }
}

/// (rows, cols) of a rank-1 or rank-2 tile; rank 1 is a column [M, 1].
pub fn rows_cols(shape: &[usize]) -> (usize, usize) {
    match shape {
        [m] => (*m, 1),
        [m, n] => (*m, *n),
        _ => (0, 0),
    }
}

/// For `RowMma`: the (row, col) offsets of slot `s` relative to (warp·M/W + g, 2q); for
/// `[M, 1]` tiles the column is 0 and the quad lanes replicate.
pub fn rowmma_slot(shape: &[usize], s: usize) -> (usize, usize) {
    let (_, n) = rows_cols(shape);
    if n == 1 {
        let (mf, h) = (s / 2, s % 2);
        (mf * 16 + 8 * h, 0)
    } else {
        let nfs = n / 8;
        let (mf, rest) = (s / (nfs * 4), s % (nfs * 4));
        let (nf, c) = (rest / 4, rest % 4);
        (mf * 16 + 8 * (c / 2), nf * 8 + (c % 2))
    }
}

/// True if a tile of `shape` can use `RowMma` with `warps` warps.
pub fn fits_rowmma(shape: &[usize], warps: u32) -> bool {
    let (m, n) = rows_cols(shape);
    m > 0 && m % (16 * warps as usize) == 0 && (n == 1 || n % 8 == 0) && shape.len() <= 2
}

/// True if a [M, N] tile of `shape` can use `Grid` with `warps` warps: the 2-D warp grid of
/// [`grid_dims`] has more than one column of warps and divides the tile into whole fragments.
pub fn fits_grid(shape: &[usize], warps: u32) -> bool {
    let (m, n) = rows_cols(shape);
    let b = Block {
        threads: warps * 32,
        warps,
    };
    let (wm, wn) = grid_dims(shape, b);
    shape.len() == 2 && wn > 1 && m % (16 * wm) == 0 && n % (8 * wn) == 0
}

/// True if `dot` with these operand/result shapes can use mma.sync m16n8k16 (in the `RowMma` or
/// the `Grid` layout).
pub fn dot_uses_mma(a: &Type, b: &Type, out: &Type, warps: u32) -> bool {
    let (Some(sa), Some(sb), Some(so)) = (a.shape(), b.shape(), out.shape()) else {
        return false;
    };
    let lowp = matches!(a.dtype(), Some(Dtype::F16 | Dtype::Bf16)) && a.dtype() == b.dtype();
    lowp && sa.len() == 2
        && sb.len() == 2
        && sa[1] % 16 == 0
        && (fits_rowmma(&so, warps) || fits_grid(&so, warps))
        && so[1] % 8 == 0
        && sb[1] == so[1]
}

struct Uf(Vec<usize>);
impl Uf {
    fn find(&mut self, x: usize) -> usize {
        let mut r = x;
        while self.0[r] != r {
            r = self.0[r];
        }
        let mut y = x;
        while self.0[y] != r {
            let n = self.0[y];
            self.0[y] = r;
            y = n;
        }
        r
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra] = rb;
        }
    }
}

/// Assigns a place to every value of a specialized kernel (target-independent choices).
pub fn assign(k: &Kernel, b: Block) -> HashMap<Value, Place> {
    assign_for(k, b, None)
}

/// [`assign`] for `target`: on sm_90a a dot that can use wgmma keeps its accumulator class in
/// `RowMma` (one 16-row fragment per warp, wgmma's D layout) rather than the 2-D warp grid.
pub fn assign_for(
    k: &Kernel,
    b: Block,
    target: Option<crate::target::Target>,
) -> HashMap<Value, Place> {
    let dfg = &k.dfg;
    let n = dfg.values.len();
    let mut uf = Uf((0..n).collect());
    let is_tile = |v: Value| {
        dfg.values
            .get(v)
            .is_some_and(|d| !d.ty.is_scalar() && !d.ty.is_resource())
    };
    let idx = |v: Value| v.as_u32() as usize;
    let mut uses: HashMap<Value, Vec<(Opcode, usize)>> = HashMap::new();
    let mut wants_mma: Vec<Value> = Vec::new();
    for (_, op) in dfg.ops.iter() {
        for (i, &u) in op.uses().iter().enumerate() {
            uses.entry(u).or_default().push((op.opcode, i));
        }
        let tiles = |vs: &[Value]| {
            vs.iter()
                .copied()
                .filter(|&v| is_tile(v))
                .collect::<Vec<_>>()
        };
        let mut group = |vs: Vec<Value>| {
            for w in vs.windows(2) {
                uf.union(idx(w[0]), idx(w[1]));
            }
        };
        match op.opcode {
            kir_ir::elementwise_ops!() => {
                let mut vs = tiles(&op.operands);
                vs.extend(tiles(&op.results));
                group(vs);
            }
            Opcode::Broadcast | Opcode::Reshape => {
                let (Some(&a), Some(&r)) = (op.operands.first(), op.results.first()) else {
                    continue;
                };
                let (sa, sr) = (
                    dfg.ty(a).shape().unwrap_or_default(),
                    dfg.ty(r).shape().unwrap_or_default(),
                );
                let (ma, _) = rows_cols(&sa);
                let (mr, _) = rows_cols(&sr);
                // Only row-preserving shape changes stay in one class.
                if is_tile(a) && ma == mr && sa.len() <= 2 && sr.len() <= 2 && ma > 1 {
                    group(vec![a, r]);
                }
            }
            Opcode::Reduce => {
                let axis = match op.attr("axis") {
                    Some(Attr::Expr(e)) => e.as_int().unwrap_or(0),
                    _ => 0,
                };
                let (Some(&a), Some(&r)) = (op.operands.first(), op.results.first()) else {
                    continue;
                };
                if axis == 1 && dfg.ty(a).shape().is_some_and(|s| s.len() == 2) {
                    group(vec![a, r]);
                }
            }
            Opcode::DotWait => {
                // The waited value is the `dot_async`'s accumulator registers.
                if let (Some(&d), Some(&r)) = (op.operands.first(), op.results.first()) {
                    group(vec![d, r]);
                }
            }
            Opcode::Dot | Opcode::DotAsync => {
                if let (Some(&acc), Some(&r)) = (op.operands.get(2), op.results.first()) {
                    group(vec![acc, r]);
                    if let (Some(&a), Some(&bb)) = (op.operands.first(), op.operands.get(1)) {
                        if dot_uses_mma(dfg.ty(a), dfg.ty(bb), dfg.ty(r), b.warps) {
                            wants_mma.push(r);
                        }
                    }
                }
            }
            Opcode::For => {
                let Some(&body) = op.regions.first() else {
                    continue;
                };
                let args = &dfg.blocks[body].args;
                let yielded = dfg.blocks[body]
                    .ops
                    .last()
                    .map(|&y| dfg.ops[y].operands.clone())
                    .unwrap_or_default();
                for (i, &res) in op.results.iter().enumerate() {
                    if !is_tile(res) {
                        continue;
                    }
                    let mut vs = vec![res];
                    vs.extend(op.operands.get(3 + i).copied());
                    vs.extend(args.get(1 + i).copied());
                    vs.extend(yielded.get(i).copied());
                    group(vs);
                }
            }
            Opcode::If | Opcode::StaticIf => {
                for (i, &res) in op.results.iter().enumerate() {
                    if !is_tile(res) {
                        continue;
                    }
                    let mut vs = vec![res];
                    for &r in &op.regions {
                        if let Some(&y) = dfg.blocks[r].ops.last() {
                            vs.extend(dfg.ops[y].operands.get(i).copied());
                        }
                    }
                    group(vs);
                }
            }
            Opcode::ProgramId
            | Opcode::NumPrograms
            | Opcode::Dim
            | Opcode::Param
            | Opcode::Const
            | Opcode::Iota
            | Opcode::Splat
            | Opcode::Transpose
            | Opcode::Load
            | Opcode::Store
            | Opcode::AtomicAdd
            | Opcode::SemWait
            | Opcode::SemSignal
            | Opcode::Print
            | Opcode::Yield => {}
            // No register tiles: a stage read is placed like a load (below); the ops the PTX
            // backend does not lower are rejected by `lower_op`.
            kir_ir::schedule_ops!() => {}
        }
    }
    // Class layouts: a class holding an mma-eligible dot result gets `Grid` when all of its
    // members share one [M, N] shape that the 2-D warp grid divides (see below), else `RowMma`
    // when every member fits it with one row count.
    let mut class_ok: HashMap<usize, bool> = HashMap::new();
    for &r in &wants_mma {
        let c = uf.find(idx(r));
        class_ok.insert(c, true);
    }
    let mut rowmma_ok: HashMap<usize, bool> = HashMap::new();
    let mut class_m: HashMap<usize, usize> = HashMap::new();
    for (v, d) in dfg.values.iter() {
        let c = uf.find(idx(v));
        if !class_ok.contains_key(&c) || d.ty.is_scalar() {
            continue;
        }
        let s = d.ty.shape().unwrap_or_default();
        let (m, _) = rows_cols(&s);
        let same_m = *class_m.entry(c).or_insert(m) == m;
        let ok = rowmma_ok.entry(c).or_insert(true);
        *ok &= fits_rowmma(&s, b.warps) && same_m;
    }
    // Shared: loads and stage reads (and transposes of them) used only as dot operands a/b.
    let mut shared: HashMap<Value, bool> = HashMap::new();
    fn only_dot_operand(
        v: Value,
        uses: &HashMap<Value, Vec<(Opcode, usize)>>,
        k: &Kernel,
        depth: usize,
    ) -> bool {
        let Some(us) = uses.get(&v) else { return false };
        !us.is_empty()
            && us.iter().all(|&(oc, i)| match oc {
                Opcode::Dot | Opcode::DotAsync => i < 2,
                Opcode::Transpose => {
                    depth < 2
                        && k.dfg.ops.values().any(|o| {
                            o.opcode == Opcode::Transpose
                                && o.operands.first() == Some(&v)
                                && o.results
                                    .first()
                                    .is_some_and(|&r| only_dot_operand(r, uses, k, depth + 1))
                        })
                }
                _ => false,
            })
    }
    for (_, op) in dfg.ops.iter() {
        if matches!(
            op.opcode,
            Opcode::Load | Opcode::SmemRead | Opcode::Transpose
        ) {
            if let Some(&r) = op.results.first() {
                let src_shared = matches!(op.opcode, Opcode::Load | Opcode::SmemRead)
                    || op
                        .operands
                        .first()
                        .is_some_and(|a| shared.get(a).copied().unwrap_or(false));
                let rank2 = dfg.ty(r).shape().is_some_and(|s| s.len() == 2);
                // A transpose of a 16-bit register tile that only feeds dots is written to
                // shared memory once and read back as a transposed view (ldmatrix.trans),
                // instead of moving through a blocked register layout.
                let reg_transpose = op.opcode == Opcode::Transpose
                    && !src_shared
                    && matches!(dfg.ty(r).dtype(), Some(Dtype::F16 | Dtype::Bf16));
                if (src_shared || reg_transpose) && rank2 && only_dot_operand(r, &uses, k, 0) {
                    shared.insert(r, true);
                }
            }
        }
    }
    // A class whose members all have one [M, N] shape (no row statistics, no row broadcasts)
    // can spread its warps over a 2-D grid.
    let mut class_shape: HashMap<usize, Option<Vec<usize>>> = HashMap::new();
    for (v, d) in dfg.values.iter() {
        if d.ty.is_scalar() || d.ty.is_resource() {
            continue;
        }
        let s = d.ty.shape().unwrap_or_default();
        let e = class_shape
            .entry(uf.find(idx(v)))
            .or_insert_with(|| Some(s.clone()));
        if e.as_ref() != Some(&s) {
            *e = None;
        }
    }
    let wgmma_classes: Vec<usize> = match target {
        Some(t) => dfg
            .ops
            .values()
            .filter(|o| super::wgmma::wgmma_dot(k, o, b, t).is_some())
            .filter_map(|o| o.results.first().map(|&r| uf.find(idx(r))))
            .collect(),
        None => Vec::new(),
    };
    let grid_ok = |c: usize| -> bool {
        if wgmma_classes.contains(&c) {
            return false;
        }
        match class_shape.get(&c) {
            Some(Some(s)) => s.len() == 2 && s[1] > 1 && grid_dims(s, b).1 > 1,
            _ => false,
        }
    };
    let mut out = HashMap::new();
    for (v, d) in dfg.values.iter() {
        // Stage buffers and barriers are no tiles (the backend keeps them by value id).
        let place = if d.ty.is_scalar() || d.ty.is_resource() {
            Place::Scalar
        } else if shared.get(&v).copied().unwrap_or(false) {
            Place::Shared
        } else if class_ok.get(&uf.find(idx(v))).copied().unwrap_or(false)
            && grid_ok(uf.find(idx(v)))
        {
            Place::Reg(Layout::Grid)
        } else if class_ok.get(&uf.find(idx(v))).copied().unwrap_or(false)
            && rowmma_ok.get(&uf.find(idx(v))).copied().unwrap_or(false)
        {
            Place::Reg(Layout::RowMma)
        } else {
            Place::Reg(Layout::Blocked)
        };
        out.insert(v, place);
    }
    out
}
